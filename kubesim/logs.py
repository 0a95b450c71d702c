"""The pod log endpoint: reads the kubelet's CRI-format log files, optionally following them."""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from kubesim.errors import bad_request, not_found
from kubesim.housekeeping import pod_dir_name
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.server import Handler, Params

_FOLLOW_POLL = 0.05
_FOLLOW_CHUNK = 1 << 20  # bytes read from the log file at once: a flood is streamed, not slurped


# How the kubelet words a container that cannot start for its image (validateContainerLogStatus).
_PULL_WORDS = {
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}


def pod_dir(state_dir: Path, pod: Obj) -> Path:
    """Where the kubelet keeps a pod's logs and volumes."""
    return state_dir / "pods" / pod_dir_name(pod)


_RFC3339 = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def _parse_time(text: str) -> datetime:
    """An RFC 3339 time (``Z`` or an offset, up to nanoseconds) as an aware datetime; 400 when malformed."""
    match = _RFC3339.match(text.strip())
    if match is None:
        raise bad_request(f"invalid time {text!r}: expected RFC 3339, as 2006-01-02T15:04:05Z")
    fraction = (match.group(2) or ".0")[1:7].ljust(6, "0")
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    return datetime.fromisoformat(f"{match.group(1)}.{fraction}{zone}")


def _render(line: bytes, timestamps: bool, since: datetime | None) -> bytes | None:
    parts = line.split(b" ", 3)
    if len(parts) < 4:
        return line
    stamp, _stream, tag, text = parts
    if since is not None and _parse_time(stamp.decode()) < since:
        return None
    if tag == b"P":
        text = text[:-1]
    return stamp + b" " + text if timestamps else text


def _container_status(pod: Obj, name: str) -> Obj:
    st = pod.get("status") or {}
    for status in (st.get("initContainerStatuses") or []) + (st.get("containerStatuses") or []):
        if status.get("name") == name:
            return dict(status)
    return {}


@dataclass(frozen=True)
class _LogQuery:
    """What one log request asks for: which container run's file, and how to cut and render its lines."""

    container: str
    restart: int
    path: Path
    since: datetime | None
    timestamps: bool
    tail: int | None
    limit: int | None


def serve(handler: Handler, namespace: str, name: str, params: Params) -> None:
    """Answer ``GET .../pods/NAME/log`` with ``container``, ``follow``, ``tailLines``, ``sinceTime``,
    ``sinceSeconds``, ``timestamps``, ``previous`` and ``limitBytes``."""
    pod = handler.cluster.store.get("pods", namespace, name)
    if pod is None:
        raise not_found("pods", name)
    query = _parse_query(handler.cluster.state_dir, pod, params)
    with open(query.path, "rb") as handle:
        lines = handle.readlines()
        complete = [ln for ln in lines if ln.endswith(b"\n")]
        offset = sum(len(ln) for ln in complete)
        if query.tail is not None:
            complete = list(deque(complete, maxlen=max(query.tail, 0)))
        rendered = [
            r for r in (_render(ln, query.timestamps, query.since) for ln in complete) if r is not None
        ]
        if not params.flag("follow"):
            _send_whole(handler, b"".join(rendered), query.limit)
            return
        handler.start_stream("text/plain")
        handler.close_connection = True
        sent = 0
        for chunk in rendered:
            handler.send_chunk(chunk)
            sent += len(chunk)
        handle.seek(offset)
        _follow(handler, handle, pod, query, sent)
        handler.end_stream()


def _parse_query(state_dir: Path, pod: Obj, params: Params) -> _LogQuery:
    """Read the request's parameters against the pod, refusing with 400 what the kubelet refuses.

    Checked in a fixed order, so a request wrong in several ways always gets the same answer: the
    container, ``previous`` (only after a restart), whether the container has started (has a log
    file), then the times and counts.
    """
    name = pod["metadata"]["name"]
    container = _pick_container(pod, params.get("container"))
    status = _container_status(pod, container)
    restart = int(status.get("restartCount", 0))
    if params.flag("previous"):
        if restart == 0:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        restart -= 1
    path = pod_dir(state_dir, pod) / "logs" / f"{container}.{restart}.log"
    if not path.exists():
        reason = (status.get("state") or {}).get("waiting", {}).get("reason", "ContainerCreating")
        reason = _PULL_WORDS.get(reason, reason)
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
    since: datetime | None = None
    if params.get("sinceTime"):
        since = _parse_time(params.get("sinceTime") or "")
    elif params.integer("sinceSeconds") is not None:
        since = datetime.now(UTC) - timedelta(seconds=params.integer("sinceSeconds") or 0)
    return _LogQuery(
        container=container,
        restart=restart,
        path=path,
        since=since,
        timestamps=params.flag("timestamps"),
        tail=params.integer("tailLines"),
        limit=params.integer("limitBytes"),
    )


def _pick_container(pod: Obj, asked: str | None) -> str:
    """The container asked for, or the pod's only one; 400 when none is named and there are several."""
    name = pod["metadata"]["name"]
    names = [c["name"] for c in (pod["spec"].get("containers") or [])]
    inits = [c["name"] for c in (pod["spec"].get("initContainers") or [])]
    container = asked
    if not container:
        if len(names) != 1:
            also = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]{also}"
            )
        container = names[0]
    if container not in names + inits:
        raise bad_request(f"container {container} is not valid for pod {name}")
    return container


def _send_whole(handler: Handler, body: bytes, limit: int | None) -> None:
    """Answer a request without ``follow``: the rendered lines in one body, cut at ``limitBytes``."""
    if limit is not None:
        body = body[:limit]
    handler.send_response(200)
    handler.send_header("Content-Type", "text/plain")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def _follow(handler: Handler, handle: BinaryIO, pod: Obj, query: _LogQuery, sent: int) -> None:
    """Stream lines as the kubelet appends them, until the container run ends and its file is drained,
    the pod is gone or replaced, the server stops, or ``limitBytes`` have been sent. The file is read a
    chunk at a time, so a flood's backlog is streamed, never held in memory whole.

    A partial line is held back until its newline arrives, so every chunk holds whole lines.
    """
    cluster = handler.cluster
    namespace, name, uid = pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"]
    pending = b""
    while not cluster.stopping.is_set() and (query.limit is None or sent < query.limit):
        data = handle.read(_FOLLOW_CHUNK)
        if data:
            pending += data
            *full, pending = pending.split(b"\n")
            out = b"".join(
                r for r in (_render(ln + b"\n", query.timestamps, query.since) for ln in full) if r
            )
            if out:
                handler.send_chunk(out)
                sent += len(out)
            continue
        current = cluster.store.peek("pods", namespace, name)
        if current is None or current["metadata"]["uid"] != uid:
            break
        if _run_over(_container_status(current, query.container), query.restart):
            if not handle.read(1):
                break
            handle.seek(-1, 1)
            continue
        time.sleep(_FOLLOW_POLL)


def _run_over(status: Obj, restart: int) -> bool:
    """Tell whether the container run being followed has ended: it restarted since, or it terminated."""
    return int(status.get("restartCount", 0)) > restart or (
        "terminated" in (status.get("state") or {}) and int(status.get("restartCount", 0)) == restart
    )
