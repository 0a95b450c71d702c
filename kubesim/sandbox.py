"""Sandboxed containers: each command runs under bubblewrap in its own mount and PID namespaces.

The container sees a private root folder (its writable layer), read-only system folders of this machine,
kubesim's interpreter, and its pod's volumes at their ``mountPath``s; not other pods, the state directory
or the checkout. Its network is its pod's namespace (kubesim.network), entered before bwrap starts.
"""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from kubesim.store import Obj

log = logging.getLogger("kubesim.sandbox")
BWRAP = "/usr/bin/bwrap"
# containerd's default capability set for a root container; a non-root one has none.
CAPABILITIES = (
    *("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "SETPCAP"),
    *("NET_BIND_SERVICE", "NET_RAW", "SYS_CHROOT", "MKNOD", "AUDIT_WRITE", "SETFCAP"),
)
SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
HIDDEN_FILES = ("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-")
HIDDEN_DIRS = ("/etc/ssh", "/etc/ssl/private")
SHM = "/dev/shm"  # noqa: S108 - the container's own 64 MiB tmpfs, as a pod sandbox has
SHM_BYTES = 64 * 2**20
# The shell that execs bwrap ignores SIGTERM first: bwrap and its reaper inherit that, so a SIGTERM sent to
# the container's process group reaches only the command, which starts with every signal at its default.
PRELUDE = 'trap "" TERM; umask 022; '
_EXEC = ["/usr/bin/env", "--default-signal", "/usr/bin/setpriv"]


@dataclass(frozen=True)
class Mount:
    """One volume as the container sees it: host ``source`` bound at ``path``."""

    path: str
    source: str
    read_only: bool = False


@dataclass(frozen=True)
class Identity:
    """Who the command runs as: ``runAsUser``/``runAsGroup`` and supplementary groups (None: unchanged)."""

    uid: int = 0
    gid: int = 0
    groups: tuple[int, ...] = ()
    changed: bool = False

    @property
    def home(self) -> str:
        """HOME as containerd sets it for a user the image's passwd may not know."""
        if self.uid == 0:
            return "/root"
        try:
            return pwd.getpwuid(self.uid).pw_dir
        except KeyError:
            return "/"


def security_context(pod: Obj, container: Obj) -> Obj:
    """The pod's and container's securityContext merged, the container's settings winning."""
    pod_ctx = pod["spec"].get("securityContext") or {}
    return {**pod_ctx, **{k: v for k, v in (container.get("securityContext") or {}).items() if v is not None}}


def non_root_problem(pod: Obj, container: Obj) -> str | None:
    """Why the kubelet refuses to create the container under ``runAsNonRoot`` (in its words), or None.
    kubesim's images have no USER, so without ``runAsUser`` a container would run as root."""
    ctx = security_context(pod, container)
    if not ctx.get("runAsNonRoot"):
        return None
    meta = pod["metadata"]
    where = (
        f'(pod: "{meta["name"]}_{meta["namespace"]}({meta.get("uid", "")})", container: {container["name"]})'
    )
    if ctx.get("runAsUser") is None:
        return f"container has runAsNonRoot and image will run as root {where}"
    if int(ctx["runAsUser"]) == 0:
        return f"container's runAsUser breaks non-root policy {where}"
    return None


def identity(pod: Obj, container: Obj) -> Identity:
    """Who the runtime runs the command as, from the merged securityContext."""
    pod_ctx = pod["spec"].get("securityContext") or {}
    ctx = security_context(pod, container)
    uid, gid = ctx.get("runAsUser"), ctx.get("runAsGroup")
    groups = [*(pod_ctx.get("supplementalGroups") or [])]
    if pod_ctx.get("fsGroup") is not None:
        groups.append(pod_ctx["fsGroup"])
    if uid is None and gid is None and not groups:
        return Identity()
    uid = int(uid or 0)
    if gid is None:
        try:
            gid = pwd.getpwuid(uid).pw_gid
        except KeyError:
            gid = 0
    return Identity(uid, int(gid), tuple(dict.fromkeys(int(g) for g in groups)), changed=True)


@dataclass
class Layout:
    """Everything the wrapper needs for one container start."""

    root: Path
    mounts: list[Mount]
    workdir: str
    user: Identity
    read_only_root: bool = False
    devices: list[str] = field(default_factory=list)
    hostname: str | None = None


class Sandbox:
    """Probes once whether bubblewrap works here and builds the wrapper argv for each container."""

    def __init__(self, state_dir: Path, enabled: bool = True):
        self.state_dir = state_dir
        self.available = False
        self.reason = "disabled (--no-sandbox / sandbox=False)"
        self.prefixes = interpreter_folders()
        self.empty = state_dir / "sandbox-empty"  # bound over password hashes and the like
        if enabled:
            self.available, self.reason = self._probe()
        if self.available:
            log.info("kubesim sandbox: %s", self.reason)
        elif enabled:
            log.warning(
                "CONTAINERS ARE NOT SANDBOXED (%s): pods share this machine's filesystem and run as "
                "kubesim's user; install bubblewrap (make sandbox) or pass --no-sandbox to silence this",
                self.reason,
            )
        else:
            log.warning("containers are not sandboxed: %s", self.reason)

    def _probe(self) -> tuple[bool, str]:
        """Run a trivial command exactly as containers are run (namespaces, /proc, uid switch)."""
        if not os.access(BWRAP, os.X_OK):
            return False, f"bubblewrap is not installed ({BWRAP})"
        self.empty.touch()
        self.empty.chmod(0o644)
        root = self.state_dir / "sandbox-probe"
        shutil.rmtree(root, ignore_errors=True)
        layout = Layout(root, [], "/", Identity(65534, 65534, (), changed=True))
        self.prepare(layout)
        argv = ["/bin/sh", "-c", PRELUDE + 'exec "$@"', "sh", *self.wrap(["/bin/true"], layout)]
        try:
            out = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return False, f"bwrap did not run: {exc}"
        finally:
            shutil.rmtree(root, ignore_errors=True)
        if out.returncode != 0:
            return False, f"bwrap failed ({out.returncode}): {(out.stderr or out.stdout).strip()}"
        version = subprocess.run([BWRAP, "--version"], capture_output=True, text=True, check=False)
        return True, f"{version.stdout.strip() or 'bubblewrap'}: mount and PID namespaces per container"

    def problem(self, layout: Layout) -> str | None:
        """Why the container cannot start in this layout (a mount point the read-only system lacks)."""
        for path in _missing_system_paths(layout):
            top = _top(path)
            ancestors = [str(a) for a in PurePosixPath(path).parents if _within(str(a), top)]
            if top in ("/proc", "/sys") or any(os.path.islink(a) or os.path.isfile(a) for a in ancestors):
                return f"cannot create {path}: it would be inside this machine's read-only {top}"
        return None

    def prepare(self, layout: Layout) -> None:
        """Create the container's private root folder (its writable layer, on disk as a container's is):
        /tmp and /var/tmp, root's home, the working directory (owned by the user the command runs as)."""
        shutil.rmtree(layout.root, ignore_errors=True)
        layout.root.mkdir(parents=True)
        layout.root.chmod(0o755)
        # root's home stays private, but searchable when kubesim's interpreter lives below it (pyenv).
        home_mode = 0o711 if any(_within(p, "/root") for p in self.prefixes) else 0o700
        for name, mode in (("tmp", 0o1777), ("var/tmp", 0o1777), ("root", home_mode)):
            folder = layout.root / name
            folder.mkdir(parents=True, exist_ok=True)
            folder.chmod(mode)
        if not _under_system(layout.workdir) and not any(
            _within(layout.workdir, m.path) for m in layout.mounts
        ):
            folder = layout.root / layout.workdir.lstrip("/")
            if not folder.exists():
                folder.mkdir(parents=True, mode=0o755)
                os.chown(folder, layout.user.uid, layout.user.gid)

    def wrap(self, argv: list[str], layout: Layout) -> list[str]:
        """The bwrap command line that runs ``argv`` in ``layout`` (call ``prepare`` first)."""
        args = [BWRAP, "--unshare-pid", "--die-with-parent", "--cap-drop", "ALL"]
        if layout.hostname:
            args += ["--unshare-uts", "--hostname", layout.hostname]
        for cap in CAPABILITIES:
            args += ["--cap-add", f"CAP_{cap}"]
        args += ["--bind", str(layout.root), "/"]
        missing, opened = _missing_system_paths(layout), list[str]()
        for top in SYSTEM_DIRS:
            if os.path.islink(top):
                args += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                args += _system_dir(top, [p for p in missing if _within(p, top)], opened)
        for hidden in HIDDEN_FILES:
            if os.path.isfile(hidden):
                args += ["--ro-bind", str(self.empty), hidden]
        for hidden in HIDDEN_DIRS:
            if os.path.isdir(hidden):
                args += ["--tmpfs", hidden, "--remount-ro", hidden]
        args += ["--ro-bind", "/sys", "/sys", "--proc", "/proc", "--dev", "/dev"]
        args += ["--perms", "1777", "--size", str(SHM_BYTES), "--tmpfs", SHM]
        for device in layout.devices:
            args += ["--dev-bind", device, device]
        for prefix in self.prefixes:
            args += [*_parents(prefix), "--ro-bind", prefix, prefix]
        for mount in sorted(layout.mounts, key=lambda m: len(PurePosixPath(m.path).parts)):
            args += [
                *_parents(mount.path),
                "--ro-bind" if mount.read_only else "--bind",
                mount.source,
                mount.path,
            ]
        if layout.read_only_root:
            args += ["--remount-ro", "/"]
        args += [*_parents(layout.workdir), "--dir", layout.workdir]
        for folder in reversed(opened):
            args += ["--remount-ro", folder]
        args += ["--chdir", layout.workdir, "--", *_EXEC]
        user = layout.user
        if user.changed:
            groups = ",".join(map(str, user.groups))
            args += [f"--reuid={user.uid}", f"--regid={user.gid}"]
            args += [f"--groups={groups}"] if groups else ["--clear-groups"]
        return [*args, "--", *argv]


def interpreter_folders() -> list[str]:
    """The folders the container needs to run kubesim's ``python`` at the same paths: the virtualenv
    (only that folder, never the checkout around it) and the base installation, unless a system folder
    already holds them."""
    found: list[str] = []
    for path in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix):
        for candidate in (os.path.abspath(path), os.path.realpath(path)):
            if not _under_system(candidate) and candidate not in found:
                found.append(candidate)
    return [p for p in found if not any(p != q and _within(p, q) for q in found)]


def gpu_devices() -> list[str]:
    """NVIDIA device nodes of this machine, for GPU containers (CUDA_VISIBLE_DEVICES picks among them)."""
    dev = Path("/dev")
    return sorted(str(p) for p in dev.glob("nvidia*")) if dev.is_dir() else []


def _system_dir(folder: str, needed: list[str], opened: list[str]) -> list[str]:
    """Bind a system folder read-only; one that must hold new mount points (``needed``, e.g. a ConfigMap at
    /etc/app) becomes a tmpfs of read-only binds of its entries instead, made read-only once they exist."""
    if not needed:
        return ["--ro-bind", folder, folder]
    opened.append(folder)
    args = ["--perms", f"{stat.S_IMODE(os.stat(folder).st_mode):o}", "--tmpfs", folder]
    for entry in sorted(os.listdir(folder)):
        path = os.path.join(folder, entry)
        below = [p for p in needed if _within(p, path)]
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif below and os.path.isdir(path):
            args += _system_dir(path, below, opened)
        else:
            args += ["--ro-bind", path, path]
    return args


def _missing_system_paths(layout: Layout) -> list[str]:
    """Mount points and the working directory that fall in a system folder but do not exist there."""
    paths = [m.path for m in layout.mounts] + [layout.workdir]
    return [p for p in paths if _under_system(p) and not os.path.lexists(p)]


def _within(path: str, folder: str) -> bool:
    return PurePosixPath(path).is_relative_to(PurePosixPath(folder))


def _under_system(path: str) -> bool:
    return any(_within(path, top) for top in (*SYSTEM_DIRS, "/sys", "/proc"))


def _top(path: str) -> str:
    return "/" + PurePosixPath(path).parts[1]


def _parents(path: str) -> list[str]:
    """``--dir`` for each missing ancestor, so that bwrap creates them 0755 (not 0700 as for mount points)."""
    args: list[str] = []
    for parent in reversed(PurePosixPath(path).parents[:-1]):
        args += ["--dir", str(parent)]
    return args
