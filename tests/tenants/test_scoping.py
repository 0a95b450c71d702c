"""The scoping helper: members see their tenant only, roles decide what they may do."""

import pytest
from django.contrib.auth.models import AnonymousUser

from jobs.models import Job
from jobs.selectors import job_get, job_list
from tenants.models import Membership
from tenants.scoping import Perm, can_manage_owned, has_perm, restrict, tenants_for
from tenants.services import membership_remove, membership_set
from tests.factories import JobFactory, TenantFactory, UserFactory, member

pytestmark = pytest.mark.django_db


def test_member_sees_only_their_tenants_jobs() -> None:
    mine, other = TenantFactory(), TenantFactory()
    user = member(mine)
    own_job = JobFactory(tenant=mine, owner=user)
    JobFactory(tenant=other)
    assert list(job_list(user=user)) == [own_job]


def test_other_tenants_job_is_not_found_exactly_like_a_missing_one() -> None:
    mine, other = TenantFactory(), TenantFactory()
    user = member(mine)
    foreign = JobFactory(tenant=other)
    with pytest.raises(Job.DoesNotExist):
        job_get(user=user, job_id=foreign.pk)
    with pytest.raises(Job.DoesNotExist):
        job_get(user=user, job_id="nosuchjob")


def test_anonymous_user_sees_nothing() -> None:
    JobFactory()
    assert not job_list(user=AnonymousUser()).exists()
    assert not tenants_for(AnonymousUser()).exists()


def test_superuser_sees_every_tenant() -> None:
    a, b = TenantFactory(), TenantFactory()
    admin = UserFactory(is_superuser=True, is_staff=True)
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
    tenant = TenantFactory()
    user = member(tenant, role)
    assert {perm for perm in Perm if has_perm(user, tenant, perm)} == expected


def test_changing_a_role_takes_permissions_away() -> None:
    tenant = TenantFactory()
    user = member(tenant, "owner")
    membership_set(tenant=tenant, user=user, role="viewer")
    assert has_perm(user, tenant, Perm.VIEW)
    assert not has_perm(user, tenant, Perm.SUBMIT)
    assert not has_perm(user, tenant, Perm.MANAGE_TENANT)


def test_removed_member_loses_all_access() -> None:
    tenant = TenantFactory()
    user = member(tenant, "member")
    JobFactory(tenant=tenant, owner=user)
    membership_remove(tenant=tenant, user=user)
    assert not Membership.objects.filter(user=user).exists()
    assert not job_list(user=user).exists()


def test_viewer_cannot_manage_even_a_job_they_own() -> None:
    tenant = TenantFactory()
    viewer = member(tenant, "viewer")
    job = JobFactory(tenant=tenant, owner=viewer)
    assert not can_manage_owned(viewer, job)


def test_member_manages_own_job_but_not_a_colleagues() -> None:
    tenant = TenantFactory()
    alice, bob = member(tenant), member(tenant)
    assert can_manage_owned(alice, JobFactory(tenant=tenant, owner=alice))
    assert not can_manage_owned(alice, JobFactory(tenant=tenant, owner=bob))


def test_owner_manages_any_job_of_the_tenant_but_none_elsewhere() -> None:
    tenant, other = TenantFactory(), TenantFactory()
    owner = member(tenant, "owner")
    assert can_manage_owned(owner, JobFactory(tenant=tenant))
    assert not can_manage_owned(owner, JobFactory(tenant=other))


def test_restrict_narrows_any_tenant_owned_queryset() -> None:
    mine, other = TenantFactory(), TenantFactory()
    user = member(mine, "viewer")
    JobFactory(tenant=mine)
    JobFactory(tenant=other)
    assert set(restrict(Job.objects.all(), user).values_list("tenant", flat=True)) == {mine.pk}
    assert not restrict(Job.objects.all(), user, Perm.SUBMIT).exists()


def test_unknown_role_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown role"):
        membership_set(tenant=TenantFactory(), user=UserFactory(), role="god")
