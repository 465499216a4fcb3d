"""The seeded fault plan: which fault, on whom, when, for how long. Pure: `plan` draws from its
own `random.Random(seed)` and returns a list of `Step`s — the same seed, the same plan.

Each fault is one or two steps sharing a fault number: the step that begins it and, for faults
that last, the step that ends it (SIGCONT, heal, respawn, undrain, restart). Fault kinds:

| kind              | begins                         | ends                                 |
|-------------------|--------------------------------|--------------------------------------|
| `kill_worker`     | kill -9 of a worker            | the same id started again            |
| `stop_worker`     | SIGSTOP, past lease + margin   | SIGCONT (a zombie wakes up)          |
| `drain_worker`    | SIGTERM: it drains and exits   | a new worker joins in its place      |
| `join`            | a new worker starts            | —                                    |
| `kill_supervisor` | kill -9 of the supervisor      | restarted, same --state-file         |
| `partition`       | proxy black-holes up/down/both | healed                               |
| `delay`           | proxy delays both ways         | delay removed                        |
| `ctl_drain`       | `corralctl drain W`            | `corralctl undrain W`                |
| `tasks`           | task file rewritten + SIGHUP or `corralctl query` | —                 |

Kinds are dealt from a shuffled deck, so every kind comes up once before any comes twice. The
plan keeps ``replicas + 1`` workers healthy (alive, not frozen, partitioned or drained) at every
instant, so the fleet can always hold every replica; a worker has at most one fault at a time;
and a supervisor kill happens only while no other fault is on, and nothing starts until the
restarted supervisor has had time to warm up.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

KINDS = ("kill_worker", "stop_worker", "drain_worker", "join", "kill_supervisor", "partition",
         "delay", "ctl_drain", "tasks")
DIRECTIONS = ("up", "down", "both")


@dataclass(frozen=True)
class Timings:
    """The daemons' timings (CI-sized by default) that the plan and the checks depend on."""

    lease: float = 3.0
    margin: float = 1.0
    tick: float = 0.25
    report: float = 0.5
    warmup: float = 1.0
    drain_timeout: float = 5.0

    def supervisor_args(self) -> list[str]:
        return ["--warmup", f"{self.warmup:g}", "--lease", f"{self.lease:g}",
                "--lease-margin", f"{self.margin:g}", "--tick", f"{self.tick:g}",
                "--report-interval", f"{self.report:g}"]

    def worker_args(self) -> list[str]:
        return ["--report-interval", f"{self.report:g}",
                "--drain-timeout", f"{self.drain_timeout:g}"]


@dataclass(frozen=True)
class Step:
    at: float  # seconds after the fault phase began
    fault: int  # the fault this step begins or ends
    action: str  # see Harness._do
    target: str | None = None
    args: dict[str, Any] = field(default_factory=dict)
    begins: bool = True


@dataclass
class _Fleet:
    """What the planner knows of the fleet as it plans ahead."""

    healthy: set[str]
    busy_until: dict[str, float]  # worker -> when its current fault ends (down or not)
    down_until: dict[str, float]  # worker -> when it counts as healthy again
    next_id: int
    tasks: list[str]
    next_task: int

    def healthy_at(self, t: float) -> list[str]:
        return sorted(w for w in self.healthy if self.down_until.get(w, 0.0) <= t)

    def free_at(self, t: float) -> list[str]:
        return [w for w in self.healthy_at(t) if self.busy_until.get(w, 0.0) <= t]


def plan(seed: int, span: float, workers: list[str], tasks: list[str], replicas: int,
         timings: Timings) -> list[Step]:
    """Faults spread over ``[0, span)`` seconds, sorted by time."""
    rng = random.Random(seed)
    fleet = _Fleet(set(workers), {}, {}, len(workers) + 1, list(tasks), len(tasks))
    steps: list[Step] = []
    deck: list[str] = []
    t = rng.uniform(0.5, 1.5)
    quiet_until = 0.0  # nothing starts before this (a supervisor restart warming up)
    fault = 0
    while True:
        t = max(t, quiet_until)
        if t >= span:
            break
        if not deck:
            deck = list(KINDS)
            rng.shuffle(deck)
        for i in range(len(deck) - 1, -1, -1):  # the next card that can happen now
            new, t_end = _one(deck[i], fault, t, rng, fleet, replicas, timings)
            if new:
                kind = deck.pop(i)
                break
        else:
            t += 0.5
            continue
        steps.extend(new)
        fault += 1
        if kind == "kill_supervisor":
            quiet_until = t_end + 2.0 + timings.warmup + 2 * timings.report
        t += rng.uniform(1.5, 4.0)
    steps.sort(key=lambda s: (s.at, s.fault))
    return steps


def _one(kind: str, fault: int, t: float, rng: random.Random, fleet: _Fleet, replicas: int,
         tm: Timings) -> tuple[list[Step], float]:
    """The steps of one fault beginning at ``t``, or [] (and the fleet unchanged)
    if it cannot happen now."""
    failover = tm.lease + tm.margin
    free = fleet.free_at(t)
    can_lose_one = len(fleet.healthy_at(t)) - 1 >= replicas + 1
    if kind == "join":
        wid = f"w{fleet.next_id}"
        fleet.next_id += 1
        fleet.healthy.add(wid)
        return [Step(t, fault, "spawn_worker", wid)], t
    if kind == "tasks":
        return [_tasks_step(fault, t, rng, fleet)], t
    if kind == "kill_supervisor":
        if any(end > t for end in [*fleet.busy_until.values(), *fleet.down_until.values()]):
            return [], t
        down = rng.uniform(0.2, 1.5)
        return [Step(t, fault, "kill_supervisor"),
                Step(t + down, fault, "start_supervisor", begins=False)], t + down
    if not free:
        return [], t
    target = rng.choice(free)
    if kind == "delay":
        delay = round(rng.uniform(0.05, min(0.8, tm.lease / 5)), 3)
        end = t + rng.uniform(2.0, 5.0)
        fleet.busy_until[target] = end
        return [Step(t, fault, "proxy", target, {"delay": delay}),
                Step(end, fault, "proxy", target, {}, begins=False)], end
    if not can_lose_one:
        return [], t
    if kind == "kill_worker":
        end = t + rng.uniform(1.0, failover + 2.0)
        fleet.busy_until[target] = fleet.down_until[target] = end
        return [Step(t, fault, "kill_worker", target),
                Step(end, fault, "spawn_worker", target, begins=False)], end
    if kind == "stop_worker":
        end = t + failover + rng.uniform(0.5, 2.5)
        fleet.busy_until[target] = fleet.down_until[target] = end
        return [Step(t, fault, "sigstop", target),
                Step(end, fault, "sigcont", target, begins=False)], end
    if kind == "partition":
        direction = rng.choice(DIRECTIONS)
        end = t + rng.uniform(1.0, 2.5 * tm.lease)
        fleet.busy_until[target] = fleet.down_until[target] = end
        return [Step(t, fault, "proxy", target, {direction: True}),
                Step(end, fault, "proxy", target, {}, begins=False)], end
    if kind == "drain_worker":
        fleet.healthy.discard(target)
        wid = f"w{fleet.next_id}"
        fleet.next_id += 1
        fleet.healthy.add(wid)
        join = t + rng.uniform(0.5, 2.0)
        fleet.down_until[wid] = join
        return [Step(t, fault, "sigterm_worker", target),
                Step(join, fault, "spawn_worker", wid, begins=False)], join
    if kind == "ctl_drain":
        end = t + rng.uniform(2.0, 4.0)
        fleet.busy_until[target] = fleet.down_until[target] = end
        return [Step(t, fault, "ctl", target, {"verb": "drain"}),
                Step(end, fault, "ctl", target, {"verb": "undrain"}, begins=False)], end
    raise ValueError(f"unknown fault kind {kind!r}")


def _tasks_step(fault: int, t: float, rng: random.Random, fleet: _Fleet) -> Step:
    removed = rng.sample(fleet.tasks, k=min(len(fleet.tasks) - 1, rng.randint(1, 3)))
    added = [f"task-{fleet.next_task + i:03d}" for i in range(rng.randint(1, 4))]
    fleet.next_task += len(added)
    fleet.tasks = [x for x in fleet.tasks if x not in removed] + added
    via = rng.choice(("sighup", "corralctl"))
    return Step(t, fault, "tasks", None, {"tasks": list(fleet.tasks), "via": via,
                                          "added": added, "removed": sorted(removed)})


def kind_of(step: Step) -> str:
    """The fault kind a beginning step starts."""
    a = step.action
    if a == "proxy":
        return "delay" if "delay" in step.args else "partition"
    return {"kill_worker": "kill_worker", "sigstop": "stop_worker", "spawn_worker": "join",
            "sigterm_worker": "drain_worker", "kill_supervisor": "kill_supervisor",
            "ctl": "ctl_drain", "tasks": "tasks"}[a]
