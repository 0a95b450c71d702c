"""Login throttling by username at an address and by address across usernames (django-axes' handler).

axes counts failures for each lockout parameter combination and compares the largest count with one limit.
Password spraying (a few guesses at many usernames from one address) needs a second, higher limit for the
address alone, so that one mistyping user does not lock out everyone behind the same office address."""

from __future__ import annotations

from typing import Any

from axes.handlers.database import AxesDatabaseHandler
from django.conf import settings
from django.db.models import QuerySet, Sum
from django.http import HttpRequest


def _failures(attempts: QuerySet[Any]) -> int:
    return int(attempts.aggregate(total=Sum("failures_since_start"))["total"] or 0)


class AddressAwareAxesHandler(AxesDatabaseHandler):
    """axes' database handler with the address-wide count held to LOGIN_ADDRESS_FAILURE_LIMIT.

    Failures are reported in units of the per-username limit (AXES_FAILURE_LIMIT), so axes' one comparison
    locks a username at an address after AXES_FAILURE_LIMIT failures and the whole address after
    LOGIN_ADDRESS_FAILURE_LIMIT failures across usernames. It expects AXES_LOCKOUT_PARAMETERS to be
    `[["username", "ip_address"], "ip_address"]`, in that order. A successful login clears only its own
    username's count at that address: one account the sprayer owns does not reset the address's count."""

    def get_failures(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        """The pair's failures, or the address's scaled to the pair's limit, whichever is closer to it."""
        pair, address = self.get_user_attempts(request, credentials)
        user_limit = int(settings.AXES_FAILURE_LIMIT)
        address_limit = max(int(settings.LOGIN_ADDRESS_FAILURE_LIMIT), 1)
        return max(_failures(pair), _failures(address) * user_limit // address_limit)

    def reset_user_attempts(self, request: HttpRequest, credentials: dict[str, Any] | None = None) -> int:
        """Clears the username-at-address count only; the address-wide count runs out with the cool-off."""
        pair = self.filter_user_attempts(request, credentials)[0]
        count, _ = pair.delete()
        return int(count)
