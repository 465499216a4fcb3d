"""Task lists: every accepted shape, full entries, and one clear error for each broken one."""

from __future__ import annotations

import doctest
import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.errors import TaskSourceError
from corral.common.wire import tasklist
from corral.common.wire.protocol import MAX_ID_CHARS, MAX_SPEC_BYTES
from corral.common.wire.tasklist import (
    PLAIN,
    TaskEntry,
    canonical_spec,
    entry,
    normalize,
    parse_entry_json,
    parse_json,
    parse_lines,
    parse_text,
    parse_toml,
)


def costs(tasks: dict[str, TaskEntry]) -> dict[str, float]:
    return {k: v.cost for k, v in tasks.items()}


def test_old_shapes_still_parse() -> None:
    assert costs(parse_lines("a\n  b  \n\n# no\n")) == {"a": 1.0, "b": 1.0}
    assert costs(parse_json('{"a": 2, "b": 0.5}')) == {"a": 2.0, "b": 0.5}
    assert costs(parse_json('["a", {"id": "b"}]')) == {"a": 1.0, "b": 1.0}
    assert costs(parse_toml('tasks = ["a", {id = "b", cost = 3}]')) == {"a": 1.0, "b": 3.0}
    assert costs(parse_toml('[tasks]\na = 2\n"b c" = 1')) == {"a": 2.0, "b c": 1.0}
    assert costs(parse_text("[\"x\"]", "f.json")) == {"x": 1.0}
    assert costs(parse_text("x\ny", "f.txt")) == {"x": 1.0, "y": 1.0}
    assert costs(normalize(iter(["a"]))) == {"a": 1.0}
    assert parse_lines("") == {}
    assert all(v is PLAIN for v in parse_lines("a\nb").values())  # ids share one entry


def test_full_entries_in_every_structured_shape() -> None:
    want = {
        "cam-1": TaskEntry(2.0, '{"fps":25,"url":"rtsp://a"}', {"gpu": "true"}, 3),
        "cam-2": PLAIN,
    }
    listed = ('[{"id": "cam-1", "cost": 2, "spec": {"url": "rtsp://a", "fps": 25},'
              ' "require": {"gpu": "true"}, "replicas": 3}, "cam-2"]')
    mapped = ('{"cam-1": {"cost": 2, "spec": {"fps": 25, "url": "rtsp://a"},'
              ' "require": {"gpu": "true"}, "replicas": 3}, "cam-2": {}}')
    toml_list = ('tasks = [{id = "cam-1", cost = 2, spec = {url = "rtsp://a", fps = 25},'
                 ' require = {gpu = "true"}, replicas = 3}, "cam-2"]')
    toml_table = ('[tasks.cam-1]\ncost = 2\nreplicas = 3\nspec = {url = "rtsp://a", fps = 25}\n'
                  'require = {gpu = "true"}\n[tasks.cam-2]\n')
    assert parse_json(listed) == want
    assert parse_json(mapped) == want
    assert parse_toml(toml_list) == want
    assert parse_toml(toml_table) == want
    assert normalize({"cam-1": json.loads(mapped)["cam-1"], "cam-2": 1}) == want
    assert normalize([json.loads(listed)[0], {"id": "cam-2"}]) == want


def test_entries_are_frozen_hashable_and_compare_by_value() -> None:
    a = entry(spec={"b": 1, "a": [1, "é"]}, require={"zone": "eu"})
    b = entry(spec={"a": [1, "é"], "b": 1}, require={"zone": "eu"})
    assert a == b and hash(a) == hash(b) and a.spec == b.spec == '{"a":[1,"é"],"b":1}'
    with pytest.raises(TypeError):
        a.require["zone"] = "us"  # type: ignore[index]
    with pytest.raises(AttributeError):
        a.cost = 2  # type: ignore[misc]
    by_hand = TaskEntry(require={"x": "y"})  # a plain dict is wrapped read-only
    with pytest.raises(TypeError):
        by_hand.require["x"] = "z"  # type: ignore[index]
    assert entry(spec={}) is PLAIN  # an empty spec is no spec
    assert a.as_dict() == {"spec": {"a": [1, "é"], "b": 1}, "require": {"zone": "eu"}}
    assert PLAIN.as_dict() == {}


def test_entry_json_for_one_key() -> None:
    assert parse_entry_json("t", "") is PLAIN
    assert parse_entry_json("t", "{}") is PLAIN
    assert parse_entry_json("t", "2") == TaskEntry(2.0)
    assert parse_entry_json("t", '{"id": "t", "replicas": 2}') == TaskEntry(replicas=2)
    with pytest.raises(TaskSourceError, match=r"^k \(t\): id 'u' differs from its key"):
        parse_entry_json("t", '{"id": "u"}', "k")
    with pytest.raises(TaskSourceError, match=r"^task \(t\): expected an entry object or a "
                                              r"cost, got list"):
        parse_entry_json("t", "[]")
    with pytest.raises(TaskSourceError, match=r"^task \(t\): not valid JSON"):
        parse_entry_json("t", "{")


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (parse_json, "[1, 2]", r"task list\[0\]: expected a task id or an entry"),
        (parse_json, "{", "not valid JSON"),
        (parse_json, "[" * 100_000, "nested too deeply"),
        (parse_json, '"a"', "list or an object, got string"),
        (parse_json, '{"a": -1}', "cost must be a finite number > 0"),
        (parse_json, '{"a": 1e300}', "at most 1e"),
        (parse_json, '{"a": "x"}', "cost must be a number"),
        (parse_json, '{"a": true}', "cost must be a number"),
        (parse_json, '[{"id": "a", "weight": 2}]',
         r"task list\[0\] \(a\): unknown key weight; an entry has id, cost"),
        (parse_json, '[{"cost": 2}]', r"task list\[0\]: an entry needs an id"),
        (parse_json, '[{"id": "room-7", "spec": [1]}]',
         r"^task list\[0\] \(room-7\): spec must be a JSON object, got list$"),
        (parse_json, '{"room-7": {"spec": "x"}}',
         r"^task list\['room-7'\]: spec must be a JSON object, got string$"),
        (parse_json, '[{"id": "a", "require": ["gpu"]}]', "require must be an object"),
        (parse_json, '[{"id": "a", "require": {"gpu": true}}]',
         r"require\['gpu'\] must be a non-empty string"),
        (parse_json, '[{"id": "a", "require": {"": "x"}}]', "label must be a non-empty"),
        (parse_json, '[{"id": "a", "replicas": 0}]', "replicas must be a whole number"),
        (parse_json, '[{"id": "a", "replicas": 2.0}]', "replicas must be a whole number"),
        (parse_json, '{"a": {"id": "b"}}', "differs from its key"),
        (parse_json, '["a", "a"]', "appears twice"),
        (parse_json, '[""]', "non-empty string"),
        (parse_json, '[" a"]', "whitespace"),
        (parse_json, "[\"" + "x" * 300 + "\"]", f"at most {MAX_ID_CHARS}"),
        (parse_toml, 'tasks = [{id = "a", spec = {t = 1979-05-27}}]', "spec is not plain JSON"),
        (parse_toml, "tasks = 1\nother = 2", "exactly one key"),
        (parse_toml, "tasks = 1", "expected a list of tasks, got int"),
        (parse_toml, "tasks = [", "not valid TOML"),
        (parse_lines, "a\na", "appears twice"),
    ],
)
def test_broken_lists_give_one_clear_error(parse: Any, text: str, says: str) -> None:
    with pytest.raises(TaskSourceError, match=says):
        parse(text)


def test_spec_size_is_measured_as_canonical_utf8() -> None:
    room = MAX_SPEC_BYTES - len('{"k":""}')
    assert len(canonical_spec({"k": "x" * room})) == MAX_SPEC_BYTES
    with pytest.raises(TaskSourceError, match=f"spec is {MAX_SPEC_BYTES + 1} bytes"):
        canonical_spec({"k": "x" * (room + 1)})
    # "é" is one character but two bytes of UTF-8.
    with pytest.raises(TaskSourceError, match=f"spec is {MAX_SPEC_BYTES + 2} bytes"):
        parse_json(json.dumps([{"id": "big", "spec": {"k": "é" * (room // 2 + 1)}}]))
    with pytest.raises(TaskSourceError, match="not plain JSON"):
        canonical_spec({"x": float("nan")})


def test_a_string_is_not_a_list() -> None:
    with pytest.raises(TaskSourceError, match="single string"):
        normalize("abc")


def test_doctests() -> None:
    assert doctest.testmod(tasklist).failed == 0


# -- anything parses to a valid map or one TaskSourceError -----------------------------------

_scalar = st.none() | st.booleans() | st.integers(-3, 5) | st.floats() | st.text(max_size=6)
_json = st.recursive(_scalar, lambda inner: st.lists(inner, max_size=3)
                     | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=8)
_field = st.sampled_from(["id", "cost", "spec", "require", "replicas", "other"])
_entry = st.dictionaries(_field, _json | st.sampled_from(["a", "b", 2, {"gpu": "true"}]),
                         max_size=5)
_ids = st.sampled_from(["a", "b", "c", " d", ""])
_lists = st.lists(_ids | _entry | _json, max_size=5)
_maps = st.dictionaries(_ids, _json | _entry, max_size=4)


def _valid(tasks: dict[str, TaskEntry]) -> None:
    for task, e in tasks.items():
        assert isinstance(task, str) and task == task.strip() and 0 < len(task) <= MAX_ID_CHARS
        assert isinstance(e, TaskEntry) and e.cost > 0
        assert e.spec is None or (e.spec.startswith("{") and e.spec != "{}"
                                  and canonical_spec(json.loads(e.spec)) == e.spec)
        assert all(isinstance(k, str) and isinstance(v, str) and k and v
                   for k, v in e.require.items())
        assert e.replicas is None or (type(e.replicas) is int and e.replicas >= 1)


@given(_lists | _maps | _json)
def test_anything_parses_to_valid_entries_or_one_error(data: Any) -> None:
    for parse, text in ((parse_json, json.dumps(data)), (normalize, data)):
        try:
            tasks = parse(text)
        except TaskSourceError as exc:
            assert str(exc)
        else:
            _valid(tasks)
            # The full form round-trips.
            again = parse_json(json.dumps({k: v.as_dict() for k, v in tasks.items()}))
            assert again == tasks


def _per_id(text: str) -> dict[str, TaskEntry] | str:
    """What `parse_lines` gave before its bulk path: every id checked on its own."""
    lines = (line.strip() for line in text.splitlines())
    try:
        return normalize([x for x in lines if x and not x.startswith("#")])
    except TaskSourceError as exc:
        return str(exc)


_LINE = st.one_of(
    st.sampled_from(["a", "b", " a ", "# c", "#", "", "\t", "x" * MAX_ID_CHARS,
                     "y" * (MAX_ID_CHARS + 1), "a b", "é", "\u2028", "\x0b", "\r"]),
    st.text(max_size=6),
)


@given(st.lists(_LINE, max_size=30), st.sampled_from(["\n", "\r\n", "\r", "\x1e"]))
def test_lines_in_bulk_give_what_each_id_checked_alone_gives(lines: list[str],
                                                             sep: str) -> None:
    text = sep.join(lines)
    try:
        got: dict[str, TaskEntry] | str = parse_lines(text)
    except TaskSourceError as exc:
        got = str(exc)
    assert got == _per_id(text)
    if isinstance(got, dict):
        assert list(got) == list(_per_id(text))  # in the list's order
        assert all(v is PLAIN for v in got.values())


def test_a_long_list_is_read_in_chunks_with_a_late_duplicate_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tasklist, "_CHUNK", 3)
    ids = [f"t{i}" for i in range(10)]
    assert list(parse_lines("\n".join(ids))) == ids
    with pytest.raises(TaskSourceError, match="'t1' appears twice"):
        parse_lines("\n".join([*ids, "t1"]))
    monkeypatch.setattr(tasklist, "MAX_TASKS", 9)
    with pytest.raises(TaskSourceError, match="more than 9 tasks"):
        parse_lines("\n".join(ids))
