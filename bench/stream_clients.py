"""The WebSocket viewers of `bench/stream_bench.py`, in a process of their own.

The bench starts this file as a script (``stream_clients.py --clients '<json>'``), so that parsing the
viewers' frames does not share a GIL with the log follower it measures; it prints ``ready`` once every
viewer is subscribed, then one JSON result. `clients` is the bench's side: start it, wait, read the result.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

TERMINAL = ("succeeded", "failed", "cancelled")


def _client(config: dict[str, Any], ready: threading.Barrier, result: dict[str, Any]) -> None:
    """One WebSocket viewer: send the subscriptions, read until the job's terminal status (or, for a tenant
    watcher, until stdin closes), and keep what the figures need; an exception is kept as `error`."""
    result.update(lat=[], seqs={}, statuses=[], gaps=0, gap_lines=0, frames=0)
    try:
        _view(config, ready, result)
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"


def _view(config: dict[str, Any], ready: threading.Barrier, result: dict[str, Any]) -> None:
    import websocket

    ws = websocket.create_connection(
        config["url"], cookie=f"sessionid={config['session']}", origin=config["origin"], timeout=30
    )
    lat: list[float] = []
    seqs: dict[int, int] = {}
    statuses: list[tuple[str, str, float]] = []
    gaps = gap_lines = frames = 0
    try:
        for message in config["subscribe"]:
            ws.send(json.dumps(message))
        answered = 0
        while answered < len(config["subscribe"]):
            frame = json.loads(ws.recv())
            answered += frame.get("type") in ("subscribed", "subscribed_tenant")
        ready.wait(timeout=60)
        ws.settimeout(1)
        deadline = time.monotonic() + config["timeout"]
        while time.monotonic() < deadline and not result.get("stop"):
            try:
                raw = ws.recv()
            except websocket.WebSocketTimeoutException:
                continue
            now = time.time()
            frame = json.loads(raw)
            frames += 1
            kind = frame.get("type")
            if kind == "logs":
                for seq, text in frame["lines"]:
                    seqs[seq] = seqs.get(seq, 0) + 1
                    if text.startswith("L "):
                        lat.append((now - float(text.split()[2])) * 1000)
            elif kind == "gap":
                gaps += 1
                gap_lines += frame["to_seq"] - frame["from_seq"] + 1
            elif kind == "status":
                statuses.append((frame["job"], frame["status"], now))
                if config.get("until_terminal") and frame["status"] in TERMINAL:
                    break
    finally:
        ws.close()
    result.update(lat=lat, seqs=seqs, statuses=statuses, gaps=gaps, gap_lines=gap_lines, frames=frames)


def _storm_client(config: dict[str, Any], start: threading.Barrier, result: dict[str, Any]) -> None:
    """One of many viewers that connect at the same moment: from the moment all are released to its
    handshake's end, its first frame (`subscribed`) and its first `logs` frame, in ms."""
    import websocket

    start.wait(timeout=60)
    began = time.perf_counter()
    try:
        ws = websocket.create_connection(
            config["url"], cookie=f"sessionid={config['session']}", origin=config["origin"], timeout=30
        )
        result["connected_ms"] = (time.perf_counter() - began) * 1000
        try:
            for message in config["subscribe"]:
                ws.send(json.dumps(message))
            while "first_lines_ms" not in result:
                frame = json.loads(ws.recv())
                at = (time.perf_counter() - began) * 1000
                result.setdefault("first_frame_ms", at)
                if frame.get("type") == "logs":
                    result["first_lines_ms"] = at
        finally:
            ws.close()
    except Exception as exc:
        result["error"] = f"{type(exc).__name__}: {exc}"


def run_storm(config: dict[str, Any]) -> None:
    """`count` viewers released together; prints their results as one JSON line."""
    count = int(config["count"])
    start = threading.Barrier(count)
    results: list[dict[str, Any]] = [{} for _ in range(count)]
    threads = [
        threading.Thread(target=_storm_client, args=(config, start, results[i]), daemon=True)
        for i in range(count)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    print(json.dumps({"cpu_s": time.process_time(), "viewers": results}), flush=True)


def storm(server: str, session: str, count: int, subscribe: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Connect `count` viewers at once (threads of a process of their own) and return what each saw."""
    config = {
        "url": server.replace("http://", "ws://") + "/ws/",
        "origin": server,
        "session": session,
        "count": count,
        "subscribe": subscribe,
    }
    out = subprocess.run(
        [sys.executable, __file__, "--storm", json.dumps(config)],
        capture_output=True,
        text=True,
        timeout=150,
        check=True,
    ).stdout
    viewers: list[dict[str, Any]] = json.loads(out)["viewers"]
    return viewers


def run_clients(config: dict[str, Any]) -> None:
    """`count` viewers with the same subscriptions, in threads; prints 'ready' once all are subscribed,
    then their results as one JSON line. A tenant watcher stops when stdin closes."""
    count = int(config["count"])
    ready = threading.Barrier(count + 1)
    results: list[dict[str, Any]] = [{} for _ in range(count)]
    threads = [
        threading.Thread(target=_client, args=(config, ready, results[i]), daemon=True) for i in range(count)
    ]
    for thread in threads:
        thread.start()
    ready.wait(timeout=60)
    print("ready", flush=True)
    if not config.get("until_terminal"):
        sys.stdin.read()
        for result in results:
            result["stop"] = True
    for thread in threads:
        thread.join(timeout=config["timeout"] + 35)
    viewers = [{**r, "seqs": list(r["seqs"].items())} for r in results]
    print(json.dumps({"cpu_s": time.process_time(), "viewers": viewers}), flush=True)


@contextmanager
def clients(
    server: str, session: str, count: int, subscribe: list[dict[str, Any]], **options: Any
) -> Iterator[dict[str, Any]]:
    """Start the client process and wait until every viewer is subscribed; on exit, read the results into
    the yielded dict: `viewers` and the process's `cpu_s` (closing stdin first, which stops a tenant
    watcher)."""
    config = {
        "url": server.replace("http://", "ws://") + "/ws/",
        "origin": server,
        "session": session,
        "count": count,
        "subscribe": subscribe,
        "timeout": 90,
        **options,
    }
    process = subprocess.Popen(
        [sys.executable, __file__, "--clients", json.dumps(config)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdin is not None and process.stdout is not None
    outcome: dict[str, Any] = {}
    try:
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("the WebSocket clients did not all subscribe")
        yield outcome
        out, _ = process.communicate(timeout=150)  # closes stdin first
        found = json.loads(out)
        outcome["cpu_s"] = found["cpu_s"]
        outcome["viewers"] = [{**r, "seqs": {int(k): n for k, n in r["seqs"]}} for r in found["viewers"]]
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] not in ("--clients", "--storm"):
        sys.exit("usage: stream_clients.py --clients|--storm '<json>' (started by bench/stream_bench.py)")
    (run_clients if sys.argv[1] == "--clients" else run_storm)(json.loads(sys.argv[2]))
