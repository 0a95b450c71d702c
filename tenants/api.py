"""REST API for tenants (`/api/v1/tenants/`) and the caller's API tokens (`/api/v1/tokens/`)."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.http import Http404
from drf_spectacular.utils import OpenApiResponse, extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.exceptions import PermissionDenied
from rest_framework.request import Request
from rest_framework.response import Response

from common.api import ApiView, ResourcesSerializer, api_user, errors
from tenants.members import MemberRefused, member_add, member_events, member_remove, member_role_set
from tenants.models import (
    ApiToken,
    JobClaims,
    Membership,
    MembershipEvent,
    PodSecurity,
    Role,
    Tenant,
    TokenScope,
)
from tenants.policy import WRITE_CAP_FIELDS, policy_of, policy_set
from tenants.scoping import Perm, has_perm, tenants_for
from tenants.services import QUOTA_FIELDS, quota_set
from tenants.tokens import TokenRefused, token_create, token_revoke
from tenants.usage import tenant_usage


def _limit(resource: str) -> serializers.IntegerField:
    return serializers.IntegerField(
        min_value=0,
        allow_null=True,
        help_text=f"{resource} the tenant may borrow above its nominal quota from its cohort's unused quota: "
        "0 none, null no limit of its own (still bounded by what the cohort has to lend).",
    )


class QuotaSerializer(ResourcesSerializer):
    """A tenant's nominal (guaranteed) GPUs, CPU and memory, what it may borrow beyond them from its cohort,
    how many jobs it may run and keep waiting, and the claim storage and count its jobs may hold; every field
    optional on PATCH."""

    gpus = serializers.IntegerField(min_value=0, help_text="Nominal (guaranteed) whole GPUs.")
    cpu_millis = serializers.IntegerField(min_value=0, help_text="Nominal CPU in millicores.")
    memory_mib = serializers.IntegerField(min_value=0, help_text="Nominal memory in MiB.")
    gpus_borrowing_limit = _limit("GPUs")
    cpu_millis_borrowing_limit = _limit("CPU (millicores)")
    memory_mib_borrowing_limit = _limit("Memory (MiB)")
    cohort = serializers.SlugField(
        max_length=40,
        allow_blank=True,
        help_text="Tenants of one cohort lend each other unused nominal quota; blank: the cluster-wide cohort.",
    )
    max_running_jobs = serializers.IntegerField(min_value=0)
    max_queued_jobs = serializers.IntegerField(min_value=0)
    storage_gib = serializers.IntegerField(
        min_value=0,
        max_value=10**9,
        help_text="Total GiB the tenant's claims may request together (checkpoint claims, from a job's first "
        "launch until it is deleted).",
    )
    max_claims = serializers.IntegerField(
        min_value=0, max_value=10**6, help_text="How many PersistentVolumeClaims the tenant's jobs may hold."
    )
    weight = serializers.FloatField(
        source="tenant.weight",
        min_value=0.01,
        max_value=1000,
        help_text="Fair-share weight: with weight 2 a tenant gets twice the share of one with weight 1.",
    )


class UsageSerializer(ResourcesSerializer):
    """What a tenant's admitted jobs hold now (a `tenants.usage.Usage`), and how many jobs wait."""

    running_jobs = serializers.IntegerField()
    queued_jobs = serializers.IntegerField()
    storage_gib = serializers.IntegerField(
        help_text="GiB the claims of its jobs request (halted and finished jobs keep theirs until deleted)."
    )
    claims = serializers.IntegerField(help_text="PersistentVolumeClaims its jobs hold.")


class TenantDataSerializer(serializers.Serializer):
    """A tenant with its quota, its current usage and your role in it."""

    slug = serializers.SlugField()
    name = serializers.CharField()
    weight = serializers.FloatField()
    active = serializers.BooleanField()
    role = serializers.SerializerMethodField()
    quota = QuotaSerializer()
    usage = serializers.SerializerMethodField()

    @extend_schema_field(
        serializers.ChoiceField(
            choices=[*Role.values, "admin"],
            allow_null=True,
            help_text="Your role in the tenant; admin for a superuser who is not a member.",
        )
    )
    def get_role(self, tenant: Tenant) -> str | None:
        """The role of the context's `user`: the views pass the requester, so one serializer serves all."""
        user = self.context["user"]
        role = Membership.objects.filter(tenant=tenant, user=user).values_list("role", flat=True).first()
        return role or ("admin" if getattr(user, "is_superuser", False) else None)

    @extend_schema_field(UsageSerializer)
    def get_usage(self, tenant: Tenant) -> dict[str, Any]:
        return dict(UsageSerializer(tenant_usage(tenant)).data)


class MemberSerializer(serializers.Serializer):
    """A member of the tenant and their role; the tenant's owners see e-mail addresses too."""

    username = serializers.CharField(source="user.username")
    role = serializers.ChoiceField(choices=Role.values)
    email = serializers.CharField(
        source="user.email", required=False, help_text="Shown to the tenant's owners only."
    )

    def to_representation(self, instance: Membership) -> dict[str, Any]:
        """Leaves the address out unless the context's `show_email` says the requester owns the tenant."""
        data = dict(super().to_representation(instance))
        if not self.context.get("show_email"):
            del data["email"]
        return data


class MemberAddSerializer(serializers.Serializer):
    """Who to add (an existing user's username) and with which role (default member)."""

    username = serializers.CharField()
    role = serializers.ChoiceField(choices=Role.values, default=Role.MEMBER)


class MemberRoleSerializer(serializers.Serializer):
    """A member's new role."""

    role = serializers.ChoiceField(choices=Role.values)


def _object(request: Request) -> dict[str, Any]:
    if not isinstance(request.data, dict):
        raise MemberRefused({"": ["send a JSON object"]})
    return {str(k): v for k, v in request.data.items()}


def _tenant(request: Request, slug: str) -> Tenant:
    tenant = tenants_for(request.user).select_related("quota").filter(slug=slug).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


class TenantListView(ApiView):
    """GET: the tenants you belong to, with quota, usage and your role."""

    @extend_schema(responses={200: TenantDataSerializer(many=True), **errors(401, 429)})
    def get(self, request: Request) -> Response:
        tenants = tenants_for(request.user).select_related("quota")
        return Response(TenantDataSerializer(tenants, many=True, context={"user": request.user}).data)


class TenantDetailView(ApiView):
    @extend_schema(responses={200: TenantDataSerializer, **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        return Response(TenantDataSerializer(tenant, context={"user": request.user}).data)


class TenantMembersView(ApiView):
    """GET: members and roles (owners see e-mail addresses too). POST {"username", "role"}: add an existing
    user (owners and platform admins)."""

    @extend_schema(responses={200: MemberSerializer(many=True), **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        owner = has_perm(request.user, tenant, Perm.MANAGE_TENANT)
        rows = Membership.objects.filter(tenant=tenant).select_related("user")
        return Response(MemberSerializer(rows, many=True, context={"show_email": owner}).data)

    @extend_schema(
        request=MemberAddSerializer,
        responses={201: MemberSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def post(self, request: Request, slug: str) -> Response:
        """Add an existing user by username with a role (owners and platform admins)."""
        tenant = _tenant(request, slug)
        body = _object(request)
        unknown = sorted(set(body) - {"username", "role"})
        if unknown:
            raise MemberRefused({name: ["unknown field; send username and role"] for name in unknown})
        membership = member_add(
            tenant=tenant,
            actor=api_user(request),
            username=body.get("username"),
            role=body.get("role", Role.MEMBER),
        )
        body = MemberSerializer(membership, context={"show_email": True}).data
        return Response(body, status=status.HTTP_201_CREATED)


class TenantMemberDetailView(ApiView):
    """PATCH {"role"}: change a member's role. DELETE: remove them. Owners and platform admins; the last
    owner can be neither demoted nor removed."""

    @extend_schema(
        request=MemberRoleSerializer,
        responses={200: MemberSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def patch(self, request: Request, slug: str, username: str) -> Response:
        tenant = _tenant(request, slug)
        body = _object(request)
        unknown = sorted(set(body) - {"role"})
        if unknown:
            raise MemberRefused({name: ["unknown field; only role can change"] for name in unknown})
        if "role" not in body:
            raise MemberRefused({"role": ["this field is required"]})
        membership = member_role_set(
            tenant=tenant, actor=api_user(request), username=username, role=body["role"]
        )
        return Response(MemberSerializer(membership, context={"show_email": True}).data)

    @extend_schema(
        responses={204: OpenApiResponse(description="Removed."), **errors(400, 401, 403, 404, 429)}
    )
    def delete(self, request: Request, slug: str, username: str) -> Response:
        member_remove(tenant=_tenant(request, slug), actor=api_user(request), username=username)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MemberEventSerializer(serializers.ModelSerializer):
    """One membership change: whom, what (added, role_changed, removed), the roles, who did it, when."""

    actor = serializers.CharField(source="actor.username", allow_null=True, default=None)

    class Meta:
        model = MembershipEvent
        fields = ["username", "action", "role", "previous_role", "actor", "at"]


class TenantMemberEventsView(ApiView):
    """GET: the audit of the tenant's membership changes, newest first (owners and platform admins)."""

    @extend_schema(responses={200: MemberEventSerializer(many=True), **errors(401, 403, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        if not has_perm(request.user, tenant, Perm.MANAGE_TENANT):
            raise PermissionDenied(f"only owners of tenant {tenant.slug} see its membership changes")
        return Response(MemberEventSerializer(member_events(tenant=tenant)[:200], many=True).data)


class PolicySerializer(serializers.Serializer):
    """A tenant's policy (tenants.policy); every field optional on PATCH."""

    host_path_prefixes = serializers.ListField(
        child=serializers.CharField(),
        help_text="Node folders `type: host` volumes may mount (none by default).",
    )
    image_registries = serializers.ListField(
        child=serializers.CharField(), help_text="Patterns images must match; empty: any image."
    )
    datastore_hosts = serializers.ListField(
        child=serializers.CharField(), help_text="S3 endpoint hosts allowed; empty: any public endpoint."
    )
    member_max_priority = serializers.IntegerField(help_text="The highest priority a member may use.")
    owner_max_priority = serializers.IntegerField(help_text="The highest priority an owner may use.")
    pod_security = serializers.ChoiceField(choices=PodSecurity.values, help_text="The namespace's PSA level.")
    preempt_lower_priority = serializers.BooleanField(
        help_text="A waiting job may preempt the tenant's own running jobs of lower priority."
    )
    idle_gpu_halt_after_seconds = serializers.IntegerField(
        allow_null=True,
        help_text="Halt a job this many seconds after its GPUs were flagged idle; null: never (only flag).",
    )
    job_claims = serializers.ChoiceField(
        choices=JobClaims.values,
        help_text="Which jobs' checkpoint claims a pvc volume may mount: none, the submitter's own, any job's "
        "of the tenant.",
    )
    # Caps on what one attempt of a job writes; null: the platform's default (docs/operations.md).
    result_max_files = serializers.IntegerField(allow_null=True, help_text="Result files per attempt.")
    result_max_bytes = serializers.IntegerField(
        allow_null=True, help_text="Bytes of result files per attempt."
    )
    pod_reports_max = serializers.IntegerField(
        allow_null=True, help_text="Completion reports and other pod-reported events per attempt."
    )
    tensorboard_piece_max_bytes = serializers.IntegerField(
        allow_null=True, help_text="Bytes of one TensorBoard piece (at most 64 MiB)."
    )
    tensorboard_max_bytes = serializers.IntegerField(
        allow_null=True, help_text="Bytes of TensorBoard event files per attempt."
    )
    tensorboard_piece_max_rows = serializers.IntegerField(
        allow_null=True, help_text="Metric rows kept from one parsed TensorBoard piece."
    )
    tensorboard_max_rows = serializers.IntegerField(
        allow_null=True, help_text="Metric rows kept from one attempt's TensorBoard files."
    )
    log_max_lines_per_second = serializers.IntegerField(
        allow_null=True, help_text="Log lines a learner may store per second; null: the platform's default."
    )
    log_max_bytes_per_second = serializers.IntegerField(
        allow_null=True, help_text="Log bytes a learner may store per second; null: the platform's default."
    )
    log_max_lines = serializers.IntegerField(
        allow_null=True, help_text="Log lines a learner may store per attempt; null: the platform's default."
    )
    log_max_bytes = serializers.IntegerField(
        allow_null=True, help_text="Log bytes a learner may store per attempt; null: the platform's default."
    )
    pod_overrides = serializers.JSONField(
        help_text="Operator overrides of the tenant's learner pods, applied after POD_OVERRIDES: tolerations, "
        "node_selector, node_affinity, priority_class_name, labels, annotations, patch (docs/operations.md)."
    )


POLICY_FIELDS = (
    "host_path_prefixes",
    "image_registries",
    "datastore_hosts",
    "member_max_priority",
    "owner_max_priority",
    "pod_security",
    "preempt_lower_priority",
    "idle_gpu_halt_after_seconds",
    "job_claims",
    *WRITE_CAP_FIELDS,
    "log_max_lines_per_second",
    "log_max_bytes_per_second",
    "log_max_lines",
    "log_max_bytes",
    "pod_overrides",
)


class TenantPolicyView(ApiView):
    """GET: what the tenant's jobs may reach (any member). PATCH: change it (platform admins only)."""

    @extend_schema(responses={200: PolicySerializer, **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        return Response(PolicySerializer(policy_of(_tenant(request, slug))).data)

    @extend_schema(
        request=PolicySerializer(partial=True),
        responses={200: PolicySerializer, **errors(400, 401, 403, 404, 429)},
    )
    def patch(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        if not api_user(request).is_superuser:
            raise PermissionDenied("only platform admins change a tenant's policy")
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"": ["send a JSON object of policy fields"]})
        unknown = sorted(set(request.data) - set(POLICY_FIELDS))
        if unknown:
            raise serializers.ValidationError({name: ["unknown policy field"] for name in unknown})
        try:
            policy_set(tenant=tenant, **request.data)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        return Response(PolicySerializer(policy_of(tenant)).data)


class TenantQuotaView(ApiView):
    """GET: the tenant's quota (any member). PATCH: change it (platform admins only), all fields or none."""

    @extend_schema(responses={200: QuotaSerializer, **errors(401, 404, 429)})
    def get(self, request: Request, slug: str) -> Response:
        return Response(QuotaSerializer(_tenant(request, slug).quota).data)

    @extend_schema(
        request=QuotaSerializer(partial=True),
        responses={200: QuotaSerializer, **errors(400, 401, 403, 404, 429)},
    )
    def patch(self, request: Request, slug: str) -> Response:
        tenant = _tenant(request, slug)
        if not api_user(request).is_superuser:
            raise PermissionDenied("only platform admins change a tenant's quota")
        if not isinstance(request.data, dict):
            raise serializers.ValidationError({"": ["send a JSON object of quota fields"]})
        unknown = sorted(set(request.data) - {*QUOTA_FIELDS, "weight"})
        if unknown:
            raise serializers.ValidationError({name: ["unknown quota field"] for name in unknown})
        form = QuotaSerializer(data=request.data, partial=True)
        form.is_valid(raise_exception=True)
        fields = dict(form.validated_data)
        fields.update(fields.pop("tenant", {}))
        try:
            quota = quota_set(tenant=tenant, **fields)
        except DjangoValidationError as exc:
            raise serializers.ValidationError(exc.message_dict) from None
        return Response(QuotaSerializer(quota).data)


class TokenSerializer(serializers.ModelSerializer):
    """A token as its owner sees it: never its secret."""

    class Meta:
        model = ApiToken
        fields = ["id", "name", "scope", "prefix", "created_at", "last_used_at", "expires_at", "revoked_at"]


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=100)
    scope = serializers.ChoiceField(
        choices=TokenScope.choices,
        default=TokenScope.SUBMIT,
        help_text="read: safe methods only; submit: also job writes (submit, cancel, halt, resume, retry, "
        "labels, delete); admin: everything your role allows. No wider than the token this request uses.",
    )
    expires_at = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="When it stops working; absent or null: API_TOKEN_DEFAULT_DAYS (90) from now. At most "
        "API_TOKEN_MAX_DAYS (365) ahead, and no later than the token this request uses.",
    )


class TokenWithSecretSerializer(TokenSerializer):
    """A new token as POST returns it: with its secret, shown this once."""

    token = serializers.SerializerMethodField(
        help_text="The secret: send it as `Authorization: Bearer <token>`."
    )

    class Meta(TokenSerializer.Meta):
        fields = [*TokenSerializer.Meta.fields, "token"]

    def get_token(self, token: ApiToken) -> str:
        """The secret the view passes in the context: only its hash is stored, so the token cannot give it."""
        return str(self.context["secret"])


class TokenListView(ApiView):
    """GET: your tokens (never their secrets). POST {"name", "scope", "expires_at"}: a new token, its secret
    shown this once (an admin-scoped token, or a session, may make one)."""

    @extend_schema(responses={200: TokenSerializer(many=True), **errors(401, 429)})
    def get(self, request: Request) -> Response:
        return Response(TokenSerializer(ApiToken.objects.filter(user=api_user(request)), many=True).data)

    @extend_schema(
        request=TokenCreateSerializer,
        responses={201: TokenWithSecretSerializer, **errors(400, 401, 403, 429)},
    )
    def post(self, request: Request) -> Response:
        form = TokenCreateSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        parent = request.auth if isinstance(request.auth, ApiToken) else None
        try:
            token, secret = token_create(user=api_user(request), parent=parent, **form.validated_data)
        except TokenRefused as exc:
            raise serializers.ValidationError({exc.field: [str(exc)]}) from None
        body = TokenWithSecretSerializer(token, context={"secret": secret}).data
        return Response(body, status=status.HTTP_201_CREATED)


class TokenDetailView(ApiView):
    """DELETE: revoke one of your tokens."""

    @extend_schema(responses={204: OpenApiResponse(description="Revoked."), **errors(401, 403, 404, 429)})
    def delete(self, request: Request, token_id: int) -> Response:
        token = ApiToken.objects.filter(user=api_user(request), pk=token_id).first()
        if token is None:
            raise Http404("no such token")
        token_revoke(token=token)
        return Response(status=status.HTTP_204_NO_CONTENT)
