"""scripts/bench subsetting [-o json]: connection churn of each subsetting algorithm on a resize.

300 clients subset the backends at two subset sizes (10 % and 30 % of the backends); then the
backends go 300 → 301 and 10 → 11 and they subset again. Churn is the fraction of
client→backend connections that changed; "ideal" is the least a balanced algorithm must move
(the new backend's fair share, 1/301 and 1/11). Alongside: the balance before the resize
(max connections per backend ÷ mean) and the milliseconds to subset all 300 clients.

``repeated_resize``: thirty one-backend scale-ups, 300 → 330 backends with K = 30, per
algorithm: the cumulative churn (the sum of the thirty steps' churn) next to its minimum (the
sum of the thirty ideals, ≈ 9.5 %), and the balance before the first step.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from corral.common.balancer.subsetting import (
    ALGORITHMS,
    assign,
    churn,
    connection_counts,
    ideal_churn,
)
from corral.sim.subsetting_sim import simulate_repeated_resize

CLIENTS = 300
RESIZES = ((300, 301), (10, 11))
FRACTIONS = (0.10, 0.30)
REPEATED = (300, 330, 30)  # from, to, K


def names(n: int) -> list[str]:
    return [f"b{i:04d}" for i in range(n)]


def measure(algorithm: str, before: int, after: int, k: int) -> dict[str, float]:
    start = time.perf_counter()
    old = assign(algorithm, names(before), range(CLIENTS), k)
    ms = 1000 * (time.perf_counter() - start)
    new = assign(algorithm, names(after), range(CLIENTS), k)
    counts = connection_counts(old, names(before)).values()
    mean = sum(counts) / len(counts)
    return {
        "churn": churn(old, new),
        "min_over_mean": min(counts) / mean,
        "max_over_mean": max(counts) / mean,
        "ms": ms,
    }


def repeated_resize(algorithm: str) -> dict[str, float]:
    start, end, k = REPEATED
    r = simulate_repeated_resize(algorithm, algorithm, None, CLIENTS, start, k, end - start)
    return {"churn": r.churn, "minimum": r.minimum, "churn_over_minimum": r.churn / r.minimum,
            "min_over_mean": r.min_over_mean, "max_over_mean": r.max_over_mean}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("-o", "--output", choices=["text", "json"], default="text")
    args = ap.parse_args()
    result: dict[str, Any] = {"clients": CLIENTS, "resizes": {}}
    for before, after in RESIZES:
        for fraction in FRACTIONS:
            k = max(1, round(before * fraction))
            row: dict[str, Any] = {"subset_size": k, "ideal": ideal_churn(before, after)}
            row.update({a: measure(a, before, after, k) for a in ALGORITHMS})
            result["resizes"][f"{before}->{after} K={k}"] = row
    start, end, k = REPEATED
    result["repeated_resize"] = {"from": start, "to": end, "subset_size": k,
                                 **{a: repeated_resize(a) for a in ALGORITHMS}}
    if args.output == "json":
        print(json.dumps(result))
        return
    print(f"{CLIENTS} clients; churn = connections changed on the resize\n")
    head = "".join(f"{a:>16}" for a in ALGORITHMS)
    print(f"{'resize':<18}{'ideal':>8}{head}")
    for label, row in result["resizes"].items():
        cells = "".join(f"{row[a]['churn']:>16.2%}" for a in ALGORITHMS)
        print(f"{label:<18}{row['ideal']:>8.2%}{cells}")
    print("\nbalance before the resize: min÷mean – max÷mean of connections per backend\n")
    print(f"{'backends, K':<18}{'':>8}{head}")
    for label, row in result["resizes"].items():
        cells = "".join(
            f"{row[a]['min_over_mean']:>10.2f}–{row[a]['max_over_mean']:<5.2f}" for a in ALGORITHMS
        )
        print(f"{label.split('->')[0] + ', K=' + str(row['subset_size']):<18}{'':>8}{cells}")
    print("\nms to subset all clients\n")
    for label, row in result["resizes"].items():
        cells = "".join(f"{row[a]['ms']:>16.1f}" for a in ALGORITHMS)
        print(f"{label:<18}{'':>8}{cells}")
    rep = result["repeated_resize"]
    print(f"\nrepeated resize: {start} -> {end} one backend at a time, K={k}\n")
    print(f"{'algorithm':<16}{'churn':>10}{'minimum':>10}{'÷ minimum':>11}{'balance':>16}")
    for a in ALGORITHMS:
        r = rep[a]
        print(f"{a:<16}{r['churn']:>10.2%}{r['minimum']:>10.2%}{r['churn_over_minimum']:>11.2f}"
              f"{r['min_over_mean']:>10.2f}–{r['max_over_mean']:<5.2f}")


if __name__ == "__main__":
    main()
