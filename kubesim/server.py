"""The HTTP front: routes Kubernetes REST paths to the Api, streams watches and logs, serves discovery."""

from __future__ import annotations

import contextlib
import json
import socket
import ssl
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from kubesim import __version__, auth, resources, tables
from kubesim.errors import ApiError, bad_request, not_found, too_large_resource_version
from kubesim.openapi import fields
from kubesim.resources import Resource
from kubesim.store import Obj
from kubesim.watch import serve_watch

if TYPE_CHECKING:
    from kubesim.cluster import Cluster

VERSION_INFO = {
    "major": "1",
    "minor": "32",
    "gitVersion": "v1.32.0-kubesim",
    "gitCommit": "kubesim",
    "gitTreeState": "clean",
    "buildDate": "2025-01-01T00:00:00Z",
    "goVersion": "go1.23",
    "compiler": "gc",
    "platform": "linux/amd64",
    "kubesimVersion": __version__,
}
_FRESH_WAIT = 3.0  # the watch cache's blockTimeout
_FRESH_RETRY = 1  # its resourceVersionTooHighRetrySeconds


class Params:
    """Query parameters with typed accessors."""

    def __init__(self, query: str):
        self.raw = parse_qs(query, keep_blank_values=True)

    def get(self, name: str) -> str | None:
        """The last value of a parameter, or None."""
        values = self.raw.get(name)
        return values[-1] if values else None

    def flag(self, name: str) -> bool:
        """A boolean parameter (``true``/``1``)."""
        return (self.get(name) or "").lower() in ("true", "1")

    def integer(self, name: str) -> int | None:
        """An integer parameter; 400 when malformed."""
        value = self.get(name)
        if value in (None, ""):
            return None
        try:
            return int(value)
        except ValueError:
            raise bad_request(f"invalid value for {name}: {value!r}") from None


class ApiHTTPServer(ThreadingHTTPServer):
    """A threading HTTPS server that remembers open connections so that stop() can cut them; it answers only
    requests that carry ``token`` (kubesim/auth.py)."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], cluster: Cluster, token: str, tls: ssl.SSLContext):
        self.cluster = cluster
        self.token = token
        self.connections: set[socket.socket] = set()
        self.conn_lock = threading.Lock()
        super().__init__(address, Handler)
        self.socket = tls.wrap_socket(self.socket, server_side=True, do_handshake_on_connect=False)

    def finish_request(self, request: Any, client_address: Any) -> None:
        """Complete the TLS handshake on the connection's own thread (a slow or plain-HTTP client holds up
        no other), then serve it."""
        try:
            request.settimeout(10)
            request.do_handshake()
            request.settimeout(None)
        except OSError:
            return
        super().finish_request(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A connection that a client dropped or cut mid-TLS is not an error worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)

    def process_request(self, request: Any, client_address: Any) -> None:
        """Track the connection, then handle it on its own thread."""
        with self.conn_lock:
            self.connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        """Forget and close a finished connection."""
        with self.conn_lock:
            self.connections.discard(request)
        super().shutdown_request(request)

    def close_all(self) -> None:
        """Shut down every open connection (idle keep-alives and streams)."""
        with self.conn_lock:
            conns = list(self.connections)
        for conn in conns:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


class Handler(BaseHTTPRequestHandler):
    """One HTTP connection; each request is routed by ``_route``."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go in two writes; avoid the delayed-ACK stall
    server: ApiHTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        """Silence per-request logging (kubesim logs only its own decisions)."""

    @property
    def cluster(self) -> Cluster:
        """The cluster this server fronts."""
        return self.server.cluster

    def do_GET(self) -> None:
        """Handle GET."""
        self._dispatch("GET")

    def do_POST(self) -> None:
        """Handle POST."""
        self._dispatch("POST")

    def do_PUT(self) -> None:
        """Handle PUT."""
        self._dispatch("PUT")

    def do_PATCH(self) -> None:
        """Handle PATCH."""
        self._dispatch("PATCH")

    def do_DELETE(self) -> None:
        """Handle DELETE."""
        self._dispatch("DELETE")

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _json_body(self) -> Any:
        raw = self._body()
        if not raw:
            return None
        try:
            return json.loads(raw)
        except ValueError:
            import yaml

            try:
                return yaml.safe_load(raw.decode())
            except yaml.YAMLError:
                raise bad_request("the body of the request was in an unknown format") from None

    def send_json(self, code: int, body: Any) -> None:
        """Send a complete JSON response."""
        data = json.dumps(body, separators=(",", ":")).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        for warning in self.warnings:
            self.send_header("Warning", '299 - "' + warning.replace('"', '\\"') + '"')
        self.send_header("Content-Length", str(len(data)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(data)

    def start_stream(self, content_type: str) -> None:
        """Begin a chunked streaming response."""
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def send_chunk(self, data: bytes) -> None:
        """Write one chunk of a streaming response."""
        if data:
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")

    def end_stream(self) -> None:
        """Finish a chunked response."""
        self.wfile.write(b"0\r\n\r\n")

    def _dispatch(self, method: str) -> None:
        url = urlsplit(self.path)
        params = Params(url.query)
        self.warnings: list[str] = []
        try:
            if not auth.authenticated(self.headers.get("Authorization"), self.server.token):
                self.close_connection = True  # its body, if any, stays unread
                raise auth.unauthorized()
            if not url.path.startswith("/kubesim/"):
                self.cluster.requests.count(method, url.path, params.flag("watch"))
                try:
                    self.cluster.faults.apply(method, url.path, self.cluster.stopping)
                except ApiError:
                    self.close_connection = True  # its body, if any, stays unread
                    raise
            self._route(method, url.path.rstrip("/") or "/", params)
        except ApiError as exc:
            self._send_error(exc)
        except (BrokenPipeError, ConnectionResetError, ssl.SSLEOFError):  # the client went away mid-answer
            self.close_connection = True
        except Exception as exc:
            self.cluster.log.exception("internal error on %s %s", method, self.path)
            self._send_error(ApiError(500, "InternalError", f"kubesim internal error: {exc}"))

    def _send_error(self, exc: ApiError) -> None:
        try:
            self.send_json(exc.code, exc.status())
        except OSError:
            self.close_connection = True

    def _route(self, method: str, path: str, params: Params) -> None:
        from kubesim import admin

        if path.startswith("/kubesim/"):
            admin.handle(self, method, path, params)
            return
        if path == "/swagger-2.0.0.pb-v1" or path.startswith("/openapi/"):
            from kubesim import openapi

            openapi.serve(self, method, path)
            return
        simple = self._discovery(path)
        if simple is not None:
            if method != "GET":
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on {path}")
            self.send_json(200, simple)
            return
        parts = [p for p in path.split("/") if p]
        if parts[:2] == ["api", "v1"]:
            group, version, rest = "", "v1", parts[2:]
        elif len(parts) >= 3 and parts[0] == "apis":
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] not in ("status", "finalize"):
            namespace, rest = rest[1], rest[2:]
        res = resources.find(group, version, rest[0]) if rest else None
        if res is None or len(rest) > 3:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        name = rest[1] if len(rest) > 1 else None
        sub = rest[2] if len(rest) > 2 else None
        if not res.stored:
            from kubesim import metrics

            self.send_json(200, metrics.serve(self.cluster, res, namespace, name, params))
            return
        self._resource(method, res, namespace, name, sub, params)

    def _discovery(self, path: str) -> Any:
        if path == "/version":
            return VERSION_INFO
        if path in ("/healthz", "/readyz", "/livez"):
            return "ok"
        if path == "/api":
            addr = f"127.0.0.1:{self.server.server_address[1]}"
            return {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": addr}],
            }
        if path == "/api/v1":
            return resources.resource_list("", "v1")
        if path == "/apis":
            return resources.api_group_list()
        parts = [p for p in path.split("/") if p]
        if len(parts) == 2 and parts[0] == "apis":
            group = resources.api_group(parts[1])
            if group is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return group
        if len(parts) == 3 and parts[0] == "apis":
            found = resources.resource_list(parts[1], parts[2])
            if found is None:
                raise ApiError(404, "NotFound", "the server could not find the requested resource")
            return found
        return None

    def _resource(
        self,
        method: str,
        res: Resource,
        namespace: str | None,
        name: str | None,
        sub: str | None,
        params: Params,
    ) -> None:
        api = self.cluster.api
        if sub is not None and sub not in res.subresources:
            raise ApiError(404, "NotFound", "the server could not find the requested resource")
        if name is None:
            if method == "GET":
                if params.flag("watch"):
                    serve_watch(self, res, namespace, params)
                else:
                    self._list(res, namespace, params)
            elif method == "POST":
                body = self._checked(res, self._json_body(), params, fields.decoding_context(res))
                self.send_json(201, api.create(res, namespace, body, dry_run=dry_run(params)))
            elif method == "DELETE":
                self._delete_collection(res, namespace, params)
            else:
                raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed on a collection")
            return
        if sub == "log":
            from kubesim import logs

            logs.serve(self, namespace or "", name, params)
        elif sub in ("binding", "eviction") and method == "POST":
            self._pod_action(sub, namespace or "", name)
        elif method == "GET":
            self._require_version(params, from_storage=False)
            obj = api.get(res, namespace, name)
            version = tables.wants_table(self.headers.get("Accept")) if sub is None else None
            if version:
                obj = tables.table(res.plural, [obj], version, params.get("includeObject"), {})
            self.send_json(200, obj)
        elif method == "PUT":
            body = self._json_body()
            if sub != "finalize":
                body = self._checked(res, body, params, fields.decoding_context(res))
            self.send_json(200, api.update(res, namespace, name, body, sub, dry_run=dry_run(params)))
        elif method == "PATCH":
            content_type = self.headers.get("Content-Type") or "application/json"
            mode = fields.directive(params.get("fieldValidation"))

            def check(obj: Obj) -> Obj:
                return fields.check(res, obj, mode, self.warnings)

            patched = api.patch(
                res, namespace, name, content_type, self._body(), sub, check=check, dry_run=dry_run(params)
            )
            self.send_json(200, patched)
        elif method == "DELETE":
            self.send_json(200, api.delete(res, namespace, name, self._delete_options(params)))
        else:
            raise ApiError(405, "MethodNotAllowed", f"{method} is not allowed here")

    def _checked(self, res: Resource, body: Any, params: Params, context: str) -> Any:
        """The request body after server-side field validation (``fieldValidation``)."""
        mode = fields.directive(params.get("fieldValidation"))
        return fields.check(res, body, mode, self.warnings, context)

    def _delete_options(self, params: Params) -> Obj:
        options = self._json_body() or {}
        if not isinstance(options, dict):
            raise bad_request("invalid DeleteOptions")
        grace = params.integer("gracePeriodSeconds")
        if grace is not None:
            options["gracePeriodSeconds"] = grace
        if params.get("propagationPolicy"):
            options["propagationPolicy"] = params.get("propagationPolicy")
        if params.get("orphanDependents"):
            options["orphanDependents"] = params.flag("orphanDependents")
        if dry_run(params):
            options["dryRun"] = ["All"]
        if options.get("dryRun") not in (None, [], ["All"]):
            raise bad_request(f"unsupported dry run directive: {options['dryRun']}")
        return options

    def _pod_action(self, sub: str, namespace: str, name: str) -> None:
        api = self.cluster.api
        pods = resources.find("", "v1", "pods")
        assert pods is not None
        body = self._json_body() or {}
        if sub == "eviction":
            from kubesim.disruption import evict_pod

            evict_pod(self.cluster, namespace, name, body)
        else:
            target = (body.get("target") or {}).get("name")
            if not target:
                raise bad_request("binding target is required")
            if (
                api.mutate("pods", namespace, name, lambda p: p["spec"].__setitem__("nodeName", target))
                is None
            ):
                raise not_found("pods", name)
        self.send_json(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})

    def _require_version(self, params: Params, from_storage: bool) -> None:
        """A read at ``resourceVersion=N`` must see version N or later. The watch cache waits up to 3 s for
        it, then answers 504 "Too large resource version" (retry after 1 s); reads served from etcd (paged
        lists) fail at once. Only a store that went back (``--fresh``) makes a client hold such a version."""
        raw = params.get("resourceVersion")
        if raw in (None, "", "0"):
            return
        try:
            wanted = int(raw or "")
        except ValueError:
            raise bad_request(f"invalid resourceVersion {raw!r}") from None
        store = self.cluster.store
        if not store.wait_until(wanted, 0 if from_storage else _FRESH_WAIT):
            retry = 0 if from_storage else _FRESH_RETRY
            raise too_large_resource_version(wanted, store.rv, retry)

    def _list(self, res: Resource, namespace: str | None, params: Params) -> None:
        limit = params.integer("limit")
        self._require_version(params, from_storage=bool(limit and limit > 0) or bool(params.get("continue")))
        items, rv, token, remaining = self.cluster.api.list(
            res,
            namespace,
            params.get("labelSelector"),
            params.get("fieldSelector"),
            limit,
            params.get("continue"),
        )
        meta: dict[str, Any] = {"resourceVersion": str(rv)}
        if token:
            meta["continue"] = token
            meta["remainingItemCount"] = remaining
        version = tables.wants_table(self.headers.get("Accept"))
        if version:
            self.send_json(200, tables.table(res.plural, items, version, params.get("includeObject"), meta))
            return
        self.send_json(
            200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": meta, "items": items}
        )

    def _delete_collection(self, res: Resource, namespace: str | None, params: Params) -> None:
        api = self.cluster.api
        options = self._delete_options(params)
        items, *_ = api.list(res, namespace, params.get("labelSelector"), params.get("fieldSelector"))
        deleted = []
        for obj in list(items):
            meta = obj["metadata"]
            try:
                api.delete(res, meta.get("namespace"), meta["name"], options)
                deleted.append(obj)
            except ApiError as exc:
                if exc.code != 404:
                    raise
        self.send_json(
            200, {"kind": f"{res.kind}List", "apiVersion": res.api_version, "metadata": {}, "items": deleted}
        )


def dry_run(params: Params) -> bool:
    """Whether a write is a dry run (``dryRun=All``: checked and answered, not stored); 400 for other values."""
    values = params.raw.get("dryRun") or []
    if any(v != "All" for v in values):
        raise bad_request(f"unsupported dry run directive: {values}")
    return bool(values)
