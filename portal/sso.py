"""Single sign-on with OpenID Connect (docs/sso.md), on django-allauth's openid_connect provider.

- The provider's sign-in and callback views, with every ID token checked against the provider's keys
  (allauth skips the signature of a token it fetched itself, as the spec allows; we check it anyway, and
  accept only asymmetric signatures).
- Users are created at their first sign-in (just in time) and their memberships follow their groups at every
  sign-in (`OIDC_GROUP_MAP`, tenants.groupmap).
- The login page: the providers' buttons, and the password form unless LOCAL_LOGIN_ENABLED is off, when a
  password POST is refused here and by `LocalPasswordSwitch` for every other password login (the admin
  console's)."""

from __future__ import annotations

import logging
from typing import Any

from allauth.account.internal.decorators import login_not_required
from allauth.account.signals import user_logged_in
from allauth.account.utils import user_email, user_username
from allauth.core.internal.deferred import jwt
from allauth.socialaccount.adapter import DefaultSocialAccountAdapter
from allauth.socialaccount.internal import jwtkit
from allauth.socialaccount.models import SocialApp
from allauth.socialaccount.providers.oauth2.client import OAuth2Error
from allauth.socialaccount.providers.oauth2.views import OAuth2CallbackView, OAuth2LoginView
from allauth.socialaccount.providers.openid_connect.views import OpenIDConnectOAuth2Adapter
from allauth.utils import generate_unique_username
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth import views as auth_views
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db import transaction
from django.dispatch import receiver
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import urlencode

from tenants.groupmap import group_memberships_apply

log = logging.getLogger(__name__)

ID_TOKEN_ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512")


def id_token_verify(id_token: str, *, keys_url: str, issuer: str, client_id: str) -> dict[str, Any]:
    """The claims of `id_token` once its signature (by a key of the provider's JWKS at `keys_url`, with an
    asymmetric algorithm), issuer, audience and expiry hold; `OAuth2Error` otherwise."""
    try:
        algorithm = jwt.get_unverified_header(id_token).get("alg")
    except jwt.PyJWTError as exc:
        raise OAuth2Error("Invalid id_token") from exc
    if algorithm not in ID_TOKEN_ALGORITHMS:
        raise OAuth2Error(f"id_token signed with {algorithm!r}, not an accepted algorithm")
    claims: dict[str, Any] = jwtkit.verify_and_decode(
        credential=id_token,
        keys_url=keys_url,
        issuer=issuer,
        audience=client_id,
        lookup_kid=jwtkit.lookup_kid_jwk,
        verify_signature=True,
    )
    return claims


class VerifyingOIDCAdapter(OpenIDConnectOAuth2Adapter):
    """allauth's OpenID Connect adapter, checking every ID token's signature against the provider's JWKS."""

    def complete_login(self, request: HttpRequest, app: SocialApp, token: Any, **kwargs: Any) -> Any:
        """allauth's, remembering on the request what a later sign-out at the provider needs (the
        `_remember_provider_logout` receiver puts it in the new session)."""
        login = super().complete_login(request, app, token, **kwargs)
        end_session = self.openid_config.get("end_session_endpoint")
        if end_session:
            request.sso_logout = {  # type: ignore[attr-defined]
                "end_session": end_session,
                "id_token": kwargs["response"].get("id_token", ""),
                "client_id": app.client_id,
            }
        return login

    def _decode_id_token(self, app: SocialApp, id_token: str) -> dict[str, Any]:
        config = self.openid_config
        return id_token_verify(
            id_token, keys_url=config["jwks_uri"], issuer=config["issuer"], client_id=app.client_id
        )


@login_not_required
def oidc_login(request: HttpRequest, provider_id: str) -> HttpResponse:
    """Start a sign-in at provider `provider_id` (a POST from the login page's button)."""
    try:
        view = OAuth2LoginView.adapter_view(VerifyingOIDCAdapter(request, provider_id))
        response: HttpResponse = view(request)
    except SocialApp.DoesNotExist:
        raise Http404(f"no identity provider {provider_id}") from None
    return response


@login_not_required
def oidc_callback(request: HttpRequest, provider_id: str) -> HttpResponse:
    """The provider sends the browser back here with a code; allauth exchanges it (with the PKCE verifier)."""
    try:
        view = OAuth2CallbackView.adapter_view(VerifyingOIDCAdapter(request, provider_id))
        response: HttpResponse = view(request)
    except SocialApp.DoesNotExist:
        raise Http404(f"no identity provider {provider_id}") from None
    return response


def providers() -> list[dict[str, str]]:
    """The configured providers for the login page: id, name and the URL its button posts to."""
    return [
        {
            "id": app["provider_id"],
            "name": app["name"],
            "url": reverse("openid_connect_login", kwargs={"provider_id": app["provider_id"]}),
        }
        for app in settings.OIDC_APPS
    ]


class LoginView(auth_views.LoginView):
    """The portal's login page: a button per identity provider, and the password form while local
    passwords are on; with them off a password POST is refused (403) before any password is checked."""

    template_name = "portal/login.html"
    redirect_authenticated_user = True

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context["providers"] = providers()
        context["local_login"] = settings.LOCAL_LOGIN_ENABLED
        return context

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        if not settings.LOCAL_LOGIN_ENABLED:
            response = self.render_to_response(
                self.get_context_data(refused="Passwords are turned off here: sign in with your provider.")
            )
            response.status_code = 403
            return response
        response = super().post(request, *args, **kwargs)
        return response


SSO_LOGOUT_SESSION_KEY = "sso_logout"


@login_not_required
def account_inactive(request: HttpRequest) -> HttpResponse:
    """Where allauth sends a sign-in whose user an admin deactivated (its `account_inactive`)."""
    message = "This account is deactivated: ask a platform admin."
    return render(request, "portal/403.html", {"message": message}, status=403)


class LogoutView(auth_views.LogoutView):
    """The portal's logout; after a single sign-on, it goes on to the provider's sign-out (RP-initiated
    logout, when the provider offers an end_session_endpoint and OIDC_LOGOUT_AT_PROVIDER is on), which comes
    back to the login page."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        hint = request.session.get(SSO_LOGOUT_SESSION_KEY)
        response: HttpResponse = super().post(request, *args, **kwargs)
        if not hint or not settings.OIDC_LOGOUT_AT_PROVIDER:
            return response
        back = request.build_absolute_uri(str(settings.LOGOUT_REDIRECT_URL))
        query = {"client_id": hint["client_id"], "post_logout_redirect_uri": back}
        if hint.get("id_token"):
            query["id_token_hint"] = hint["id_token"]
        return HttpResponseRedirect(f"{hint['end_session']}?{urlencode(query)}")


class LocalPasswordSwitch:
    """An authentication backend that refuses every password while LOCAL_LOGIN_ENABLED is off (raising
    PermissionDenied stops Django from asking the backends after it); otherwise it abstains. It has no
    `get_user`, so no session is ever tied to it (allauth ties a sign-in to the first backend that has one)."""

    def authenticate(self, request: HttpRequest | None, **credentials: Any) -> None:
        if "password" in credentials and not settings.LOCAL_LOGIN_ENABLED:
            raise PermissionDenied("local passwords are turned off (LOCAL_LOGIN_ENABLED)")
        return None


class SsoAccountAdapter(DefaultSocialAccountAdapter):
    """Anyone the provider vouches for gets a user at their first sign-in (just in time); access comes from
    their groups (OIDC_GROUP_MAP) or from an owner adding them."""

    def is_open_for_signup(self, request: HttpRequest, sociallogin: Any) -> bool:
        return True

    def populate_user(self, request: HttpRequest, sociallogin: Any, data: dict[str, Any]) -> Any:
        """allauth's, with a username nobody has: the provider's `preferred_username` when free, else one
        made from it (a local user of that name is never taken over: sign-ins find users by `sub`)."""
        user = super().populate_user(request, sociallogin, data)
        name = user_username(user)
        if not name or get_user_model().objects.filter(username__iexact=name).exists():
            user_username(user, generate_unique_username([name, user_email(user), "user"]))
        return user


def groups_claim(extra_data: dict[str, Any]) -> list[str]:
    """The `groups` claim of a sign-in: the ID token's, else the userinfo's; none when neither has one."""
    for source in ("id_token", "userinfo"):
        claims = extra_data.get(source) or {}
        if "groups" in claims:
            groups = claims["groups"]
            return [g for g in groups if isinstance(g, str)] if isinstance(groups, list) else []
    return []


@receiver(user_logged_in)
def _remember_provider_logout(sender: Any, request: HttpRequest, user: User, **kwargs: Any) -> None:
    """Keep in the session what the logout needs to sign out at the provider too."""
    hint = getattr(request, "sso_logout", None)
    if kwargs.get("sociallogin") is not None and hint:
        request.session[SSO_LOGOUT_SESSION_KEY] = hint


@receiver(user_logged_in)
def _memberships_from_groups(sender: Any, request: HttpRequest, user: User, **kwargs: Any) -> None:
    """At every single sign-on, the user's memberships in the tenants the group map names follow their
    groups (tenants.groupmap)."""
    sociallogin = kwargs.get("sociallogin")
    if sociallogin is None or not settings.OIDC_GROUP_MAP:
        return
    groups = groups_claim(sociallogin.account.extra_data or {})
    apply = (
        group_memberships_apply.nested
        if transaction.get_connection().in_atomic_block
        else group_memberships_apply
    )
    for line in apply(user=user, groups=groups, group_map=settings.OIDC_GROUP_MAP):
        log.info("single sign-on: %s", line)
