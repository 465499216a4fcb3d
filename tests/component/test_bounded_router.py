"""Weeks without a restart, the `Router`: fresh worker ids come into its map and leave it, with
calls to them that succeed, fail, time out and end after they left; every table of the router
(`Router.table_sizes`) is back to its size with the same live workers. Real sockets (the fake
control endpoint and workers of test_serving_router), a fake clock."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest

from corral.client.errors import CallTimeout, RemoteError

from .test_serving_router import Fake, World, code, ok

KEEP = [f"keep-{i}" for i in range(5)]
ROUNDS, FRESH = 200, 10  # 2,000 fresh worker ids, each with its own connection


@pytest.fixture
def world() -> Iterator[World]:
    w = World()
    try:
        yield w
    finally:
        w.close()


def test_router_tables_come_back_to_their_size_after_fresh_workers_come_and_go(
        world: World) -> None:
    serving = Fake(ok("fresh"))
    failing = Fake(code("error"))
    keep = world.worker("keep", ok("keep"))
    world.workers.update(serving=serving, failing=failing)
    workers = {w: {"serve": keep.address, "state": "ready"} for w in KEEP}
    tasks = {f"t-{w}": [w] for w in KEEP}
    world.control.set(tasks, workers)
    now = [0.0]
    r = world.router(clock=lambda: now[0], policy="llrr", subset_size=4, forget_after=30.0)

    def steady() -> dict[str, int]:
        now[0] += 60.0  # past every error window, blackout and forget_after
        for t in tasks:
            r.call(t, 1)
        for _ in range(10):
            r.call_any(1)
        return r.table_sizes()

    before = steady()
    for rnd in range(ROUNDS):
        now[0] += 0.5
        fresh = [f"r{rnd:03d}-{i}" for i in range(FRESH)]
        extra = {w: {"serve": (failing if i % 3 == 0 else serving).address,
                     "state": "lame_duck" if i == 1 else "ready"} for i, w in enumerate(fresh)}
        world.control.set({**tasks, **{f"t-{w}": [w] for w in fresh},
                           f"both-{rnd}": fresh[4:6]}, {**workers, **extra})
        assert r.refresh()
        for w in fresh[2:]:
            with contextlib.suppress(RemoteError):  # a third of them answer errors
                r.call(f"t-{w}", 1)
        r.call(f"both-{rnd}", 1)
        for _ in range(3):
            with contextlib.suppress(RemoteError):
                r.call_any(1)
        with pytest.raises(CallTimeout):  # its reply comes after the worker left the map
            r.call(f"t-{fresh[2]}", 1, timeout=0.0)
        world.control.set(tasks, workers)
        assert r.refresh()
    after = steady()
    assert after == before
    assert r.counters["timeouts"] == ROUNDS
