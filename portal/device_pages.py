"""The command line's sign-in through the portal (`trainyard login --sso URL`): the OAuth device
authorization grant (RFC 8628) for the platform's own API tokens (tenants/device.py, docs/sso.md).

- POST /auth/device/ (no session; form field `client_name`, optional): a device code, a user code, the
  verification URLs, how long they hold and the poll interval; 429 while too many wait from the address.
- POST /auth/device/token/ (form fields `grant_type=urn:ietf:params:oauth:grant-type:device_code`,
  `device_code`): 400 with `error` authorization_pending / slow_down / access_denied / expired_token /
  invalid_grant, or 200 with the new API token (`access_token`, `token_type`, `scope`, `expires_at`).
- /device/ (signed-in users): enter or confirm the user code, then approve or deny."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse
from django.utils.http import urlencode
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods, require_POST

from portal.middleware import client_ip
from tenants.device import DeviceRefused, device_decide, device_pending, device_poll, device_start
from tenants.pages import page_user, render_page

DEVICE_GRANT = "urn:ietf:params:oauth:grant-type:device_code"


@csrf_exempt
@require_POST
@never_cache
def device_code_view(request: HttpRequest) -> JsonResponse:
    """Start a command line's sign-in."""
    try:
        row, device_code = device_start(
            client_name=request.POST.get("client_name", "").strip(), address=client_ip(request)
        )
    except DeviceRefused as exc:
        return JsonResponse({"error": "slow_down", "error_description": str(exc)}, status=429)
    verification = request.build_absolute_uri(reverse("device"))
    return JsonResponse(
        {
            "device_code": device_code,
            "user_code": row.user_code,
            "verification_uri": verification,
            "verification_uri_complete": f"{verification}?{urlencode({'user_code': row.user_code})}",
            "expires_in": settings.DEVICE_CODE_MINUTES * 60,
            "interval": row.interval,
        }
    )


@csrf_exempt
@require_POST
@never_cache
def device_token_view(request: HttpRequest) -> JsonResponse:
    """The command line's poll: pending, slower, refused, expired, or its API token (once)."""
    if request.POST.get("grant_type") != DEVICE_GRANT:
        return JsonResponse(
            {"error": "unsupported_grant_type", "error_description": f"grant_type must be {DEVICE_GRANT}"},
            status=400,
        )
    poll = device_poll(device_code=request.POST.get("device_code", ""))
    if poll.error:
        body: dict[str, object] = {"error": poll.error}
        if poll.error in ("authorization_pending", "slow_down"):
            body["interval"] = poll.interval
        return JsonResponse(body, status=400)
    return JsonResponse(
        {
            "access_token": poll.secret,
            "token_type": "Bearer",
            "scope": poll.scope,
            "expires_at": poll.expires_at,
        }
    )


@require_http_methods(["GET", "POST"])
@login_required
@never_cache
def device_page(request: HttpRequest) -> HttpResponse:
    """Confirm a command line's sign-in: the code it shows, then Approve or Deny."""
    user = page_user(request)
    code = (request.POST.get("user_code") or request.GET.get("user_code") or "").strip()
    if request.method == "POST" and request.POST.get("action") in ("approve", "deny"):
        approve = request.POST["action"] == "approve"
        if device_decide(user_code=code, user=user, approve=approve) is None:
            messages.error(request, f"No sign-in waits for code {code}: it expired or was decided already.")
            return redirect("device")
        if approve:
            messages.success(request, "The command line is signed in: go back to your terminal.")
        else:
            messages.info(request, "Refused: the command line was not signed in.")
        return redirect("home")
    pending = device_pending(code) if code else None
    error = (
        f"No sign-in waits for code {code}: it expired or was decided already."
        if code and not pending
        else ""
    )
    return render_page(request, "portal/device.html", {"pending": pending, "code": code, "error": error})
