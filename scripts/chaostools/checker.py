"""The chaos run's invariants, judged from the merged task journals. Pure: no clock, no I/O.

Every worker process writes a journal (``--journal``): one line per task start and stop, with
CLOCK_MONOTONIC times that all processes on the machine share. The harness adds what only it
knows — when each process was started, killed or frozen, and which faults it injected when —
and `check` turns it all into *spans* (one process holding one task from ``start`` to ``end``)
and judges them:

``coverage``   every task in the task list has ``replicas`` owners at every instant, except
               inside the *window* of a fault that may uncover it (below).
``replicas+1`` no task ever has more than ``replicas + 1`` owners, at any instant.
``exclusive``  no task ever has more than ``replicas`` owners, except a planned move's
               make-before-break hand-off (at most one extra owner, and one of them stops
               within ``handoff`` seconds after the newest started it — longer only if a fault
               hit the old owner or the supervisor meanwhile: then the old owner must still stop
               by the end of its own lease) and a zombie's wake-up (below).
``removed``    a task taken off the list is stopped by all its owners within ``change`` s.
``lost``       at the end, every task in the final list has ``replicas`` owners.

How the harness's events become spans:

- a ``log`` worker killed with SIGKILL holds nothing from the instant it was killed (its
  journal has no stop lines: it could not write them). An ``exec`` worker's task processes
  outlive it, held by the keeper until the next process with its id adopts them (``adopt``
  lines: the span passes to it) or ends them at the lease's end (``"by": "keeper"``): judged
  as for a freeze from the agent's end;
- a frozen (SIGSTOPped) ``log`` worker runs nothing while frozen: its spans are cut at the
  SIGSTOP and resume at the SIGCONT. A zombie — frozen past its lease, its tasks moved
  meanwhile — must stop them as the first thing it does on waking: an overlap that starts at
  its SIGCONT and ends within ``wake`` seconds is counted as a *zombie wake-up*.
- an ``exec`` worker's tasks are processes a freeze of the agent does not stop: their spans run
  on (marked frozen) until the keeper ends them (its ``"by": "keeper"`` lines). ``keeper``: such
  a process must be gone by the freeze + lease + ``wake``; an extra owner that starts once the
  frozen worker's lease has surely lapsed (freeze + lease) while its process still lives is two
  live processes for one task: a violation, never a hand-off.

Fault windows (from the fault's start ``t0``; ``t1`` is when it was lifted), each + ``slack``:

- kill_worker: the target's tasks at t0, until t0 + failover;
- stop_worker: the target's, until max(t0 + failover, t1 + 2 report);
- partition: the target's, until max(t0 + failover, t1 + 2 report), + 1.5 lease if only the
  supervisor -> worker direction was black-holed;
- delay: the target's, until t1 + 2 report;
- kill_supervisor: every task, until ``up`` (when it answered again) + warmup + 2 report;
- tasks: the added tasks, until t0 + change;
- drain_worker, ctl_drain, join: none — planned moves are make-before-break.

failover = lease + margin + tick + 2 report: the supervisor gives a silent worker's tasks away
lease + margin after its last report, at most a tick late, and the new owner starts them about
a report interval later. A black-hole of only the supervisor → worker direction (the proxy
acknowledges what it holds, so TCP does not notice) is noticed by the worker when its lease
has stayed lapsed for half of it: it opens its connection again, and stops reporting until
that completes, hence 1.5 ``lease`` (the lapse comes at most a lease after the cut).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from .model import EPS, INF, Bounds, Fault, Process, Result, Span


def build_spans(journals: dict[str, list[dict[str, Any]]],
                processes: dict[str, Process]) -> list[Span]:
    """Who held what when: journal lines closed by process deaths and cut by freezes."""
    out: list[Span] = []
    for key, lines in journals.items():
        p = processes[key]
        opened: dict[str, tuple[float, bool]] = {}
        raw: list[tuple[str, float, float, bool]] = []
        for d in sorted(lines, key=lambda d: float(d["t"])):
            task, t = str(d["task"]), float(d["t"])
            if d["event"] in ("start", "adopt"):
                opened.setdefault(task, (t, d["event"] == "adopt"))
            elif d["event"] == "stop" and task in opened:
                a, adopted = opened.pop(task)
                raw.append((task, a, t, adopted))
        end = INF if p.ended is None else p.ended
        for task, (t, adopted) in opened.items():
            b = _outlived(task, p, end, journals, processes) if p.exec and end < INF else end
            raw.append((task, t, max(t, b), adopted))
        # An exec agent's end is a freeze that never thaws, for the processes it leaves.
        gone = (*p.frozen, (end, None)) if p.exec and end < INF else p.frozen
        for task, a, b, adopted in raw:
            span = Span(task, key, p.worker, a, b, split=adopted)
            out += _mark(span, gone) if p.exec else _cut(span, p.frozen)
    return out


def _outlived(task: str, p: Process, end: float, journals: dict[str, list[dict[str, Any]]],
              processes: dict[str, Process]) -> float:
    """When an exec task's process that ``p`` left running (killed, handed over) at ``end``
    ended for it: a later process of its id adopted it, or the keeper ended it; INF if neither."""
    ends = [float(d["t"]) for key, lines in journals.items()
            if processes[key].worker == p.worker and processes[key].started >= p.started
            and key != p.key for d in lines
            if d["task"] == task and float(d["t"]) >= end - EPS
            and (d["event"] == "adopt" or d.get("by") == "keeper")]
    return min(ends, default=INF)


def _mark(span: Span, frozen: tuple[tuple[float, float | None], ...]) -> list[Span]:
    """An exec task's span, split where its agent was frozen (the pieces inside say since
    when); the process ran on all the same."""
    pieces: list[Span] = []
    a = span.start
    for f0, f1 in sorted(frozen):
        thaw = INF if f1 is None else f1
        if thaw <= a or f0 >= span.end:
            continue
        if f0 > a:
            pieces.append(Span(span.task, span.owner, span.worker, a, f0))
        b = min(thaw, span.end)
        pieces.append(Span(span.task, span.owner, span.worker, max(a, f0), b, frozen_at=f0,
                           split=f0 > span.start))
        a = b
    if a < span.end:
        pieces.append(Span(span.task, span.owner, span.worker, a, span.end,
                           split=a > span.start))
    return pieces


def _cut(span: Span, frozen: tuple[tuple[float, float | None], ...]) -> list[Span]:
    pieces: list[Span] = []
    a, resumed = span.start, False
    for f0, f1 in sorted(frozen):
        thaw = INF if f1 is None else f1
        if thaw <= a or f0 >= span.end:
            continue
        if f0 > a:
            pieces.append(Span(span.task, span.owner, span.worker, a, f0, resumed))
        a, resumed = thaw, True
        if a >= span.end:
            break
    if a < span.end:
        pieces.append(Span(span.task, span.owner, span.worker, a, span.end, resumed))
    return pieces


def owners_at(spans: list[Span], t: float) -> dict[str, list[str]]:
    """task -> the workers holding it at ``t``."""
    out: dict[str, list[str]] = {}
    for s in spans:
        if s.start <= t < s.end:
            out.setdefault(s.task, []).append(s.worker)
    return {k: sorted(v) for k, v in out.items()}


# -- the check -----------------------------------------------------------------------------------


def check(journals: dict[str, list[dict[str, Any]]], processes: dict[str, Process],
          faults: list[Fault], history: list[tuple[float, list[str]]], replicas: int,
          bounds: Bounds, start: float, end: float,
          assigned: Sequence[tuple[float, dict[str, list[str]]]] = ()) -> Result:
    """Judge the run between ``start`` (everything was running) and ``end`` (it settled).
    ``history`` is the task list over time: ``(since, tasks)``, sorted; ``assigned`` samples
    of the supervisor's assignments ``(when, {task: [worker, ...]})``."""
    spans = build_spans(journals, processes)
    by_task: dict[str, list[Span]] = {}
    for s in spans:
        by_task.setdefault(s.task, []).append(s)
    windows = _windows(faults, spans, bounds, assigned)
    res = Result()
    for s in spans:  # the keeper ends a frozen exec worker's tasks when its lease lapses
        if s.frozen_at is not None and s.end > s.frozen_at + bounds.lease + bounds.wake:
            res.violations.append({
                "task": s.task, "window": [s.frozen_at + bounds.lease, s.end],
                "rule": "keeper", "detail": f"{s.owner}'s task process ran "
                f"{s.end - s.frozen_at:.3f} s into its agent's freeze (lease {bounds.lease:g})"})
    every = {t for _, ts in history for t in ts} | set(by_task)
    uncovered: dict[str, list[tuple[float, float]]] = {}
    for task in sorted(every):
        listed = _listed(task, history, start, end)
        mine = by_task.get(task, [])
        gaps = _judge_task(task, mine, listed, replicas, bounds, faults, start, end, res)
        uncovered[task] = gaps
        for a, b in gaps:
            res.uncovered_s += b - a
            res.max_uncovered_s = max(res.max_uncovered_s, b - a)
            for a2, b2 in _minus((a, b), [(w0, w1) for w0, w1, ts in windows
                                         if ts is None or task in ts]):
                if b2 - a2 > EPS:
                    res.violations.append({"task": task, "window": [a2, b2], "rule": "coverage",
                                           "detail": f"fewer than {replicas} owners for "
                                                     f"{b2 - a2:.3f} s outside any fault window"})
        _removed(task, mine, listed, history, bounds, start, end, res)
    final = history[-1][1] if history else []
    held = owners_at(spans, end - EPS)
    res.lost_tasks = [t for t in final if len(held.get(t, [])) < replicas]
    for (_, w1, ts), f in zip(windows, _windowed(faults), strict=True):
        ends = [b for task, gaps in uncovered.items() if ts is None or task in ts
                for a, b in gaps if f.t0 <= a < w1]  # gaps that began in its window
        res.recovery.append({"fault": f.id, "kind": f.kind, "target": f.target, "t0": f.t0,
                             "recovery_s": round(max(ends) - f.t0, 3) if ends else 0.0,
                             "window_s": round(w1 - f.t0, 3)})
    return res


def _listed(task: str, history: list[tuple[float, list[str]]], start: float,
            end: float) -> list[tuple[float, float]]:
    """When ``task`` was in the task list, within [start, end]."""
    out: list[tuple[float, float]] = []
    for i, (since, tasks) in enumerate(history):
        until = history[i + 1][0] if i + 1 < len(history) else INF
        a, b = max(since, start), min(until, end)
        if task in tasks and b > a:
            if out and abs(out[-1][1] - a) < EPS:
                out[-1] = (out[-1][0], b)
            else:
                out.append((a, b))
    return out


def _judge_task(task: str, spans: list[Span], listed: list[tuple[float, float]], replicas: int,
                bounds: Bounds, faults: list[Fault], start: float, end: float,
                res: Result) -> list[tuple[float, float]]:
    """Sweep one task's spans: record excess-owner intervals in ``res``; return the intervals
    (within ``listed``) with fewer than ``replicas`` owners."""
    points = sorted({start, end, *(p for s in spans for p in (s.start, s.end)
                                   if start < p < end),
                     *(p for iv in listed for p in iv)})
    gaps: list[tuple[float, float]] = []
    excess: list[tuple[float, float, list[Span], int]] = []
    for a, b in itertools.pairwise(points):
        owners = [s for s in spans if s.start <= a and s.end >= b]
        n = len(owners)
        if n < replicas and any(la <= a and b <= lb for la, lb in listed):
            if gaps and abs(gaps[-1][1] - a) < EPS:
                gaps[-1] = (gaps[-1][0], b)
            else:
                gaps.append((a, b))
        if n > replicas:
            if excess and abs(excess[-1][1] - a) < EPS:
                merged = excess[-1][2] + [s for s in owners if s not in excess[-1][2]]
                excess[-1] = (excess[-1][0], b, merged, max(excess[-1][3], n))
            else:
                excess.append((a, b, owners, n))
    for a, b, owners, most in excess:
        _judge_excess(task, a, b, owners, most, replicas, bounds, faults, end, res)
    return gaps


def _judge_excess(task: str, a: float, b: float, owners: list[Span], most: int, replicas: int,
                  bounds: Bounds, faults: list[Fault], end: float, res: Result) -> None:
    def violation(why: str) -> None:
        res.double_owner_s += b - a
        res.violations.append({"task": task, "window": [a, b], "rule": "exclusive",
                               "detail": why, "owners": sorted(s.worker for s in owners)})

    # A zombie waking up (in-process tasks frozen with their agent, stopped as the first
    # thing it does) may meet a planned hand-off: that instant is its wake-up, not a third
    # owner the supervisor made.
    wakers = [s for s in owners if s.resumed and s.start >= a - EPS
              and s.end - s.start <= bounds.wake]
    if most > replicas + 1 and wakers and most - len(wakers) <= replicas + 1:
        res.zombies.append(b - a)
        return None
    if most > replicas + 1:
        res.double_owner_s += b - a
        res.violations.append({"task": task, "window": [a, b], "rule": "replicas+1",
                               "detail": f"{most} owners, replicas {replicas}",
                               "owners": sorted(s.worker for s in owners)})
        return None
    frozen = [s.frozen_at for s in owners if s.frozen_at is not None]
    if frozen:  # an exec worker's process lives on while its agent is frozen
        lapsed = min(frozen) + bounds.lease
        if max(s.start for s in owners if not s.split) >= lapsed - EPS:
            return violation("two live processes: a new owner started after the frozen "
                             "owner's lease had lapsed, and its process still ran")
        if b <= lapsed + bounds.wake:  # a hand-off the freeze interrupted: the keeper ends it
            res.handoffs.append(b - a)
            return None
    if b >= end - EPS:
        return violation("still more owners than replicas at the end")
    leaving = [s for s in owners if abs(s.end - b) < EPS]
    if not leaving:
        return violation("no owner stopped it")
    old = leaving[0]
    if old.resumed and old.start >= a - EPS:
        if b - old.start <= bounds.wake:
            res.zombies.append(b - a)
            return None
        return violation(f"a zombie kept it {b - old.start:.3f} s after waking")
    # The newest start among all the owners: usually the new owner's, but the overlap may also
    # end with the new owner giving the task up (its lease ran out: it was cut off).
    newest = max(s.start for s in owners if not s.split)
    allowed = _handoff_allowed(old.worker, newest, b, bounds, faults)
    if b <= allowed:
        res.handoffs.append(b - a)
        return None
    return violation(f"the old owner stopped it {b - newest:.3f} s after the new one started "
                     f"(allowed {allowed - newest:.3f} s)")


def _handoff_allowed(old: str, newest: float, b: float, bounds: Bounds,
                     faults: list[Fault]) -> float:
    """By when the old owner of a hand-off must stop: ``handoff`` after the newest start if it
    was reachable then; a partition of the old owner or a supervisor outage that interrupted
    the hand-off gives it until its lease runs out, or until the fault is over if sooner."""
    base, extended, delay = newest + bounds.handoff, -INF, 0.0
    lapse = bounds.lease + bounds.report  # its lease ends by then: it must have stopped
    for f in faults:
        if f.kind == "partition" and f.target == old:
            if f.t0 <= newest <= f.t1:
                base = -INF  # cut off when the new owner started: only its lease stops it
            if f.t0 <= newest + bounds.handoff and f.t1 >= newest - bounds.lease:
                extended = max(extended, min(f.t0 + lapse, f.t1 + bounds.handoff))
        elif f.kind == "delay" and f.target == old and f.t0 <= b and f.t1 >= newest:
            delay = max(delay, 2 * float(f.detail.get("delay", 0.0)))
        elif f.kind == "kill_supervisor" and newest - EPS <= f.t0 <= newest + bounds.handoff:
            up = float(f.detail.get("up", f.t1))
            extended = max(extended, min(f.t0 + lapse, up + bounds.warmup + bounds.handoff))
    return max(base, extended) + delay


def _removed(task: str, spans: list[Span], listed: list[tuple[float, float]],
             history: list[tuple[float, list[str]]], bounds: Bounds, start: float, end: float,
             res: Result) -> None:
    """Owning a task more than ``change`` after it left the list is a violation."""
    off: list[tuple[float, float]] = []
    for since, tasks in history:
        if task not in tasks and since > start:
            was_listed = any(abs(lb - since) < EPS for _, lb in listed)
            if was_listed:
                nxt = [la for la, _ in listed if la > since]
                off.append((since + bounds.change, min(nxt, default=end)))
    for a, b in off:
        for s in spans:
            lo, hi = max(a, s.start), min(b, s.end)
            if hi > lo + EPS:
                res.violations.append({"task": task, "window": [lo, hi], "rule": "removed",
                                       "detail": f"{s.worker} still ran it after it was "
                                                 "removed from the task list"})


# -- fault windows -------------------------------------------------------------------------------

_NO_WINDOW = ("drain_worker", "ctl_drain", "join")


def _windowed(faults: list[Fault]) -> list[Fault]:
    return [f for f in faults if f.kind not in _NO_WINDOW]


def _windows(faults: list[Fault], spans: list[Span], bounds: Bounds,
             assigned: Sequence[tuple[float, dict[str, list[str]]]],
             ) -> list[tuple[float, float, frozenset[str] | None]]:
    """(from, to, tasks or None for all) for every fault that may uncover tasks. A worker
    fault may uncover what the worker held when it began, and what the supervisor placed on
    it (not knowing yet) until the window ends."""
    out: list[tuple[float, float, frozenset[str] | None]] = []
    for f in _windowed(faults):
        tasks: frozenset[str] | None = frozenset(
            s.task for s in spans if s.worker == f.target and s.start <= f.t0 <= s.end)
        twice = 2 * bounds.report
        if f.kind == "kill_worker":
            until = f.t0 + bounds.failover
        elif f.kind == "stop_worker":
            until = max(f.t0 + bounds.failover, f.t1 + twice)
        elif f.kind == "partition":
            lapse = 1.5 * bounds.lease if f.detail.get("proxy") == "down" else 0.0
            until = max(f.t0 + bounds.failover + lapse, f.t1 + twice)
        elif f.kind == "delay":
            until = f.t1 + twice
        elif f.kind == "kill_supervisor":
            tasks = None
            until = max(f.t0, float(f.detail.get("up", f.t1)) + bounds.warmup + twice)
        elif f.kind == "tasks":
            tasks = frozenset(f.detail.get("added", ()))
            until = f.t0 + bounds.change
        else:
            raise ValueError(f"unknown fault kind {f.kind!r}")
        until += bounds.slack
        if tasks is not None and f.target is not None:
            tasks |= {t for when, asg in assigned if f.t0 <= when <= until
                      for t, ws in asg.items() if f.target in ws}
        out.append((f.t0, until, tasks))
    return out


def _minus(iv: tuple[float, float],
           holes: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The parts of ``iv`` outside every hole."""
    parts = [iv]
    for h0, h1 in holes:
        nxt: list[tuple[float, float]] = []
        for a, b in parts:
            if h1 <= a or h0 >= b:
                nxt.append((a, b))
                continue
            if h0 > a:
                nxt.append((a, h0))
            if h1 < b:
                nxt.append((h1, b))
        parts = nxt
    return parts
