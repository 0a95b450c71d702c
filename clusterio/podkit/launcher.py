"""Trainyard's wrapper around a learner's command: run it, then hand its results to the platform.

Run as `python -c <this file's text> <the user's argv...>` (see docs/artifacts.md). The child runs in
its own process group; its stdout and stderr are pipes the launcher relays byte for byte to its own (one
pipe for both where the launcher's two are the same file, as kubesim's runtime merges them, so their order
is kept), so its output reaches the pod log unchanged and the launcher knows whether the command's last
line on each stream is complete: the launcher's own lines (`trainyard: ...`, on stderr) always start on a
new line, a newline ending the command's unfinished line first (a 20 MB line without one would otherwise
swallow them). SIGTERM and SIGINT are forwarded to the whole group, so a graceful stop reaches every
process the command started. When the child ends, every regular file under RESULT_DIR is uploaded
(symlinks are skipped, never followed), CHECKPOINT_DIR is measured, and the end is reported; the
launcher then exits with the child's code (128 + signal when a signal killed it). Upload problems
are reported on stderr and never change that code. Without TRAINYARD_RESULTS_URL it only runs the
child. Stdlib only, Python 3.9+; as a container's PID 1 it also reaps orphaned processes. The artifact token
stays out of the child's reach: not in its environment, and the launcher is not dumpable (see
`hide_from_the_command`).

With TRAINYARD_TENSORBOARD_URL and TRAINYARD_TENSORBOARD_DIR (a job whose `evaluation_metrics` is of type
tensorboard), a thread sends the new bytes of every TensorBoard event file under that folder every
TRAINYARD_TENSORBOARD_INTERVAL seconds while the command runs, and once more after it ends (before the
results): `PUT <url>/files/<relative path>` with `X-Trainyard-Offset` (where the body starts in the file).
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import re
import select
import signal
import stat
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import Any

TOKEN_ENV = "TRAINYARD_ARTIFACT_TOKEN"  # noqa: S105 - an env name
TOKEN_HEADER = "X-Trainyard-Artifact-Token"  # noqa: S105 - a header name
SHA_HEADER = "X-Trainyard-Sha256"
FORWARDED = (signal.SIGTERM, signal.SIGINT)
BACKOFF = 0.5
BACKOFF_MAX = 15.0
# How long an upload keeps retrying a platform that is down or answering 5xx (a web or database restart,
# a rollout): minutes, not seconds, or a short outage loses a job's results.
RETRY_SECONDS_ENV = "TRAINYARD_UPLOAD_RETRY_SECONDS"
RETRY_SECONDS = 300.0
TIMEOUT = 60.0
CHUNK = 1 << 20
CONTINUE_WAIT = 5.0  # seconds to wait for `100 Continue` before sending a body anyway
_EXPECT = {"continue": True}  # whether the platform answers `Expect: 100-continue` (until it once does not)
REFUSED_MAX = 50  # refused result files named in the end report
# Refusals of one file (a bad path or checksum, a cap on files, its size): the others are still sent.
FILE_REFUSALS = (400, 409, 413)
PR_SET_DUMPABLE = 4


RELAY_CHUNK = 1 << 16
# How long the launcher waits, once the command has exited, for the last of its output: a process it left
# behind that holds the pipes open (a daemon) must not keep the results from being uploaded.
RELAY_DRAIN_SECONDS = 2.0


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _same_file(one: int, other: int) -> bool:
    first, second = os.fstat(one), os.fstat(other)
    return (first.st_dev, first.st_ino) == (second.st_dev, second.st_ino)


class Output:
    """The command's stdout and stderr, relayed to the launcher's own by one thread per pipe, remembering
    whether the last line written on each is unfinished (no newline yet), so that `say` can end it first."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.open_line = {1: False, 2: False}
        self.threads: list[threading.Thread] = []
        self.child_ends: list[int] = []

    def start(self) -> tuple[int, int]:
        """The child's stdout and stderr: pipes relayed to fd 1 (and 2), or fd 1 and 2 themselves when no
        pipe can be made (then output passes straight through, as without a launcher)."""
        try:
            targets = []
            read_out, write_out = os.pipe()
            targets.append((read_out, 1))
            write_err = write_out
            if not _same_file(1, 2):
                read_err, write_err = os.pipe()
                targets.append((read_err, 2))
        except OSError:
            return 1, 2
        for source, target in targets:
            thread = threading.Thread(
                target=self._relay, args=(source, target), name=f"trainyard-relay-{target}", daemon=True
            )
            thread.start()
            self.threads.append(thread)
        self.child_ends = sorted({write_out, write_err})
        return write_out, write_err

    def started(self) -> None:
        """The child has its ends of the pipes (or never will): close the launcher's copies, so that the
        relays see the end of the output once the child and its processes have closed theirs."""
        for fd in self.child_ends:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.child_ends = []

    def _relay(self, source: int, target: int) -> None:
        try:
            while True:
                chunk = os.read(source, RELAY_CHUNK)
                if not chunk:
                    return
                with self.lock:
                    _write_all(target, chunk)
                    self.open_line[target] = not chunk.endswith(b"\n")
        except OSError:
            return
        finally:
            os.close(source)

    def finish(self, timeout: float = RELAY_DRAIN_SECONDS) -> None:
        """Wait (at most `timeout` seconds) for the rest of the command's output."""
        deadline = time.monotonic() + timeout
        for thread in self.threads:
            thread.join(max(0.0, deadline - time.monotonic()))

    def say(self, line: bytes) -> None:
        """Write one of the launcher's own lines to stderr, on a line of its own: a newline first ends each
        stream's unfinished line (on its own stream, so a runtime that keeps them apart ends it too)."""
        with self.lock:
            try:
                for fd, unfinished in self.open_line.items():
                    if unfinished:
                        _write_all(fd, b"\n")
                        self.open_line[fd] = False
                _write_all(2, line)
            except OSError:
                pass


OUTPUT = Output()


def _say(message: str) -> None:
    OUTPUT.say(f"trainyard: {' '.join(message.split())}\n".encode("utf-8", "replace"))


class Forwarder:
    """Sends SIGTERM/SIGINT received by the launcher on to the child's process group."""

    def __init__(self) -> None:
        self.group: int | None = None
        self.pending: list[int] = []

    def install(self) -> None:
        for signum in FORWARDED:
            signal.signal(signum, self._handle)

    def attach(self, group: int) -> None:
        self.group = group
        for signum in self.pending:
            self._send(signum)
        self.pending.clear()

    def _handle(self, signum: int, frame: Any) -> None:
        if self.group is None:
            self.pending.append(signum)
        else:
            self._send(signum)

    def _send(self, signum: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.group or 0, signum)


def hide_from_the_command() -> None:
    """Keep the artifact token out of the user's command's reach. The child's environment goes without
    it, but the launcher's own environment and memory stay readable through /proc/<launcher>/environ and
    /proc/<launcher>/mem to any process of the same user (the command runs as the launcher's user). A
    non-dumpable process (prctl PR_SET_DUMPABLE 0) has those files owned by root and refuses ptrace
    access without CAP_SYS_PTRACE, which no container has by default and restricted pods drop; the command
    is dumpable again after its exec. Done first, before any child exists."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except (OSError, AttributeError) as exc:
        _say(f"warning: the artifact token stays readable by the command (prctl failed: {exc})")


def run_child(argv: list[str], forwarder: Forwarder) -> int:
    """Start `argv` in its own process group, wait for it (reaping orphans), return its exit code."""
    env = {key: value for key, value in os.environ.items() if key != TOKEN_ENV}
    stdout, stderr = OUTPUT.start()
    try:
        child = subprocess.Popen(argv, env=env, start_new_session=True, stdout=stdout, stderr=stderr)
    except OSError as exc:
        OUTPUT.started()
        _say(f"cannot run {argv[0]!r}: {exc.strerror or exc}")
        return 126 if isinstance(exc, PermissionError) else 127
    OUTPUT.started()
    forwarder.attach(child.pid)
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            return child.wait()
        if pid == child.pid:
            break
    code = os.waitstatus_to_exitcode(status)
    child.returncode = code
    return 128 - code if code < 0 else code


# -- results ---------------------------------------------------------------------------------------


def result_files(root: str) -> Iterator[tuple[str, str, int]]:
    """(relative path, path, size) of every regular file under `root`, in a stable order.

    Symlinked files are skipped and symlinked folders are not entered, so nothing outside `root` is read.
    """
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        for name in sorted(filenames):
            path = os.path.join(dirpath, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                yield os.path.relpath(path, root), path, info.st_size


def tree_bytes(root: str) -> int:
    """Bytes in the regular files under `root` (0 when it does not exist), symlinks not followed."""
    return sum(size for _, _, size in result_files(root)) if root else 0


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as body:
        for chunk in iter(lambda: body.read(CHUNK), b""):
            digest.update(chunk)
    return digest.hexdigest()


class Refused(Exception):
    """The platform answered with a client error: retrying, or sending more, will not help."""

    def __init__(self, problem: str, status: int = 0, detail: str = "") -> None:
        super().__init__(problem)
        self.status = status
        self.detail = detail


class Unreachable(Exception):
    """The platform could not be reached even after retries."""


def _retry_budget() -> float:
    try:
        return max(float(os.environ.get(RETRY_SECONDS_ENV, RETRY_SECONDS)), 0.0)
    except ValueError:
        return RETRY_SECONDS


def _detail(payload: bytes) -> str:
    """The `detail` of a JSON error answer (the platform's shape), else its first line."""
    try:
        answer = json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        answer = None
    if isinstance(answer, dict) and isinstance(answer.get("detail"), str):
        return answer["detail"][:300]
    return payload.decode("utf-8", "replace").strip().split("\n", 1)[0][:300]


def _retrying(once: Any) -> None:
    """Call `once()` (which answers (status, reason, body) or raises OSError), retried on connection errors
    and 5xx/408/429 answers with doubling back-off (at most BACKOFF_MAX apart) for up to
    TRAINYARD_UPLOAD_RETRY_SECONDS (default 300 s); Refused on another 4xx."""
    delay = BACKOFF
    deadline = time.monotonic() + _retry_budget()
    attempt = 0
    while True:
        attempt += 1
        try:
            status, reason, payload = once()
            if status < 400:
                return
            problem = f"HTTP {status} {reason}"
            if status < 500 and status not in (408, 429):
                raise Refused(problem, status, _detail(payload))
        except (urllib.error.URLError, OSError, http.client.HTTPException) as exc:
            problem = str(getattr(exc, "reason", exc)) or type(exc).__name__
        if time.monotonic() + delay > deadline:
            raise Unreachable(f"{problem} (after {attempt} tries)")
        time.sleep(delay)
        delay = min(delay * 2, BACKOFF_MAX)


def _send(method: str, url: str, headers: dict[str, str], body: Any) -> None:
    """One small request (retried as `_retrying` says)."""

    def once() -> tuple[int, str, bytes]:
        request = urllib.request.Request(url, data=body, method=method, headers=headers)  # noqa: S310
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
                return response.status, response.reason, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, str(exc.reason), exc.read()

    _retrying(once)


def _early_answer(sock: Any) -> tuple[int, str, bytes] | None:
    """After a request's headers went out with `Expect: 100-continue`: None when the platform says go on (or
    says nothing within CONTINUE_WAIT seconds, as RFC 9110 lets a client do), else its final answer, which
    refuses the body before it is sent (the size, over the platform's limit)."""
    ready, _, _ = select.select([sock], [], [], CONTINUE_WAIT)
    if not ready:
        _EXPECT["continue"] = False  # a server that never says it: ask no more, send bodies at once
        return None
    head = b""
    while not head.endswith(b"\r\n\r\n"):  # byte by byte: what follows a 100 belongs to http.client
        byte = sock.recv(1)
        if not byte or len(head) > 65536:
            raise http.client.BadStatusLine(head[:80].decode("latin-1"))
        head += byte
    lines = head.decode("latin-1").split("\r\n")
    first = lines[0].split(" ", 2)
    if len(first) < 2 or not first[1].isdigit():
        raise http.client.BadStatusLine(lines[0])
    status, reason = int(first[1]), (first[2].strip() if len(first) > 2 else "")
    if status == 100:
        return None
    length = 0
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.strip().lower() == "content-length" and value.strip().isdigit():
            length = min(int(value.strip()), 65536)
    payload = b""
    while len(payload) < length:
        piece = sock.recv(length - len(payload))
        if not piece:
            break
        payload += piece
    return status, reason, payload


def _put_file(url: str, headers: dict[str, str], body: Any) -> None:
    """PUT a file's bytes with its Content-Length and `Expect: 100-continue`: a file the platform refuses by
    its headers (over the size limit) is refused before its body is sent. Retried as `_retrying` says."""
    parts = urllib.parse.urlsplit(url)
    connection_class = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection

    def once() -> tuple[int, str, bytes]:
        connection = connection_class(parts.hostname or "", parts.port, timeout=TIMEOUT)
        try:
            connection.putrequest("PUT", parts.path + (f"?{parts.query}" if parts.query else ""))
            for name, value in headers.items():
                connection.putheader(name, value)
            asking = _EXPECT["continue"]
            if asking:
                connection.putheader("Expect", "100-continue")
            connection.endheaders()
            early = _early_answer(connection.sock) if asking else None
            if early is not None:
                return early
            body.seek(0)
            while piece := body.read(CHUNK):
                connection.send(piece)
            response = connection.getresponse()
            return response.status, response.reason, response.read()
        finally:
            connection.close()

    _retrying(once)


def upload_results(base: str, token: str, result_dir: str) -> tuple[int, int, list[dict[str, Any]]]:
    """PUT every result file to `<base>/files/<relative path>`; return (files, bytes) uploaded and the files
    the platform refused (each `{"path", "size", "status", "detail"}`). A file refused for itself (400, 409,
    413) does not stop the others; any other refusal (the token's: 401, 403) or a platform still unreachable
    after the retries does."""
    files = uploaded = 0
    refused: list[dict[str, Any]] = []
    if not result_dir or not os.path.isdir(result_dir):
        return files, uploaded, refused
    for rel, path, size in result_files(result_dir):
        url = f"{base}/files/{urllib.parse.quote(os.fsencode(rel), safe='/')}"
        try:
            headers = {
                TOKEN_HEADER: token,
                SHA_HEADER: _sha256(path),
                "Content-Type": "application/octet-stream",
                "Content-Length": str(size),
            }
            with open(path, "rb") as body:
                _put_file(url, headers, body)
        except OSError as exc:
            _say(f"cannot read result file {rel!r}: {exc.strerror or exc}")
            continue
        except Refused as exc:
            if exc.status not in FILE_REFUSALS:  # the token or the attempt: no other file would fare better
                _say(f"result upload of {rel!r} refused: {exc}; not uploading the rest")
                break
            _say(f"result file {rel!r} ({size} bytes) refused: {exc}: {exc.detail}; going on with the others")
            if len(refused) < REFUSED_MAX:
                refused.append({"path": rel[:512], "size": size, "status": exc.status, "detail": exc.detail})
            continue
        except Unreachable as exc:
            _say(f"result upload of {rel!r} failed: {exc}; not uploading the rest")
            break
        files += 1
        uploaded += size
    return files, uploaded, refused


def report(base: str, exit_code: int) -> None:
    """Upload the results, measure the checkpoints and post `complete`; problems only go to stderr."""
    token = os.environ.get(TOKEN_ENV, "")
    base = base.rstrip("/")
    files = uploaded = 0
    refused: list[dict[str, Any]] = []
    try:
        files, uploaded, refused = upload_results(base, token, os.environ.get("RESULT_DIR", ""))
        summary: dict[str, Any] = {
            "exit_code": exit_code,
            "files": files,
            "bytes": uploaded,
            "checkpoint_bytes": tree_bytes(os.environ.get("CHECKPOINT_DIR", "")),
        }
        if refused:
            summary["refused"] = refused
        body = json.dumps(summary).encode("utf-8")
        headers = {TOKEN_HEADER: token, "Content-Type": "application/json"}
        _send("POST", f"{base}/complete", headers, body)
    except (Refused, Unreachable) as exc:
        _say(f"could not report the attempt's end: {exc}")
    except Exception as exc:
        _say(f"results upload failed: {type(exc).__name__}: {exc}")
    tail = f"; {len(refused)} refused" if refused else ""
    _say(f"uploaded {files} result file(s), {uploaded} bytes{tail}")


# -- TensorBoard event files -------------------------------------------------------------------------

OFFSET_HEADER = "X-Trainyard-Offset"
TB_URL_ENV = "TRAINYARD_TENSORBOARD_URL"
TB_DIR_ENV = "TRAINYARD_TENSORBOARD_DIR"
TB_INTERVAL_ENV = "TRAINYARD_TENSORBOARD_INTERVAL"
TB_DEFAULT_DIR = "runs"  # where torch's SummaryWriter() writes when given no folder
TB_CHUNK = 4 << 20  # the most bytes one request carries (the platform accepts up to 8 MiB)
TB_MAX_FILES = 100


def tensorboard_dir(raw: str, environ: Any = None, cwd: str = "") -> str:
    """The absolute folder a spec's `evaluation_metrics.in` names: `$VAR` and `${VAR}` expanded from the
    environment (FfDL's $JOB_STATE_DIR, absent here, stands for RESULT_DIR), `~` left alone, and a relative
    path taken from the command's working directory (where SummaryWriter's default `runs/` lands)."""
    environ = dict(os.environ if environ is None else environ)
    environ.setdefault("JOB_STATE_DIR", environ.get("RESULT_DIR", ""))
    text = (raw or "").strip() or TB_DEFAULT_DIR

    def value(match: Any) -> str:
        name = match.group(1) or match.group(2)
        return environ.get(name, match.group(0))

    expanded = re.sub(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))", value, text)
    return os.path.normpath(os.path.join(cwd or os.getcwd(), expanded))


def event_files(root: str) -> list[tuple[str, str, int]]:
    """(relative path, path, size) of the TensorBoard event files under `root` (regular files whose name
    holds `tfevents`, as TensorBoard itself picks them; symlinks skipped), at most TB_MAX_FILES."""
    found = [item for item in result_files(root) if "tfevents" in os.path.basename(item[0])] if root else []
    return found[:TB_MAX_FILES]


class EventSync:
    """Sends what is new in the event files under a folder: the bytes past what the platform has of each.

    A file that shrank (rewritten) is sent again from its start (offset 0 replaces it). The platform
    answers 409 with the size it holds when an offset does not match (a restarted launcher, a lost answer),
    and the sync goes on from there. A file the platform refuses (4xx) is not sent again. `patient` rounds
    retry like the results upload; the periodic ones try once and wait for the next round.
    """

    def __init__(self, base: str, token: str, root: str) -> None:
        self.base = base.rstrip("/")
        self.token = token
        self.root = root
        self.sent: dict[str, int] = {}
        self.refused: set[str] = set()
        self.bytes = 0
        self.warned = False

    @property
    def files(self) -> int:
        return sum(1 for size in self.sent.values() if size > 0)

    def round(self, patient: bool = False) -> None:
        """Send the new bytes of every event file once (problems go to stderr, never raise)."""
        if not os.path.isdir(self.root):
            return
        for rel, path, size in event_files(self.root):
            if rel in self.refused:
                continue
            try:
                self.sent[rel] = self._file(rel, path, size, patient)
            except Refused as exc:
                _say(f"TensorBoard upload of {rel!r} refused: {exc}; not sending it again")
                self.refused.add(rel)
            except (Unreachable, OSError) as exc:
                if patient or not self.warned:
                    _say(f"TensorBoard upload of {rel!r} failed: {exc}")
                self.warned = True
                return

    def _file(self, rel: str, path: str, size: int, patient: bool) -> int:
        offset = self.sent.get(rel, 0)
        if size < offset:
            offset = 0
        while offset < size:
            with open(path, "rb") as handle:
                handle.seek(offset)
                body = handle.read(min(TB_CHUNK, size - offset))
            if not body:
                break
            held = self._put(rel, offset, body, patient)
            if held is None:
                offset += len(body)
                self.bytes += len(body)
            elif held == offset:
                raise Refused(f"the platform holds {held} bytes yet refused offset {offset}")
            else:
                offset = held if held <= size else 0
        return offset

    def _put(self, rel: str, offset: int, body: bytes, patient: bool) -> int | None:
        """PUT one range; None once stored, or the size the platform holds after a 409 (send from there)."""
        url = f"{self.base}/files/{urllib.parse.quote(os.fsencode(rel), safe='/')}"
        headers = {
            TOKEN_HEADER: self.token,
            SHA_HEADER: hashlib.sha256(body).hexdigest(),
            OFFSET_HEADER: str(offset),
            "Content-Type": "application/octet-stream",
        }
        delay = BACKOFF
        deadline = time.monotonic() + (_retry_budget() if patient else 0.0)
        while True:
            request = urllib.request.Request(url, data=body, method="PUT", headers=headers)  # noqa: S310
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT) as response:  # noqa: S310
                    response.read()
                return None
            except urllib.error.HTTPError as exc:
                if exc.code == 409:
                    return _held_size(exc)
                problem = f"HTTP {exc.code} {exc.reason}"
                if exc.code < 500 and exc.code not in (408, 429):
                    raise Refused(problem) from None
            except (urllib.error.URLError, OSError) as exc:
                problem = str(getattr(exc, "reason", exc))
            if time.monotonic() + delay > deadline:
                raise Unreachable(problem)
            time.sleep(delay)
            delay = min(delay * 2, BACKOFF_MAX)


def _held_size(answer: urllib.error.HTTPError) -> int:
    """The size a 409 answer says the platform holds of the file."""
    try:
        size = json.loads(answer.read() or b"{}").get("size")
    except (ValueError, AttributeError):
        size = None
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise Refused("HTTP 409 without the size the platform holds")
    return size


class EventSyncThread(threading.Thread):
    """Runs `EventSync.round` every interval until stopped."""

    def __init__(self, sync: EventSync, interval: float) -> None:
        super().__init__(name="trainyard-tensorboard", daemon=True)
        self.sync = sync
        self.interval = interval
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(self.interval):
            self.sync.round()

    def stop(self) -> None:
        self.stopped.set()
        self.join()


def start_event_sync() -> EventSyncThread | None:
    """The event-file sync for this learner, started; None when the job asks for none."""
    base = os.environ.get(TB_URL_ENV, "").strip()
    if not base:
        return None
    try:
        interval = max(float(os.environ.get(TB_INTERVAL_ENV, "5")), 0.2)
    except ValueError:
        interval = 5.0
    root = tensorboard_dir(os.environ.get(TB_DIR_ENV, ""))
    thread = EventSyncThread(EventSync(base, os.environ.get(TOKEN_ENV, ""), root), interval)
    thread.start()
    return thread


def finish_event_sync(thread: EventSyncThread | None) -> None:
    """Stop the periodic sync and send what the command left, retrying like the results upload."""
    if thread is None:
        return
    thread.stop()
    thread.sync.round(patient=True)
    _say(f"sent {thread.sync.bytes} bytes of {thread.sync.files} TensorBoard event file(s)")


def main(argv: list[str]) -> int:
    """Run the wrapped command, report its results, and return the exit status to leave with."""
    if not argv:
        _say("the launcher needs a command to run")
        return 2
    hide_from_the_command()
    forwarder = Forwarder()
    forwarder.install()
    events = start_event_sync()
    code = run_child(argv, forwarder)
    OUTPUT.finish()
    finish_event_sync(events)
    base = os.environ.get("TRAINYARD_RESULTS_URL", "").strip()
    if base:
        report(base, code)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
