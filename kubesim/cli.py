"""``python -m kubesim serve``: run the emulator until SIGTERM/SIGINT."""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from pathlib import Path
from types import FrameType

from kubesim.registries import parse_registry
from kubesim.testing import KubeSim


def _port_pair(text: str) -> str:
    """`PORT` or `POD_PORT:PORT`, each 1-65535 (as `Cluster.expose_host_port` takes it)."""
    parts = text.split(":")
    if len(parts) > 2 or not all(p.isdigit() and 0 < int(p) < 65536 for p in parts):
        raise argparse.ArgumentTypeError(f"{text!r}: expected PORT or POD_PORT:PORT (1-65535)")
    return text


def _registry(text: str) -> str:
    try:
        parse_registry(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def build_parser() -> argparse.ArgumentParser:
    """The command-line interface."""
    parser = argparse.ArgumentParser(prog="python -m kubesim", description="Kubernetes API emulator")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve the API until SIGTERM/SIGINT")
    serve.add_argument("--port", type=int, default=6443)
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument(
        "--advertise-host",
        default="127.0.0.1",
        help="the address clients use: the kubeconfig's server and the serving certificate name it",
    )
    serve.add_argument("--state-dir", type=Path, required=True)
    serve.add_argument("--kubeconfig", type=Path, required=True)
    serve.add_argument("--gpu-nodes", type=int, default=0)
    serve.add_argument("--gpus-per-node", type=int, default=8)
    serve.add_argument(
        "--gpu-taints",
        action="store_true",
        help="taint GPU nodes nvidia.com/gpu=present:NoSchedule, as GKE does",
    )
    serve.add_argument("--history-size", type=int, default=10000)
    serve.add_argument("--no-cgroups", action="store_true", help="use the polling fallbacks for limits")
    serve.add_argument(
        "--node-monitor-grace",
        type=float,
        default=40.0,
        help="seconds without a heartbeat before a node turns Ready=Unknown (kube-controller-manager's default)",
    )
    serve.add_argument(
        "--max-wait-for-unmount",
        type=float,
        default=360.0,
        help="seconds a block disk stays attached to a NotReady or gone node after its last pod there is gone "
        "(kube-controller-manager's maxWaitForUnmountDuration)",
    )
    serve.add_argument(
        "--default-toleration-seconds",
        type=int,
        default=300,
        help="tolerationSeconds of not-ready/unreachable given to pods without their own (apiserver default)",
    )
    serve.add_argument(
        "--fresh", action="store_true", help="wipe the stored objects in --state-dir: start a new cluster"
    )
    serve.add_argument(
        "--no-sandbox",
        action="store_true",
        help="run containers as plain local processes sharing this machine's filesystem (no bubblewrap)",
    )
    serve.add_argument(
        "--no-network-isolation",
        action="store_true",
        help="run pods on this machine's network (shared loopback) instead of a namespace each",
    )
    serve.add_argument(
        "--expose-host-port",
        type=_port_pair,
        action="append",
        default=[],
        metavar="[POD_PORT:]PORT",
        help="let pods reach 127.0.0.1:PORT of this machine at host.kubesim.internal:POD_PORT (default PORT); "
        "repeatable",
    )
    serve.add_argument(
        "--node-group",
        type=json.loads,
        action="append",
        default=[],
        metavar="JSON",
        help='a group the autoscaler grows from min_nodes to max_nodes (repeatable), e.g. \'{"name": "gpu-a100", '
        '"gpus": 8, "gpu_product": "NVIDIA-A100", "cpu": 32, "memory": 274877906944, "max_nodes": 4}\'',
    )
    serve.add_argument(
        "--scale-up-delay", type=float, default=1.0, help="seconds a new node of a group takes to come up"
    )
    serve.add_argument(
        "--scale-down-idle",
        type=float,
        default=10.0,
        help="seconds a group's node runs no pod before the autoscaler removes it (never below min_nodes)",
    )
    serve.add_argument(
        "--private-registry",
        type=_registry,
        action="append",
        default=[],
        metavar="HOST[=USER:PASSWORD]",
        help="a registry host whose images pull only for pods with a pull secret for it (with this login, when "
        "given); others wait in ErrImagePull/ImagePullBackOff (repeatable)",
    )
    serve.add_argument("-v", "--verbose", action="store_true")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Parse arguments and serve."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    done = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    sim = KubeSim(
        args.state_dir,
        port=args.port,
        host=args.host,
        advertise_host=args.advertise_host,
        kubeconfig_path=args.kubeconfig,
        gpu_nodes=args.gpu_nodes,
        gpus_per_node=args.gpus_per_node,
        history_size=args.history_size,
        use_cgroups=not args.no_cgroups,
        node_monitor_grace=args.node_monitor_grace,
        max_wait_for_unmount=args.max_wait_for_unmount,
        default_toleration_seconds=args.default_toleration_seconds,
        fresh=args.fresh,
        gpu_taints=args.gpu_taints,
        sandbox=not args.no_sandbox,
        network=not args.no_network_isolation,
        expose_host_ports=args.expose_host_port,
        node_groups=args.node_group,
        scale_up_delay=args.scale_up_delay,
        scale_down_idle=args.scale_down_idle,
        private_registries=args.private_registry,
    )
    sim.start()
    logging.getLogger("kubesim").info("serving %s (kubeconfig %s)", sim.url, sim.kubeconfig_path)
    try:
        while not done.wait(1):
            pass
    finally:
        sim.stop()
    return 0
