"""The Baseline Pod Security Standard's checks, in the plugin's order, and the three the restricted level replaces.

Baseline forbids the known privilege escalations (host namespaces, ports and paths, privileged
containers, unsafe sysctls and capabilities, non-default AppArmor, SELinux and seccomp profiles); each
check returns the plugin's (reason, detail) or None.
"""

from __future__ import annotations

from kubesim.podsecurity.wording import Check, Obj, Result, containers, plural, quote, sc, who, who_set

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
_SECCOMP_OK = ("RuntimeDefault", "Localhost")
_APPARMOR_ANNOTATION = "container.apparmor.security.beta.kubernetes.io/"


def _app_armor(meta: Obj, spec: Obj) -> Result:
    bad_values: set[str] = set()
    pod_bad = False
    profile = sc(spec).get("appArmorProfile")
    if profile is not None and profile.get("type") not in _SECCOMP_OK:
        pod_bad = True
        bad_values.add(str(profile.get("type") or ""))
    bad: list[str] = []
    for c in containers(spec):
        profile = sc(c).get("appArmorProfile")
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
    setters = [s for s in (who_set(pod_bad, bad),) if s]
    if annotations:
        setters.append(plural("annotation", "annotations", len(annotations)))
    if not setters:
        return None
    values = sorted(bad_values) + annotations
    reason = plural("forbidden AppArmor profile", "forbidden AppArmor profiles", len(values))
    return reason, f"{' and '.join(setters)} must not set AppArmor profile type to {quote(values)}"


def _host_namespaces(meta: Obj, spec: Obj) -> Result:
    used = sorted(key for key in ("hostNetwork", "hostPID", "hostIPC") if spec.get(key))
    return ("host namespaces", ", ".join(used)) if used else None


def _host_ports(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    ports: set[str] = set()
    for c in containers(spec):
        used = {str(p["hostPort"]) for p in c.get("ports") or [] if p.get("hostPort")}
        if used:
            bad.append(c.get("name", ""))
            ports |= used
    if not bad:
        return None
    uses = plural("uses", "use", len(bad))
    return (
        "hostPort",
        f"{who(bad)} {uses} {plural('hostPort', 'hostPorts', len(ports))} {', '.join(sorted(ports))}",
    )


def _probe_hosts(meta: Obj, spec: Obj) -> Result:
    bad: set[str] = set()
    hosts: set[str] = set()
    for c in containers(spec):
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
    uses = plural("uses", "use", len(bad))
    kind = plural("probe or lifecycle host", "probe or lifecycle hosts", len(hosts))
    return "probe or lifecycle host", f"{who(sorted(bad))} {uses} {kind} {quote(sorted(hosts))}"


def _privileged(meta: Obj, spec: Obj) -> Result:
    bad = [c.get("name", "") for c in containers(spec) if sc(c).get("privileged") is True]
    return ("privileged", f"{who(bad)} must not set securityContext.privileged=true") if bad else None


def _proc_mount(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    values: set[str] = set()
    for c in containers(spec):
        mount = sc(c).get("procMount")
        if mount is not None and mount != "Default":
            bad.append(c.get("name", ""))
            values.add(str(mount))
    if not bad:
        return None
    return "procMount", f"{who(bad)} must not set securityContext.procMount to {quote(sorted(values))}"


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

    pod_bad = not ok(sc(spec).get("seLinuxOptions"))
    bad = [c.get("name", "") for c in containers(spec) if not ok(sc(c).get("seLinuxOptions"))]
    if not pod_bad and not bad:
        return None
    data: list[str] = []
    if bad_types:  # as the plugin words it: user and role are named only beside a bad type
        data.append(f"{plural('type', 'types', len(bad_types))} {quote(sorted(bad_types))}")
        data += [f"{key} may not be set" for key, was_set in flags.items() if was_set]
    return (
        "seLinuxOptions",
        f"{who_set(pod_bad, bad)} set forbidden securityContext.seLinuxOptions: {'; '.join(data)}",
    )


def _sysctls(meta: Obj, spec: Obj) -> Result:
    bad = [s.get("name", "") for s in sc(spec).get("sysctls") or [] if s.get("name") not in SAFE_SYSCTLS]
    return ("forbidden sysctls", ", ".join(bad)) if bad else None


def _host_process(meta: Obj, spec: Obj) -> Result:
    def host_process(obj: Obj) -> bool:
        return (sc(obj).get("windowsOptions") or {}).get("hostProcess") is True

    bad = [c.get("name", "") for c in containers(spec) if host_process(c)]
    pod_bad = host_process(spec)
    if not pod_bad and not bad:
        return None
    return (
        "hostProcess",
        f"{who_set(pod_bad, bad)} must not set securityContext.windowsOptions.hostProcess=true",
    )


def _capabilities_baseline(meta: Obj, spec: Obj) -> Result:
    bad: list[str] = []
    added: set[str] = set()
    for c in containers(spec):
        extra = {
            cap
            for cap in (sc(c).get("capabilities") or {}).get("add") or []
            if cap not in BASELINE_CAPABILITIES
        }
        if extra:
            bad.append(c.get("name", ""))
            added |= extra
    if not bad:
        return None
    detail = f"{who(bad)} must not include {quote(sorted(added))} in securityContext.capabilities.add"
    return "non-default capabilities", detail


def _host_path_volumes(meta: Obj, spec: Obj) -> Result:
    bad = [v.get("name", "") for v in spec.get("volumes") or [] if v.get("hostPath") is not None]
    return ("hostPath volumes", f"{plural('volume', 'volumes', len(bad))} {quote(bad)}") if bad else None


def seccomp(spec: Obj, *, required: bool) -> Result:
    """The seccomp check at either level: a forbidden profile fails both; with `required` (restricted), so
    does a container that no profile covers."""
    bad_values: set[str] = set()
    pod_profile = sc(spec).get("seccompProfile")
    pod_type = None if pod_profile is None else pod_profile.get("type")
    pod_bad = pod_profile is not None and pod_type not in _SECCOMP_OK
    if pod_bad:
        bad_values.add(str(pod_type))
    pod_set = pod_profile is not None and not pod_bad
    explicit: list[str] = []
    implicit: list[str] = []
    for c in containers(spec):
        profile = sc(c).get("seccompProfile")
        if profile is not None:
            if profile.get("type") not in _SECCOMP_OK:
                explicit.append(c.get("name", ""))
                bad_values.add(str(profile.get("type")))
        elif not pod_set:
            implicit.append(c.get("name", ""))
    if pod_bad or explicit:
        setters = who_set(pod_bad, explicit)
        return (
            "seccompProfile",
            f"{setters} must not set securityContext.seccompProfile.type to {quote(sorted(bad_values))}",
        )
    if required and implicit:
        return (
            "seccompProfile",
            f'pod or {who(implicit)} must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"',
        )
    return None


def _seccomp_baseline(meta: Obj, spec: Obj) -> Result:
    return seccomp(spec, required=False)


BASELINE: tuple[Check, ...] = (
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
REPLACED_BY_RESTRICTED: tuple[Check, ...] = (_capabilities_baseline, _host_path_volumes, _seccomp_baseline)
