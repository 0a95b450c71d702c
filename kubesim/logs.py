"""The pod log endpoint: reads the kubelet's CRI-format log files, optionally following them."""

from __future__ import annotations

import re
import time
from collections import deque
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from kubesim.errors import bad_request, not_found
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.server import Handler, Params

_FOLLOW_POLL = 0.05


# How the kubelet words a container that cannot start for its image (validateContainerLogStatus).
_PULL_WORDS = {
    "ErrImagePull": "image can't be pulled",
    "ImagePullBackOff": "trying and failing to pull image",
}


def pod_dir(state_dir: Path, pod: Obj) -> Path:
    """Where the kubelet keeps a pod's logs and volumes."""
    meta = pod["metadata"]
    return state_dir / "pods" / f"{meta['namespace']}_{meta['name']}_{meta['uid'][:8]}"


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


def serve(handler: Handler, namespace: str, name: str, params: Params) -> None:
    """Answer ``GET .../pods/NAME/log`` with ``container``, ``follow``, ``tailLines``, ``sinceTime``,
    ``sinceSeconds``, ``timestamps``, ``previous`` and ``limitBytes``."""
    cluster = handler.cluster
    pod = cluster.store.get("pods", namespace, name)
    if pod is None:
        raise not_found("pods", name)
    names = [c["name"] for c in (pod["spec"].get("containers") or [])]
    inits = [c["name"] for c in (pod["spec"].get("initContainers") or [])]
    container = params.get("container")
    if not container:
        if len(names) != 1:
            also = f" or one of the init containers: [{' '.join(inits)}]" if inits else ""
            raise bad_request(
                f"a container name must be specified for pod {name}, choose one of: [{' '.join(names)}]{also}"
            )
        container = names[0]
    if container not in names + inits:
        raise bad_request(f"container {container} is not valid for pod {name}")
    status = _container_status(pod, container)
    restart = int(status.get("restartCount", 0))
    if params.flag("previous"):
        if restart == 0:
            raise bad_request(f'previous terminated container "{container}" in pod "{name}" not found')
        restart -= 1
    path = pod_dir(cluster.state_dir, pod) / "logs" / f"{container}.{restart}.log"
    if not path.exists():
        reason = (status.get("state") or {}).get("waiting", {}).get("reason", "ContainerCreating")
        reason = _PULL_WORDS.get(reason, reason)
        raise bad_request(f'container "{container}" in pod "{name}" is waiting to start: {reason}')
    since: datetime | None = None
    if params.get("sinceTime"):
        since = _parse_time(params.get("sinceTime") or "")
    elif params.integer("sinceSeconds") is not None:
        since = datetime.now(UTC) - timedelta(seconds=params.integer("sinceSeconds") or 0)
    timestamps = params.flag("timestamps")
    tail = params.integer("tailLines")
    limit = params.integer("limitBytes")
    with open(path, "rb") as handle:
        lines = handle.readlines()
        complete = [ln for ln in lines if ln.endswith(b"\n")]
        offset = sum(len(ln) for ln in complete)
        if tail is not None:
            complete = list(deque(complete, maxlen=max(tail, 0)))
        rendered = [r for r in (_render(ln, timestamps, since) for ln in complete) if r is not None]
        if not params.flag("follow"):
            body = b"".join(rendered)
            if limit is not None:
                body = body[:limit]
            handler.send_response(200)
            handler.send_header("Content-Type", "text/plain")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)
            return
        handler.start_stream("text/plain")
        handler.close_connection = True
        sent = 0
        for chunk in rendered:
            handler.send_chunk(chunk)
            sent += len(chunk)
        handle.seek(offset)
        pending = b""
        uid = pod["metadata"]["uid"]
        while not cluster.stopping.is_set() and (limit is None or sent < limit):
            data = handle.read()
            if data:
                pending += data
                *full, pending = pending.split(b"\n")
                out = b"".join(r for r in (_render(ln + b"\n", timestamps, since) for ln in full) if r)
                if out:
                    handler.send_chunk(out)
                    sent += len(out)
                continue
            current = cluster.store.peek("pods", namespace, name)
            if current is None or current["metadata"]["uid"] != uid:
                break
            cstatus = _container_status(current, container)
            if int(cstatus.get("restartCount", 0)) > restart or (
                "terminated" in (cstatus.get("state") or {})
                and int(cstatus.get("restartCount", 0)) == restart
            ):
                if not handle.read(1):
                    break
                handle.seek(-1, 1)
                continue
            time.sleep(_FOLLOW_POLL)
        handler.end_stream()
