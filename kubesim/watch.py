"""Watch streams: the events of one resource after a resourceVersion, filtered by selectors, as the
apiserver sends them (chunked JSON lines, bookmarks, 410 Expired once history is compacted)."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kubesim import tables
from kubesim.errors import bad_request
from kubesim.resources import Resource
from kubesim.selectors import (
    FieldRequirement,
    Requirement,
    SelectorError,
    fields_match,
    labels_match,
    parse_field_selector,
    parse_label_selector,
)
from kubesim.store import Compacted, Obj, WatchEvent

if TYPE_CHECKING:
    from kubesim.server import Handler, Params

_WATCH_POLL = 0.25


@dataclass(frozen=True)
class _Selection:
    """Which objects a watch sees: its namespace (for namespaced resources) and label and field selectors."""

    namespace: str | None
    namespaced: bool
    labels: list[Requirement]
    fields: list[FieldRequirement]

    def matches(self, obj: Obj | None) -> bool:
        """Tell whether `obj` (None: no object, as the old side of a creation) is in the watch."""
        if obj is None:
            return False
        if (
            self.namespace is not None
            and self.namespaced
            and obj["metadata"].get("namespace") != self.namespace
        ):
            return False
        return labels_match(self.labels, obj["metadata"].get("labels")) and fields_match(self.fields, obj)

    def event_type(self, event: WatchEvent) -> str:
        """The type the client sees for a store event: an object entering the selection is ADDED, one
        leaving it DELETED; "" when the event is outside the selection both before and after."""
        now_match, was_match = self.matches(event.obj), self.matches(event.old)
        if event.type == "DELETED":
            return "DELETED" if was_match else ""
        if now_match:
            return "MODIFIED" if was_match else "ADDED"
        return "DELETED" if was_match else ""


class _EventWriter:
    """Writes watch events as the apiserver does: one JSON line per event, as a Table when asked for."""

    def __init__(self, handler: Handler, res: Resource, params: Params) -> None:
        self.handler = handler
        self.res = res
        self.params = params
        self.table_version = tables.wants_table(handler.headers.get("Accept"))

    def send(self, type_: str, obj: Obj) -> None:
        """Send one event; objects of ADDED/MODIFIED/DELETED become one-row Tables for a Table client."""
        if self.table_version and type_ in ("ADDED", "MODIFIED", "DELETED"):
            meta = {"resourceVersion": obj["metadata"].get("resourceVersion", "")}
            obj = tables.table(
                self.res.plural, [obj], self.table_version, self.params.get("includeObject"), meta
            )
        self.handler.send_chunk(
            json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"
        )

    def bookmark(self, cursor: int) -> None:
        """Send a BOOKMARK, so the client may resume from `cursor` though nothing it watches changed."""
        self.send(
            "BOOKMARK",
            {
                "kind": self.res.kind,
                "apiVersion": self.res.api_version,
                "metadata": {"resourceVersion": str(cursor)},
            },
        )


def serve_watch(handler: Handler, res: Resource, namespace: str | None, params: Params) -> None:
    """Stream a watch: ADDED for the current objects (from no resourceVersion) or the events after it,
    objects entering or leaving the selectors as ADDED/DELETED, BOOKMARKs, and ERROR 410 once compacted."""
    store = handler.cluster.store
    try:
        selection = _Selection(
            namespace=namespace,
            namespaced=res.namespaced,
            labels=parse_label_selector(params.get("labelSelector")),
            fields=parse_field_selector(params.get("fieldSelector"), res.plural),
        )
    except SelectorError as exc:
        raise bad_request(str(exc)) from None
    timeout = params.integer("timeoutSeconds")
    deadline = time.monotonic() + (timeout if timeout is not None else 1800)
    bookmarks = params.flag("allowWatchBookmarks")
    start = params.get("resourceVersion")
    initial: list[Obj] = []
    if start in (None, "", "0"):
        with store.lock:
            items, cursor = store.list(res.plural, namespace if res.namespaced else None)
            initial = [o for o in items if selection.matches(o)]
    else:
        try:
            cursor = int(start)
        except ValueError:
            raise bad_request(f"invalid resourceVersion {start!r}") from None
    handler.start_stream("application/json")
    handler.close_connection = True
    writer = _EventWriter(handler, res, params)
    for obj in initial:
        writer.send("ADDED", obj)
    _stream_events(handler, res, selection, writer, cursor, deadline, bookmarks)
    handler.end_stream()


def _stream_events(
    handler: Handler,
    res: Resource,
    selection: _Selection,
    writer: _EventWriter,
    cursor: int,
    deadline: float,
    bookmarks: bool,
) -> None:
    """Send the events after `cursor` as they happen, until the deadline, the server stops, or the
    history the watch needs is compacted (then one ERROR 410). A BOOKMARK goes out, when allowed, after
    a bookmark interval with nothing sent."""
    store = handler.cluster.store
    last_sent = time.monotonic()
    interval = handler.cluster.bookmark_interval
    while not handler.cluster.stopping.is_set():
        try:
            events = store.events_after(cursor)
        except Compacted:
            writer.send("ERROR", gone_status(cursor))
            break
        for event in events:
            cursor = event.rv
            if event.plural != res.plural:
                continue
            type_ = selection.event_type(event)
            if type_:
                writer.send(type_, event.obj)
                last_sent = time.monotonic()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            break
        if bookmarks and time.monotonic() - last_sent >= interval:
            writer.bookmark(cursor)
            last_sent = time.monotonic()
        if not events:
            store.wait(cursor, min(remaining, _WATCH_POLL, interval))


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
