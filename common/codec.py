"""The wire format: a versioned msgpack envelope ``[version, kind, {field: value}]``.

`decode` is the edge where untrusted bytes enter: whatever they are, it returns a valid message
or raises `ProtocolError` with one clear sentence, and never raises anything else. Every field
is checked for type and range, unknown and missing fields are refused, and sizes are bounded so
a hostile frame cannot make a daemon allocate without limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Any

import msgpack

from .errors import ProtocolError
from .protocol import (
    PROTOCOL_VERSION,
    ControlError,
    ControlReply,
    ControlRequest,
    Instructions,
    Message,
    Refusal,
    Status,
    WorkerState,
)

MAX_FRAME_BYTES = 16 * 1024 * 1024
MAX_ID_CHARS = 256  # worker ids, task ids, verbs, addresses
MAX_TASKS = 200_000  # entries in one list or map of tasks
MAX_TEXT_CHARS = 4096  # free text (reasons, messages)
MAX_UINT = 2**63 - 1
MAX_NUMBER = 1e15
MAX_PLAIN_DEPTH = 16

Check = Callable[[str, Any], Any]


def _fail(path: str, expected: str, value: Any) -> ProtocolError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ProtocolError(f"{path}: expected {expected}, got {type(value).__name__} {shown}")


def _id(path: str, v: Any) -> str:
    if type(v) is not str or not 0 < len(v) <= MAX_ID_CHARS:
        raise _fail(path, f"a non-empty string of at most {MAX_ID_CHARS} characters", v)
    return v


def _text(path: str, v: Any) -> str:
    if type(v) is not str or len(v) > MAX_TEXT_CHARS:
        raise _fail(path, f"a string of at most {MAX_TEXT_CHARS} characters", v)
    return v


def _uint(path: str, v: Any) -> int:
    if type(v) is not int or not 0 <= v <= MAX_UINT:
        raise _fail(path, f"an integer in [0, {MAX_UINT}]", v)
    return v


def _number(path: str, v: Any) -> float:
    t = type(v)
    # NaN fails every comparison and inf fails the upper bound.
    if (t is not float and t is not int) or not (0 <= v <= MAX_NUMBER):
        raise _fail(path, f"a finite number in [0, {MAX_NUMBER:g}]", v)
    return v  # type: ignore[no-any-return]


def _bool(path: str, v: Any) -> bool:
    if type(v) is not bool:
        raise _fail(path, "true or false", v)
    return v


def _state(path: str, v: Any) -> WorkerState:
    try:
        return WorkerState(v)
    except (ValueError, TypeError):
        raise _fail(path, "one of " + "|".join(s.value for s in WorkerState), v) from None


def _task_map(path: str, v: Any) -> dict[str, int]:
    if type(v) is not dict:
        raise _fail(path, "a map of task id to integer", v)
    for k, n in v.items():
        if type(k) is not str or not 0 < len(k) <= MAX_ID_CHARS:
            raise _fail(f"{path} key", "a task id", k)
        if type(n) is not int or not 0 <= n <= MAX_UINT:
            raise _fail(f"{path}[{k!r}]", "an integer >= 0", n)
    return v


def _task_list(path: str, v: Any) -> tuple[str, ...]:
    if type(v) is not list:
        raise _fail(path, "a list of task ids", v)
    for i, k in enumerate(v):
        if type(k) is not str or not 0 < len(k) <= MAX_ID_CHARS:
            raise _fail(f"{path}[{i}]", "a task id", k)
    return tuple(v)


def _pair(path: str, v: Any) -> tuple[int, int]:
    if type(v) is not list or len(v) != 2:
        raise _fail(path, "[epoch, seq]", v)
    return (_uint(f"{path}[0]", v[0]), _uint(f"{path}[1]", v[1]))


def _opt_addr(path: str, v: Any) -> str | None:
    return None if v is None else _id(path, v)


def _plain(path: str, v: Any, depth: int = 0) -> Any:
    """Any plain msgpack value (nil, bool, int, float, str, list, map with string keys)."""
    if depth > MAX_PLAIN_DEPTH:
        raise ProtocolError(f"{path}: nested deeper than {MAX_PLAIN_DEPTH} levels")
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        if v != v or v in (math.inf, -math.inf):  # JSON output cannot carry them
            raise _fail(path, "a finite number", v)
        return v
    if t is list:
        return [_plain(path, x, depth + 1) for x in v]
    if t is dict:
        return {_id(f"{path} key", k): _plain(path, x, depth + 1) for k, x in v.items()}
    raise _fail(path, "a plain value", v)


def _args(path: str, v: Any) -> dict[str, Any]:
    if type(v) is not dict:
        raise _fail(path, "a map", v)
    return _plain(path, v)  # type: ignore[no-any-return]


def _control_error(path: str, v: Any) -> ControlError | None:
    if v is None:
        return None
    if type(v) is not dict or set(v) != {"code", "message"}:
        raise _fail(path, "nil or {code, message}", v)
    return ControlError(_id(f"{path}.code", v["code"]), _text(f"{path}.message", v["message"]))


_REQUIRED = object()

# kind on the wire -> (class, ((field, check, default), ...)) in the dataclass's field order.
# A default of None for a map field means "a new empty dict".
_SCHEMAS: dict[str, tuple[type[Any], tuple[tuple[str, Check, Any], ...]]] = {
    "status": (
        Status,
        (
            ("worker", _id, _REQUIRED),
            ("incarnation", _uint, _REQUIRED),
            ("seq", _uint, _REQUIRED),
            ("sent_at", _number, _REQUIRED),
            ("max_load", _number, _REQUIRED),
            ("running", _task_map, _REQUIRED),
            ("state", _state, WorkerState.READY),
            ("utilization", _number, 0.0),
            ("qps", _number, 0.0),
            ("errors", _number, 0.0),
            ("applied", _pair, (0, 0)),
            ("serve", _opt_addr, None),
            ("failures", _task_map, None),
            ("lease_held", _bool, False),
        ),
    ),
    "instructions": (
        Instructions,
        (
            ("epoch", _uint, _REQUIRED),
            ("seq", _uint, _REQUIRED),
            ("incarnation", _uint, _REQUIRED),
            ("lease", _number, _REQUIRED),
            ("answers_seq", _uint, _REQUIRED),
            ("answers_sent_at", _number, _REQUIRED),
            ("reset", _bool, False),
            ("add", _task_list, ()),
            ("remove", _task_list, ()),
        ),
    ),
    "refusal": (
        Refusal,
        (
            ("epoch", _uint, _REQUIRED),
            ("incarnation", _uint, _REQUIRED),
            ("code", _id, _REQUIRED),
            ("reason", _text, _REQUIRED),
        ),
    ),
    "control_request": (
        ControlRequest,
        (
            ("request_id", _uint, _REQUIRED),
            ("verb", _id, _REQUIRED),
            ("args", _args, None),
        ),
    ),
    "control_reply": (
        ControlReply,
        (
            ("request_id", _uint, _REQUIRED),
            ("result", _plain, None),
            ("error", _control_error, None),
        ),
    ),
}
_MAP_FIELDS = frozenset({"running", "failures", "args"})
_KIND_OF: dict[type[Any], str] = {cls: kind for kind, (cls, _) in _SCHEMAS.items()}
_FIELDS_OF: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in _KIND_OF
}
for _cls, _names in _FIELDS_OF.items():
    # The schema must list exactly the dataclass's fields, or _build would make a bad instance.
    assert _names == tuple(s[0] for s in _SCHEMAS[_KIND_OF[_cls]][1]), _cls

_new = object.__new__
_setattr = object.__setattr__
_STATES = {s.value: s for s in WorkerState}
_STATUS_KEYS = frozenset(s[0] for s in _SCHEMAS["status"][1])
_NUMBER_TYPES = (int, float)


def _build(cls: type[Any], values: dict[str, Any]) -> Any:
    """An instance of a frozen dataclass from a dict holding exactly its validated fields."""
    obj = _new(cls)
    _setattr(obj, "__dict__", values)
    return obj


def _check_generic(kind: str, body: dict[str, Any]) -> dict[str, Any]:
    specs = _SCHEMAS[kind][1]
    out: dict[str, Any] = {}
    for name, check, default in specs:
        v = body.get(name, _REQUIRED)
        if v is _REQUIRED or (v is None and default is not _REQUIRED):
            # An explicit nil for an optional field means the same as leaving it out.
            if default is _REQUIRED:
                raise ProtocolError(f"{kind}.{name}: missing")
            out[name] = {} if default is None and name in _MAP_FIELDS else default
        else:
            out[name] = check(f"{kind}.{name}", v)
    if len(body) > len(out) or not body.keys() <= out.keys():
        _refuse_extra(kind, body)
    return out


def _refuse_extra(kind: str, body: dict[str, Any]) -> None:
    known = {s[0] for s in _SCHEMAS[kind][1]}
    extra = sorted(repr(k) for k in body if k not in known)
    if extra:
        raise ProtocolError(f"{kind}: unknown field(s) {', '.join(extra)}")


def _check_status(body: dict[str, Any]) -> dict[str, Any]:
    """The hot path: every worker report goes through here. Same rules as the generic check,
    written out inline (a Python call costs as much as several type tests). A failed fast test
    re-runs the field's named check, which raises the clear error."""
    if not body.keys() <= _STATUS_KEYS:
        _refuse_extra("status", body)
    try:
        worker = body["worker"]
        inc = body["incarnation"]
        seq = body["seq"]
        sent_at = body["sent_at"]
        max_load = body["max_load"]
        running = body["running"]
    except KeyError as exc:
        raise ProtocolError(f"status.{exc.args[0]}: missing") from None
    get = body.get
    util = get("utilization")
    qps = get("qps")
    errors = get("errors")
    # Absent and explicit nil both mean the default.
    if util is None:
        util = body["utilization"] = 0.0
    if qps is None:
        qps = body["qps"] = 0.0
    if errors is None:
        errors = body["errors"] = 0.0
    # NaN fails every comparison and inf fails the upper bound, so no isfinite() is needed.
    if not (
        type(worker) is str
        and 0 < len(worker) <= MAX_ID_CHARS
        and type(inc) is int
        and 0 <= inc <= MAX_UINT
        and type(seq) is int
        and 0 <= seq <= MAX_UINT
        and type(sent_at) in _NUMBER_TYPES
        and 0 <= sent_at <= MAX_NUMBER
        and type(max_load) in _NUMBER_TYPES
        and 0 <= max_load <= MAX_NUMBER
        and type(util) in _NUMBER_TYPES
        and 0 <= util <= MAX_NUMBER
        and type(qps) in _NUMBER_TYPES
        and 0 <= qps <= MAX_NUMBER
        and type(errors) in _NUMBER_TYPES
        and 0 <= errors <= MAX_NUMBER
    ):
        _id("status.worker", worker)
        _uint("status.incarnation", inc)
        _uint("status.seq", seq)
        for name, v in (("sent_at", sent_at), ("max_load", max_load), ("utilization", util)):
            _number(f"status.{name}", v)
        _number("status.qps", qps)
        _number("status.errors", errors)
    if type(running) is not dict:
        _task_map("status.running", running)
    for k, n in running.items():
        if not (
            type(k) is str and 0 < len(k) <= MAX_ID_CHARS and type(n) is int and 0 <= n <= MAX_UINT
        ):
            _task_map("status.running", running)
    state = get("state", "ready")
    st = _STATES.get(state) if type(state) is str else None
    applied = get("applied")
    serve = get("serve")
    failures = get("failures")
    lease_held = get("lease_held", False)
    body["state"] = st if st is not None else _state("status.state", state)
    if serve is None:
        body["serve"] = None
    if applied is None:
        body["applied"] = (0, 0)
    elif type(applied) is list and len(applied) == 2:
        body["applied"] = (_uint("status.applied[0]", applied[0]), _uint("applied[1]", applied[1]))
    else:
        _pair("status.applied", applied)
    if serve is not None and not (type(serve) is str and 0 < len(serve) <= MAX_ID_CHARS):
        _id("status.serve", serve)
    if failures is None:
        body["failures"] = {}
    elif failures or type(failures) is not dict:
        _task_map("status.failures", failures)
    if type(lease_held) is not bool:
        _bool("status.lease_held", lease_held)
    body["lease_held"] = lease_held
    return body


def decode(frame: bytes) -> Message:
    """Decode one frame into a message, or raise `ProtocolError` (and nothing else)."""
    if type(frame) is not bytes:
        try:
            frame = bytes(frame)
        except Exception as exc:
            raise ProtocolError(f"frame is not bytes: {type(frame).__name__}") from exc
    if len(frame) > MAX_FRAME_BYTES:
        raise ProtocolError(f"frame of {len(frame)} bytes exceeds {MAX_FRAME_BYTES}")
    try:
        # msgpack's default limits are derived from the frame's length, which is bounded above,
        # so a hostile frame cannot claim more than it carries.
        envelope = msgpack.unpackb(frame)
    except Exception as exc:  # msgpack raises several types; all mean "not a valid frame"
        raise ProtocolError(f"not valid msgpack: {type(exc).__name__}: {exc}") from None
    if type(envelope) is not list or len(envelope) != 3:
        raise ProtocolError("not a corral envelope: expected [version, kind, body]")
    version, kind, body = envelope
    if type(version) is not int or version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"unsupported protocol version {version!r} (this is {PROTOCOL_VERSION})"
        )
    if type(kind) is not str or kind not in _SCHEMAS:
        raise ProtocolError(f"unknown message kind {kind!r}")
    if type(body) is not dict:
        raise ProtocolError(f"{kind}: body must be a map, got {type(body).__name__}")
    if kind == "status":
        return _build(Status, _check_status(body))  # type: ignore[no-any-return]
    return _build(_SCHEMAS[kind][0], _check_generic(kind, body))  # type: ignore[no-any-return]


def _wire(v: Any) -> Any:
    if isinstance(v, ControlError):
        return {"code": v.code, "message": v.message}
    return v


def encode(msg: Message) -> bytes:
    """Encode a message into one frame. Raises TypeError for a value msgpack cannot carry."""
    cls = type(msg)
    body = {name: _wire(getattr(msg, name)) for name in _FIELDS_OF[cls]}
    return msgpack.packb([PROTOCOL_VERSION, _KIND_OF[cls], body])  # type: ignore[no-any-return]
