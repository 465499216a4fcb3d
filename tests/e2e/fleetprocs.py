"""Real `corral-worker` processes for end-to-end tests, and their journals.

Every worker runs the log handler with a journal: one JSON line per task start and stop with
CLOCK_MONOTONIC times, which all processes on one machine share — so merged journals tell who
ran what when, and `intervals` turns them into ownership spans per task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from ..support import Proc
from .procs import BIN, Procs, Supervisor

FAST = ["--report-interval", "0.5", "--drain-timeout", "10"]


def start_worker(procs: Procs, sup: Supervisor, wid: str, max_load: float = 10,
                 *extra: str, endpoint: str | None = None) -> Proc:
    journal = procs.tmp / f"{wid}.journal"
    return procs.start(wid, [str(BIN / "corral-worker"), "run", "--supervisor",
                             endpoint or sup.endpoint,
                             "--id", wid, "--max-load", str(max_load), "--handler", "log",
                             "--journal", str(journal), *FAST, *extra],
                       env={"CORRAL_LOG_JSON": "1"})


def journal(procs: Procs, wid: str) -> list[dict[str, Any]]:
    path = procs.tmp / f"{wid}.journal"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Span:
    task: str
    worker: str
    start: float
    stop: float | None  # None: still running


def intervals(procs: Procs, workers: list[str]) -> list[Span]:
    spans: list[Span] = []
    for w in workers:
        open_at: dict[str, float] = {}
        for e in journal(procs, w):
            if e["event"] == "start":
                open_at[e["task"]] = e["t"]
            elif e["event"] == "adopt":  # the next agent took the same process over
                open_at.setdefault(e["task"], e["t"])
            elif e["event"] == "stop" and e["task"] in open_at:
                spans.append(Span(e["task"], w, open_at.pop(e["task"]), e["t"]))
        spans += [Span(t, w, s, None) for t, s in open_at.items()]
    return spans


def running_now(procs: Procs, workers: list[str]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for s in intervals(procs, workers):
        if s.stop is None:
            out.setdefault(s.task, []).append(s.worker)
    return out


def owners_at(spans: list[Span], task: str, t: float) -> int:
    return sum(1 for s in spans if s.task == task and s.start <= t
               and (s.stop is None or t < s.stop))


def uncovered(spans: list[Span], task: str, start: float, end: float) -> list[float]:
    """Instants in [start, end] at which ``task`` had no running owner (checked at every
    start/stop event, where coverage can change)."""
    events = sorted({start, end, *(x for s in spans if s.task == task
                                   for x in (s.start, s.stop) if x is not None)})
    return [t for t in events if start <= t <= end and owners_at(spans, task, t) == 0]
