"""scripts/bench settle [-o json]: many workers at once — a fleet back after every lease
lapsed — with the settle window (``--settle 1``, the default) and without (``--settle 0``).

The real `SupervisorCore` on a fake clock against the real worker state machine
(tests/component/modelfleet.py): the fleet runs its tasks, falls silent past lease + margin
(the supervisor takes every worker for gone, each stops its tasks when its own lease lapses),
then comes back, one report at a time at the given offsets. Reported: the replicas the first
worker back holds once everything is placed, the most any worker holds then, the rebalance
moves that follow until the placement is balanced, and the late workers' fair share of the
placed replicas (a join takes about its fair share, at most one more).

* ``6 × 10, 12 tasks``: the issue's case, six workers of max load 10 back 0.1 s apart;
* ``40 mixed, 150 × 2``: forty workers of max loads 5–20, 150 tasks × 2 replicas, thirty-five
  back within 0.9 s and five 2–4 s later.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from corral.supervisor.events import Report
from tests.component.modelfleet import Harness, ModelWorker, config


def run(settle: float, caps: list[int], tasks: int, replicas: int,
        offsets: list[float]) -> dict[str, Any]:
    h = Harness(config(settle=settle, replicas=replicas),
                {f"t{i:04d}": 1.0 for i in range(tasks)})
    workers = [ModelWorker(f"w{i:02d}", max_load=c) for i, c in enumerate(caps)]
    for w in workers:
        h.add(w)
    h.until(h.running)
    h.until(lambda: h.core.rebalancing.balanced, limit=120.0)
    gone = tuple(workers)
    h.until(lambda: all(not h.core.registry.get(w.id).active for w in workers)  # type: ignore[union-attr]
            and not any(w.running for w in workers), silent=gone)
    moved = h.core.counters.rebalance_moves
    start, back = h.now, set()
    order = sorted(zip(offsets, workers, strict=True), key=lambda a: a[0])
    for offset, w in order:
        while h.now + 0.1 <= start + offset:
            h.step(0.1, silent=tuple(x for _, x in order if x.id not in back))
        h.now = max(h.now, start + offset)
        h.run(h.core.handle(Report(w.identity, w.force_report(h.now)), h.now))
        back.add(w.id)
    view = h.core.assigner.view
    wanted = min(tasks * replicas, sum(caps))
    h.until(lambda: sum(len(view.owners(t)) for t in view.tasks) >= wanted or h.now > start + 20,
            limit=30.0)
    first = order[0][1].id
    held = {w.id: len(view.tasks_of(w.id)) for w in workers}
    h.until(lambda: h.core.rebalancing.balanced and not h.core.assigner.handoffs.pinned,
            limit=120.0)
    late = [w for off, w in order if off > 1.0]
    placed = sum(len(view.owners(t)) for t in view.tasks)
    fair = sum(placed * w.max_load / sum(caps) for w in late)
    return {"first_worker_holds": held[first], "most_held": max(held.values()),
            "moves_after": h.core.counters.rebalance_moves - moved,
            "late_workers": len(late), "late_fair_share": round(fair, 1)}


def cases() -> dict[str, tuple[list[int], int, int, list[float]]]:
    rng = random.Random(3)
    caps = [rng.choice([5, 8, 13, 20]) for _ in range(40)]
    offsets = [rng.uniform(0.0, 0.9) for _ in range(35)] + [rng.uniform(2.0, 4.0)
                                                            for _ in range(5)]
    return {"6 x 10, 12 tasks": ([10] * 6, 12, 1, [0.1 * i for i in range(6)]),
            "40 mixed, 150 x 2": (caps, 150, 2, offsets)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    out = {name: {str(settle): run(settle, *case) for settle in (0.0, 1.0)}
           for name, case in cases().items()}
    if args.output == "json":
        print(json.dumps(out))
        return
    print(f"{'case':<20} {'--settle':>8} {'first holds':>11} {'most':>5} {'moves after':>11} "
          f"{'late (fair share)':>18}")
    for name, rows in out.items():
        for settle, r in rows.items():
            print(f"{name:<20} {settle:>8} {r['first_worker_holds']:>11} {r['most_held']:>5} "
                  f"{r['moves_after']:>11} {r['late_workers']:>6} ({r['late_fair_share']})")


if __name__ == "__main__":
    main()
