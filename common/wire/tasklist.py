"""Task lists: parse what a task source returned into ``{task id: TaskEntry}``, or say clearly
why not. Pure; fetching is the supervisor's business (supervisor/sources.py). docs/supervisor.md
("Task sources") shows every shape to operators.

A task is an id and an entry: ``cost`` (default 1), ``spec`` (a JSON object handed to the
worker with the task, at most 64 KiB as canonical JSON), ``require`` (labels a worker must have,
``{"gpu": "true"}``) and ``replicas`` (overrides ``--replicas`` for this task).

Accepted shapes:

* lines — one task id per line; blank lines and lines starting with ``#`` are skipped (ids
  only: no cost, spec or labels);
* JSON — ``["a", "b"]``, ``[{"id": "a", "cost": 2, "spec": {…}}, …]``, ``{"a": 2, "b": 1}``
  or ``{"a": {"cost": 2, "require": {…}}, …}``;
* TOML — ``tasks = ["a", {id = "b", cost = 2}]``, or a ``[tasks]`` table whose values are costs
  or entries (``[tasks.a]`` sub-tables);
* Python — an iterable of ids or of entry dicts, or a mapping of id to cost or to entry dict.

    >>> parse_lines("a\\n# comment\\n\\nb\\n")
    {'a': TaskEntry(), 'b': TaskEntry()}
    >>> parse_json('[{"id": "x", "cost": 2.5, "spec": {"url": "rtsp://x", "fps": 25}}, "y"]')
    {'x': TaskEntry(cost=2.5, spec='{"fps":25,"url":"rtsp://x"}'), 'y': TaskEntry()}
    >>> parse_json('{"z": {"require": {"gpu": "true"}, "replicas": 3}}')["z"].as_dict()
    {'require': {'gpu': 'true'}, 'replicas': 3}
    >>> parse_json('[{"id": "r7", "spec": [1]}]')
    Traceback (most recent call last):
    ...
    corral.common.errors.TaskSourceError: task list[0] (r7): spec must be a JSON object, got list
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ..errors import TaskSourceError
from .ids import FORBIDDEN, check_id
from .protocol import MAX_ID_CHARS, MAX_LABELS, MAX_NUMBER, MAX_SPEC_BYTES

MAX_TASKS = 1_000_000
MAX_REPLICAS = 1000
FIELDS = ("id", "cost", "spec", "require", "replicas")
_NO_LABELS: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class TaskEntry:
    """One task's entry. ``spec`` is canonical JSON text (sorted keys, no spaces, UTF-8 as is),
    so equal specs are equal strings; an empty object is no spec. ``require`` is read-only.
    Parsers check every field; build one by hand with `entry` to get the same checks."""

    cost: float = 1.0
    spec: str | None = None
    require: Mapping[str, str] = field(default_factory=lambda: _NO_LABELS)
    replicas: int | None = None

    def __post_init__(self) -> None:
        if type(self.require) is not MappingProxyType:
            object.__setattr__(self, "require", MappingProxyType(dict(self.require)))

    def __hash__(self) -> int:
        return hash((self.cost, self.spec, frozenset(self.require.items()), self.replicas))

    def __repr__(self) -> str:  # only what differs from the defaults, as the docs show it
        parts = [f"{k}={v!r}" for k, v in self._set_fields().items()]
        return f"TaskEntry({', '.join(parts)})"

    def _set_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.cost != 1.0:
            out["cost"] = self.cost
        if self.spec is not None:
            out["spec"] = self.spec
        if self.require:
            out["require"] = dict(self.require)
        if self.replicas is not None:
            out["replicas"] = self.replicas
        return out

    def as_dict(self) -> dict[str, Any]:
        """The entry's full form without its id and without defaults (spec as an object):
        what a JSON source or an etcd value holds, and what ``-o json`` can show."""
        out = self._set_fields()
        if self.spec is not None:
            out["spec"] = json.loads(self.spec)
        return out


PLAIN = TaskEntry()  # shared by every entry that is only an id
_CHUNK = 50_000  # ids checked in one C call by `parse_lines` (~30 ms)


def entry(cost: Any = 1.0, spec: Any = None, require: Any = None, replicas: Any = None,
          where: str = "task") -> TaskEntry:
    """A checked `TaskEntry`; anything wrong is one `TaskSourceError` starting with ``where``."""
    cost = _cost(cost, where)
    text = _spec(spec, where)
    labels = _require(require, where)
    count = _replicas(replicas, where)
    if cost == 1.0 and text is None and not labels and count is None:
        return PLAIN
    return TaskEntry(cost, text, MappingProxyType(labels) if labels else _NO_LABELS, count)


def canonical_spec(spec: Any, where: str = "spec") -> str:
    """A JSON object as canonical text: sorted keys, separators ``,`` and ``:``, no ASCII
    escaping. At most `MAX_SPEC_BYTES` bytes of UTF-8.

    >>> canonical_spec({"b": [1, 2.5], "a": "é"})
    '{"a":"é","b":[1,2.5]}'
    """
    if not isinstance(spec, Mapping):
        raise TaskSourceError(f"{where}: spec must be a JSON object, got {_kind(spec)}")
    try:
        text = json.dumps(dict(spec), sort_keys=True, separators=(",", ":"),
                          ensure_ascii=False, allow_nan=False)
    except RecursionError:
        raise TaskSourceError(f"{where}: spec is nested too deeply") from None
    except (TypeError, ValueError) as exc:
        raise TaskSourceError(f"{where}: spec is not plain JSON: {exc}") from None
    size = len(text) if text.isascii() else len(text.encode())
    if size > MAX_SPEC_BYTES:
        raise TaskSourceError(f"{where}: spec is {size} bytes as JSON, more than the "
                              f"{MAX_SPEC_BYTES} allowed")
    return text


def _kind(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def _spec(value: Any, where: str) -> str | None:
    if value is None:
        return None
    text = canonical_spec(value, where)
    return None if text == "{}" else text


def _require(value: Any, where: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TaskSourceError(f"{where}: require must be an object of label = value, got "
                              f"{_kind(value)}")
    if len(value) > MAX_LABELS:
        raise TaskSourceError(f"{where}: require has {len(value)} labels, more than "
                              f"{MAX_LABELS}")
    for k, v in value.items():
        for part, what in ((k, "label"), (v, f"require[{k!r:.40}]")):
            if not isinstance(part, str) or not part or len(part) > MAX_ID_CHARS:
                raise TaskSourceError(f"{where}: {what} must be a non-empty string of at most "
                                      f"{MAX_ID_CHARS} characters, got {part!r:.60}")
            why = check_id(part, what)
            if why is not None:
                raise TaskSourceError(f"{where}: {why}")
    return dict(value)


def _replicas(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_REPLICAS:
        raise TaskSourceError(f"{where}: replicas must be a whole number from 1 to "
                              f"{MAX_REPLICAS}, got {value!r:.60}")
    return value


def _cost(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TaskSourceError(f"{where}: cost must be a number, got {value!r:.60}")
    if not math.isfinite(value) or not 0 < value <= MAX_NUMBER:
        raise TaskSourceError(f"{where}: cost must be a finite number > 0 and at most "
                              f"{MAX_NUMBER:g}, got {value!r}")
    return float(value)


def _id(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise TaskSourceError(
            f"{where}: a task id must be a non-empty string of at most {MAX_ID_CHARS} "
            f"characters, got {value!r:.60}"
        )
    why = check_id(value, "task id")
    if why is not None:
        raise TaskSourceError(f"{where}: {why}")
    if value != value.strip():
        raise TaskSourceError(f"{where}: task id {value!r:.60} has surrounding whitespace")
    return value


def _full(item: Mapping[Any, Any], task: str, where: str) -> TaskEntry:
    unknown = sorted(str(k) for k in item if k not in FIELDS)
    if unknown:
        raise TaskSourceError(f"{where}: unknown key{'s' * (len(unknown) > 1)} "
                              f"{', '.join(unknown)}; an entry has {', '.join(FIELDS)}")
    if "id" in item and item["id"] != task:
        raise TaskSourceError(f"{where}: id {item['id']!r:.60} differs from its key")
    return entry(item.get("cost", 1.0), item.get("spec"), item.get("require"),
                 item.get("replicas"), where)


def _listed(item: Any, where: str) -> tuple[str, TaskEntry]:
    """An element of a list: an id, or an entry object with an ``id``."""
    if isinstance(item, str):
        return _id(item, where), PLAIN
    if isinstance(item, Mapping):
        if "id" not in item:
            raise TaskSourceError(f"{where}: an entry needs an id, got keys "
                                  f"{sorted(map(str, item))}")
        task = _id(item["id"], where)
        return task, _full(item, task, f"{where} ({task:.60})")
    raise TaskSourceError(f"{where}: expected a task id or an entry object, got {_kind(item)}")


def _mapped(task: Any, value: Any, where: str) -> tuple[str, TaskEntry]:
    """A member of a mapping: id -> cost, or id -> entry object (empty for the defaults)."""
    task = _id(task, where)
    if isinstance(value, Mapping):
        return task, _full(value, task, where)
    return task, entry(value, where=where)


def normalize(
    items: Iterable[Any] | Mapping[Any, Any], what: str = "task list"
) -> dict[str, TaskEntry]:
    """Check every entry; duplicates are an error (a source that repeats itself is broken)."""
    out: dict[str, TaskEntry] = {}
    pairs: Iterable[tuple[str, TaskEntry]]
    if isinstance(items, Mapping):
        pairs = (_mapped(k, v, f"{what}[{k!r:.40}]") for k, v in items.items())
    elif isinstance(items, str | bytes):
        raise TaskSourceError(f"{what}: expected a list of tasks, got a single string")
    else:
        try:
            pairs = (_listed(x, f"{what}[{i}]") for i, x in enumerate(items))
        except TypeError:
            raise TaskSourceError(f"{what}: expected a list of tasks, got "
                                  f"{type(items).__name__}") from None
    for task, item in pairs:
        if task in out:
            raise TaskSourceError(f"{what}: task {task!r:.60} appears twice")
        out[task] = item
        if len(out) > MAX_TASKS:
            raise TaskSourceError(f"{what}: more than {MAX_TASKS} tasks")
    return out


def parse_entry_json(task: str, text: str, what: str = "task") -> TaskEntry:
    """One task's entry stored on its own (an etcd value): empty text or ``{}`` is the default
    entry, a number is a cost, an object is the full form (its ``id``, if any, must be
    ``task``).

    >>> parse_entry_json("cam-1", '{"cost": 2, "spec": {"fps": 25}}')
    TaskEntry(cost=2.0, spec='{"fps":25}')
    """
    where = f"{what} ({task:.60})"
    _id(task, where)
    if not text.strip():
        return PLAIN
    data = _loads_json(text, where)
    if not isinstance(data, dict | int | float) or isinstance(data, bool):
        raise TaskSourceError(f"{where}: expected an entry object or a cost, got {_kind(data)}")
    return _mapped(task, data, where)[1]


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refused if it names a key twice (json keeps the last one silently: a
    task listed twice would be the second entry, restarted with its spec)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _Duplicate(key)
        out[key] = value
    return out


class _Duplicate(Exception):
    pass


def _loads_json(text: str, what: str) -> Any:
    try:
        return json.loads(text, object_pairs_hook=_no_duplicate_keys)
    except _Duplicate as exc:
        raise TaskSourceError(f"{what}: key {exc.args[0]!r:.60} appears twice in one object "
                              "(a task id may be listed once)") from None
    except json.JSONDecodeError as exc:
        raise TaskSourceError(f"{what}: not valid JSON: {exc}") from None
    except RecursionError:
        raise TaskSourceError(f"{what}: JSON nested too deeply") from None


def parse_lines(text: str, what: str = "task list") -> dict[str, TaskEntry]:
    lines = (line.strip() for line in text.splitlines())
    ids = [x for x in lines if x and not x.startswith("#")]
    # A stripped line is a non-empty string with no surrounding whitespace and no line break:
    # of `_id`'s checks the length and the characters are left, done in bulk in C (about half
    # the time the task-source thread holds the GIL that the supervisor's loop waits on), in
    # chunks so that no single call holds it for long. Anything wrong goes the long way, for
    # its error.
    if (len(ids) > MAX_TASKS or max(map(len, ids), default=0) > MAX_ID_CHARS
            or FORBIDDEN.search("".join(ids))):
        return normalize(ids, what)
    out: dict[str, TaskEntry] = {}
    for i in range(0, len(ids), _CHUNK):
        out.update(dict.fromkeys(ids[i:i + _CHUNK], PLAIN))
    if len(out) != len(ids):  # a duplicate
        return normalize(ids, what)
    return out


def parse_json(text: str, what: str = "task list") -> dict[str, TaskEntry]:
    data = _loads_json(text, what)
    if not isinstance(data, list | dict):
        raise TaskSourceError(f"{what}: JSON must be a list or an object, got {_kind(data)}")
    return normalize(data, what)


def parse_toml(text: str, what: str = "task list") -> dict[str, TaskEntry]:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TaskSourceError(f"{what}: not valid TOML: {exc}") from None
    if set(data) != {"tasks"}:
        raise TaskSourceError(f"{what}: TOML must hold exactly one key, `tasks`; got "
                              f"{sorted(data)}")
    return normalize(data["tasks"], what)


def parse_text(text: str, name: str) -> dict[str, TaskEntry]:
    """By the name's extension: .json, .toml, anything else is one id per line."""
    if name.endswith(".json"):
        return parse_json(text, name)
    if name.endswith(".toml"):
        return parse_toml(text, name)
    return parse_lines(text, name)
