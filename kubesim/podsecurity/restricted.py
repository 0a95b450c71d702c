"""The Restricted Pod Security Standard's checks, in the plugin's order (run after the baseline ones).

Restricted adds the hardening a pod must opt into: no privilege escalation, all capabilities dropped,
only ephemeral or claim-backed volume types, a non-root user, and a seccomp profile.
"""

from __future__ import annotations

from kubesim.podsecurity.baseline import seccomp
from kubesim.podsecurity.wording import Check, Obj, Result, containers, plural, quote, sc, who, who_set

RESTRICTED_VOLUMES = frozenset(
    [
        "configMap",
        "csi",
        "downwardAPI",
        "emptyDir",
        "ephemeral",
        "persistentVolumeClaim",
        "projected",
        "secret",
    ]
)
# Volume sources the plugin names; any other (non-allowed) source is reported as "unknown".
_NAMED_VOLUMES = [
    "hostPath",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "nfs",
    "iscsi",
    "glusterfs",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "fc",
    "azureFile",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "portworxVolume",
    "scaleIO",
    "storageos",
]


def _privilege_escalation(meta: Obj, spec: Obj) -> Result:
    bad = [c.get("name", "") for c in containers(spec) if sc(c).get("allowPrivilegeEscalation") is not False]
    if not bad:
        return None
    return (
        "allowPrivilegeEscalation != false",
        f"{who(bad)} must set securityContext.allowPrivilegeEscalation=false",
    )


def _capabilities_restricted(meta: Obj, spec: Obj) -> Result:
    missing_drop: list[str] = []
    adding: list[str] = []
    added: set[str] = set()
    for c in containers(spec):
        caps = sc(c).get("capabilities")
        if caps is None:
            missing_drop.append(c.get("name", ""))
            continue
        if "ALL" not in (caps.get("drop") or []):
            missing_drop.append(c.get("name", ""))
        extra = {cap for cap in caps.get("add") or [] if cap != "NET_BIND_SERVICE"}
        if extra:
            adding.append(c.get("name", ""))
            added |= extra
    details: list[str] = []
    if missing_drop:
        details.append(f'{who(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{who(adding)} must not include {quote(sorted(added))} in securityContext.capabilities.add"
        )
    return ("unrestricted capabilities", "; ".join(details)) if details else None


def _restricted_volumes(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    kinds: set[str] = set()
    for volume in spec.get("volumes") or []:
        sources = [key for key in volume if key != "name"]
        if not sources or any(key in RESTRICTED_VOLUMES for key in sources):
            continue  # no source at all is an emptyDir, as the apiserver defaults it
        bad.append(volume.get("name", ""))
        kinds.add(next((key for key in _NAMED_VOLUMES if key in sources), "unknown"))
    if not bad:
        return None
    uses = plural("uses", "use", len(bad))
    kind = plural("restricted volume type", "restricted volume types", len(kinds))
    return (
        "restricted volume types",
        f"{plural('volume', 'volumes', len(bad))} {quote(bad)} {uses} {kind} {quote(sorted(kinds))}",
    )


def _run_as_non_root(meta: Obj, spec: Obj) -> Result:
    pod_value = sc(spec).get("runAsNonRoot")
    explicit = [c.get("name", "") for c in containers(spec) if sc(c).get("runAsNonRoot") is False]
    if pod_value is False or explicit:
        setters = who_set(pod_value is False, explicit)
        return "runAsNonRoot != true", f"{setters} must not set securityContext.runAsNonRoot=false"
    implicit = [
        c.get("name", "")
        for c in containers(spec)
        if sc(c).get("runAsNonRoot") is None and pod_value is not True
    ]
    if implicit:
        return "runAsNonRoot != true", f"pod or {who(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def _run_as_user(meta: Obj, spec: Obj) -> Result:
    def root(obj: Obj) -> bool:
        value = sc(obj).get("runAsUser")
        return type(value) is int and value == 0

    pod_bad = root(spec)
    bad = [c.get("name", "") for c in containers(spec) if root(c)]
    if not pod_bad and not bad:
        return None
    return "runAsUser=0", f"{who_set(pod_bad, bad)} must not set runAsUser=0"


def _seccomp_restricted(meta: Obj, spec: Obj) -> Result:
    return seccomp(spec, required=True)


RESTRICTED: tuple[Check, ...] = (
    _privilege_escalation,
    _capabilities_restricted,
    _restricted_volumes,
    _run_as_non_root,
    _run_as_user,
    _seccomp_restricted,
)
