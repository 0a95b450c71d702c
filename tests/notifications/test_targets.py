"""SSRF protection of webhook targets: http(s) only, and no private, loopback or link-local address, checked
when a subscription is created and again inside the connection at delivery."""

from __future__ import annotations

import pytest
from django.test import override_settings

from jobs.checks import notify_allowed_targets_check
from jobs.notifications.targets import TargetRefused, check_addresses, check_url


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://example.com/x", "http:// or https://"),
        ("file:///etc/passwd", "http:// or https://"),
        ("javascript:alert(1)", "http:// or https://"),
        ("https:///nohost", "must name a host"),
        ("https://user:pw@93.184.216.34/", "user name or password"),
        ("http://93.184.216.34:99999/", "not a valid URL"),
    ],
)
def test_urls_that_are_not_plain_http_are_refused(url: str, why: str) -> None:
    with pytest.raises(TargetRefused, match=why):
        check_url(url)


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False)
@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8000/hook",
        "http://localhost/hook",
        "http://10.1.2.3/hook",
        "http://192.168.0.10/hook",
        "http://172.16.5.4/hook",
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/hook",
        "http://[fe80::1]/hook",
        "http://[::ffff:127.0.0.1]/hook",
        "http://0.0.0.0/hook",
        "http://127.1/hook",
        "http://0177.0.0.1/hook",
        "http://127.000.000.001/hook",
        "http://0x7f.0.0.1/hook",
        "http://10.1/hook",
        "http://2130706433/hook",
    ],
)
def test_private_loopback_and_link_local_targets_are_refused(url: str) -> None:
    with pytest.raises(TargetRefused, match="not allowed as webhook targets"):
        check_url(url)


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False)
def test_a_public_address_is_accepted() -> None:
    assert check_url(" https://93.184.216.34/hooks/trainyard ") == "https://93.184.216.34/hooks/trainyard"


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=True)
def test_the_setting_allows_private_targets() -> None:
    assert check_url("http://127.0.0.1:9/hook") == "http://127.0.0.1:9/hook"


def test_a_host_that_does_not_resolve_is_refused() -> None:
    with pytest.raises(TargetRefused, match="does not resolve"):
        check_url("https://no-such-host.invalid/hook")


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False, NOTIFY_ALLOWED_TARGETS=["10.20.0.0/16", "fd00:1::/64"])
def test_an_allowed_network_opens_its_addresses_and_no_other() -> None:
    assert check_url("http://10.20.3.4:8080/hook") == "http://10.20.3.4:8080/hook"
    assert check_url("http://[fd00:1::5]/hook") == "http://[fd00:1::5]/hook"
    for url in ("http://10.21.0.1/hook", "http://127.0.0.1/hook", "http://169.254.169.254/"):
        with pytest.raises(TargetRefused, match="NOTIFY_ALLOWED_TARGETS"):
            check_url(url)


@override_settings(NOTIFY_ALLOW_PRIVATE_TARGETS=False)
def test_an_allowed_host_may_resolve_to_private_addresses_but_never_to_loopback_or_metadata() -> None:
    with override_settings(NOTIFY_ALLOWED_TARGETS=["*.corp.example", "chat.internal"]):
        check_addresses("hooks.corp.example", ["10.0.0.7", "fd12::7"])
        check_addresses("CHAT.internal.", ["192.168.1.2"])
        for address in ("127.0.0.1", "169.254.169.254", "::1", "fe80::1", "::ffff:127.0.0.1", "0.0.0.0"):  # noqa: S104
            with pytest.raises(TargetRefused):
                check_addresses("hooks.corp.example", [address])
        with pytest.raises(TargetRefused):
            check_addresses("corp.example.evil", ["10.0.0.7"])  # a suffix, not a substring
        with pytest.raises(TargetRefused):
            check_addresses("other.internal", ["10.0.0.7"])
    with override_settings(NOTIFY_ALLOWED_TARGETS=["chat.internal", "127.0.0.1/32"]):
        check_addresses("chat.internal", ["127.0.0.1"])  # a listed CIDR opens even loopback


@pytest.mark.parametrize("entry", ["10.0.0.0/99", "https://x", "a..b", "*.", "host/path"])
def test_a_misspelt_allowed_target_fails_the_system_check(entry: str) -> None:
    with override_settings(NOTIFY_ALLOWED_TARGETS=[entry]):
        errors = notify_allowed_targets_check()
    assert [e.id for e in errors] == ["jobs.E011"] and entry in errors[0].msg
