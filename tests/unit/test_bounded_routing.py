"""Weeks without a restart, client side: the balancer core keeps nothing per worker id it ever
saw. 10,000 fresh worker ids come into the routing map and leave it, with requests that end
after their worker left (late replies, late lame-duck flags, failures); every table of the
`ReplicaChooser`, the `Balancer`, their `WeightTracker`s and the router's `Health` is back to
its size with the same live workers. Fake clock; as `corral.client.Router` wires them."""

from __future__ import annotations

import random
from typing import Any

from corral.client.health import Health
from corral.common.balancer import Balancer, BalancerConfig
from corral.common.balancer.backends import HealthConfig
from corral.common.balancer.hashring import BoundedLoad, HashRing
from corral.common.balancer.replicas import ReplicaChooser
from corral.common.balancer.subsetting import LOW_CHURN
from corral.common.balancer.weights import LoadReport, WeightConfig, WeightTracker
from corral.common.wire.routemap import LAME_DUCK, READY, WorkerEntry

KEEP = [f"keep-{i:02d}" for i in range(20)]
ROUNDS, FRESH = 1_000, 10  # 10,000 fresh worker ids
WEIGHTS = WeightConfig(blackout=2.0)


class Client:
    """A balancer, a replica chooser and the health that feeds both, as a Router has them."""

    def __init__(self) -> None:
        self.balancer = Balancer(BalancerConfig(picker="wrr", subsetting=LOW_CHURN,
                                                subset_size=10, weights=WEIGHTS), (), 3,
                                 rng=random.Random(1))
        self.chooser = ReplicaChooser("wrr", HealthConfig(), WEIGHTS, random.Random(2))
        self.health = Health(self.balancer, self.chooser, refused_retry=0.5)
        self.map: dict[str, WorkerEntry] = {}

    def set_map(self, workers: dict[str, WorkerEntry]) -> None:
        old, self.map = self.map, workers
        self.balancer.set_backends(workers)
        self.chooser.set_workers(workers)
        self.health.new_map(old, workers)

    def task_call(self, worker: str, now: float) -> None:
        """A request to a task's only owner (replicas = 1, the common case), picked now."""
        assert self.chooser.pick([worker], now) == worker

    def task_reply(self, worker: str, now: float, ok: bool, lame: bool = False) -> None:
        report = LoadReport(qps=100.0, utilization=0.5)
        self.chooser.finished(worker, ok, now, report)
        self.balancer.report(worker, report, now)
        self.health.replied(worker, report, lame)

    def any_reply(self, request: Any, now: float, ok: bool) -> None:
        report = LoadReport(qps=50.0, utilization=0.25, eps=0.0 if ok else 1.0)
        self.balancer.release(request, now, ok, report)
        self.chooser.weights.report(request.backend, report, now)
        self.health.replied(request.backend, report, False)

    def sizes(self) -> dict[str, int]:
        return {**self.health.sizes(), **self.chooser.sizes(),
                **{f"any_{k}": v for k, v in self.balancer.sizes().items()}}


def live(workers: list[str], lame: frozenset[str] = frozenset()) -> dict[str, WorkerEntry]:
    return {w: WorkerEntry(f"tcp://{w}:7770", LAME_DUCK if w in lame else READY)
            for w in workers}


def steady_traffic(c: Client, now: float) -> float:
    """The same traffic on the live workers before and after the churn, once past every
    error window and blackout, so the two snapshots compare like with like."""
    now += 10.0
    for i, w in enumerate(KEEP):
        c.task_call(w, now)
        c.task_reply(w, now, ok=i % 5 != 0)
        req = c.balancer.acquire(now)
        c.any_reply(req, now, ok=True)
    now += 2.0
    c.task_call(KEEP[1], now)
    c.task_reply(KEEP[1], now, ok=False)  # expires what the window left behind
    c.any_reply(c.balancer.acquire(now), now, ok=True)
    return now


def test_every_table_comes_back_to_its_size_after_10000_fresh_workers() -> None:
    c = Client()
    c.set_map(live(KEEP))
    now = steady_traffic(c, 0.0)
    before = c.sizes()
    assert before["chooser_states"] == before["health_reports"] == len(KEEP)
    for r in range(ROUNDS):
        now += 0.1
        fresh = [f"r{r:04d}-{i}" for i in range(FRESH)]
        c.set_map(live(KEEP + fresh, lame=frozenset(fresh[:2])))
        # Requests started while the fresh workers are in the map, some to end after they left.
        for w in fresh + KEEP[:3]:
            c.task_call(w, now)
        held = [c.balancer.acquire(now) for _ in range(10)]
        for w in fresh[:5]:
            c.task_reply(w, now, ok=w.endswith(("0", "3")))
        c.health.refused(fresh[6], now)
        for req in held[:5]:
            c.any_reply(req, now, ok=True)
        c.set_map(live(KEEP))  # the fresh ones leave the map
        now += 0.05
        for w in fresh[5:]:  # late replies, one of them a lame duck's, some failures
            c.task_reply(w, now, ok=w.endswith("7"), lame=w.endswith("8"))
        for w in KEEP[:3]:
            c.task_reply(w, now, ok=True)
        for req in held[5:]:
            c.any_reply(req, now, ok=False)
        c.health.tick(now)
    now = steady_traffic(c, now)
    assert c.sizes() == before


def test_a_weight_tracker_keeps_only_the_backends_it_is_told_to_retain() -> None:
    t = WeightTracker(WeightConfig(blackout=0.0))
    for i in range(1_000):
        t.report(f"w{i}", LoadReport(qps=10.0 + i, utilization=0.5), i / 10)
    t.adjust([f"w{i}" for i in range(1_000)], 100.0)
    assert set(t.sizes().values()) == {1_000}
    t.retain({"w1", "w2"})
    assert set(t.sizes().values()) == {2}
    assert t.weights(["w1", "w2"], 100.0)[1] > 0


def test_bounded_load_keeps_no_entry_for_a_node_gone_for_good() -> None:
    ring = HashRing(["a", "b", "c"])
    bounded = BoundedLoad(ring, 1.25)
    keys = [f"k{i}" for i in range(300)]
    for k in keys:
        bounded.place(k)
    before = bounded.sizes()
    for r in range(2_000):  # fresh nodes come, take keys, and go
        node = f"n{r}"
        ring.add(node)
        for k in keys[:20]:
            bounded.release(k)
            bounded.place(k)
        ring.remove(node)
        for k in keys[:20]:
            bounded.release(k)
            bounded.place(k)
    assert bounded.sizes() == before
    assert sum(bounded.load(n) for n in "abc") == len(keys)
