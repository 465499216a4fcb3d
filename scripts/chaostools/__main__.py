"""``scripts/chaos``: a seeded chaos run against a real fleet on loopback, then its verdict.

Exit status: 0 when nothing was violated and no task was lost, 1 otherwise, 2 for bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .harness import Options, run


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="scripts/chaos",
        description="Start a supervisor and workers on loopback, inject a seeded schedule of "
                    "faults (kill -9, SIGSTOP, SIGTERM drains, joins, supervisor kill and "
                    "restart, partitions and delays through a proxy, task-list changes), then "
                    "check from the task journals and corralctl that every task kept its "
                    "replicas, never had more owners than replicas, and was not lost.")
    ap.add_argument("--duration", type=float, default=60.0,
                    help="seconds the run should take, start-up and settling included "
                         "[default: 60]")
    ap.add_argument("--seed", type=int, default=1, help="seeds the fault plan [default: 1]")
    ap.add_argument("--workers", type=int, default=4, help="workers at the start [default: 4]")
    ap.add_argument("--replicas", type=int, default=2, help="replicas per task [default: 2]")
    ap.add_argument("--tasks", type=int, default=0,
                    help="tasks at the start [default: six per worker]")
    ap.add_argument("--handler", choices=("exec", "log"), default="exec",
                    help="what the workers run: exec (a process per task, stopped by the "
                         "lease keeper when a frozen agent's lease lapses) or log (nothing: "
                         "the agent is the task) [default: exec]")
    ap.add_argument("--slack", type=float, default=1.5,
                    help="seconds added to every bound, for a slow machine [default: 1.5]")
    ap.add_argument("--workdir", type=Path, default=None,
                    help="keep journals and logs here [default: a new temporary folder]")
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args(argv)
    if a.workers < a.replicas + 2:
        ap.error("--workers must be at least --replicas + 2 (faults take one down at a time "
                 "and replicas + 1 stay healthy)")
    if a.replicas < 1 or a.duration <= 0 or a.slack < 0 or a.tasks < 0:
        ap.error("--replicas must be >= 1, --duration > 0, --slack and --tasks >= 0")
    try:
        result = run(Options(a.duration, a.seed, a.workers, a.replicas, a.tasks, a.slack,
                             a.workdir, handler=a.handler))
    except ValueError as exc:
        ap.error(str(exc))
    except KeyboardInterrupt:
        print("scripts/chaos: interrupted; every process was stopped", file=sys.stderr)
        return 1
    if a.output == "json":
        print(json.dumps(result, indent=2, sort_keys=True))
    else:
        print(summary(result))
    return 0 if result["ok"] else 1


def summary(r: dict[str, Any]) -> str:
    run_, faults = r["run"], r["faults"]
    lines = [
        f"chaos run: seed {run_['seed']}, {run_['workers']} {run_['handler']} workers, replicas "
        f"{run_['replicas']}, {run_['tasks_at_start']} -> {run_['tasks_at_end']} tasks, "
        f"{run_['fault_phase_s']:.1f} s of faults",
        f"faults injected: {faults['total']} ("
        + ", ".join(f"{k} {v}" for k, v in sorted(faults["by_kind"].items())) + ")",
        f"violations: {len(r['violations'])}    lost tasks: {len(r['lost_tasks'])}",
        f"max uncovered: {r['max_uncovered_s']:.3f} s    double owner: "
        f"{r['double_owner_s']:.3f} s",
        "hand-off overlaps: {count} (longest {max_s:.3f} s)".format(**r["handoff_overlaps"]),
        "zombie wake-ups: {count} (longest {max_s:.3f} s)".format(**r["zombie_overlaps"]),
        "recovery (s)    " + "  ".join(f"{k}: max {v['max_s']:.2f} mean {v['mean_s']:.2f}"
                                       for k, v in r["recovery_by_kind"].items()),
        f"lease losses: {sum(r['lease_losses'].values())}    journals and logs: "
        f"{run_['workdir']}",
    ]
    for v in r["violations"][:20]:
        lines.append(f"  VIOLATION {v['rule']}: task {v['task']} in [{v['window'][0]}, "
                     f"{v['window'][1]}]: {v['detail']}")
    if r["lost_tasks"]:
        lines.append(f"  LOST: {', '.join(r['lost_tasks'])}")
    lines += [f"  note: {n}" for n in run_["notes"]]
    lines.append("OK" if r["ok"] else "FAILED")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
