"""docs/examples/fenced_writer.py runs as documented: as a real process with the environment
an exec task gets, it writes under a newer token and is refused under an older one; and run
by a real `corral-worker` it gets its token from the agent."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

from corral.common.wire.protocol import make_token

from ..support import WAIT, wait_until
from . import workerprocs as support
from .workerprocs import FakeSupervisor, Workers

supervisor_fixture = support.supervisor_fixture  # the `supervisor` fixture
workers_fixture = support.workers_fixture  # the `workers` fixture

EXAMPLE = Path(__file__).resolve().parents[2] / "docs" / "examples" / "fenced_writer.py"


def write_once(db: Path, task: str, token: int) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CORRAL_TASK": task, "CORRAL_FENCING_TOKEN": str(token)}
    return subprocess.run([sys.executable, str(EXAMPLE), "--db", str(db), "--once"],
                          env=env, capture_output=True, text=True, timeout=WAIT)


def rows(db: Path) -> list[tuple[str, int]]:
    """What the writers wrote so far; none while the first writer is still making the file
    and its tables (a reader can open the file in between)."""
    with sqlite3.connect(db) as conn:
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'rows'").fetchone():
            return []
        return [(t, n) for t, n in conn.execute("SELECT task, token FROM rows ORDER BY rowid")]


def test_a_write_with_an_older_token_is_refused(tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    old, new = make_token(3, 7), make_token(4, 1)
    assert write_once(db, "room-1", old).returncode == 0
    assert write_once(db, "room-1", new).returncode == 0
    zombie = write_once(db, "room-1", old)  # the old owner wakes up and writes once more
    assert zombie.returncode == 3 and "is older than" in zombie.stderr
    assert write_once(db, "room-2", old).returncode == 0  # fences are per task
    assert rows(db) == [("room-1", old), ("room-1", new), ("room-2", old)]


def test_run_by_the_worker_it_writes_under_the_assignment_s_token(
        supervisor: FakeSupervisor, workers: Workers, tmp_path: Path) -> None:
    db = tmp_path / "store.db"
    workers.start(supervisor.endpoint, "--handler", "exec", "--exec",
                  f"{sys.executable} {EXAMPLE} --db {db} --every 0.05")
    token = make_token(7, 42)
    supervisor.answer(supervisor.recv(), add=("room-1",), tokens={"room-1": token})
    wait_until(lambda: db.exists() and rows(db), what="the task's first write")
    assert {n for _, n in rows(db)} == {token}
