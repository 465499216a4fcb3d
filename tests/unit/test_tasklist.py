"""Task lists: every accepted shape, and one clear error for each broken one."""

from __future__ import annotations

import doctest

import pytest

from corral.common import tasklist
from corral.common.errors import TaskSourceError
from corral.common.tasklist import normalize, parse_json, parse_lines, parse_text, parse_toml


def test_shapes() -> None:
    assert parse_lines("a\n  b  \n\n# no\n") == {"a": 1.0, "b": 1.0}
    assert parse_json('{"a": 2, "b": 0.5}') == {"a": 2.0, "b": 0.5}
    assert parse_json('["a", {"id": "b"}]') == {"a": 1.0, "b": 1.0}
    assert parse_toml('tasks = ["a", {id = "b", cost = 3}]') == {"a": 1.0, "b": 3.0}
    assert parse_toml('[tasks]\na = 2\n"b c" = 1') == {"a": 2.0, "b c": 1.0}
    assert parse_text("[\"x\"]", "f.json") == {"x": 1.0}
    assert parse_text("x\ny", "f.txt") == {"x": 1.0, "y": 1.0}
    assert normalize(iter(["a"])) == {"a": 1.0}
    assert parse_lines("") == {}


@pytest.mark.parametrize(
    ("parse", "text", "says"),
    [
        (parse_json, "[1, 2]", "task id or"),
        (parse_json, "{", "not valid JSON"),
        (parse_json, '"a"', "list or an object"),
        (parse_json, '{"a": -1}', "cost must be a finite number > 0"),
        (parse_json, '{"a": "x"}', "cost must be a number"),
        (parse_json, '[{"id": "a", "weight": 2}]', "expected {id, cost}"),
        (parse_json, '["a", "a"]', "appears twice"),
        (parse_json, '[""]', "non-empty string"),
        (parse_json, '[" a"]', "whitespace"),
        (parse_json, "[\"" + "x" * 300 + "\"]", "at most 256"),
        (parse_toml, "tasks = 1\nother = 2", "exactly one key"),
        (parse_toml, "tasks = [", "not valid TOML"),
        (parse_lines, "a\na", "appears twice"),
    ],
)
def test_broken_lists_give_one_clear_error(parse: object, text: str, says: str) -> None:
    with pytest.raises(TaskSourceError, match=says):
        parse(text)  # type: ignore[operator]


def test_a_string_is_not_a_list() -> None:
    with pytest.raises(TaskSourceError, match="single string"):
        normalize("abc")


def test_doctests() -> None:
    assert doctest.testmod(tasklist).failed == 0
