"""scripts/bench placement [-o json]: corral's placement against kafka-python and uhashring.

On the same generated inputs, in one process: a full placement's seconds, max utilization ÷
mean utilization (utilization = tasks ÷ the worker's max load), tasks moved when one worker
leaves (and how many it had), tasks moved when one worker joins. Then corral alone at 100,000
tasks × 1,000 workers × 2 replicas: full placement, and one worker's death handled
incrementally (median over several deaths, each a different worker).
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Any

from _peers import kafka_roundrobin, kafka_sticky, uhashring_assign, uhashring_ring

from corral.common.placement import LEAST_UTILIZED, PROPORTIONAL, Placement

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
    mom = max_over_mean(p.assignment(), caps)
    leaver = sorted(caps)[len(caps) // 2]
    departed = len(p.tasks_of(leaver))
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


def run_large(ntasks: int, nworkers: int, replicas: int, deaths: int, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    caps = {f"w{i:04d}": float(rng.choice((200, 300, 400, 600))) for i in range(nworkers)}
    p = Placement(replicas, LEAST_UTILIZED)
    for w, c in caps.items():
        p.upsert_worker(w, c)
    p.add_tasks([f"task-{i:06d}" for i in range(ntasks)])
    _, full = timed(p.place)
    times = []
    for victim in rng.sample(sorted(caps), deaths):
        gc.collect()
        t = time.perf_counter()
        p.remove_worker(victim)
        diff = p.place()
        times.append(time.perf_counter() - t)
        assert not p.pending() and diff.moved() > 0
    return {"tasks": ntasks, "workers": nworkers, "replicas": replicas, "full_s": full,
            "incremental_s": statistics.median(times), "incremental_max_s": max(times),
            "deaths_measured": deaths}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["table", "json"], default="table")
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--workers", type=int, default=200)
    ap.add_argument("--large-tasks", type=int, default=100_000)
    ap.add_argument("--large-workers", type=int, default=1_000)
    ap.add_argument("--deaths", type=int, default=9, help="deaths measured in the large run")
    ap.add_argument("--no-sticky", action="store_true", help="skip kafka Sticky (slow)")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

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
    result["inputs"] = {"tasks": args.tasks, "workers": args.workers, "max_loads": MAX_LOADS,
                        "replicas": 1}
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"{args.tasks} tasks x {args.workers} workers (max loads {MAX_LOADS}), replicas 1\n")
    print(f"{'peer':<22}{'full s':>10}{'max/mean':>10}{'moved on leave':>16}{'departed':>10}"
          f"{'moved on join':>15}")
    for name, r in result.items():
        if name in ("corral_large", "inputs"):
            continue
        print(f"{name:<22}{r['full_s']:>10.4f}{r['max_over_mean']:>10.3f}"
              f"{r['moved_on_leave']:>16}{r['departed_tasks']:>10}{r['moved_on_join']:>15}")
    lg = result["corral_large"]
    print(f"\ncorral at {lg['tasks']} tasks x {lg['workers']} workers x replicas "
          f"{lg['replicas']}: full {lg['full_s']:.3f} s; one death "
          f"{lg['incremental_s'] * 1e3:.2f} ms (median of {lg['deaths_measured']}, max "
          f"{lg['incremental_max_s'] * 1e3:.2f} ms) = {lg['incremental_s'] / lg['full_s']:.2%}"
          " of a full placement")
    if "kafka_sticky" in result:
        print(f"corral vs kafka Sticky (full placement): "
              f"{result['kafka_sticky']['full_s'] / result['corral']['full_s']:.0f}x faster")


if __name__ == "__main__":
    main()
