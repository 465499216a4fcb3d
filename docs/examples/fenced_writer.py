"""A corral ``exec`` task that fences its own storage with ``CORRAL_FENCING_TOKEN``.

corral gives every assignment of a task a fencing token that only grows for that task (across
owners, supervisor epochs and restarts). A lease alone cannot stop a *zombie* — an owner that
was paused, lost its lease, and wakes up still believing it owns the task — from writing
once more. The storage can: it remembers the highest token that wrote for each task and
refuses a write that carries a lower one (Kleppmann's fencing tokens, Chubby's sequencers).

Here the storage is a SQLite file, and the check and the write are one transaction::

    corral-worker run --handler exec \\
        --exec "python docs/examples/fenced_writer.py --db /var/lib/recorder.db --every 1"

Each task appends a row every ``--every`` seconds. A write with a token lower than the
highest one seen for the task is refused: the task logs why and exits with status 3 (corral
reports it as failed, and it is no longer this worker's to run anyway). ``--once`` writes a
single row and exits: 0 written, 3 fenced off.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import sys
import time

FENCED = 3


class Fenced(Exception):
    """A newer owner of the task has written: this one must stop."""


class FencedStore:
    """Rows per task, each write checked against the highest token seen for that task."""

    def __init__(self, path: str) -> None:
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None)
        self.db.executescript(
            "CREATE TABLE IF NOT EXISTS fence (task TEXT PRIMARY KEY, token INTEGER NOT NULL);"
            "CREATE TABLE IF NOT EXISTS rows (task TEXT, token INTEGER, value TEXT);")

    def write(self, task: str, token: int, value: str) -> None:
        """Append ``value`` for ``task`` unless a higher token has written; else `Fenced`."""
        self.db.execute("BEGIN IMMEDIATE")  # one writer at a time: check and write together
        try:
            row = self.db.execute("SELECT token FROM fence WHERE task = ?", (task,)).fetchone()
            if row is not None and token < row[0]:
                raise Fenced(f"task {task}: token {token} is older than {row[0]}")
            self.db.execute("INSERT INTO fence VALUES (?, ?) ON CONFLICT(task) DO UPDATE "
                            "SET token = excluded.token", (task, token))
            self.db.execute("INSERT INTO rows VALUES (?, ?, ?)", (task, token, value))
            self.db.execute("COMMIT")
        except BaseException:
            self.db.execute("ROLLBACK")
            raise


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db", required=True, help="the SQLite file (created if missing)")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between writes")
    ap.add_argument("--once", action="store_true", help="write one row and exit")
    args = ap.parse_args(argv)
    task, token = os.environ["CORRAL_TASK"], int(os.environ["CORRAL_FENCING_TOKEN"])
    store = FencedStore(args.db)
    n = 0
    while True:
        try:
            store.write(task, token, f"sample {n} at {time.time():.3f}")
        except Fenced as exc:
            print(f"fenced_writer: {exc}: a newer owner has the task; stopping", file=sys.stderr)
            return FENCED
        n += 1
        if args.once:
            return 0
        time.sleep(args.every)


if __name__ == "__main__":
    sys.exit(main())
