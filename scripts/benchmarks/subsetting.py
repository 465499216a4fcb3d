"""scripts/bench subsetting [-o text|json|markdown]: each subsetting algorithm's balance,
churn and per-client loss on resizes (``-o markdown`` prints docs/balancer.md's comparison
table).

300 clients. For each case the backends go from B to B2 one at a time (a scale-up appends the
next name, a scale-down drops the last); every algorithm reports: connections per backend
before the first step (min–max, and max − min, the spread), the cumulative churn of the steps
(the fraction of client→backend connections that changed, summed) next to its minimum (the
sum of the per-step ideals: the new backend's fair share), the most connections one client
lost in a step, and — before the first step — the most one client loses when any one backend
leaves (each in turn) or one joins (`corral.sim.resize_sim`). ``steady`` reads backend indexes
from the list's order, so a backend leaving it leaves its place empty; it runs with the
number of clients given (as a service knows its own size) and, on a row of its own, without.
Alongside: milliseconds to subset all 300 clients at B.

The cases: the issue's thirty one-backend scale-ups (300 → 330, K = 30); one backend more at
K = 10 % and 30 % of 300 and of 10; and the issue's uneven fleet (211 → 212, K = 13).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from corral.common.balancer.subsetting import ALGORITHMS, STEADY, assign, churn, ideal_churn
from corral.sim.cli import resize_table
from corral.sim.resize_sim import backend_names, compare_resizes

CLIENTS = 300
CASES = ((300, 330, 30), (300, 301, 30), (300, 301, 90), (211, 212, 13), (10, 11, 1),
         (10, 11, 3))  # (B, B2, K)  # fmt: skip


def milliseconds(algorithm: str, backends: int, k: int) -> float:
    population = CLIENTS if algorithm == STEADY else None
    start = time.perf_counter()
    assign(algorithm, backend_names(backends), range(CLIENTS), k, population=population)
    return 1000 * (time.perf_counter() - start)


def shifted_indexes() -> dict[str, float]:
    """What steady costs when its indexes are not stable: 300 names in sorted order, then a
    name that sorts into the middle (every later index shifts), against the ideal."""
    names = backend_names(300)
    before = assign(STEADY, names, range(CLIENTS), 30, population=CLIENTS)
    after = assign(STEADY, sorted([*names, "b0149x"]), range(CLIENTS), 30, population=CLIENTS)
    return {"churn": churn(before, after), "ideal": ideal_churn(300, 301)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["text", "json", "markdown"], default="text")
    args = ap.parse_args()
    result: dict[str, Any] = {"clients": CLIENTS, "cases": []}
    for b, b2, k in CASES:
        rows = compare_resizes(CLIENTS, b, b2, k)
        result["cases"].append({
            "backends": b, "resize_to": b2, "subset_size": k,
            "variants": [r.to_json() for r in rows],
            "ms": {a: milliseconds(a, b, k) for a in ALGORITHMS},
        })  # fmt: skip
        if args.output == "text":
            print("\n".join(resize_table(rows, CLIENTS, b, b2, k)[:-1]))
            print("ms to subset all clients: " + ", ".join(
                f"{a} {ms:.1f}" for a, ms in result["cases"][-1]["ms"].items()) + "\n")
    result["shifted_indexes"] = shifted = shifted_indexes()
    note = (f"steady with indexes that shift (300 sorted names, one more sorting into the "
            f"middle): churn {shifted['churn']:.2%}, ideal {shifted['ideal']:.2%}")
    if args.output == "json":
        print(json.dumps(result))
    elif args.output == "markdown":
        print("\n".join(markdown(result["cases"])) + f"\n\n{note}")
    else:
        print(note)
        print("lost/step: the most connections one client lost in a step; lost/any: when any "
              "one backend left (each in turn) or one joined, before the first step")


def markdown(cases: list[dict[str, Any]]) -> list[str]:
    """The comparison table of docs/balancer.md, one row per case and variant."""
    out = ["| backends (→ B2), K | variant | connections min–max | spread | churn | "
           "÷ minimum | lost / step | lost / any change |",
           "|---|---|---:|---:|---:|---:|---:|---:|"]
    for case in cases:
        size = f"{case['backends']} → {case['resize_to']}, {case['subset_size']}"
        for v in case["variants"]:
            out.append(f"| {size} | {v['variant']} | {v['min']}–{v['max']} | {v['spread']} | "
                       f"{v['churn']:.2%} | {v['churn_over_minimum']:.2f} | "
                       f"{v['worst_step_loss']} | {v['worst_single_loss']} |")
    return out


if __name__ == "__main__":
    main()
