"""The store on disk: every committed object write lands in ``STATE/store.sqlite`` before the API answers.

This plays etcd's part. One row per object (its JSON body) and the last resourceVersion, written in one
SQLite transaction per store write (WAL, ``synchronous=NORMAL``): a killed kubesim (even SIGKILL) loses
nothing it acknowledged; only a crash of the machine itself can lose the last writes.
"""

from __future__ import annotations

import fcntl
import json
import sqlite3
from pathlib import Path
from typing import IO, Any

Obj = dict[str, Any]
FILENAME = "store.sqlite"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS objects (plural TEXT NOT NULL, namespace TEXT NOT NULL, name TEXT NOT NULL,"
    " body TEXT NOT NULL, PRIMARY KEY (plural, namespace, name)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
)


class StateDirBusy(RuntimeError):
    """Another kubesim is running on the same state dir."""


class DiskStore:
    """The SQLite file behind a Store; callers serialise access (the Store calls it under its lock).

    It holds an exclusive lock on ``STATE/store.lock`` while open, so that a second kubesim on the same state
    dir fails at once instead of killing the first one's processes or wiping its objects.
    """

    def __init__(self, state_dir: Path, fresh: bool = False):
        self.path = state_dir / FILENAME
        self.lock_file: IO[str] | None = open(state_dir / "store.lock", "w")  # noqa: SIM115
        try:
            fcntl.flock(self.lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self.lock_file.close()
            raise StateDirBusy(f"another kubesim is running on {state_dir}") from None
        if fresh:
            for suffix in ("", "-wal", "-shm"):
                (state_dir / f"{FILENAME}{suffix}").unlink(missing_ok=True)
        self.db: sqlite3.Connection | None = sqlite3.connect(
            str(self.path), isolation_level=None, check_same_thread=False
        )
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        for statement in _SCHEMA:
            self.db.execute(statement)

    def load(self) -> tuple[dict[str, dict[tuple[str, str], Obj]], int]:
        """Every stored object by plural and (namespace, name), and the last resourceVersion handed out."""
        assert self.db is not None
        objects: dict[str, dict[tuple[str, str], Obj]] = {}
        for plural, namespace, name, body in self.db.execute(
            "SELECT plural, namespace, name, body FROM objects"
        ):
            objects.setdefault(plural, {})[(namespace, name)] = json.loads(body)
        row = self.db.execute("SELECT value FROM meta WHERE key = 'rv'").fetchone()
        return objects, int(row[0]) if row else 0

    def put(self, plural: str, key: tuple[str, str], obj: Obj, rv: int) -> None:
        """Store one object's new version together with the resourceVersion it got."""
        body = json.dumps(obj, separators=(",", ":"))
        self._commit(
            ("INSERT OR REPLACE INTO objects VALUES (?, ?, ?, ?)", (plural, key[0], key[1], body)), rv
        )

    def delete(self, plural: str, key: tuple[str, str], rv: int) -> None:
        """Forget one object; the deletion still used up resourceVersion ``rv``."""
        self._commit(
            ("DELETE FROM objects WHERE plural = ? AND namespace = ? AND name = ?", (plural, *key)), rv
        )

    def _commit(self, change: tuple[str, tuple[Any, ...]], rv: int) -> None:
        if self.db is None:
            return
        self.db.execute("BEGIN")
        try:
            self.db.execute(*change)
            self.db.execute("INSERT OR REPLACE INTO meta VALUES ('rv', ?)", (str(rv),))
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        """Checkpoint, close and unlock; later writes are kept in memory only (kubesim is stopping)."""
        if self.db is not None:
            self.db.close()
            self.db = None
        if self.lock_file is not None:
            self.lock_file.close()
            self.lock_file = None
