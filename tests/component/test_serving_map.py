"""The supervisor's routing map (verb ``map``), from the core stepped with a fake clock against
model workers that serve requests."""

from __future__ import annotations

import msgspec

from corral.common.wire.protocol import Status
from corral.common.wire.routemap import parse
from corral.supervisor import verbs

from .modelfleet import Harness, ModelWorker, config

TASKS = {f"t{i}": 1.0 for i in range(6)}


class ServingWorker(ModelWorker):
    def __init__(self, id: str, serve: str | None = None) -> None:
        super().__init__(id)
        self.serve = serve

    def report(self, now: float) -> Status | None:
        status = super().report(now)
        return None if status is None else msgspec.structs.replace(status, serve=self.serve)


def map_of(h: Harness, **args: object) -> dict[str, object] | None:
    result, error, _ = verbs.call(h.core, "map", dict(args), h.now)
    assert error is None, error
    return result  # type: ignore[no-any-return]


def fleet() -> tuple[Harness, ServingWorker, ServingWorker, ServingWorker]:
    h = Harness(config(), dict(TASKS))
    a, b = (h.add(ServingWorker(x, serve=f"tcp://{x}:7770")) for x in "ab")
    c = h.add(ServingWorker("c"))  # runs tasks, serves no requests
    h.until(h.running)
    h.step(1.0)
    h.step(1.0)
    return h, a, b, c


def test_the_map_lists_serving_owners_and_moves_its_version_only_with_content() -> None:
    h, a, _, _ = fleet()
    m = parse(map_of(h))
    assert m.epoch == h.core.life.epoch
    assert m.workers.keys() == {"a", "b"} and m.workers["a"].serve == "tcp://a:7770"
    owners = h.owners()
    for task, ws in m.tasks.items():
        assert list(ws) == [w for w in owners[task] if w != "c"]  # c's tasks: no one serves
    assert map_of(h, if_newer_than=m.version) is None  # current: nothing to send
    h.step(1.0)  # reports that change nothing
    assert map_of(h, if_newer_than=m.version) is None
    a.drain(h.now)
    h.step(1.0)
    newer = parse(map_of(h, if_newer_than=m.version))
    assert newer.version > m.version and newer.workers["a"].state == "lame_duck"


def test_a_moving_task_keeps_its_old_owner_until_the_new_one_runs_it() -> None:
    h, _, b, c = fleet()
    mine = sorted(t for t, ws in h.owners().items() if ws == ["a"])
    assert mine
    h.run(verbs.call(h.core, "drain", {"worker": "a"}, h.now)[2])  # make-before-break
    before = parse(map_of(h))
    assert all(before.tasks[t] == ("a",) for t in mine), "b has not reported them running"
    for w in (b, c):
        h.report(w)  # the new owners report the tasks running: the hand-offs complete
    after = parse(map_of(h, if_newer_than=before.version))
    moved = [t for t in mine if after.tasks[t]]
    assert moved and all(after.tasks[t] == ("b",) for t in moved)
    assert all(not after.tasks[t] for t in mine if t not in moved)  # went to c: no server
    assert all("a" not in ws for ws in after.tasks.values())


def test_a_silent_worker_leaves_the_map() -> None:
    h, a, _, _ = fleet()
    h.until(lambda: not h.core.queries.worker("a").active, silent=(a,))  # type: ignore[union-attr]
    m = parse(map_of(h))
    assert "a" not in m.workers and all("a" not in ws for ws in m.tasks.values())


def test_bad_arguments_are_one_clear_error() -> None:
    h, *_ = fleet()
    for bad in ("7", True, 1.5):
        _, error, _ = verbs.call(h.core, "map", {"if_newer_than": bad}, h.now)
        assert error is not None and error.code == "bad_request"
        assert error.message == "map: if_newer_than must be an integer"


def test_a_map_of_another_epoch_is_always_answered() -> None:
    # A client that held a map from the previous leader (another epoch) gets the whole map,
    # whatever the version numbers; an HA epoch (above 2**40) still fits on the wire.
    h, _, _, _ = fleet()
    m = parse(map_of(h))
    assert map_of(h, if_newer_than=m.version, epoch=m.epoch) is None
    assert parse(map_of(h, if_newer_than=10**6, epoch=m.epoch - 1)).key == m.key
    ha = Harness(config(), dict(TASKS), epoch=(1 << 40) + 123)
    assert parse(map_of(ha)).key == ((1 << 40) + 123, 0)  # empty, but its epoch's
