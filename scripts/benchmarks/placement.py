"""scripts/bench placement [-o json] [--million]: corral's placement against kafka-python and
uhashring, then corral alone at scale.

On the same generated inputs, in one process: a full placement's seconds, max utilization ÷
mean utilization (utilization = tasks ÷ the worker's max load), tasks moved when one worker
leaves (and how many it had), tasks moved when one worker joins. Then corral alone:

* ``corral_large`` — 100,000 tasks × 1,000 workers × 2 replicas: full placement; one worker's
  death handled incrementally (median over several deaths); a worker of the largest max load
  joining, converged as the supervisor does it (tolerance 0, 20 moves a pass) — the wall time
  of all passes, the moves, and the joiner's capacity-weighted fair share of the replicas;
  a worker leaving (replicas 2): the moves until balanced, and its replicas.
* ``corral_zones`` — the same in 10 zones, 20 % of workers labelled gpu=true and 5 % of tasks
  requiring it: full placement, one whole zone dying (incremental), tasks left zone-degraded,
  and the zone coming back (the repair moves until balanced).
* ``--million``: only `measure_1m` — 1,000,000 tasks × 10,000 workers × 2 replicas: full
  placement, one death, a join to convergence, and the process's peak RSS.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

from _peers import kafka_roundrobin, kafka_sticky, uhashring_assign, uhashring_ring

from corral.common.placement import LEAST_UTILIZED, PROPORTIONAL, Placement, TaskShape

MAX_LOADS = (50, 75, 100, 150)


def fleet(n: int, seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    return {f"w{i:04d}": float(rng.choice(MAX_LOADS)) for i in range(n)}


def max_over_mean(owner_lists: dict[str, list[str]], caps: dict[str, float]) -> float:
    load = dict.fromkeys(caps, 0.0)
    for owners in owner_lists.values():
        for w in owners:
            load[w] += 1
    utils = [load[w] / caps[w] for w in caps]
    return max(utils) / statistics.fmean(utils)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    gc.collect()
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def run_corral(tasks: list[str], caps: dict[str, float], strategy: str) -> dict[str, Any]:
    def build() -> Placement:
        p = Placement(1, strategy)
        for w, c in caps.items():
            p.upsert_worker(w, c)
        p.add_tasks(tasks)
        p.place()
        return p

    p, full = timed(build)
    mom = max_over_mean(p.view.assignment(), caps)
    leaver = sorted(caps)[len(caps) // 2]
    departed = len(p.view.tasks_of(leaver))
    p.remove_worker(leaver)
    moved_leave = p.place().moved()
    p2 = build()
    p2.upsert_worker("joiner", statistics.median(caps.values()))
    _, moves = p2.rebalance(tolerance=0.0, budget=len(tasks))
    return {"full_s": full, "max_over_mean": mom, "moved_on_leave": moved_leave,
            "departed_tasks": departed, "moved_on_join": len(moves)}


def run_peer(
    assign: Callable[[list[str], dict[str, float], dict[str, str] | None], dict[str, str]],
    tasks: list[str], caps: dict[str, float],
) -> dict[str, Any]:
    before, full = timed(lambda: assign(tasks, caps, None))
    mom = max_over_mean({t: [w] for t, w in before.items()}, caps)
    leaver = sorted(caps)[len(caps) // 2]
    departed = sum(1 for w in before.values() if w == leaver)
    rest = {w: c for w, c in caps.items() if w != leaver}
    after = assign(tasks, rest, before)
    moved_leave = sum(1 for t in tasks if after[t] != before[t])
    joined = assign(tasks, {**caps, "joiner": statistics.median(caps.values())}, before)
    moved_join = sum(1 for t in tasks if joined[t] != before[t])
    return {"full_s": full, "max_over_mean": mom, "moved_on_leave": moved_leave,
            "departed_tasks": departed, "moved_on_join": moved_join}


def peers() -> dict[str, Callable[..., dict[str, str]]]:
    def rr(tasks: list[str], caps: dict[str, float], prev: Any) -> dict[str, str]:
        return kafka_roundrobin(tasks, sorted(caps))

    def sticky(tasks: list[str], caps: dict[str, float], prev: Any) -> dict[str, str]:
        return kafka_sticky(tasks, sorted(caps), prev)

    def ring(tasks: list[str], caps: dict[str, float], prev: Any) -> dict[str, str]:
        return uhashring_assign(uhashring_ring(caps), tasks)

    return {"kafka_roundrobin": rr, "kafka_sticky": sticky, "uhashring": ring}


MAX_LARGE = (200, 300, 400, 600)


def large_fleet(nworkers: int, rng: random.Random) -> dict[str, float]:
    return {f"w{i:04d}": float(rng.choice(MAX_LARGE)) for i in range(nworkers)}


def converge(p: Placement, budget: int = 20) -> tuple[int, int]:
    """Rebalance passes until nothing changes, as the supervisor runs them: (moves, passes)."""
    moves = passes = 0
    while True:
        diff, ms = p.rebalance(0.0, budget)
        passes += 1
        if not diff:
            return moves, passes
        moves += len(ms)


def deaths(p: Placement, victims: list[str]) -> list[float]:
    """Each death handled incrementally. One collection before the series, not before each:
    a full collection untracks the owners dict (all its tuples are untracked by then), the
    next new owner tuple re-tracks it into the youngest generation, and the next young
    collection walks it once (5 ms at 100k tasks) — a cost a supervisor pays once after a
    rare full collection (or never, with gc.freeze() after warm-up), not per death. The
    first death of the series pays it: `incremental_max_s` shows it."""
    times = []
    gc.collect()
    for victim in victims:
        t = time.perf_counter()
        p.remove_worker(victim)
        diff = p.place()
        times.append(time.perf_counter() - t)
        assert not p.view.pending() and diff.moved() > 0
    return times


def join(p: Placement) -> dict[str, Any]:
    """A worker of the largest max load joins; all passes to the fixed point, timed."""
    big = max(p.view.max_load(w) for w in p.view.workers)
    p.upsert_worker("joiner", big)
    placed = sum(len(p.view.owners(t)) for t in p.view.tasks)
    fair = placed * big / sum(p.view.max_load(w) for w in p.view.workers)
    (moves, passes), took = timed(lambda: converge(p))
    assert p.is_balanced(0.0)
    return {"join_converge_s": took, "join_moves": moves, "join_passes": passes,
            "join_ideal_moves": int(fair + 0.5), "join_fair_share": fair}


def run_large(ntasks: int, nworkers: int, replicas: int, deaths_n: int, seed: int
              ) -> dict[str, Any]:
    rng = random.Random(seed)
    caps = large_fleet(nworkers, rng)
    p = Placement(replicas, LEAST_UTILIZED)
    for w, c in caps.items():
        p.upsert_worker(w, c)
    p.add_tasks([f"task-{i:06d}" for i in range(ntasks)])
    _, full = timed(p.place)
    times = deaths(p, rng.sample(sorted(caps), deaths_n))
    out = {"tasks": ntasks, "workers": nworkers, "replicas": replicas, "full_s": full,
           "incremental_s": statistics.median(times), "incremental_max_s": max(times),
           "deaths_measured": deaths_n}
    converge(p)  # the deaths left it balanced already; nothing to do here
    out.update(join(p))
    leaver = sorted(p.view.workers)[len(p.view.workers) // 3]
    departed = len(p.view.tasks_of(leaver))
    p.remove_worker(leaver)
    placed = p.place().moved()
    moves, _ = converge(p)
    out.update({"leave_moves_r2": placed + moves, "leave_departed_r2": departed})
    return out


def run_zones(ntasks: int, nworkers: int, zones: int, seed: int) -> dict[str, Any]:
    """10 zones; every 5th worker has gpu=true, every 20th task requires it."""
    rng = random.Random(seed)
    caps = large_fleet(nworkers, rng)
    p = Placement(2, LEAST_UTILIZED)
    gpu = {"gpu": "true"}
    for i, (w, c) in enumerate(caps.items()):
        p.upsert_worker(w, c, zone=f"zone-{i % zones}", labels=gpu if i % 5 == 0 else {})
    p.add_tasks({f"task-{i:06d}": TaskShape(require=gpu) if i % 20 == 0 else 1.0
                 for i in range(ntasks)})
    _, full = timed(p.place)
    degraded_full = p.view.zone_degraded()
    dead = [w for w in caps if p.view.zone(w) == "zone-3"]
    gone = {w: p.view.labels(w) for w in dead}

    def zone_death() -> None:
        for w in dead:
            p.remove_worker(w)
        p.place()

    _, death = timed(zone_death)
    out = {"tasks": ntasks, "workers": nworkers, "zones": zones, "replicas": 2,
           "full_s": full, "degraded_after_full": degraded_full, "zone_death_s": death,
           "zone_workers_lost": len(dead), "degraded_after_zone_death": p.view.zone_degraded(),
           "pending_after_zone_death": len(p.view.pending())}
    for w, labels in gone.items():
        p.upsert_worker(w, caps[w], zone="zone-3", labels=labels)
    (moves, _), took = timed(lambda: converge(p))
    out.update({"zone_return_converge_s": took, "zone_return_moves": moves,
                "degraded_after_zone_return": p.view.zone_degraded()})
    return out


def measure_1m(seed: int = 7) -> dict[str, Any]:
    """1,000,000 tasks × 10,000 workers × 2 replicas: full placement, one worker's death
    (median of 3), a join of the largest max load converged, and the process's peak RSS
    (run it alone in a process for a clean figure: `scripts/bench placement --million`)."""
    rng = random.Random(seed)
    caps = large_fleet(10_000, rng)
    p = Placement(2, LEAST_UTILIZED)
    for w, c in caps.items():
        p.upsert_worker(w, c)
    ids = [f"task-{i:07d}" for i in range(1_000_000)]
    _, add = timed(lambda: p.add_tasks(ids))
    _, full = timed(p.place)
    times = deaths(p, rng.sample(sorted(caps), 3))
    joined = join(p)
    return {"tasks": 1_000_000, "workers": 10_000, "replicas": 2, "add_s": add, "full_s": full,
            "death_s": statistics.median(times), "join_converge_s": joined["join_converge_s"],
            "join_moves": joined["join_moves"], "join_ideal_moves": joined["join_ideal_moves"],
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--large-tasks", type=int, default=100_000)
    ap.add_argument("--large-workers", type=int, default=1_000)
    ap.add_argument("--deaths", type=int, default=9, help="deaths measured in the large run")
    ap.add_argument("--no-sticky", action="store_true", help="skip kafka Sticky (slow)")
    ap.add_argument("--million", action="store_true",
                    help="only the 1M tasks x 10k workers measurement (measure_1m)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    if args.million:
        m = measure_1m(args.seed)
        if args.output == "json":
            print(json.dumps({"placement_1m": m}, indent=2))
        else:
            print(f"corral at 1,000,000 tasks x 10,000 workers x 2: full {m['full_s']:.2f} s "
                  f"(add_tasks {m['add_s']:.2f} s); one death {m['death_s'] * 1e3:.1f} ms = "
                  f"{m['death_s'] / m['full_s']:.2%}; a join converged in "
                  f"{m['join_converge_s']:.3f} s ({m['join_moves']} moves, fair share "
                  f"{m['join_ideal_moves']}); peak RSS {m['rss_mb']:.0f} MB")
        return

    caps = fleet(args.workers, args.seed)
    tasks = [f"t{i:05d}" for i in range(args.tasks)]
    result: dict[str, Any] = {
        "corral": run_corral(tasks, caps, LEAST_UTILIZED),
        "corral_proportional": run_corral(tasks, caps, PROPORTIONAL),
    }
    for name, fn in peers().items():
        if name == "kafka_sticky" and args.no_sticky:
            continue
        result[name] = run_peer(fn, tasks, caps)
    result["corral_large"] = run_large(args.large_tasks, args.large_workers, 2, args.deaths,
                                       args.seed)
    result["corral_zones"] = run_zones(args.large_tasks, args.large_workers, 10, args.seed)
    result["inputs"] = {"tasks": args.tasks, "workers": args.workers, "max_loads": MAX_LOADS,
                        "replicas": 1}
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"{args.tasks} tasks x {args.workers} workers (max loads {MAX_LOADS}), replicas 1\n")
    print(f"{'peer':<22}{'full s':>10}{'max/mean':>10}{'moved on leave':>16}{'departed':>10}"
          f"{'moved on join':>15}")
    for name, r in result.items():
        if name in ("corral_large", "corral_zones", "inputs"):
            continue
        print(f"{name:<22}{r['full_s']:>10.4f}{r['max_over_mean']:>10.3f}"
              f"{r['moved_on_leave']:>16}{r['departed_tasks']:>10}{r['moved_on_join']:>15}")
    lg = result["corral_large"]
    print(f"\ncorral at {lg['tasks']} tasks x {lg['workers']} workers x replicas "
          f"{lg['replicas']}: full {lg['full_s']:.3f} s; one death "
          f"{lg['incremental_s'] * 1e3:.2f} ms (median of {lg['deaths_measured']}, max "
          f"{lg['incremental_max_s'] * 1e3:.2f} ms) = {lg['incremental_s'] / lg['full_s']:.2%}"
          " of a full placement")
    print(f"  a worker of max load {max(MAX_LARGE)} joins: {lg['join_moves']} moves (fair share "
          f"{lg['join_fair_share']:.1f}) in {lg['join_passes']} passes of 20, "
          f"{lg['join_converge_s'] * 1e3:.1f} ms = {lg['join_converge_s'] / lg['full_s']:.1%} of a "
          f"full placement; a leave: {lg['leave_moves_r2']} moves for "
          f"{lg['leave_departed_r2']} departed replicas")
    zn = result["corral_zones"]
    print(f"\nin {zn['zones']} zones (gpu on 20 % of workers, required by 5 % of tasks): full "
          f"{zn['full_s']:.3f} s = {zn['full_s'] / lg['full_s']:.2f}x zone-less; a zone of "
          f"{zn['zone_workers_lost']} workers dies: {zn['zone_death_s'] * 1e3:.1f} ms = "
          f"{zn['zone_death_s'] / zn['full_s']:.1%} of a full placement, "
          f"{zn['degraded_after_zone_death']} tasks zone-degraded, "
          f"{zn['pending_after_zone_death']} pending; it comes back: "
          f"{zn['zone_return_moves']} repair moves in {zn['zone_return_converge_s']:.3f} s, "
          f"{zn['degraded_after_zone_return']} degraded")
    if "kafka_sticky" in result:
        print(f"corral vs kafka Sticky (full placement): "
              f"{result['kafka_sticky']['full_s'] / result['corral']['full_s']:.0f}x faster")


if __name__ == "__main__":
    main()
