"""Task lists: parse what a task source returned into ``{task id: cost}``, or say clearly why
not. Pure; fetching is the supervisor's business (supervisor/sources.py).

Accepted shapes (cost defaults to 1):

* lines — one task id per line; blank lines and lines starting with ``#`` are skipped;
* JSON — ``["a", "b"]``, ``[{"id": "a", "cost": 2}, …]``, or ``{"a": 2, "b": 1}``;
* TOML — ``tasks = ["a", "b"]``, ``tasks = [{id = "a", cost = 2}]``, or a ``[tasks]`` table
  of ``id = cost``;
* Python — any iterable of ids, or a mapping of id to cost.

    >>> parse_lines("a\\n# comment\\n\\nb\\n")
    {'a': 1.0, 'b': 1.0}
    >>> parse_json('[{"id": "x", "cost": 2.5}, "y"]')
    {'x': 2.5, 'y': 1.0}
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .codec import MAX_ID_CHARS
from .errors import TaskSourceError

MAX_TASKS = 1_000_000


def _entry(item: Any, where: str) -> tuple[str, float]:
    if isinstance(item, str):
        return _id(item, where), 1.0
    if isinstance(item, Mapping):
        extra = set(item) - {"id", "cost"}
        if "id" not in item or extra:
            raise TaskSourceError(f"{where}: expected {{id, cost}}, got keys {sorted(item)}")
        return _id(item["id"], where), _cost(item.get("cost", 1.0), where)
    raise TaskSourceError(f"{where}: expected a task id or {{id, cost}}, got {type(item).__name__}")


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise TaskSourceError(
            f"{where}: a task id must be a non-empty string of at most {MAX_ID_CHARS} "
            f"characters, got {value!r:.60}"
        )
    if value != value.strip() or "\n" in value:
        raise TaskSourceError(f"{where}: task id {value!r:.60} has surrounding whitespace")
    return value


def _cost(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskSourceError(f"{where}: cost must be a number, got {value!r:.60}")
    if not math.isfinite(value) or value <= 0:
        raise TaskSourceError(f"{where}: cost must be a finite number > 0, got {value!r}")
    return float(value)


def normalize(
    items: Iterable[Any] | Mapping[str, Any], what: str = "task list"
) -> dict[str, float]:
    """Check every entry; duplicates are an error (a source that repeats itself is broken)."""
    out: dict[str, float] = {}
    pairs: Iterable[tuple[str, float]]
    if isinstance(items, Mapping):
        pairs = ((_id(k, f"{what}[{k!r:.40}]"), _cost(v, f"{what}[{k!r:.40}]"))
                 for k, v in items.items())
    elif isinstance(items, str | bytes):
        raise TaskSourceError(f"{what}: expected a list of tasks, got a single string")
    else:
        try:
            pairs = (_entry(x, f"{what}[{i}]") for i, x in enumerate(items))
        except TypeError:
            raise TaskSourceError(f"{what}: expected a list of tasks, got "
                                  f"{type(items).__name__}") from None
    for task, cost in pairs:
        if task in out:
            raise TaskSourceError(f"{what}: task {task!r:.60} appears twice")
        out[task] = cost
        if len(out) > MAX_TASKS:
            raise TaskSourceError(f"{what}: more than {MAX_TASKS} tasks")
    return out


def parse_lines(text: str, what: str = "task list") -> dict[str, float]:
    lines = (line.strip() for line in text.splitlines())
    return normalize([x for x in lines if x and not x.startswith("#")], what)


def parse_json(text: str, what: str = "task list") -> dict[str, float]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TaskSourceError(f"{what}: not valid JSON: {exc}") from None
    if not isinstance(data, list | dict):
        raise TaskSourceError(f"{what}: JSON must be a list or an object, got "
                              f"{type(data).__name__}")
    return normalize(data, what)


def parse_toml(text: str, what: str = "task list") -> dict[str, float]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskSourceError(f"{what}: not valid TOML: {exc}") from None
    if set(data) != {"tasks"}:
        raise TaskSourceError(f"{what}: TOML must hold exactly one key, `tasks`; got "
                              f"{sorted(data)}")
    return normalize(data["tasks"], what)


def parse_text(text: str, name: str) -> dict[str, float]:
    """By the name's extension: .json, .toml, anything else is one id per line."""
    if name.endswith(".json"):
        return parse_json(text, name)
    if name.endswith(".toml"):
        return parse_toml(text, name)
    return parse_lines(text, name)


@dataclass(frozen=True)
class TaskEntry:
    """One task as its source describes it: cost, spec (canonical JSON text), required
    worker labels, and replicas (None: the supervisor's --replicas)."""

    cost: float = 1.0
    spec: str | None = None
    require: Mapping[str, str] = field(default_factory=dict)
    replicas: int | None = None
