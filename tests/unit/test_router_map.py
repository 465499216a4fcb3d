"""The routing map: parsing the ``map`` verb's result, versions, keys → tasks, explanations."""

from __future__ import annotations

import doctest
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.client import routes
from corral.client.routes import TaskRing, explain
from corral.common.errors import ProtocolError
from corral.common.wire import routemap
from corral.common.wire.routemap import MapVersions, RouteMap, WorkerEntry, parse

RESULT: dict[str, Any] = {
    "version": 5,
    "epoch": 3,
    "workers": {"w1": {"serve": "tcp://h1:7770", "state": "ready"},
                "w2": {"serve": "tcp://h2:7770", "state": "lame_duck"},
                "w3": {"serve": "tcp://h3:7770", "state": "starting"}},
    "tasks": {"a": ["w1"], "b": ["w2", "w1"], "c": ["w2"], "d": [], "e": ["w3", "gone"]},
}


def test_doctests() -> None:
    assert doctest.testmod(routemap).failed == 0


def test_parse_and_back() -> None:
    m = parse(RESULT)
    assert m.version == 5 and m.epoch == 3 and m.key == (3, 5)
    assert m.workers["w2"] == WorkerEntry("tcp://h2:7770", "lame_duck")
    assert m.tasks["b"] == ("w2", "w1") and m.tasks["d"] == ()
    assert m.tasks["e"] == ("w3",)  # an owner that is not a serving worker is left out
    assert routemap.to_result(m)["tasks"]["e"] == ["w3"]
    assert parse(routemap.to_result(m)) == m
    assert parse({**RESULT, "later_key": 1}) == m  # the view may grow


@pytest.mark.parametrize("bad", [
    None, [], {"version": 1}, {**RESULT, "version": "1"},
    {**RESULT, "workers": {"w1": {"serve": "x", "state": "asleep"}}},
    {**RESULT, "workers": {"w1": {"state": "ready"}}},
    {**RESULT, "tasks": {"a": "w1"}},
])
def test_a_bad_map_is_one_protocol_error(bad: Any) -> None:
    with pytest.raises(ProtocolError, match=r"^map: "):
        parse(bad)


def test_versions_move_with_content_only_and_start_above_earlier_epochs() -> None:
    built = []

    def build(owner: str) -> Any:
        def go() -> Any:
            built.append(owner)
            return {"t": (owner,)}, {owner: WorkerEntry("tcp://x:1", "ready")}
        return go

    v1 = MapVersions(epoch=1)
    first = v1.current("s1", build("w1"))
    assert v1.current("s1", build("w9")) is first and built == ["w1"]  # same signature
    assert v1.current("s2", build("w1")).version == first.version  # rebuilt, same content
    moved = v1.current("s3", build("w2"))
    assert moved.version == first.version + 1 and moved.tasks == {"t": ("w2",)}
    assert v1.result()["tasks"] == {"t": ["w2"]} and v1.result() is v1.result()
    assert MapVersions(epoch=2).current("s1", build("w1")).key > moved.key


def test_keys_go_to_tasks_consistently_and_few_move_when_a_task_is_added() -> None:
    tasks = {f"part-{i}": () for i in range(20)}
    ring = TaskRing(tasks)
    keys = [f"user-{i}" for i in range(4000)]
    before = {k: ring.task_for(k) for k in keys}
    other_order = TaskRing(dict(reversed(tasks.items())))  # what another client builds
    assert before == {k: other_order.task_for(k) for k in keys}
    assert len(set(before.values())) == 20
    after = TaskRing({**tasks, "part-20": ()})
    moved = [k for k in keys if after.task_for(k) != before[k]]
    assert 0 < len(moved) < 0.1 * len(keys)  # about 1/21, all of them to the new task
    assert {after.task_for(k) for k in moved} == {"part-20"}
    with pytest.raises(LookupError):
        TaskRing({}).task_for("k")


def test_explain_says_where_and_why() -> None:
    m = parse(RESULT)
    a = explain(m, task="a")
    assert a["goes_to"] == ["w1"] and a["verdict"] == "goes to w1"
    b = explain(m, task="b")  # the lame duck is avoided while a ready owner exists
    assert b["goes_to"] == ["w1"]
    assert [o["why"] for o in b["owners"]] == [
        "avoided while any owner is ready: lame duck", "eligible"]
    c = explain(m, task="c")  # ... and used when it is the only owner
    assert c["goes_to"] == ["w2"] and "no owner is ready" in c["verdict"]
    assert explain(m, task="d")["verdict"].startswith("fails: no worker")
    k = explain(m, key="user-42")
    assert k["key"] == "user-42" and k["task"] == TaskRing(m.tasks).task_for("user-42")
    with pytest.raises(LookupError, match="no task 'zz'"):
        explain(m, task="zz")
    with pytest.raises(LookupError, match="no tasks"):
        explain(RouteMap(1), key="k")


@given(st.dictionaries(st.text(min_size=1, max_size=5),
                       st.lists(st.sampled_from(["w1", "w2", "w3"]), unique=True, max_size=3),
                       max_size=10),
       st.dictionaries(st.sampled_from(["w1", "w2", "w3"]),
                       st.sampled_from(["ready", "starting", "lame_duck"])))
def test_tiers_prefer_ready_owners_and_lose_none(tasks: dict[str, list[str]],
                                                  states: dict[str, str]) -> None:
    workers = {w: WorkerEntry(f"tcp://{w}:1", s) for w, s in states.items()}
    m = parse(routemap.to_result(RouteMap(1, 0, workers, {t: tuple(o) for t, o in
                                                         tasks.items()})))
    for task, owners in m.tasks.items():
        tiers = routes.tiers(owners, m.workers)
        assert sorted(w for tier in tiers for w in tier) == sorted(owners)
        if any(m.workers[w].state == "ready" for w in owners):
            assert all(m.workers[w].state == "ready" for w in tiers[0])
        assert explain(m, task=task)["goes_to"] == (tiers[0] if tiers else [])
