"""scripts/bench pickers [-o json] [--repeat N]: nanoseconds per pick, each picker, 10/100/1000.

What is timed is the picker's whole share of a request in a steady state: `pick()` (which counts
the request as started) plus `release()` of a request picked 2n picks earlier, so that about
two requests per backend are in flight and the load-aware pickers (llrr, p2c) move backends
between load levels as they would in use. The loop's own bookkeeping (the same loop without
the two calls) is subtracted; the calls themselves are counted. wrr runs with random weights
in [1, 3]. Each figure is the median of --repeat runs; the runs of the pickers and sizes are
interleaved, so that a burst of load from elsewhere on the machine falls on all of them alike
(machines are noisy: compare within a run, not across runs).

Time is this process's CPU time by default (``--clock cpu``): on a machine shared with other
work, wall-clock time also counts the moments the process waited for a core, which say nothing
about the picker. ``--clock wall`` measures wall-clock time instead, as on a quiet machine the
two agree.

The text report adds, for reference, the cost of a whole `Balancer.acquire` + `release` (the
picker plus health, flow control, error expiry, statistics) at 100 backends.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time
from collections.abc import Callable
from typing import Protocol

from corral.common.balancer import Balancer, BalancerConfig
from corral.common.balancer.pickers import make_picker

PICKERS = ("rr", "llrr", "llrr-naive", "wrr", "p2c", "random")
SIZES = (10, 100, 1000)


class _Pickish(Protocol):
    def pick(self) -> int: ...
    def release(self, i: int) -> None: ...


Clock = Callable[[], float]
CLOCKS: dict[str, Clock] = {"cpu": time.process_time, "wall": time.perf_counter}


def _bare_loop(n: int, picks: int, clock: Clock) -> float:
    """The loop's own bookkeeping, without the two calls (which are the picker's cost)."""
    window = 2 * n
    ring = [0] * window
    k = 0
    start = clock()
    for _ in range(picks):
        ring[k] = ring[k]
        k += 1
        if k == window:
            k = 0
    return clock() - start


def _loop(picker: _Pickish, n: int, picks: int, clock: Clock) -> float:
    """Seconds for `picks` rounds of release-an-old-request + pick-a-new-one."""
    window = 2 * n
    ring = [picker.pick() for _ in range(window)]
    pick, release = picker.pick, picker.release
    k = 0
    start = clock()
    for _ in range(picks):
        release(ring[k])
        ring[k] = pick()
        k += 1
        if k == window:
            k = 0
    return clock() - start


def ns_per_pick(name: str, n: int, picks: int, r: int, clock: Clock) -> float:
    """One run: nanoseconds per pick + release of picker ``name`` over ``n`` slots."""
    picker = make_picker(name, n, random.Random(r))
    if name == "wrr":
        weights = random.Random(1000 + r)
        picker.set_weights([1 + 2 * weights.random() for _ in range(n)])
    spent = _loop(picker, n, picks, clock) - _bare_loop(n, picks, clock)
    return 1e9 * spent / picks


def table(picks: int, repeat: int, clock: Clock) -> dict[str, dict[str, int]]:
    """The median of ``repeat`` runs per picker and size, the runs interleaved."""
    runs: dict[tuple[str, int], list[float]] = {(p, n): [] for p in PICKERS for n in SIZES}
    for r in range(repeat):
        for name, n in runs:
            runs[name, n].append(ns_per_pick(name, n, picks, r, clock))
    return {p: {str(n): round(statistics.median(runs[p, n])) for n in SIZES} for p in PICKERS}


def balancer_ns(picker: str, picks: int, repeat: int, clock: Clock) -> float:
    """A whole Balancer.acquire + release at 100 backends (subset of all 100)."""
    runs = []
    backends = [f"b{i}" for i in range(100)]
    for r in range(repeat):
        bal = Balancer(BalancerConfig(picker=picker, subset_size=100, seed=r), backends, 0)
        ring = [bal.acquire(0.0) for _ in range(200)]
        k = 0
        start = clock()
        for i in range(picks):
            now = i * 1e-4
            bal.release(ring[k], now)
            ring[k] = bal.acquire(now)
            k = (k + 1) % 200
        runs.append(1e9 * (clock() - start) / picks)
    return statistics.median(runs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    ap.add_argument("--repeat", type=int, default=7, help="runs per figure; the median is kept")
    ap.add_argument("--picks", type=int, default=100_000, help="picks per run")
    ap.add_argument("--clock", choices=sorted(CLOCKS), default="cpu",
                    help="cpu: this process's CPU time; wall: wall-clock time")
    args = ap.parse_args()
    clock = CLOCKS[args.clock]
    medians = table(args.picks, args.repeat, clock)
    if args.output == "json":
        print(json.dumps({"ns_per_pick": medians}))
        return
    print("ns per pick (pick + release calls, steady state; median of "
          f"{args.repeat} runs of {args.picks} picks)\n")  # fmt: skip
    print(f"{'picker':<12}" + "".join(f"{n:>10}" for n in SIZES))
    for name, row in medians.items():
        print(f"{name:<12}" + "".join(f"{row[str(n)]:>10}" for n in SIZES))
    picks = args.picks // 4
    print("\nwhole Balancer.acquire + release at 100 backends, ns:")
    for name in ("rr", "llrr", "wrr"):
        print(f"{name:<12}{balancer_ns(name, picks, args.repeat, clock):>10.0f}")


if __name__ == "__main__":
    main()
