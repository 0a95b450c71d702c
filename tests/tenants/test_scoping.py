"""The scoping helper: members see their tenant only, roles decide what they may do."""

import pytest
from django.contrib.auth.models import AnonymousUser

from jobs.models import Job
from jobs.selectors import job_get, job_list
from tenants.models import Membership
from tenants.scoping import Perm, can_manage_owned, has_perm, restrict, tenants_for
from tenants.services import membership_remove, membership_set
from tests.factories import make_job, make_tenant, make_user, member

pytestmark = pytest.mark.django_db


def test_member_sees_only_their_tenants_jobs() -> None:
    mine, other = make_tenant(), make_tenant()
    user = member(mine)
    own_job = make_job(tenant=mine, owner=user)
    make_job(tenant=other)
    assert list(job_list(user=user)) == [own_job]


def test_other_tenants_job_is_not_found_exactly_like_a_missing_one() -> None:
    mine, other = make_tenant(), make_tenant()
    user = member(mine)
    foreign = make_job(tenant=other)
    with pytest.raises(Job.DoesNotExist):
        job_get(user=user, job_id=foreign.pk)
    with pytest.raises(Job.DoesNotExist):
        job_get(user=user, job_id="nosuchjob")


def test_anonymous_user_sees_nothing() -> None:
    make_job()
    assert not job_list(user=AnonymousUser()).exists()
    assert not tenants_for(AnonymousUser()).exists()


def test_superuser_sees_every_tenant() -> None:
    a, b = make_tenant(), make_tenant()
    admin = make_user(is_superuser=True, is_staff=True)
    assert set(tenants_for(admin, Perm.MANAGE_TENANT)) == {a, b}


@pytest.mark.parametrize(
    ("role", "expected"),
    [
        ("viewer", {Perm.VIEW}),
        ("member", {Perm.VIEW, Perm.SUBMIT}),
        ("owner", {Perm.VIEW, Perm.SUBMIT, Perm.MANAGE_JOBS, Perm.MANAGE_TENANT}),
    ],
)
def test_role_grants_exactly_its_permissions(role: str, expected: set[Perm]) -> None:
    tenant = make_tenant()
    user = member(tenant, role)
    assert {perm for perm in Perm if has_perm(user, tenant, perm)} == expected


def test_changing_a_role_takes_permissions_away() -> None:
    tenant = make_tenant()
    user = member(tenant, "owner")
    membership_set(tenant=tenant, user=user, role="viewer")
    assert has_perm(user, tenant, Perm.VIEW)
    assert not has_perm(user, tenant, Perm.SUBMIT)
    assert not has_perm(user, tenant, Perm.MANAGE_TENANT)


def test_removed_member_loses_all_access() -> None:
    tenant = make_tenant()
    user = member(tenant, "member")
    make_job(tenant=tenant, owner=user)
    membership_remove(tenant=tenant, user=user)
    assert not Membership.objects.filter(user=user).exists()
    assert not job_list(user=user).exists()


def test_viewer_cannot_manage_even_a_job_they_own() -> None:
    tenant = make_tenant()
    viewer = member(tenant, "viewer")
    job = make_job(tenant=tenant, owner=viewer)
    assert not can_manage_owned(viewer, job)


def test_member_manages_own_job_but_not_a_colleagues() -> None:
    tenant = make_tenant()
    alice, bob = member(tenant), member(tenant)
    assert can_manage_owned(alice, make_job(tenant=tenant, owner=alice))
    assert not can_manage_owned(alice, make_job(tenant=tenant, owner=bob))


def test_owner_manages_any_job_of_the_tenant_but_none_elsewhere() -> None:
    tenant, other = make_tenant(), make_tenant()
    owner = member(tenant, "owner")
    assert can_manage_owned(owner, make_job(tenant=tenant))
    assert not can_manage_owned(owner, make_job(tenant=other))


def test_restrict_narrows_any_tenant_owned_queryset() -> None:
    mine, other = make_tenant(), make_tenant()
    user = member(mine, "viewer")
    make_job(tenant=mine)
    make_job(tenant=other)
    assert set(restrict(Job.objects.all(), user).values_list("tenant", flat=True)) == {mine.pk}
    assert not restrict(Job.objects.all(), user, Perm.SUBMIT).exists()


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        membership_set(tenant=make_tenant(), user=make_user(), role="god")
