"""Builders for the objects that fence in one tenant: namespace, quota, defaults, network, identity."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from kubernetes import client

from clusterio import names
from clusterio.builders.quantities import cpu_quantity, memory_quantity
from clusterio.builders.specs import TenantLimits

GPU_RESOURCE = "nvidia.com/gpu"
# NodeLocal DNSCache's link-local address (the add-on's default; GKE's and EKS's too): pods whose resolver
# is the node-local cache send DNS there, not to kube-dns's pods in kube-system.
NODE_LOCAL_DNS_CIDRS = ("169.254.20.10/32",)
PodSecurityLevel = Literal["restricted", "baseline", "privileged"]


def _managed_labels() -> dict[str, str]:
    return {names.LABEL_MANAGED_BY: names.MANAGED_BY}


def make_namespace(
    name: str,
    tenant_slug: str,
    labels: Mapping[str, str] | None = None,
    *,
    pod_security: PodSecurityLevel | None = None,
) -> client.V1Namespace:
    """Build the namespace that holds one tenant's jobs, labelled with the tenant and managed-by.

    `pod_security` sets the Pod Security Admission `enforce` level; learner pods satisfy
    `restricted` unless they mount hostPath volumes (which need `privileged`), so the caller chooses.
    Platform labels win over `labels`.
    """
    all_labels = {key: names.label_value(value) for key, value in (labels or {}).items()}
    all_labels.update(names.tenant_labels(tenant_slug))
    if pod_security is not None:
        all_labels["pod-security.kubernetes.io/enforce"] = pod_security
    return client.V1Namespace(
        api_version="v1",
        kind="Namespace",
        metadata=client.V1ObjectMeta(name=name, labels=all_labels),
    )


def make_resource_quota(namespace: str, limits: TenantLimits) -> client.V1ResourceQuota:
    """Build the ResourceQuota that caps a tenant's CPU, memory, GPUs and (optionally) pod count, claim
    storage (`requests.storage`, every claim of the namespace) and claim count (`persistentvolumeclaims`).

    Requests and limits get the same cap because learners run with requests == limits. GPUs can
    only be quota'd by request (`requests.nvidia.com/gpu`), as for every extended resource.
    """
    cpu = cpu_quantity(limits.cpu_millis)
    memory = memory_quantity(limits.memory_mib)
    hard = {
        "requests.cpu": cpu,
        "limits.cpu": cpu,
        "requests.memory": memory,
        "limits.memory": memory,
        f"requests.{GPU_RESOURCE}": str(limits.gpus),
    }
    if limits.max_pods is not None:
        hard["pods"] = str(limits.max_pods)
    if limits.storage_gib is not None:
        hard["requests.storage"] = f"{limits.storage_gib}Gi"
    if limits.max_claims is not None:
        hard["persistentvolumeclaims"] = str(limits.max_claims)
    return client.V1ResourceQuota(
        api_version="v1",
        kind="ResourceQuota",
        metadata=client.V1ObjectMeta(
            name=names.RESOURCE_QUOTA_NAME, namespace=namespace, labels=_managed_labels()
        ),
        spec=client.V1ResourceQuotaSpec(hard=hard),
    )


def make_limit_range(
    namespace: str, *, default_cpu_millis: int, default_memory_mib: int
) -> client.V1LimitRange:
    """Build the LimitRange giving containers without resources a default request == limit.

    A ResourceQuota on cpu/memory rejects pods that declare none; this default keeps stray pods
    (debug shells, helpers) admissible and Guaranteed.
    """
    if default_cpu_millis < 1 or default_memory_mib < 1:
        raise ValueError("default cpu and memory must be positive")
    defaults = {"cpu": cpu_quantity(default_cpu_millis), "memory": memory_quantity(default_memory_mib)}
    return client.V1LimitRange(
        api_version="v1",
        kind="LimitRange",
        metadata=client.V1ObjectMeta(
            name=names.LIMIT_RANGE_NAME, namespace=namespace, labels=_managed_labels()
        ),
        spec=client.V1LimitRangeSpec(
            limits=[
                client.V1LimitRangeItem(type="Container", default=defaults, default_request=dict(defaults))
            ]
        ),
    )


def make_network_policy(
    namespace: str, *, egress_cidrs: Sequence[str] = (), dns_cidrs: Sequence[str] = NODE_LOCAL_DNS_CIDRS
) -> client.V1NetworkPolicy:
    """Build the NetworkPolicy that isolates a tenant's namespace.

    Every pod in the namespace is selected, and both directions are default-deny except:
    ingress from and egress to pods of the same namespace (learners rendezvous with each other);
    egress to port 53 UDP and TCP of any pod in `kube-system` (cluster DNS, matched by the
    `kubernetes.io/metadata.name` label every namespace carries) and of `dns_cidrs` (a node-local DNS
    cache, which answers on a link-local address outside any namespace: NodeLocal DNSCache's
    169.254.20.10 by default; empty: none); and egress to `egress_cidrs` (object stores, registries)
    when given. Other namespaces can neither reach nor be reached by the tenant's pods.
    """
    same_namespace = client.V1NetworkPolicyPeer(pod_selector=client.V1LabelSelector())
    dns = client.V1NetworkPolicyEgressRule(
        to=[
            client.V1NetworkPolicyPeer(
                namespace_selector=client.V1LabelSelector(
                    match_labels={"kubernetes.io/metadata.name": "kube-system"}
                )
            ),
            *(client.V1NetworkPolicyPeer(ip_block=client.V1IPBlock(cidr=cidr)) for cidr in dns_cidrs),
        ],
        ports=[
            client.V1NetworkPolicyPort(protocol="UDP", port=53),
            client.V1NetworkPolicyPort(protocol="TCP", port=53),
        ],
    )
    egress = [client.V1NetworkPolicyEgressRule(to=[same_namespace]), dns]
    if egress_cidrs:
        egress.append(
            client.V1NetworkPolicyEgressRule(
                to=[client.V1NetworkPolicyPeer(ip_block=client.V1IPBlock(cidr=cidr)) for cidr in egress_cidrs]
            )
        )
    return client.V1NetworkPolicy(
        api_version="networking.k8s.io/v1",
        kind="NetworkPolicy",
        metadata=client.V1ObjectMeta(
            name=names.NETWORK_POLICY_NAME, namespace=namespace, labels=_managed_labels()
        ),
        spec=client.V1NetworkPolicySpec(
            pod_selector=client.V1LabelSelector(),
            policy_types=["Ingress", "Egress"],
            ingress=[client.V1NetworkPolicyIngressRule(_from=[same_namespace])],
            egress=egress,
        ),
    )


def make_service_account(namespace: str, name: str = names.SERVICE_ACCOUNT_NAME) -> client.V1ServiceAccount:
    """Build the identity learner pods run as: no API token is mounted, and it is granted no RBAC."""
    return client.V1ServiceAccount(
        api_version="v1",
        kind="ServiceAccount",
        metadata=client.V1ObjectMeta(name=name, namespace=namespace, labels=_managed_labels()),
        automount_service_account_token=False,
    )
