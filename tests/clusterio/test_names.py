"""Names and labels: DNS-1123 valid, bounded, deterministic, distinct, hashed when cut."""

from __future__ import annotations

import re
import uuid

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from clusterio import names

DNS_1035_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")

any_text = st.text(max_size=300)
slugs = st.text(alphabet=st.characters(codec="ascii"), max_size=120) | any_text
job_ids = st.integers(min_value=0, max_value=10**30) | st.uuids() | any_text
attempts = st.integers(min_value=0, max_value=10**6)
indexes = st.integers(min_value=0, max_value=9999)


def _is_label(name: str) -> bool:
    return len(name) <= names.DNS_LABEL_MAX and bool(names.DNS_LABEL_RE.match(name))


@given(any_text)
def test_dns_label_is_always_valid_and_deterministic(raw: str) -> None:
    name = names.dns_label(raw)
    assert _is_label(name)
    assert names.dns_label(raw) == name


@given(st.from_regex(names.DNS_LABEL_RE, fullmatch=True).filter(lambda s: len(s) <= 63))
def test_dns_label_keeps_valid_names_unchanged(raw: str) -> None:
    assert names.dns_label(raw) == raw


@given(any_text)
def test_dns_label_appends_hash_of_input_when_cut_or_rewritten(raw: str) -> None:
    name = names.dns_label(raw)
    if name != raw:
        assert name.endswith(names.short_hash(raw))


def test_dns_label_cuts_long_names_to_63_with_hash_suffix() -> None:
    raw = "a" * 100
    name = names.dns_label(raw)
    assert len(name) == 63
    assert name == "a" * 54 + "-" + names.short_hash(raw)


@given(any_text, any_text)
def test_different_inputs_get_different_labels(a: str, b: str) -> None:
    assume(a != b)
    assert names.dns_label(a) != names.dns_label(b)


def test_inputs_that_sanitize_alike_stay_distinct() -> None:
    assert names.tenant_namespace("ty", "Team_A") != names.tenant_namespace("ty", "team-a")


@given(any_text)
def test_dns_subdomain_is_valid_and_at_most_253(raw: str) -> None:
    name = names.dns_subdomain(raw)
    assert len(name) <= names.DNS_SUBDOMAIN_MAX
    assert names.DNS_SUBDOMAIN_RE.match(name)


@given(st.text(alphabet="abc.-", max_size=400))
def test_dns_subdomain_handles_dots_and_long_inputs(raw: str) -> None:
    name = names.dns_subdomain(raw)
    assert len(name) <= 253
    assert names.DNS_SUBDOMAIN_RE.match(name)


@given(st.text(max_size=20), slugs)
def test_tenant_namespace_is_a_valid_label(prefix: str, slug: str) -> None:
    name = names.tenant_namespace(prefix, slug)
    assert _is_label(name)
    assert names.tenant_namespace(prefix, slug) == name


def test_tenant_namespace_joins_prefix_and_slug() -> None:
    assert names.tenant_namespace("trainyard", "acme") == "trainyard-acme"
    assert names.tenant_namespace("", "acme") == "acme"


def test_tenant_namespace_of_long_slug_is_cut_with_hash() -> None:
    slug = "very-long-tenant-" * 6
    name = names.tenant_namespace("trainyard", slug)
    assert len(name) <= 63
    assert name.endswith(names.short_hash(f"trainyard-{slug}"))


def test_job_names_follow_the_documented_pattern() -> None:
    assert names.job_object_name(42, 1) == "ty-42-a1"
    assert names.service_name(42, 1) == "ty-42-a1"
    assert names.learner_pod_name(42, 1, 0) == "ty-42-a1-l0"
    assert names.datastore_secret_name(42, 1) == "ty-42-a1-ds"
    job = uuid.UUID("0b8f3f5e-8d2a-4c1e-9f00-1234567890ab")
    assert names.learner_pod_name(job, 3, 7) == f"ty-{job}-a3-l7"


@given(job_ids, attempts, indexes)
def test_job_names_are_valid_dns_1035_labels(job_id: object, attempt: int, index: int) -> None:
    assert isinstance(job_id, str | int | uuid.UUID)
    for name in (
        names.job_object_name(job_id, attempt),
        names.service_name(job_id, attempt),
        names.learner_pod_name(job_id, attempt, index),
        names.datastore_secret_name(job_id, attempt),
    ):
        assert _is_label(name)
        assert DNS_1035_RE.match(name)


@given(job_ids, attempts, indexes)
def test_job_names_are_deterministic_and_share_the_attempt_prefix(
    job_id: str | int | uuid.UUID, attempt: int, index: int
) -> None:
    base = names.job_object_name(job_id, attempt)
    assert names.job_object_name(job_id, attempt) == base
    assert names.learner_pod_name(job_id, attempt, index) == f"{base}-l{index}"
    assert names.datastore_secret_name(job_id, attempt) == f"{base}-ds"


@given(job_ids, attempts)
def test_attempts_of_one_job_get_different_names(job_id: str | int | uuid.UUID, attempt: int) -> None:
    assert names.job_object_name(job_id, attempt) != names.job_object_name(job_id, attempt + 1)


def test_long_job_id_is_cut_with_hash_of_the_id() -> None:
    job_id = "x" * 200
    name = names.learner_pod_name(job_id, 2, 3)
    assert len(name) <= 63
    assert names.short_hash(job_id) in name
    assert name.endswith("-a2-l3")


@pytest.mark.parametrize("bad", [-1, True, 1.5])
def test_attempt_must_be_a_non_negative_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="attempt"):
        names.job_object_name(1, bad)  # type: ignore[arg-type]


def test_learner_index_must_be_non_negative() -> None:
    with pytest.raises(ValueError, match="learner index"):
        names.learner_pod_name(1, 0, -1)


@given(st.one_of(any_text, st.integers(), st.uuids()))
def test_label_values_are_valid_and_deterministic(raw: object) -> None:
    value = names.label_value(raw)
    assert len(value) <= names.LABEL_VALUE_MAX
    assert names.LABEL_VALUE_RE.match(value)
    assert names.label_value(raw) == value


def test_label_values_keep_valid_ids_and_hash_the_rest() -> None:
    assert names.label_value(42) == "42"
    assert names.label_value("Team_A.v2") == "Team_A.v2"
    assert names.label_value("") == ""
    assert names.label_value("-x-") == "x-" + names.short_hash("-x-")
    assert names.label_value("a" * 70) == "a" * 54 + "-" + names.short_hash("a" * 70)


def test_label_keys_live_in_one_place() -> None:
    assert names.learner_labels("acme", 42, 1, 0) == {
        "trainyard.io/tenant": "acme",
        "app.kubernetes.io/managed-by": "trainyard",
        "trainyard.io/job": "42",
        "trainyard.io/attempt": "1",
        "trainyard.io/learner": "0",
    }


def test_selectors_match_the_labels() -> None:
    assert names.managed_selector() == "app.kubernetes.io/managed-by=trainyard"
    assert names.job_selector(42) == "app.kubernetes.io/managed-by=trainyard,trainyard.io/job=42"
    assert names.job_selector(42, 3) == (
        "app.kubernetes.io/managed-by=trainyard,trainyard.io/job=42,trainyard.io/attempt=3"
    )
