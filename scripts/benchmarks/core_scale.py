"""scripts/bench core-scale [-o json] [--workers 100000]: the supervisor's core alone, no sockets.

What one supervisor costs at a size this 2-core VM cannot emulate over sockets
(`scripts/bench scale` needs the emulated workers' CPU too): the real `SupervisorCore`,
driven in-process with the real messages, at its defaults, by N workers with 10 tasks each.

- ``join_us``: per first report (a worker joining during the warm-up);
- ``rebuild_s``: the rebuild that ends the warm-up (N workers, 10 N tasks placed, every
  worker sent its reset), all its slices; ``rebuild_slice_max_s``: the longest slice — the
  longest the supervisor's loop does not read reports then;
- ``changed_report_us``: per report of a worker that just applied its set (it runs what it
  was given): read in full, judged, and settled;
- ``settled_report_us``: per report of a settled worker (the fast path, with the lease
  renewals it answers), in random order over the fleet, so per-worker objects are cache misses
  as at fleet scale; ``cpu_share_at_default`` = that × N ÷ (lease ÷ 2);
- ``rss_mb``: the process's resident memory at the end (the core's state and this script's
  N status messages).
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import time
from typing import Any

from corral.common.wire.codec import encode, glance_status
from corral.common.wire.protocol import Instructions, Renewal, Status
from corral.common.wire.tasklist import TaskEntry
from corral.supervisor.config import SupervisorConfig
from corral.supervisor.core import SupervisorCore
from corral.supervisor.events import (
    Continue,
    Fetch,
    RawReport,
    Report,
    Send,
    TasksFetched,
)

TASKS_PER_WORKER = 10
LEASE = 10.0


def measure(workers: int, reports: int, seed: int) -> dict[str, Any]:
    cfg = SupervisorConfig(tasks="file:unused", state_file="/nonexistent",
                           expect_workers=workers)
    now = 0.0
    core = SupervisorCore(cfg, 1, now)
    ids = [f"worker-{i:06d}" for i in range(workers)]
    idents = {w: f"{w}@{i:x}".encode() for i, w in enumerate(ids)}
    seqs = dict.fromkeys(ids, 1)
    fetches: list[Fetch] = []
    t0 = time.perf_counter()
    for w in ids:
        now += 1e-5
        for a in core.handle(Report(idents[w], Status(w, 1, 1, now, TASKS_PER_WORKER, {})),
                             now):
            if isinstance(a, Fetch):
                fetches.append(a)
    join_us = (time.perf_counter() - t0) / workers * 1e6
    assert fetches, "the warm-up did not end with every worker reported"
    tasks = {f"t{i:07d}": TaskEntry(1.0) for i in range(workers * TASKS_PER_WORKER)}
    # The rebuild runs in slices (supervisor/rebuild.py), one per turn of the daemon's loop;
    # here the turns follow each other with no reports in between.
    actions: list[Any] = []
    slice_max = 0.0
    t0 = time.perf_counter()
    event: Any = TasksFetched(tasks, None, True)
    while True:
        s0 = time.perf_counter()
        actions.extend(core.handle(event, now))
        slice_max = max(slice_max, time.perf_counter() - s0)
        if core.rebuilding is None:
            break
        event = Continue()
    rebuild_s = time.perf_counter() - t0
    # Every worker applies its set (parts assembled) and runs what it was given.
    given: dict[bytes, dict[str, int]] = {}
    applied: dict[bytes, tuple[int, int]] = {}
    for a in actions:
        if isinstance(a, Send) and isinstance(a.message, Instructions | Renewal):
            msg = a.message
            if isinstance(msg, Instructions):
                given.setdefault(a.identity, {}).update(msg.tokens)
            applied[a.identity] = (msg.epoch, msg.seq)
    statuses = {}
    first = []
    for w in ids:
        ident = idents[w]
        seqs[w] += 1
        statuses[w] = Status(w, 1, seqs[w], now, TASKS_PER_WORKER, given.get(ident, {}),
                             applied=applied.get(ident, (0, 0)))
        first.append((ident, encode(statuses[w])))
    t0 = time.perf_counter()
    for ident, frame in first:  # the report of a set applied: read in full, and settles it
        now += 1e-5
        core.handle(RawReport(ident, glance_status(frame), frame), now)
    changed_us = (time.perf_counter() - t0) / workers * 1e6
    del first
    rng = random.Random(seed)
    order = [rng.choice(ids) for _ in range(reports)]
    step = (LEASE / 2) / workers  # the fleet's reports spread over one interval
    frames = []  # encoded before the clock starts: the workers' work, not the supervisor's
    for w in order:
        now += step
        seqs[w] += 1
        st = statuses[w]
        frames.append((idents[w], encode(Status(w, 1, seqs[w], now, st.max_load, st.running,
                                                applied=st.applied)), now))
    events0 = core.counters.assignment_events
    t0 = time.perf_counter()
    for ident, frame, at in frames:  # as the daemon hands reports over: maps still encoded
        core.handle(RawReport(ident, glance_status(frame), frame), at)
    settled_us = (time.perf_counter() - t0) / reports * 1e6
    # (the glance decode is part of that figure; receiving from the socket is not)
    return {
        "workers": workers, "tasks": len(tasks), "join_us": round(join_us, 1),
        "rebuild_s": round(rebuild_s, 3), "rebuild_slice_max_s": round(slice_max, 3),
        "changed_report_us": round(changed_us, 1),
        "settled_report_us": round(settled_us, 1),
        "cpu_share_at_default": round(settled_us * 1e-6 * workers / (LEASE / 2), 3),
        "rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        # the measured reports that needed no set with content (settled, as meant)
        "settled_share": round(1 - (core.counters.assignment_events - events0) / reports, 4),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--workers", type=int, default=100_000)
    ap.add_argument("--reports", type=int, default=300_000, help="settled reports measured")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    out = measure(args.workers, args.reports, args.seed)
    if args.output == "json":
        print(json.dumps(out, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:24} {v}")


if __name__ == "__main__":
    main()
