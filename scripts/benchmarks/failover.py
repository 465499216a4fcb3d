"""scripts/bench failover [-o json]: seconds from a worker's death to its tasks running elsewhere.

A supervisor and 5 workers (log handler, journals) run 200 tasks on loopback. One worker is
killed with SIGKILL; the time until every one of its tasks has been started by another worker
(from the workers' journals, CLOCK_MONOTONIC, shared by all processes here) is the failover
time. Also counted: how many tasks moved, and how many the dead worker had (they must match:
nothing else moves). Target: reassigned_after_s <= lease + margin + one tick + 0.5 s.
"""

from __future__ import annotations

import json
import shutil
import time

from _cluster import Cluster, fleet_parser, median_run, wait_until


def one_run(tasks: int, workers: int, lease: float, margin: float, tick: float,
            report: float) -> dict[str, float]:
    names = [f"worker-{i}" for i in range(workers)]
    c = Cluster([f"task-{i:03d}" for i in range(tasks)])
    try:
        c.start_supervisor(warmup=10, expect_workers=workers, lease=lease, lease_margin=margin,
                           tick=tick, report_interval=report, log_level="warning")
        for name in names:
            c.start_worker(name, max_load=tasks, report_interval=report, log_level="warning")
        wait_until(lambda: len(c.running(names)) == tasks, timeout=60)
        time.sleep(3 * report)  # settled: every worker has reported what it runs
        victim = names[len(names) // 2]
        before = c.running(names)
        lost = {t for t, ws in before.items() if ws == [victim]}
        survivors = [n for n in names if n != victim]
        killed = c.kill(victim)
        wait_until(lambda: lost <= set(c.running(survivors)), timeout=lease + margin + 30)
        starts = c.starts_after(survivors, killed)
        after = c.running(survivors)
        moved = sum(1 for t in before if t not in lost and after.get(t) != before[t])
        return {"reassigned_after_s": max(starts[t] for t in lost) - killed,
                "tasks_moved": len({t for t in starts if t in lost}) + moved,
                "departed_tasks": len(lost)}
    finally:
        c.close()
        shutil.rmtree(c.dir, ignore_errors=True)


def main() -> None:
    ap = fleet_parser(__doc__)
    ap.add_argument("--lease", type=float, default=10.0, help="the supervisor's default")
    ap.add_argument("--margin", type=float, default=2.0, help="the supervisor's default")
    ap.add_argument("--tick", type=float, default=0.5, help="the supervisor's default")
    ap.add_argument("--report-interval", type=float, default=1.0, help="the workers' default")
    args = ap.parse_args()
    runs = [one_run(args.tasks, args.workers, args.lease, args.margin, args.tick,
                    args.report_interval) for _ in range(args.repeat)]
    r = median_run(runs, "reassigned_after_s")
    result = {"lease_s": args.lease, "margin_s": args.margin, "tick_s": args.tick,
              "reassigned_after_s": round(r["reassigned_after_s"], 3),
              "tasks_moved": r["tasks_moved"], "departed_tasks": r["departed_tasks"],
              "runs_s": [round(x["reassigned_after_s"], 3) for x in runs],
              "target_s": args.lease + args.margin + args.tick + 0.5}
    if args.output == "json":
        print(json.dumps(result, indent=2))
        return
    print(f"{args.tasks} tasks, {args.workers} workers; lease {args.lease:g} s, margin "
          f"{args.margin:g} s, tick {args.tick:g} s")
    print(f"  failover (kill -9 -> all its tasks running elsewhere): "
          f"{result['reassigned_after_s']:.2f} s (median of {args.repeat}: {result['runs_s']}; "
          f"target <= {result['target_s']:g} s)")
    print(f"  tasks moved {result['tasks_moved']}, departed worker's tasks "
          f"{result['departed_tasks']}")


if __name__ == "__main__":
    main()
