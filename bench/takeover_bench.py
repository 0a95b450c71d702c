"""Leader takeover benchmark: two watchers (`manage.py watch_cluster`) and two beats (`celery -A portal beat`)
as the Deployments run them; the leader of each is killed (SIGKILL: a crash, an OOM kill, a deleted pod) or
stopped (SIGTERM: a rolling update, a drain) again and again, and the time until the standby leads is measured
from the moment of the signal to the moment the server's locks show the standby as the holder
(`common.leader.leader_of`, polled every 10 ms). The killed process is started again, as Kubernetes would,
and becomes the next round's standby.

Run: ``.venv/bin/python bench/takeover_bench.py [--rounds 5]``; prints one JSON line per role and signal
(median and max seconds, and each round's), with LEADER_RETRY_SECONDS (the standby's try interval, the
bound on a takeover after a process's death) alongside. Needs the local PostgreSQL and Redis the tests use:
database ``trainyard_takeover_bench`` (created if missing, migrated), Redis db 14 (or
``TAKEOVER_BENCH_REDIS_URL``; what beat sent there is deleted at the end), kubesim in-process.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

BENCH_DB = "trainyard_takeover_bench"
BENCH_REDIS = os.environ.get("TAKEOVER_BENCH_REDIS_URL", "redis://127.0.0.1:6379/14")
os.environ["DJANGO_SETTINGS_MODULE"] = "portal.settings.test"
for _name in ("REDIS_URL", "CELERY_BROKER_URL", "CELERY_RESULT_BACKEND"):
    os.environ[_name] = BENCH_REDIS

import django  # noqa: E402
from django.conf import settings  # noqa: E402

settings.DATABASES["default"]["NAME"] = BENCH_DB


def emit(record: dict[str, object]) -> None:
    print(json.dumps(record), flush=True)


def prepare_database() -> None:
    import psycopg
    from psycopg import sql

    db = settings.DATABASES["default"]
    params = {k: db.get(k.upper()) for k in ("host", "port", "user", "password") if db.get(k.upper())}
    with psycopg.connect(dbname="postgres", autocommit=True, **params) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [BENCH_DB]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(BENCH_DB)))
    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0, interactive=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5, help="kills (and stops) per role")
    args = parser.parse_args()
    prepare_database()
    from common.leader import leader_of
    from kubesim.testing import running_kubesim

    state = Path(tempfile.mkdtemp(prefix="takeover-bench-"))
    db = settings.DATABASES["default"]
    env = {
        **os.environ,
        "DATABASE_URL": f"postgres://{db['USER'] or ''}@{db['HOST'] or ''}/{BENCH_DB}",
        "LEADER_ELECTION": "true",
    }
    commands = {
        "watcher": lambda n: [sys.executable, "manage.py", "watch_cluster"],
        "beat": lambda n: [
            *(sys.executable, "-m", "celery", "-A", "portal", "beat", "--loglevel=WARNING"),
            f"--schedule={state / f'beat-{n}.schedule'}",
        ],
    }
    running: list[subprocess.Popen[bytes]] = []

    def start(role: str, n: int) -> subprocess.Popen[bytes]:
        beats = state / f"{role}-{n}"
        beats.mkdir(exist_ok=True)
        (beats / f"trainyard-{role}.alive").unlink(missing_ok=True)
        process = subprocess.Popen(
            commands[role](n),
            cwd=ROOT,
            env=env | {"HEARTBEAT_DIR": str(beats)},
            stdout=subprocess.DEVNULL,
            stderr=(state / f"{role}-{n}.log").open("ab"),
        )
        running.append(process)
        return process

    def holder(role: str, processes: list[subprocess.Popen[bytes]]) -> subprocess.Popen[bytes] | None:
        who = leader_of(role)
        return next((p for p in processes if f"{socket.gethostname()}:{p.pid}" == who), None)

    def wait(role: str, processes: list[subprocess.Popen[bytes]], old: object) -> tuple[object, float]:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            found = holder(role, processes)
            if found is not None and found is not old:
                return found, time.monotonic()
            time.sleep(0.01)
        raise SystemExit(f"no {role} took over within 120 s (logs in {state})")

    try:
        with running_kubesim(state / "kubesim", gpu_nodes=1, gpus_per_node=4) as sim:
            env["KUBECONFIG"] = str(sim.kubeconfig_path)
            for role in commands:
                pair = [start(role, 0), start(role, 1)]
                leader, _ = wait(role, pair, None)
                for how in (signal.SIGKILL, signal.SIGTERM):
                    times = []
                    for _ in range(args.rounds):
                        standby = next(p for p in pair if p is not leader)
                        # The standby must be trying already (its heartbeat written at each try), as a
                        # replica that has run for a while is, not still loading Django.
                        alive = state / f"{role}-{pair.index(standby)}" / f"trainyard-{role}.alive"
                        while not alive.exists():
                            time.sleep(0.05)
                        # ... and caught at a random point of its retry interval, as a real death is.
                        time.sleep(random.uniform(0, settings.LEADER_RETRY_SECONDS))
                        signalled = time.monotonic()
                        leader.send_signal(how)  # type: ignore[attr-defined]
                        new, led = wait(role, pair, leader)
                        assert new is standby
                        times.append(led - signalled)
                        leader.wait(timeout=60)  # type: ignore[attr-defined]
                        pair[pair.index(leader)] = start(role, pair.index(leader))  # type: ignore[arg-type]
                        leader = new
                    emit(
                        {
                            "role": role,
                            "signal": how.name,
                            "rounds": args.rounds,
                            "takeover_median_s": round(statistics.median(times), 3),
                            "takeover_max_s": round(max(times), 3),
                            "each_s": [round(t, 3) for t in times],
                            "retry_s": settings.LEADER_RETRY_SECONDS,
                        }
                    )
                for process in pair:
                    process.terminate()
                for process in pair:
                    process.wait(timeout=60)
    finally:
        for process in running:
            if process.poll() is None:
                process.kill()
                process.wait()
        import redis

        redis.Redis.from_url(BENCH_REDIS).delete("celery", "trainyard:pulses")
        shutil.rmtree(state, ignore_errors=True)


if __name__ == "__main__":
    main()
