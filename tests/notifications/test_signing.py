"""Webhook signatures and back-off: pure functions a receiver (and the retry schedule) rely on."""

from __future__ import annotations

import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import pytest

from jobs.notifications.services import backoff_seconds
from jobs.notifications.signing import new_secret, signature, verify


def test_the_signature_is_hmac_sha256_of_timestamp_dot_body_in_hex() -> None:
    body = b'{"event":"succeeded"}'
    expected = hmac.new(b"whsec_abc", b"1700000000." + body, hashlib.sha256).hexdigest()
    assert signature("whsec_abc", "1700000000", body) == f"sha256={expected}"


def test_verify_refuses_another_body_timestamp_or_secret() -> None:
    header = signature("whsec_abc", "1700000000", b"{}")
    assert verify("whsec_abc", "1700000000", b"{}", header)
    assert not verify("whsec_abc", "1700000000", b"{ }", header)
    assert not verify("whsec_abc", "1700000001", b"{}", header)
    assert not verify("whsec_abd", "1700000000", b"{}", header)


def test_secrets_are_fresh_and_long() -> None:
    first, second = new_secret(), new_secret()
    assert first != second and first.startswith("whsec_") and len(first) > 40


@pytest.mark.parametrize(
    ("attempts", "delay"), [(1, 30.0), (2, 60.0), (3, 120.0), (4, 240.0), (5, 300.0), (12, 300.0)]
)
def test_back_off_doubles_after_each_failure_up_to_the_cap(attempts: int, delay: float) -> None:
    assert backoff_seconds(attempts, base=30, cap=300) == delay


def test_the_receivers_check_in_the_docs_accepts_a_real_signature_and_refuses_a_stale_one() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "notifications.md").read_text()
    code = text.split("### Verifying the signature", 1)[1].split("```python", 1)[1].split("```", 1)[0]
    scope: dict[str, Any] = {}
    exec(compile(code, "docs/notifications.md", "exec"), scope)  # noqa: S102 (our own documentation)
    body, now = b'{"event":"test"}', str(int(time.time()))
    headers = {"X-Trainyard-Timestamp": now, "X-Trainyard-Signature": signature("whsec_x", now, body)}
    assert scope["verify"]("whsec_x", headers, body)
    assert not scope["verify"]("whsec_y", headers, body)
    old = str(int(time.time()) - 3600)
    stale = {"X-Trainyard-Timestamp": old, "X-Trainyard-Signature": signature("whsec_x", old, body)}
    assert not scope["verify"]("whsec_x", stale, body)
