"""The client `Router` over real sockets, against a fake control endpoint serving a map and
fake workers (ROUTERs in threads) whose answers the tests choose."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import zmq

from corral.client import Router, RouterConfig
from corral.client.errors import (
    CallTimeout,
    MapUnavailable,
    NoOwner,
    NotOwner,
    RemoteError,
    Unavailable,
)
from corral.common.balancer.weights import WeightConfig
from corral.common.wire.codec import decode, encode
from corral.common.wire.protocol import ControlReply, ControlRequest, Reply, Request

from ..support import free_port

Answer = Callable[[Request], Reply | None]  # None: never answer


class Fake(threading.Thread):
    """A ROUTER on loopback answering each decoded message with ``answer`` (None: silence)."""

    def __init__(self, answer: Callable[[Any], Any]) -> None:
        super().__init__(daemon=True)
        self.address = f"tcp://127.0.0.1:{free_port()}"
        self.answer = answer
        self.seen: list[Any] = []
        self.raw: list[bytes] = []  # extra frames to send before the next answer
        self._halt = threading.Event()
        self._bound = threading.Event()
        self.start()
        assert self._bound.wait(5)

    def run(self) -> None:
        ctx = zmq.Context()
        sock = ctx.socket(zmq.ROUTER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self.address)
        self._bound.set()
        while not self._halt.is_set():
            if not sock.poll(20):
                continue
            identity, frame = sock.recv_multipart()
            msg = decode(frame)
            self.seen.append(msg)
            for extra in self.raw:
                sock.send_multipart([identity, extra])
            self.raw = []
            out = self.answer(msg)
            if out is not None:
                sock.send_multipart([identity, encode(out)])
        sock.close()
        ctx.term()

    def close(self) -> None:
        self._halt.set()
        self.join(5)


class Control:
    """The supervisor's map verb: ``tasks`` and ``workers`` become a map, versioned."""

    def __init__(self) -> None:
        self.version = 1
        self.tasks: dict[str, list[str]] = {}
        self.workers: dict[str, dict[str, str]] = {}
        self.fake = Fake(self.answer)

    def set(self, tasks: dict[str, list[str]], workers: dict[str, dict[str, str]]) -> None:
        self.tasks, self.workers = tasks, workers
        self.version += 1

    def answer(self, req: ControlRequest) -> ControlReply:
        if req.args.get("if_newer_than", -1) >= self.version:
            return ControlReply(req.request_id, None)
        return ControlReply(req.request_id, {"version": self.version, "epoch": 1,
                                             "workers": self.workers, "tasks": self.tasks})

    @property
    def fetches(self) -> int:
        return len(self.fake.seen)


def ok(name: str, lame: bool = False) -> Answer:
    return lambda r: Reply(r.id, "ok", [name, r.body], version=(1, 1), qps=10, utilization=0.1,
                           lame_duck=lame)


def code(c: str) -> Answer:
    return lambda r: Reply(r.id, c, error=f"said {c}")


class World:
    def __init__(self) -> None:
        self.control = Control()
        self.workers: dict[str, Fake] = {}
        self.routers: list[Router] = []

    def worker(self, name: str, answer: Answer, state: str = "ready") -> Fake:
        self.workers[name] = Fake(answer)
        self.control.workers[name] = {"serve": self.workers[name].address, "state": state}
        return self.workers[name]

    def router(self, clock: Callable[[], float] = time.monotonic, **cfg: Any) -> Router:
        base: dict[str, Any] = dict(control=self.control.fake.address, policy="rr", client=1,
                                    timeout=2.0, control_timeout=2.0, refresh_interval=60.0,
                                    connect_wait=0.1)
        r = Router(RouterConfig(**{**base, **cfg}), clock=clock)
        self.routers.append(r)
        return r

    def close(self) -> None:
        for r in self.routers:
            r.close()
        for f in [*self.workers.values(), self.control.fake]:
            f.close()


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    try:
        yield w
    finally:
        w.close()


def test_call_call_key_and_call_any_go_where_the_map_says(world: World) -> None:
    world.worker("w1", ok("w1"))
    world.worker("w2", ok("w2"))
    world.control.tasks = {"t1": ["w1"], "t2": ["w2"]}
    r = world.router()
    assert r.call("t1", "x") == ["w1", "x"] and r.call("t2", 1) == ["w2", 1]
    key_task = r.task_for("user-7")
    assert r.call_key("user-7", None) == [world.control.tasks[key_task][0], None]
    got = Counter(r.call_any(i)[0] for i in range(10))
    assert got == Counter({"w1": 5, "w2": 5})  # round robin over the subset
    assert [m.task for m in world.workers["w1"].seen[:1]] == ["t1"]
    assert r.counters["ok"] == 13 and r.counters["refreshes"] == 1
    assert r.explain("t1")["owners"][0]["client_state"] == "healthy"


def test_not_owner_refreshes_the_map_and_retries_once_elsewhere(world: World) -> None:
    world.worker("w1", code("not_owner"))
    world.worker("w2", ok("w2"))
    world.control.tasks = {"t": ["w1"]}
    r = world.router()
    r.refresh()
    world.control.set({"t": ["w2"]}, world.control.workers)  # the task moved: r's map is stale
    assert r.call("t", "x") == ["w2", "x"]
    assert r.counters["not_owner"] == 1 and r.counters["retries"] == 1
    assert world.control.fetches == 2
    world.control.set({"t": ["w1"]}, world.control.workers)  # back to the one that refuses
    r.refresh()
    with pytest.raises(NotOwner, match="'t': w1 answered not_owner again"):
        r.call("t", "x")


def test_errors_are_one_clear_exception_each(world: World) -> None:
    world.worker("w1", code("error"))
    world.control.tasks = {"t": ["w1"], "empty": []}
    r = world.router()
    with pytest.raises(RemoteError, match="w1 failed to serve task 't': said error"):
        r.call("t", 1)
    with pytest.raises(NoOwner, match="no task 'nope' in map version"):
        r.call("nope", 1)
    with pytest.raises(NoOwner, match="task 'empty' has no owner that serves"):
        r.call("empty", 1)
    lonely = Router(RouterConfig(control=f"tcp://127.0.0.1:{free_port()}",
                                 control_timeout=0.2))
    try:
        with pytest.raises(MapUnavailable, match="no map from the supervisor"):
            lonely.call_any(1)
    finally:
        lonely.close()


def test_timeouts_count_as_in_flight_until_the_late_reply(world: World) -> None:
    hold = threading.Event()
    late: list[Request] = []

    def slow(req: Request) -> Reply | None:
        late.append(req)
        return None if not hold.is_set() else Reply(req.id, "ok", "late")

    world.worker("w1", slow)
    world.control.tasks = {"t": ["w1"]}
    r = world.router(max_active=2, timeout=0.2)
    for _ in range(2):
        with pytest.raises(CallTimeout, match=r"task 't': no reply from w1 \(tcp://.*\) within"):
            r.call("t", 1)
    with pytest.raises(Unavailable, match="has 2 requests in flight"):  # flow control
        r.call("t", 1)
    assert len(late) == 2  # the third was never sent
    skew = [0.0]  # the router's clock runs ahead when the test says so
    r2 = world.router(clock=lambda: time.monotonic() + skew[0], max_active=2, timeout=0.2,
                      forget_after=30.0)
    for _ in range(2):
        with pytest.raises(CallTimeout):
            r2.call("t", 1)
    skew[0] = 31.0
    hold.set()
    assert r2.call("t", 1) == "late"  # forgotten: the limit no longer holds it back


def test_a_lame_duck_reply_stops_new_call_any_requests(world: World) -> None:
    world.worker("w1", ok("w1", lame=True))
    world.worker("w2", ok("w2"))
    r = world.router()
    got = Counter(r.call_any(i)[0] for i in range(10))
    assert got["w1"] == 1 and got["w2"] == 9
    r.refresh()  # the map still says ready: the fresher word of the reply is kept
    assert {r.call_any(i)[0] for i in range(4)} == {"w2"}
    world.control.workers["w1"]["state"] = "starting"
    world.control.version += 1
    r.refresh()
    world.control.workers["w1"]["state"] = "ready"  # a change of the map's state counts
    world.control.version += 1
    r.refresh()
    assert "w1" in {r.call_any(i)[0] for i in range(4)}


def test_the_maps_lame_ducks_are_avoided_but_still_own_their_tasks(world: World) -> None:
    world.worker("w1", ok("w1", lame=True), state="lame_duck")
    world.worker("w2", ok("w2"))
    world.control.tasks = {"t": ["w1", "w2"], "only": ["w1"]}
    r = world.router()
    assert {r.call("t", i)[0] for i in range(6)} == {"w2"}
    assert r.call("only", 1) == ["w1", 1]
    assert {r.call_any(i)[0] for i in range(6)} == {"w2"}


def test_a_refusing_worker_is_skipped_without_an_error(world: World) -> None:
    world.worker("w2", ok("w2"))
    world.control.workers["dead"] = {"serve": f"tcp://127.0.0.1:{free_port()}",
                                     "state": "ready"}
    world.control.tasks = {"t": ["dead", "w2"]}
    r = world.router(refused_retry=30.0)
    assert {r.call("t", i)[0] for i in range(4)} == {"w2"}
    assert {r.call_any(i)[0] for i in range(4)} == {"w2"}
    assert r.counters["send_failures"] >= 1
    world.control.tasks = {"t": ["dead"]}
    world.control.version += 1
    r.refresh()
    with pytest.raises(Unavailable, match="no worker took the request"):
        r.call("t", 1)


def test_stray_frames_are_counted_and_periodic_refreshes_ask_by_version(
        world: World) -> None:
    w1 = world.worker("w1", ok("w1"))
    world.control.tasks = {"t": ["w1"]}
    r = world.router(refresh_interval=0.0)
    w1.raw = [b"junk", encode(Reply(999_999, "ok"))]
    assert r.call("t", 1) == ["w1", 1]
    assert r.counters["bad_replies"] == 1 and r.counters["late_replies"] == 1
    before = world.control.fetches
    r.call("t", 2)
    r.call("t", 3)
    assert world.control.fetches == before + 2  # refresh_interval 0: every call asks...
    versions = [m.args.get("if_newer_than") for m in world.control.fake.seen]
    assert versions[0] is None and set(versions[1:]) == {world.control.version}  # ...by version


def test_extreme_but_wire_valid_load_reports_are_counted_and_calls_keep_working(
        world: World) -> None:
    """A buggy or hostile worker answers with load figures the wire accepts (0 to 1e15) but no
    real load produces: one such report used to make every call_any raise ValueError for the
    whole subset. Now the Router counts it and ignores it, and every call succeeds."""
    extremes = [(1e15, 1e-300, 0.0), (1e15, 5e-324, 1e15), (0.0, 1e15, 1e15),
                (1e-300, 1e-300, 0.0), (1e15, 1e15, 1e15)]  # fmt: skip
    turn = [0]

    def evil(r: Request) -> Reply:
        qps, utilization, errors = extremes[turn[0] % len(extremes)]
        turn[0] += 1
        return Reply(r.id, "ok", ["evil", r.body], version=(1, 1), qps=qps,
                     utilization=utilization, errors=errors)

    world.worker("evil", evil)
    world.worker("good", ok("good"))
    world.control.tasks = {"t": ["evil", "good"]}
    weights = WeightConfig(blackout=0.0, update_period=0.001)
    r = world.router(policy="wrr", weights=weights)
    served: Counter[str] = Counter()
    for i in range(60):
        served[r.call_any(i)[0]] += 1
        served[r.call("t", i)[0]] += 1
        time.sleep(0.002)  # let the weights be recomputed between calls
    assert sum(served.values()) == 120 and r.counters["ok"] == 120
    assert served["evil"] > 0 and served["good"] > 0
    assert r.counters["bad_reports"] == turn[0]  # every one of the evil worker's reports
    assert r.reports["evil"].qps in {q for q, _, _ in extremes}  # what it said, for metrics
