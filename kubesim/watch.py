"""Watch streams: the events of one resource after a resourceVersion, filtered by selectors, as the
apiserver sends them (chunked JSON lines, bookmarks, 410 Expired once history is compacted)."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING

from kubesim import tables
from kubesim.errors import bad_request
from kubesim.resources import Resource
from kubesim.selectors import (
    SelectorError,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from kubesim.store import Compacted, Obj

if TYPE_CHECKING:
    from kubesim.server import Handler, Params

_WATCH_POLL = 0.25


def serve_watch(handler: Handler, res: Resource, namespace: str | None, params: Params) -> None:
    """Stream a watch: ADDED for the current objects (from no resourceVersion) or the events after it,
    objects entering or leaving the selectors as ADDED/DELETED, BOOKMARKs, and ERROR 410 once compacted."""
    store = handler.cluster.store
    try:
        labels = parse_label_selector(params.get("labelSelector"))
        fields = parse_field_selector(params.get("fieldSelector"), res.plural)
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    timeout = params.integer("timeoutSeconds")
    deadline = time.monotonic() + (timeout if timeout is not None else 1800)
    bookmarks = params.flag("allowWatchBookmarks")
    start = params.get("resourceVersion")

    def matches(obj: Obj | None) -> bool:
        if obj is None:
            return False
        if namespace is not None and res.namespaced and obj["metadata"].get("namespace") != namespace:
            return False
        return labels_match(labels, obj["metadata"].get("labels")) and fields_match(fields, obj)

    initial: list[Obj] = []
    if start in (None, "", "0"):
        with store.lock:
            items, cursor = store.list(res.plural, namespace if res.namespaced else None)
            initial = [o for o in items if matches(o)]
    else:
        try:
            cursor = int(start)
        except ValueError:
            raise bad_request(f"invalid resourceVersion {start!r}") from None
    handler.start_stream("application/json")
    handler.close_connection = True

    table_version = tables.wants_table(handler.headers.get("Accept"))

    def send(type_: str, obj: Obj) -> None:
        if table_version and type_ in ("ADDED", "MODIFIED", "DELETED"):
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            obj = tables.table(res.plural, [obj], table_version, params.get("includeObject"), meta)
        handler.send_chunk(json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n")

    for obj in initial:
        send("ADDED", obj)
    last_sent = time.monotonic()
    interval = handler.cluster.bookmark_interval
    while not handler.cluster.stopping.is_set():
        try:
            events = store.events_after(cursor)
        except Compacted:
            send("ERROR", gone_status(cursor))
            break
        for event in events:
            cursor = event.rv
            if event.plural != res.plural:
                continue
            now_match, was_match = matches(event.obj), matches(event.old)
            if event.type == "DELETED":
                type_ = "DELETED" if was_match else ""
            elif now_match:
                type_ = "MODIFIED" if was_match else "ADDED"
            else:
                type_ = "DELETED" if was_match else ""
            if type_:
                send(type_, event.obj)
                last_sent = time.monotonic()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if bookmarks and time.monotonic() - last_sent >= interval:
            send(
                "BOOKMARK",
                {
                    "kind": res.kind,
                    "apiVersion": res.api_version,
                    "metadata": {"resourceVersion": str(cursor)},
                },
            )
            last_sent = time.monotonic()
        if not events:
            store.wait(cursor, min(remaining, _WATCH_POLL, interval))
    handler.end_stream()


def gone_status(rv: int) -> Obj:
    """The Status an ERROR watch event carries for a compacted resourceVersion (as the apiserver words it)."""
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": f"too old resource version: {rv}",
        "reason": "Expired",
        "code": 410,
    }
