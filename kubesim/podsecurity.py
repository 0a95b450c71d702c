"""Pod Security admission: a namespace's `pod-security.kubernetes.io/enforce` level checked on every pod it
gets, as the apiserver's PodSecurity plugin checks the Pod Security Standards (version `latest`; an
`enforce-version` label is validated, then read as latest), refusing with its words:
``pods "x" is forbidden: violates PodSecurity "restricted:latest": reason (detail), ...``.

Checks run in the plugin's order (its baseline checks, then the restricted ones or, at baseline, the baseline
checks that the restricted level replaces) and word their reasons and details as it does. Pods that exist when
a namespace's label changes stay (the apiserver only warns); an update re-checks a pod only when it changes an
image, as the plugin does. No exemptions (the plugin's defaults) and no audit or warn modes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from kubesim.errors import forbidden

Obj = dict[str, Any]
Cause = tuple[str, str, str]
Result = tuple[str, str] | None
Check = Callable[[Obj, Obj], Result]

PREFIX = "pod-security.kubernetes.io/"
ENFORCE = PREFIX + "enforce"
LEVELS = ("privileged", "baseline", "restricted")
_VERSION = re.compile(r"^v1\.([0-9]|[1-9][0-9]*)$")

BASELINE_CAPABILITIES = frozenset(
    [
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    ]
)
SAFE_SYSCTLS = frozenset(
    [
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.ping_group_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_wmem",
    ]
)
SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t"})
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
_SECCOMP_OK = ("RuntimeDefault", "Localhost")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def label_causes(namespace: Obj) -> list[Cause]:
    """422 causes for Pod Security labels with values the plugin cannot parse (it refuses such a namespace)."""
    causes: list[Cause] = []
    for key, value in sorted((namespace["metadata"].get("labels") or {}).items()):
        if not key.startswith(PREFIX):
            continue
        mode = key[len(PREFIX) :]
        if mode in ("enforce", "audit", "warn") and value not in LEVELS:
            problem = f"must be one of {', '.join(LEVELS)}"
        elif mode in ("enforce-version", "audit-version", "warn-version") and not (
            value == "latest" or _VERSION.match(str(value))
        ):
            problem = 'must be "latest" or "v1.x"'
        else:
            continue
        causes.append(
            (f"metadata.labels[{key}]", "FieldValueInvalid", f'Invalid value: "{value}": {problem}')
        )
    return causes


def enforced_level(namespace: Obj | None) -> str:
    """The level a namespace enforces: privileged without the label, restricted for a value that does not
    parse (the plugin fails closed)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    level = labels.get(ENFORCE, "privileged")
    return level if level in LEVELS else "restricted"


def admit(pod: Obj, namespace: Obj | None, old: Obj | None = None) -> None:
    """Refuse (403) a pod that its namespace's enforced level forbids; an update (`old` given) is checked only
    when it changes an image."""
    level = enforced_level(namespace)
    if level == "privileged" or (old is not None and not _images_changed(old, pod)):
        return
    found = violations(pod, level)
    if found:
        detail = ", ".join(f"{reason} ({text})" if text else reason for reason, text in found)
        name = pod["metadata"].get("name", "")
        raise forbidden("pods", name, f'violates PodSecurity "{level}:latest": {detail}')


def violations(pod: Obj, level: str) -> list[tuple[str, str]]:
    """(reason, detail) of every check `pod` fails at `level`, in the plugin's order."""
    if level == "privileged":
        return []
    checks = _BASELINE + (_RESTRICTED if level == "restricted" else _REPLACED_BY_RESTRICTED)
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    return [result for check in checks if (result := check(meta, spec)) is not None]


def _images_changed(old: Obj, new: Obj) -> bool:
    def images(pod: Obj) -> list[tuple[str, Any]]:
        spec = pod.get("spec") or {}
        return [
            (c.get("name"), c.get("image"))
            for key in ("initContainers", "containers", "ephemeralContainers")
            for c in spec.get(key) or []
        ]

    return images(old) != images(new)


# -- helpers, as the plugin's ---------------------------------------------------------------------------------


def _containers(spec: Obj) -> Iterator[Obj]:
    for key in ("initContainers", "containers", "ephemeralContainers"):
        yield from spec.get(key) or []


def _sc(obj: Obj) -> Obj:
    return obj.get("securityContext") or {}


def _quote(items: list[str]) -> str:
    return '"' + '", "'.join(items) + '"' if items else ""


def _plural(singular: str, plural: str, count: int) -> str:
    return singular if count == 1 else plural


def _who(names: list[str]) -> str:
    return f"{_plural('container', 'containers', len(names))} {_quote(names)}"


def _setters(pod_bad: bool, containers: list[str]) -> str:
    return " and ".join((["pod"] if pod_bad else []) + ([_who(containers)] if containers else []))


# -- baseline -------------------------------------------------------------------------------------------------


def _app_armor(meta: Obj, spec: Obj) -> Result:
    bad_values: set[str] = set()
    pod_bad = False
    profile = _sc(spec).get("appArmorProfile")
    if profile is not None and profile.get("type") not in _SECCOMP_OK:
        pod_bad = True
        bad_values.add(str(profile.get("type") or ""))
    bad: list[str] = []
    for c in _containers(spec):
        profile = _sc(c).get("appArmorProfile")
        if profile is not None and profile.get("type") not in _SECCOMP_OK:
            bad.append(c.get("name", ""))
            bad_values.add(str(profile.get("type") or ""))
    annotations = sorted(
        f'{k}="{v}"'
        for k, v in (meta.get("annotations") or {}).items()
        if k.startswith(_APPARMOR_ANNOTATION)
        and v
        and v != "runtime/default"
        and not v.startswith("localhost/")
    )
    setters = [s for s in (_setters(pod_bad, bad),) if s]
    if annotations:
        setters.append(_plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    values = sorted(bad_values) + annotations
    reason = _plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values))
    return reason, f"{' and '.join(setters)} must not set AppArmor profile type to {_quote(values)}"


def _host_namespaces(meta: Obj, spec: Obj) -> Result:
    used = sorted(key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key))
    return ("host namespaces", ", ".join(used)) if used else None


def _host_ports(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    ports: set[str] = set()
    for c in _containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c.get("name", ""))
            ports |= used
    if not bad:
        return None
    uses = _plural("uses", "use", len(bad))
    return (
        "hostPort",
        f"{_who(bad)} {uses} {_plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}",
    )


def _probe_hosts(meta: Obj, spec: Obj) -> Result:
    bad: set[str] = set()
    hosts: set[str] = set()
    for c in _containers(spec):
        handlers = [c.get(p) for p in ("livenessProbe", "readinessProbe", "startupProbe")]
        handlers += [(c.get("lifecycle") or {}).get(h) for h in ("postStart", "preStop")]
        for handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                host = ((handler or {}).get(action) or {}).get("host")
                if host:
                    bad.add(c.get("name", ""))
                    hosts.add(host)
    if not bad:
        return None
    uses = _plural("uses", "use", len(bad))
    kind = _plural("probe or lifecycle host", "probe or lifecycle hosts", len(hosts))
    return "probe or lifecycle host", f"{_who(sorted(bad))} {uses} {kind} {_quote(sorted(hosts))}"


def _privileged(meta: Obj, spec: Obj) -> Result:
    bad = [c.get("name", "") for c in _containers(spec) if _sc(c).get("privileged") is True]
    return ("privileged", f"{_who(bad)} must not set securityContext.privileged=true") if bad else None


def _proc_mount(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    values: set[str] = set()
    for c in _containers(spec):
        mount = _sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            values.add(str(mount))
    if not bad:
        return None
    return "procMount", f"{_who(bad)} must not set securityContext.procMount to {_quote(sorted(values))}"


def _se_linux(meta: Obj, spec: Obj) -> Result:
    bad_types: set[str] = set()
    flags = {"user": False, "role": False}

    def ok(options: Obj | None) -> bool:
        if options is None:
            return True
        valid = True
        if options.get("type", "") not in SELINUX_TYPES:
            bad_types.add(str(options.get("type")))
            valid = False
        for key in flags:
            if options.get(key):
                flags[key] = valid = False
        return valid

    pod_bad = not ok(_sc(spec).get("seLinuxOptions"))
    bad = [c.get("name", "") for c in _containers(spec) if not ok(_sc(c).get("seLinuxOptions"))]
    if not pod_bad and not bad:
        return None
    data: list[str] = []
    if bad_types:  # as the plugin words it: user and role are named only beside a bad type
        data.append(f"{_plural('type', 'types', len(bad_types))} {_quote(sorted(bad_types))}")
        data += [f"{key} may not be set" for key, was_set in flags.items() if was_set]
    return (
        "seLinuxOptions",
        f"{_setters(pod_bad, bad)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}",
    )


def _sysctls(meta: Obj, spec: Obj) -> Result:
    bad = [s.get("name", "") for s in _sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def _host_process(meta: Obj, spec: Obj) -> Result:
    def host_process(obj: Obj) -> bool:
        return (_sc(obj).get("windowsOptions") or {}).get("hostProcess") is True

    bad = [c.get("name", "") for c in _containers(spec) if host_process(c)]
    pod_bad = host_process(spec)
    if not pod_bad and not bad:
        return None
    return (
        "hostProcess",
        f"{_setters(pod_bad, bad)} must not set securityContext.windowsOptions.hostProcess=true",
    )


# -- baseline checks the restricted level replaces --------------------------------------------------------------


def _capabilities_baseline(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    added: set[str] = set()
    for c in _containers(spec):
        extra = {
            cap
            for cap in (_sc(c).get("capabilities") or {}).get("add") or []
            if cap not in BASELINE_CAPABILITIES
        }
        if extra:
            bad.append(c.get("name", ""))
            added |= extra
    if not bad:
        return None
    detail = f"{_who(bad)} must not include {_quote(sorted(added))} in securityContext.capabilities.add"
    return "non-default capabilities", detail


def _host_path_volumes(meta: Obj, spec: Obj) -> Result:
    bad = [v.get("name", "") for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return ("hostPath volumes", f"{_plural('volume', 'volumes', len(bad))} {_quote(bad)}") if bad else None


def _seccomp(spec: Obj, *, required: bool) -> Result:
    bad_values: set[str] = set()
    pod_profile = _sc(spec).get("seccompProfile")
    pod_type = None if pod_profile is None else pod_profile.get("type")
    pod_bad = pod_profile is not None and pod_type not in _SECCOMP_OK
    if pod_bad:
        bad_values.add(str(pod_type))
    pod_set = pod_profile is not None and not pod_bad
    explicit: list[str] = []
    implicit: list[str] = []
    for c in _containers(spec):
        profile = _sc(c).get("seccompProfile")
        if profile is not None:
            if profile.get("type") not in _SECCOMP_OK:
                explicit.append(c.get("name", ""))
                bad_values.add(str(profile.get("type")))
        elif not pod_set:
            implicit.append(c.get("name", ""))
    if pod_bad or explicit:
        setters = _setters(pod_bad, explicit)
        return (
            "seccompProfile",
            f"{setters} must not set securityContext.seccompProfile.type to {_quote(sorted(bad_values))}",
        )
    if required and implicit:
        return (
            "seccompProfile",
            f'pod or {_who(implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
        )
    return None


def _seccomp_baseline(meta: Obj, spec: Obj) -> Result:
    return _seccomp(spec, required=False)


# -- restricted -----------------------------------------------------------------------------------------------


def _privilege_escalation(meta: Obj, spec: Obj) -> Result:
    bad = [
        c.get("name", "") for c in _containers(spec) if _sc(c).get("allowPrivilegeEscalation") is not False
    ]
    if not bad:
        return None
    return (
        "allowPrivilegeEscalation != false",
        f"{_who(bad)} must set securityContext.allowPrivilegeEscalation=false",
    )


def _capabilities_restricted(meta: Obj, spec: Obj) -> Result:
    missing_drop: list[str] = []
    adding: list[str] = []
    added: set[str] = set()
    for c in _containers(spec):
        caps = _sc(c).get("capabilities")
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
        details.append(f'{_who(missing_drop)} must set securityContext.capabilities.drop=["ALL"]')
    if adding:
        details.append(
            f"{_who(adding)} must not include {_quote(sorted(added))} in securityContext.capabilities.add"
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
    uses = _plural("uses", "use", len(bad))
    kind = _plural("restricted volume type", "restricted volume types", len(kinds))
    return (
        "restricted volume types",
        f"{_plural('volume', 'volumes', len(bad))} {_quote(bad)} {uses} {kind} {_quote(sorted(kinds))}",
    )


def _run_as_non_root(meta: Obj, spec: Obj) -> Result:
    pod_value = _sc(spec).get("runAsNonRoot")
    explicit = [c.get("name", "") for c in _containers(spec) if _sc(c).get("runAsNonRoot") is False]
    if pod_value is False or explicit:
        setters = _setters(pod_value is False, explicit)
        return "runAsNonRoot != true", f"{setters} must not set securityContext.runAsNonRoot=false"
    implicit = [
        c.get("name", "")
        for c in _containers(spec)
        if _sc(c).get("runAsNonRoot") is None and pod_value is not True
    ]
    if implicit:
        return "runAsNonRoot != true", f"pod or {_who(implicit)} must set securityContext.runAsNonRoot=true"
    return None


def _run_as_user(meta: Obj, spec: Obj) -> Result:
    def root(obj: Obj) -> bool:
        value = _sc(obj).get("runAsUser")
        return type(value) is int and value == 0

    pod_bad = root(spec)
    bad = [c.get("name", "") for c in _containers(spec) if root(c)]
    if not pod_bad and not bad:
        return None
    return "runAsUser=0", f"{_setters(pod_bad, bad)} must not set runAsUser=0"


def _seccomp_restricted(meta: Obj, spec: Obj) -> Result:
    return _seccomp(spec, required=True)


_BASELINE: tuple[Check, ...] = (
    _app_armor,
    _host_namespaces,
    _host_ports,
    _probe_hosts,
    _privileged,
    _proc_mount,
    _se_linux,
    _sysctls,
    _host_process,
)
_REPLACED_BY_RESTRICTED: tuple[Check, ...] = (_capabilities_baseline, _host_path_volumes, _seccomp_baseline)
_RESTRICTED: tuple[Check, ...] = (
    _privilege_escalation,
    _capabilities_restricted,
    _restricted_volumes,
    _run_as_non_root,
    _run_as_user,
    _seccomp_restricted,
)
