"""The figures of a soak run, from what `_soakwatch` recorded: RSS slopes and descriptor drift
per process kind, the killed agents' task processes, status latency, the never-restarted
supervisor's tables judged against what its live tasks and workers explain; and the table
printed for people.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

from _soakwatch import Leftovers, Sample, Sampler

from corral.common.placement.ledger import _INTERN_LIMIT
from corral.supervisor.feed import DEFAULT_CAPACITY as FEED_CAPACITY

KIND_NAMES = {"supervisor-a": "supervisor (killed every period)",
              "supervisor-b": "supervisor (never restarted)", "agent": "agents",
              "keeper": "lease keepers", "dashboard": "dashboard"}


def slope(samples: Iterable[Sample], skip_s: float) -> dict[str, Any]:
    """A least-squares slope of RSS over time, KB a minute, common to every process of the
    kind (each its own intercept: restarts do not count as growth), from the samples taken
    at least ``skip_s`` after the process started (its start-up is not a leak)."""
    by_key: dict[str, list[tuple[float, float]]] = {}
    for s in samples:
        if s.t - s.born >= skip_s:
            by_key.setdefault(s.key, []).append((s.t / 60.0, float(s.rss_kb)))
    sxy = sxx = ssr_base = 0.0
    n = k = 0
    fits: list[tuple[list[tuple[float, float]], float, float]] = []
    for pts in by_key.values():
        if len(pts) < 2:
            continue
        mt = sum(t for t, _ in pts) / len(pts)
        mr = sum(r for _, r in pts) / len(pts)
        sxy += sum((t - mt) * (r - mr) for t, r in pts)
        sxx += sum((t - mt) ** 2 for t, _ in pts)
        fits.append((pts, mt, mr))
        n, k = n + len(pts), k + 1
    if sxx <= 0:
        return {"kb_per_min": None, "se": None, "samples": n, "processes": k}
    b = sxy / sxx
    for pts, mt, mr in fits:
        ssr_base += sum((r - mr - b * (t - mt)) ** 2 for t, r in pts)
    se = math.sqrt(ssr_base / (n - k - 1) / sxx) if n - k - 1 > 0 else None
    return {"kb_per_min": round(b, 2), "se": None if se is None else round(se, 2),
            "samples": n, "processes": k}


def per_kind(sampler: Sampler, skip_s: float) -> dict[str, dict[str, Any]]:
    """Per kind: the RSS slope over all its processes and over those sampled in the first and
    the last round (lived through the run); mean RSS and descriptors in those two rounds."""
    out: dict[str, dict[str, Any]] = {}
    if not sampler.rounds:
        return out
    first, last = sampler.rounds[0], sampler.rounds[-1]
    for kind in sampler.KINDS:
        mine = [s for s in sampler.samples if s.kind == kind]
        if not mine:
            continue
        at_first = [s for s in mine if s.t == first]
        at_last = [s for s in mine if s.t == last]
        whole = {s.key for s in at_first} & {s.key for s in at_last}
        out[kind] = {
            "rss_slope": slope(mine, skip_s),
            "rss_slope_whole_run": slope((s for s in mine if s.key in whole), 0.0),
            # the same over the run's second half: has it flattened (a ring filled up)?
            "rss_slope_second_half": slope((s for s in mine if s.key in whole
                                            and s.t >= (first + last) / 2), 0.0),
            "whole_run_processes": len(whole),
            "rss_kb_start": _mean(s.rss_kb for s in at_first),
            "rss_kb_end": _mean(s.rss_kb for s in at_last),
            "fds_start": _mean(s.fds for s in at_first),
            "fds_end": _mean(s.fds for s in at_last),
            "fds_max": max(s.fds for s in mine),
        }
        d = out[kind]
        d["fds_drift"] = None if d["fds_start"] is None or d["fds_end"] is None else \
            round(d["fds_end"] - d["fds_start"], 2)
    return out


def _mean(values: Iterable[float]) -> float | None:
    vals = list(values)
    return round(sum(vals) / len(vals), 1) if vals else None


def quantile(values: list[float], q: float) -> float | None:
    """The q-quantile by the nearest rank (no interpolation: an actual observation)."""
    if not values:
        return None
    vals = sorted(values)
    return vals[min(len(vals) - 1, max(0, math.ceil(q * len(vals)) - 1))]


def leftovers(lo: Leftovers) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, late in (("restarted_at_once", False), ("restarted_after_lease", True)):
        trs = [tr for tr in lo.tracked if tr.late == late and tr.judged]
        went = [tr.gone_at - tr.killed_at for tr in trs
                if tr.gone_at is not None and not tr.left and not tr.adopted]
        left = [tr for tr in trs if tr.left]
        out[label] = {
            "kills_with_tasks": len({(tr.worker, tr.killed_at) for tr in trs}),
            "task_processes": len(trs), "gone": len(went),
            "adopted": sum(1 for tr in trs if tr.adopted),
            "left_behind": len(left),
            "gone_after_kill_s": {"p50": _r(quantile(went, 0.5)),
                                  "max": _r(max(went, default=None))},
            "left_behind_list": [{"worker": tr.worker, "task": tr.task, "pid": tr.pid,
                                  "lived_past_deadline_s": None if tr.gone_at is None
                                  else round(tr.gone_at - tr.deadline, 3)} for tr in left],
        }
    return out


def _r(x: float | None, nd: int = 3) -> float | None:
    return None if x is None else round(x, nd)


def latency(lat: list[float], failures: list[tuple[float, str]]) -> dict[str, Any]:
    return {"polls": len(lat) + len(failures), "answered": len(lat),
            "unanswered": len(failures), "p50_s": _r(quantile(lat, 0.5)),
            "p99_s": _r(quantile(lat, 0.99)), "max_s": _r(max(lat, default=None)),
            "unanswered_list": [{"t": round(t, 3), "error": e} for t, e in failures[:20]]}


# What each table of `status` is keyed by, so what may explain it at the end.
PER_TASK = {"tasks_listed", "placement_cost", "placement_owners", "grants", "placement_want",
            "placement_need"}
PER_WORKER = {"workers", "placement_cap", "placement_load", "placement_eligible",
              "placement_open", "placement_path", "placement_rank", "placement_labels",
              "placement_tasks_of", "failing_workers", "fresh_id_buckets",
              "handoffs_awaited"}  # the last: a new owner's awaited tasks, cleaned lazily
CAPPED = {"feed": FEED_CAPACITY, "placement_interned": _INTERN_LIMIT}


def tables(start: dict[str, int], end: dict[str, int], tasks: tuple[int, int],
           workers: tuple[int, int]) -> dict[str, dict[str, Any]]:
    """Each table at the start and the end, and the most the end may hold: the start plus
    what the live tasks and workers explain — the change of the task count for a per-task
    table (and never above one entry per task), of the worker count for a per-worker one
    (one per worker: some fill lazily); a lazy silence timer per worker armed twice at most;
    a timer per known worker (forget) and per exclusion; a ring or a cache up to its
    capacity. Any other table (in flight: hand-offs, starts, pending, plans) may not end
    above its start."""
    d_tasks, d_workers = tasks[1] - tasks[0], workers[1] - workers[0]
    out: dict[str, dict[str, Any]] = {}
    for name in sorted(set(start) | set(end)):
        s, e = start.get(name, 0), end.get(name, 0)
        if name in PER_TASK:
            bound, why = max(s + d_tasks, tasks[1]), "≤ 1 per task"
        elif name in PER_WORKER:
            bound, why = max(s + d_workers, workers[1]), "≤ 1 per worker"
        elif name == "silence_timers":
            bound, why = max(s, 2 * workers[1]), "≤ 2 per worker"
        elif name == "timers":
            bound = s + max(0, d_workers) + workers[1] + end.get("exclusion_reasons", 0)
            why = "start + one per worker and exclusion"
        elif name in CAPPED:
            bound, why = max(s, CAPPED[name]), f"capacity {CAPPED[name]}"
        else:
            bound, why = s, "in flight: ≤ start"
        out[name] = {"start": s, "end": e, "diff": e - s, "bound": bound, "why": why,
                     "ok": e <= bound}
    return out


def tables_max(series: list[tuple[float, dict[str, int]]], start: float,
               stop: float) -> dict[str, dict[str, int]]:
    """The largest size of each table in the churn's first half and in its second: a table
    still growing in the second half is one to look at."""
    mid = (start + stop) / 2
    out: dict[str, dict[str, int]] = {"first_half": {}, "second_half": {}}
    for t, tables in series:
        if start <= t <= stop:
            half = out["first_half" if t < mid else "second_half"]
            for k, v in tables.items():
                half[k] = max(v, half.get(k, 0))
    return out


def print_table(r: dict[str, Any]) -> None:
    run = r["run"]
    print(f"soak: {run['minutes']:g} min of churn, {run['tasks']} tasks x {run['workers']} exec "
          f"workers per supervisor (2 supervisors); lease {run['lease_s']:g} s, margin "
          f"{run['margin_s']:g} s; load average {run['loadavg_mean']} on {run['cores']} cores")
    c = r["churn"]
    print(f"churn: {c['edits']} task-list edits ({c['fresh_ids']} fresh ids), {c['agent_kills']} "
          f"agent kills ({c['agent_kills_late']} back only after the lease), {c['drains']} "
          f"drains + {c['undrains']} undrains ({c['ctl_failed']} failed), "
          f"{c['supervisor_kills']} supervisor kills")
    print(f"\n{'process kind':34} {'RSS KB/min':>12} {'± se':>7} {'samples':>8} {'procs':>6} "
          f"{'RSS MB start→end':>18} {'fds start→end':>15}")
    for kind, d in r["processes"].items():
        s = d["rss_slope"]
        rss = f"{_mb(d['rss_kb_start'])}→{_mb(d['rss_kb_end'])}"
        fds = f"{d['fds_start']}→{d['fds_end']}"
        print(f"{KIND_NAMES[kind]:34} {_f(s['kb_per_min']):>12} {_f(s['se']):>7} "
              f"{s['samples']:>8} {s['processes']:>6} {rss:>18} {fds:>15}")
        w, h = d["rss_slope_whole_run"], d["rss_slope_second_half"]
        if kind in ("agent", "keeper") and w["samples"]:
            print(f"{'  … those alive the whole run':34} {_f(w['kb_per_min']):>12} "
                  f"{_f(w['se']):>7} {w['samples']:>8} {w['processes']:>6}")
        if h["samples"]:
            print(f"{'  … in the second half':34} {_f(h['kb_per_min']):>12} "
                  f"{_f(h['se']):>7} {h['samples']:>8} {h['processes']:>6}")
    print("\nkilled agents' task processes:")
    for label, d in r["leftovers"].items():
        g = d["gone_after_kill_s"]
        print(f"  {label.replace('_', ' '):24} {d['kills_with_tasks']:>4} kills, "
              f"{d['task_processes']:>5} processes: {d['gone']} gone (p50 {_f(g['p50'])} s, "
              f"max {_f(g['max'])} s after the kill), {d['adopted']} adopted, "
              f"{d['left_behind']} left behind")
    st = r["status"]
    print(f"\nstatus polls: {st['answered']}/{st['polls']} answered; p50 {_f(st['p50_s'])} s, "
          f"p99 {_f(st['p99_s'])} s, max {_f(st['max_s'])} s")
    print("\ntables of the never-restarted supervisor: start → end (diff); the largest in the "
          "churn's first half / second half")
    m1, m2 = r["tables"]["max"]["first_half"], r["tables"]["max"]["second_half"]
    for name, d in r["tables"]["judged"].items():
        if d["start"] or d["end"] or m1.get(name) or m2.get(name):
            mark = "" if d["ok"] else f"   ✘ above {d['bound']} ({d['why']})"
            print(f"  {name:28} {d['start']:>7} → {d['end']:>7} ({d['diff']:+})  "
                  f"{m1.get(name, '-'):>6} / {m2.get(name, '-'):<6}{mark}")
    for site, s in r["after_churn"].items():
        print(f"\nafter the churn, supervisor {site}: {s['tasks_running_at_1s']}/{s['tasks']} "
              f"running 1 s after it stopped; all running after {_f(s['all_running_after_s'])} s")
    print(f"dashboard at the end: lists {r['dashboard_workers_listed']} workers of B")
    print(f"task processes at the end: {r['end']['task_processes']} for "
          f"{r['end']['tasks_expected']} tasks; keepers {r['end']['keepers']} for "
          f"{r['end']['agents']} agents")


def _mb(kb: float | None) -> str:
    return "-" if kb is None else f"{kb / 1024:.1f}"


def _f(x: float | None) -> str:
    return "-" if x is None else f"{x:g}"
