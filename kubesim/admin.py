"""HTTP admin endpoints under ``/kubesim/`` for fault injection from outside the process.

``POST /kubesim/faults`` ``{"method": "GET", "path": "regex", "code": 500, "hangSeconds": 0, "count": 1}``;
``DELETE /kubesim/faults``; ``POST /kubesim/nodes/NAME/notready|ready|lose``;
``POST /kubesim/nodes`` ``{"name": "...", "gpus": 8}``; ``POST /kubesim/kubelet/pause|resume``;
``POST /kubesim/compact`` ``{"keep": 0}``; ``GET /kubesim/faults``;
``POST /kubesim/imagepulls`` ``{"pattern": "regex", "message": "..."}``, ``GET``/``DELETE /kubesim/imagepulls``;
``GET /kubesim/network``: whether pods are network-isolated (and why not), the node address, pod CIDR and
exposed host ports.
``POST /kubesim/podcreates`` ``{"namespace": "regex", "code": 500, "count": null, "message": "..."}`` (a failing
admission webhook: a fault rule on pod creations, listed and cleared with ``/kubesim/faults``);
``POST /kubesim/admission`` ``{"pattern": "ns/name regex", "node": "regex", "reason": "UnexpectedAdmissionError",
"message": "...", "count": null}`` (kubelet admission rejections), ``GET``/``DELETE /kubesim/admission``;
``GET /kubesim/requests`` (requests served by "verb resource"), ``DELETE`` resets them;
``GET /kubesim/sidecars``, ``POST /kubesim/sidecars`` ``{"mode": "classic" | "native" | null}`` (the injector).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from kubesim.errors import ApiError, bad_request, not_found
from kubesim.faults import WEBHOOK_FAILURE, AdmissionRule, FaultRule, ImagePullRule, pod_create_path
from kubesim.store import Obj

if TYPE_CHECKING:
    from kubesim.server import Handler, Params

_OK = {"status": "ok"}


def handle(handler: Handler, method: str, path: str, params: Params) -> None:
    """Route one admin request: the fault rules (GET, POST, DELETE), then the POST-only actions."""
    parts = [p for p in path.split("/") if p][1:]
    body = handler._json_body() or {} if method in ("POST", "PUT") else {}
    if parts == ["faults"]:
        _faults(handler, method, body)
        return
    if parts == ["imagepulls"]:
        _image_pulls(handler, method, body)
        return
    if parts == ["network"] and method == "GET":
        network = handler.cluster.network
        status = {
            "isolated": network.available,
            "reason": network.reason,
            "nodeAddress": network.node_ip,
            "podCIDR": str(network.subnet) if network.available else None,
            "exposedPorts": sorted(network.exposed),
            "networkPoliciesEnforced": network.available and network.bridge_filtered,
        }
        handler.send_json(200, status)
        return
    if parts == ["admission"]:
        _admission(handler, method, body)
        return
    if parts == ["sidecars"]:
        _sidecars(handler, method, body)
        return
    if parts == ["requests"] and method in ("GET", "DELETE"):
        if method == "DELETE":
            handler.cluster.requests.reset()
        handler.send_json(200, {"counts": handler.cluster.requests.snapshot()})
        return
    if method != "POST":
        raise ApiError(405, "MethodNotAllowed", "admin actions are POST requests")
    _action(handler, parts, path, body)


def _faults(handler: Handler, method: str, body: Obj) -> None:
    """List, add or clear the API fault rules; other methods get no answer."""
    cluster = handler.cluster
    if method == "GET":
        handler.send_json(200, {"items": [r.to_dict() for r in cluster.faults.rules()]})
    elif method == "DELETE":
        cluster.faults.clear()
        handler.send_json(200, _OK)
    elif method == "POST":
        try:
            rule = FaultRule(
                body.get("method", "*"),
                body["path"],
                body.get("code"),
                float(body.get("hangSeconds", 0)),
                body.get("count"),
                body.get("message", "injected fault"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise bad_request(f"invalid fault rule: {exc}") from None
        handler.send_json(201, cluster.faults.add(rule).to_dict())


def _image_pulls(handler: Handler, method: str, body: Obj) -> None:
    """List, add or clear the image pull failure rules."""
    cluster = handler.cluster
    if method == "GET":
        handler.send_json(200, {"items": [r.to_dict() for r in cluster.faults.image_rules()]})
    elif method == "DELETE":
        cluster.clear_image_pull_failures()
        handler.send_json(200, _OK)
    elif method == "POST":
        try:
            image_rule = ImagePullRule(body["pattern"], body.get("message", ImagePullRule.message))
        except (KeyError, TypeError, re.error) as exc:
            raise bad_request(f"invalid image pull rule: {exc}") from None
        handler.send_json(201, cluster.faults.fail_image_pulls(image_rule).to_dict())


def _admission(handler: Handler, method: str, body: Obj) -> None:
    """List, add or clear the kubelet admission rejection rules."""
    faults = handler.cluster.faults
    if method == "GET":
        handler.send_json(200, {"items": [r.to_dict() for r in faults.admission_rules()]})
    elif method == "DELETE":
        faults.clear_admission_rejections()
        handler.send_json(200, _OK)
    elif method == "POST":
        try:
            rule = AdmissionRule(
                str(body["pattern"]),
                str(body.get("reason") or "UnexpectedAdmissionError"),
                str(body.get("message") or ""),
                str(body.get("node") or ""),
                None if body.get("count") is None else int(body["count"]),
            )
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise bad_request(f"invalid admission rule: {exc}") from None
        handler.send_json(201, faults.reject_pod_admission(rule).to_dict())


def _sidecars(handler: Handler, method: str, body: Obj) -> None:
    """Show or switch the sidecar injector."""
    injector = handler.cluster.api.sidecars
    if method == "POST":
        try:
            injector.switch(body.get("mode"))
        except ValueError as exc:
            raise bad_request(str(exc)) from None
    elif method != "GET":
        raise ApiError(405, "MethodNotAllowed", "GET or POST")
    handler.send_json(200, injector.to_dict())


def _action(handler: Handler, parts: list[str], path: str, body: Obj) -> None:
    """Run one POST action: add a node, make one ready, not ready or lost, pause or resume the
    kubelets, or compact the watch history."""
    cluster = handler.cluster
    if parts == ["nodes"]:
        node = cluster.add_node(
            body["name"],
            cpu=float(body.get("cpu", 32)),
            memory=int(body.get("memory", 2**38)),
            gpus=int(body.get("gpus", 0)),
            simulated=True,
            labels=body.get("labels"),
        )
        handler.send_json(201, node)
    elif len(parts) == 3 and parts[0] == "nodes" and parts[2] in ("ready", "notready", "lose"):
        if parts[1] not in cluster.kubelets:
            raise not_found("nodes", parts[1])
        if parts[2] == "lose":
            cluster.lose_node(parts[1])
        else:
            cluster.set_node_ready(parts[1], parts[2] == "ready")
        handler.send_json(200, _OK)
    elif len(parts) == 2 and parts[0] == "kubelet" and parts[1] in ("pause", "resume"):
        cluster.pause_kubelets(parts[1] == "pause")
        handler.send_json(200, _OK)
    elif parts == ["podcreates"]:
        try:
            rule = FaultRule(
                "POST",
                pod_create_path(str(body["namespace"])),
                int(body.get("code") or 500),
                0.0,
                None if body.get("count") is None else int(body["count"]),
                str(body.get("message") or WEBHOOK_FAILURE),
            )
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise bad_request(f"invalid pod create fault: {exc}") from None
        handler.send_json(201, cluster.faults.add(rule).to_dict())
    elif parts == ["compact"]:
        cluster.store.compact(int(body.get("keep", 0)))
        handler.send_json(200, _OK)
    else:
        raise ApiError(404, "NotFound", f"unknown admin endpoint {path}")
