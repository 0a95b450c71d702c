"""The admin console renders for a superuser and is refused to everyone else."""

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from jobs.services import job_submit, job_transition
from tenants.models import Membership, MembershipEvent
from tests.factories import make_tenant, make_user, member

pytestmark = pytest.mark.django_db

SPEC = "name: a\nimage: busybox\ncommand: [echo, hi]\nresources: {gpus: 2, cpu: 1, memory: 1Gi}\n"


@pytest.fixture
def admin_client_logged_in(client: Client) -> Client:
    client.force_login(make_user(username="root", is_staff=True, is_superuser=True))
    return client


def test_tenant_list_shows_usage_beside_quota(admin_client_logged_in: Client) -> None:
    tenant = make_tenant(slug="vision")
    user = member(tenant)
    job = job_submit(tenant=tenant, user=user, document=SPEC)
    job.set_status("starting")
    job.save()
    page = admin_client_logged_in.get(reverse("admin:tenants_tenant_changelist"))
    assert page.status_code == 200
    html = page.content.decode()
    assert "vision" in html
    assert "2 / 8" in html  # GPUs used / quota
    assert "1000m / 32000m" in html


@pytest.mark.parametrize(
    "url_name",
    ["admin:tenants_tenant_changelist", "admin:jobs_job_changelist", "admin:tenants_membership_changelist"],
)
def test_admin_lists_render_for_superuser(admin_client_logged_in: Client, url_name: str) -> None:
    make_tenant()
    assert admin_client_logged_in.get(reverse(url_name)).status_code == 200


def test_tenant_change_page_has_quota_and_members_inline(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    member(tenant, "owner", username="olivia")
    html = admin_client_logged_in.get(
        reverse("admin:tenants_tenant_change", args=[tenant.pk])
    ).content.decode()
    assert "Quota" in html and "olivia" in html and "Current usage" in html


def test_adding_a_member_in_the_admin_grants_their_permissions(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    newcomer = make_user(username="newcomer")
    url = reverse("admin:tenants_membership_add")
    response = admin_client_logged_in.post(url, {"user": newcomer.pk, "tenant": tenant.pk, "role": "viewer"})
    assert response.status_code == 302
    assert Membership.objects.get(user=newcomer).role == "viewer"
    assert newcomer.has_perm("tenants.view_tenant_jobs", tenant)
    assert not newcomer.has_perm("tenants.submit_jobs", tenant)


def test_job_page_renders_with_events(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    page = admin_client_logged_in.get(reverse("admin:jobs_job_change", args=[job.pk]))
    assert page.status_code == 200 and "Submitted" in page.content.decode()


def test_cancel_action_cancels_queued_jobs(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    url = reverse("admin:jobs_job_changelist")
    admin_client_logged_in.post(url, {"action": "cancel_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == "cancelled"


def test_anonymous_user_is_sent_to_login(client: Client) -> None:
    response = client.get(reverse("admin:tenants_tenant_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_member_without_staff_status_is_refused(client: Client) -> None:
    tenant = make_tenant()
    client.force_login(member(tenant, "owner"))
    response = client.get(reverse("admin:tenants_tenant_changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_staff_without_model_permissions_gets_403(client: Client) -> None:
    client.force_login(make_user(is_staff=True))
    assert client.get(reverse("admin:tenants_tenant_changelist")).status_code == 403


def test_requeue_action_sends_a_running_job_back_without_using_a_retry(
    admin_client_logged_in: Client,
) -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    job_transition(job_id=job.pk, to="starting", reason="Admitted")
    job_transition(job_id=job.pk, to="running", reason="Running")
    url = reverse("admin:jobs_job_changelist")
    admin_client_logged_in.post(url, {"action": "requeue_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == "requeued" and job.reason == "RequeuedByAdmin"
    assert job.events.get(to_status="requeued").data == {"counts": False}


def test_requeue_action_refuses_a_queued_job(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    job = job_submit(tenant=tenant, user=member(tenant), document=SPEC)
    url = reverse("admin:jobs_job_changelist")
    admin_client_logged_in.post(url, {"action": "requeue_jobs", "_selected_action": [job.pk]})
    job.refresh_from_db()
    assert job.status == "queued"


def test_membership_changes_in_the_admin_are_audited(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    member(tenant, "owner", username="olivia")  # so that newcomer, once an owner, is not the last one
    newcomer = make_user(username="newcomer")
    add = reverse("admin:tenants_membership_add")
    admin_client_logged_in.post(add, {"user": newcomer.pk, "tenant": tenant.pk, "role": "viewer"})
    membership = Membership.objects.get(user=newcomer)
    change = reverse("admin:tenants_membership_change", args=[membership.pk])
    admin_client_logged_in.post(change, {"user": newcomer.pk, "tenant": tenant.pk, "role": "owner"})
    delete = reverse("admin:tenants_membership_delete", args=[membership.pk])
    assert admin_client_logged_in.post(delete, {"post": "yes"}).status_code == 302
    events = MembershipEvent.objects.filter(tenant=tenant).order_by("pk")
    assert [(e.action, e.username, e.previous_role, e.role, e.actor.username) for e in events] == [
        ("added", "newcomer", "", "viewer", "root"),
        ("role_changed", "newcomer", "viewer", "owner", "root"),
        ("removed", "newcomer", "owner", "", "root"),
    ]


def _form_data(response: Any) -> dict[str, Any]:
    """The data the admin change page would post back unchanged: the main form and every inline."""
    data: dict[str, Any] = {}
    forms = [response.context["adminform"].form]
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        for name in ("TOTAL_FORMS", "INITIAL_FORMS", "MIN_NUM_FORMS", "MAX_NUM_FORMS"):
            data[f"{formset.prefix}-{name}"] = management[name].value()
        forms.extend(f for f in formset.forms if f.instance.pk)
        data[f"{formset.prefix}-TOTAL_FORMS"] = len([f for f in formset.forms if f.instance.pk])
    for form in forms:
        for name in form.fields:
            value = form[name].value()
            if value is None or value is False:
                continue
            if isinstance(value, list | tuple):
                value = [v for v in value if v is not None]
            data[form.add_prefix(name)] = value
    return data


def test_member_changes_in_the_tenant_inline_are_audited(admin_client_logged_in: Client) -> None:
    tenant = make_tenant()
    member(tenant, "owner", username="olivia")
    member(tenant, "viewer", username="victor")
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    data = _form_data(admin_client_logged_in.get(url))
    prefix = next(k for k in data if k.endswith("-TOTAL_FORMS") and "membership" in k).removesuffix(
        "-TOTAL_FORMS"
    )
    rows = {Membership.objects.get(pk=data[f"{prefix}-{i}-id"]).user.username: i for i in range(2)}
    data[f"{prefix}-{rows['victor']}-role"] = "owner"  # in the same save that removes the last owner
    data[f"{prefix}-{rows['olivia']}-DELETE"] = "on"
    response = admin_client_logged_in.post(url, data)
    assert response.status_code == 302, response.context and response.context["errors"]
    events = MembershipEvent.objects.filter(tenant=tenant).order_by("username")
    assert [(e.action, e.username, e.role) for e in events] == [
        ("removed", "olivia", ""),
        ("role_changed", "victor", "owner"),
    ]
    assert Membership.objects.get(tenant=tenant).role == "owner"


def _messages(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


def _inline_prefix(data: dict[str, Any]) -> str:
    key = next(k for k in data if k.endswith("-TOTAL_FORMS") and "membership" in k)
    return key.removesuffix("-TOTAL_FORMS")


def test_the_admin_refuses_to_delete_a_tenants_last_owner(admin_client_logged_in: Client) -> None:
    tenant = make_tenant("vision")
    owner = Membership.objects.get(user=member(tenant, "owner", username="olga"))
    member(tenant, "member", username="bob")
    url = reverse("admin:tenants_membership_delete", args=[owner.pk])
    change = reverse("admin:tenants_membership_change", args=[owner.pk])
    refused = (
        "olga in vision (owner) was not deleted: olga is the last owner of vision; make another owner first."
    )
    for response in (admin_client_logged_in.get(url), admin_client_logged_in.post(url, {"post": "yes"})):
        assert response.status_code == 302 and response["Location"] == change
    page = admin_client_logged_in.post(url, {"post": "yes"}, follow=True)
    assert refused in _messages(page)
    assert Membership.objects.filter(pk=owner.pk, role="owner").exists()
    assert not MembershipEvent.objects.filter(tenant=tenant).exists()

    # With a second owner, the first may go.
    member(tenant, "owner", username="oscar")
    assert admin_client_logged_in.get(url).status_code == 200  # the confirmation page
    assert admin_client_logged_in.post(url, {"post": "yes"}).status_code == 302
    assert not Membership.objects.filter(pk=owner.pk).exists()
    assert MembershipEvent.objects.get(tenant=tenant).action == "removed"


def test_the_admin_refuses_to_demote_or_move_a_tenants_last_owner(admin_client_logged_in: Client) -> None:
    tenant, other = make_tenant("vision"), make_tenant("speech")
    olga = member(tenant, "owner", username="olga")
    owner = Membership.objects.get(user=olga)
    url = reverse("admin:tenants_membership_change", args=[owner.pk])
    for tenant_pk, role in ((tenant.pk, "member"), (other.pk, "owner")):
        response = admin_client_logged_in.post(url, {"user": olga.pk, "tenant": tenant_pk, "role": role})
        assert response.status_code == 200
        assert response.context["adminform"].form.errors["role"] == [
            "olga is the last owner of vision; make another owner first"
        ]
    owner.refresh_from_db()
    assert (owner.tenant, owner.role) == (tenant, "owner")

    # Handing the ownership to another user in the same row keeps an owner: allowed.
    bob = make_user(username="bob")
    response = admin_client_logged_in.post(url, {"user": bob.pk, "tenant": tenant.pk, "role": "owner"})
    assert response.status_code == 302
    assert list(Membership.objects.filter(tenant=tenant).values_list("user__username", "role")) == [
        ("bob", "owner")
    ]


def test_the_bulk_delete_action_refuses_a_selection_of_every_owner(admin_client_logged_in: Client) -> None:
    tenant, unowned = make_tenant("vision"), make_tenant("speech")
    picked = [
        Membership.objects.get(user=member(tenant, role, username=name)).pk
        for role, name in (("owner", "olga"), ("owner", "oscar"), ("viewer", "vic"))
    ]
    lone_viewer = Membership.objects.get(user=member(unowned, "viewer", username="val")).pk
    url = reverse("admin:tenants_membership_changelist")
    selection = {"action": "delete_selected", "_selected_action": [*picked, lone_viewer]}
    response = admin_client_logged_in.post(url, selection, follow=True)
    assert _messages(response) == [
        "Nothing was deleted: olga and oscar are the last owners of vision; keep one or make another owner "
        "first."
    ]
    response = admin_client_logged_in.post(url, {**selection, "post": "yes"})
    assert response.status_code == 302 and Membership.objects.count() == 4

    # One of the two owners, the viewer, and the member of a tenant that has no owner: deleted.
    selection["_selected_action"] = [picked[0], picked[2], lone_viewer]
    assert admin_client_logged_in.post(url, selection).status_code == 200  # Django's confirmation page
    assert admin_client_logged_in.post(url, {**selection, "post": "yes"}).status_code == 302
    assert list(Membership.objects.values_list("user__username", flat=True)) == ["oscar"]


def test_the_tenant_inline_refuses_to_remove_or_demote_the_last_owner(admin_client_logged_in: Client) -> None:
    tenant = make_tenant("vision")
    member(tenant, "owner", username="olga")
    member(tenant, "viewer", username="vic")
    url = reverse("admin:tenants_tenant_change", args=[tenant.pk])
    data = _form_data(admin_client_logged_in.get(url))
    prefix = _inline_prefix(data)
    rows = {Membership.objects.get(pk=data[f"{prefix}-{i}-id"]).user.username: i for i in range(2)}
    for field, value in (("DELETE", "on"), ("role", "member")):
        response = admin_client_logged_in.post(url, {**data, f"{prefix}-{rows['olga']}-{field}": value})
        assert response.status_code == 200
        formset = next(
            inline.formset
            for inline in response.context["inline_admin_formsets"]
            if inline.formset.model is Membership
        )
        assert formset.non_form_errors() == ["olga is the last owner of vision; make another owner first"]
    assert Membership.objects.get(user__username="olga").role == "owner"
    assert not MembershipEvent.objects.filter(tenant=tenant).exists()


def test_the_user_admin_refuses_to_delete_a_tenants_last_owner(admin_client_logged_in: Client) -> None:
    tenant = make_tenant("vision")
    olga, bob = member(tenant, "owner", username="olga"), member(tenant, "member", username="bob")
    refused = "olga is the last owner of vision; make another owner first."
    url = reverse("admin:auth_user_delete", args=[olga.pk])
    response = admin_client_logged_in.post(url, {"post": "yes"}, follow=True)
    assert response.redirect_chain == [(reverse("admin:auth_user_change", args=[olga.pk]), 302)]
    assert _messages(response) == [f"olga was not deleted: {refused}"]
    changelist = reverse("admin:auth_user_changelist")
    selection = {"action": "delete_selected", "_selected_action": [olga.pk, bob.pk], "post": "yes"}
    response = admin_client_logged_in.post(changelist, selection, follow=True)
    assert _messages(response) == [f"Nothing was deleted: {refused}"]
    assert Membership.objects.filter(tenant=tenant).count() == 2

    selection["_selected_action"] = [bob.pk]
    assert admin_client_logged_in.post(changelist, selection).status_code == 302
    assert list(Membership.objects.values_list("user__username", flat=True)) == ["olga"]
