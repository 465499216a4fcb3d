"""scripts/bench tolerance [-o json]: what the rebalance tolerance τ costs and buys — moves,
and where the loads end — at τ = 0 (the default: the documented criterion, on equal workers
loads within one) and τ = 0.05 (the old default).

The pure placement driven as the supervisor drives it: each event, then rebalance passes of
`--move-budget` 20 until one changes nothing. A worker's restart is a drain (its replicas
handed to the others) and a return empty; a zone's failure removes its workers, its return
adds them back empty. Reported per case and τ: the replicas moved (hand-offs and placements
of the event and of the passes), the loads of equal workers at the end (sorted), their
max − min, and for zones how many tasks span every live zone.

* ``restart``: six workers of max load 20, one restarts (replicas 1 and 2, low to full load);
* ``rolling``: the six restart one after another;
* ``zone``: three zones of two workers (max load 20), replicas 2, one zone dies and returns;
* ``fleet``: 100 workers of max loads 50–150, 4,000 tasks × 2: one joins, one leaves.
"""

from __future__ import annotations

import argparse
import json
import random
from typing import Any

from corral.common.placement import Mode, Placement

TOLERANCES = (0.0, 0.05)
BUDGET = 20


def converge(p: Placement, tol: float) -> int:
    moved = 0
    while True:
        diff, _ = p.rebalance(tol, BUDGET)
        if not diff:
            return moved
        moved += diff.moved()


def restart(p: Placement, w: str, tol: float) -> int:
    """Drain ``w`` (its replicas go elsewhere), it restarts empty, the passes follow."""
    cap, zone = p.view.max_load(w), p.view.zone(w)
    p.upsert_worker(w, cap, Mode.HOLD)
    for t in list(p.view.tasks_of(w)):
        p.unassign(t, w)
    moved = p.place().moved()
    p.remove_worker(w)
    p.upsert_worker(w, cap, zone=zone)
    return moved + p.place().moved() + converge(p, tol)


def loads(p: Placement) -> list[int]:
    return sorted(int(p.view.load(w)) for w in p.view.workers)


def equal_fleet(tasks: int, replicas: int, tol: float, zones: int = 0) -> Placement:
    p = Placement(replicas)
    for i in range(6):
        p.upsert_worker(f"w{i}", 20, zone=f"z{i % zones}" if zones else "")
    p.add_tasks([f"t{i:03d}" for i in range(tasks)])
    p.place()
    converge(p, tol)
    return p


def case_restart(tasks: int, replicas: int, tol: float, everyone: bool) -> dict[str, Any]:
    p = equal_fleet(tasks, replicas, tol)
    moved = sum(restart(p, w, tol) for w in (sorted(p.view.workers) if everyone else ["w0"]))
    got = loads(p)
    return {"moves": moved, "loads": got, "max_minus_min": got[-1] - got[0]}


def case_zone(tasks: int, tol: float) -> dict[str, Any]:
    p = equal_fleet(tasks, 2, tol, zones=3)
    dead = [w for w in sorted(p.view.workers) if p.view.zone(w) == "z0"]
    for w in dead:
        p.remove_worker(w)
    died = p.place().moved() + converge(p, tol)
    for w in dead:
        p.upsert_worker(w, 20, zone="z0")
    back = p.place().moved() + converge(p, tol)
    got = loads(p)
    spanning = sum(1 for t in p.view.tasks
                   if len({p.view.zone(o) for o in p.view.owners(t)}) == len(p.view.owners(t)))
    return {"moves_on_death": died, "moves_on_return": back, "loads": got,
            "max_minus_min": got[-1] - got[0],
            "back_in_zone": sum(int(p.view.load(w)) for w in dead),
            "tasks_in_distinct_zones": spanning}


def case_fleet(tol: float) -> dict[str, Any]:
    rng = random.Random(7)
    p = Placement(2)
    for i in range(100):
        p.upsert_worker(f"w{i:03d}", float(rng.choice((50, 75, 100, 150))))
    p.add_tasks([f"t{i:05d}" for i in range(4000)])
    p.place()
    converge(p, tol)
    p.upsert_worker("joiner", 100)
    joined = p.place().moved() + converge(p, tol)
    p.remove_worker("w050")
    left = p.place().moved() + converge(p, tol)
    utils = [p.view.utilization(w) for w in p.view.workers]
    return {"moves_on_join": joined, "moves_on_leave": left,
            "max_minus_min_utilization": max(utils) - min(utils)}


def measure() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for tol in TOLERANCES:
        row: dict[str, Any] = {}
        for replicas in (1, 2):
            for tasks in (12, 57, 60):
                row[f"restart r{replicas} {tasks} tasks"] = case_restart(tasks, replicas, tol,
                                                                         False)
                row[f"rolling r{replicas} {tasks} tasks"] = case_restart(tasks, replicas, tol,
                                                                         True)
        for tasks in (6, 12, 60):
            row[f"zone {tasks} tasks"] = case_zone(tasks, tol)
        row["fleet"] = case_fleet(tol)
        out[str(tol)] = row
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    out = measure()
    if args.output == "json":
        print(json.dumps(out))
        return
    first = out[str(TOLERANCES[0])]
    print(f"{'case':<26}" + "".join(f"{'τ = ' + str(t):>40}" for t in TOLERANCES))
    for case in first:
        cells = []
        for tol in TOLERANCES:
            r = out[str(tol)][case]
            if "loads" in r and "moves" in r:
                cells.append(f"{r['moves']:>4} moves, loads {r['loads']}")
            elif "loads" in r:
                cells.append(f"{r['moves_on_death']}+{r['moves_on_return']} moves, "
                             f"{r['back_in_zone']} back, {r['loads']}")
            else:
                cells.append(f"join {r['moves_on_join']}, leave {r['moves_on_leave']}, "
                             f"Δu {r['max_minus_min_utilization']:.3f}")
        print(f"{case:<26}" + "".join(f"{c:>40}" for c in cells))


if __name__ == "__main__":
    main()
