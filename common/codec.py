"""The wire format: a versioned msgpack envelope ``[version, kind, {field: value}]``.

`decode` is the edge where untrusted bytes enter: whatever they are, it returns a valid message
or raises `ProtocolError` with one clear sentence, and never raises anything else. Every field
is checked for type and range, unknown and missing fields are refused, nil is accepted only
where a field is nullable, and sizes are bounded so a hostile frame cannot make a daemon
allocate without limit. Worker reports and instruction sets — the messages sent at fleet
scale — and request routing's `Request` / `Reply` (a ``body`` is the application's: any
msgpack value but an extension type) are parsed and checked by msgspec in C; the rest below.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields
from typing import Annotated, Any, Literal, TypeVar

import msgpack
import msgspec

from .errors import ProtocolError
from .protocol import (
    PROTOCOL_VERSION,
    ControlError,
    ControlReply,
    ControlRequest,
    Instructions,
    Message,
    Refusal,
    Reply,
    Request,
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

# The low-volume messages, checked in Python: kind on the wire -> (class, ((field, check,
# default), ...)) in the dataclass's field order. A default of None for `args` means {}.
_SCHEMAS: dict[str, tuple[type[Any], tuple[tuple[str, Check, Any], ...]]] = {
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
_MAP_FIELDS = frozenset({"args"})

_new = object.__new__
_setattr = object.__setattr__

# -- the fleet-scale messages: validated by msgspec in C -------------------------------------
# Every worker report and instruction set goes through these. msgspec checks types, ranges,
# lengths and unknown fields while it parses, several times faster than the Python checks
# above (and faster than a bare msgpack.unpackb); the result is then installed into our
# frozen dataclass in one call. The rules are the same as the generic schema's.
_UInt = Annotated[int, msgspec.Meta(ge=0, le=MAX_UINT)]
_Num = Annotated[float, msgspec.Meta(ge=0, le=MAX_NUMBER)]
_Id = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_ID_CHARS)]
_TaskMap = Annotated[dict[_Id, _UInt], msgspec.Meta(max_length=MAX_TASKS)]
_TaskList = Annotated[tuple[_Id, ...], msgspec.Meta(max_length=MAX_TASKS)]


class _StatusWire(msgspec.Struct, forbid_unknown_fields=True):
    worker: _Id
    incarnation: _UInt
    seq: _UInt
    sent_at: _Num
    max_load: _Num
    running: _TaskMap
    # A plain string checked against the literal values, mapped to the enum member by a dict
    # lookup in decode(): msgspec would build it with Enum.__call__, which costs more.
    state: Literal["starting", "ready", "lame_duck"] = "ready"
    utilization: _Num = 0.0
    qps: _Num = 0.0
    errors: _Num = 0.0
    applied: tuple[_UInt, _UInt] = (0, 0)
    serve: _Id | None = None
    failures: _TaskMap = msgspec.field(default_factory=dict)
    lease_held: bool = False


class _InstructionsWire(msgspec.Struct, forbid_unknown_fields=True):
    epoch: _UInt
    seq: _UInt
    incarnation: _UInt
    lease: _Num
    answers_seq: _UInt
    answers_sent_at: _Num
    reset: bool = False
    add: _TaskList = ()
    remove: _TaskList = ()


class _RequestWire(msgspec.Struct, forbid_unknown_fields=True):
    id: _UInt
    task: _Id | None
    body: Any = None


class _ReplyWire(msgspec.Struct, forbid_unknown_fields=True):
    id: _UInt
    code: Literal["ok", "not_owner", "error"] = "ok"
    body: Any = None
    error: Annotated[str, msgspec.Meta(max_length=MAX_TEXT_CHARS)] | None = None
    version: tuple[_UInt, _UInt] = (0, 0)
    qps: _Num = 0.0
    utilization: _Num = 0.0
    errors: _Num = 0.0
    lame_duck: bool = False


class _Extension(Exception):
    """An extension type in an application's body (raised inside msgspec's parse)."""


def _no_ext(code: int, data: memoryview) -> Any:
    raise _Extension(f"msgpack extension type {code} is not allowed")


# kind -> (message class, its msgspec struct, ext_hook: only application bodies need one)
_STRUCTS: dict[str, tuple[type[Any], type[msgspec.Struct], Any]] = {
    "status": (Status, _StatusWire, None), "instructions": (Instructions, _InstructionsWire, None),
    "request": (Request, _RequestWire, _no_ext), "reply": (Reply, _ReplyWire, _no_ext),
}
_WIRE: dict[str, tuple[type[Any], msgspec.msgpack.Decoder[Any]]] = {
    kind: (cls, msgspec.msgpack.Decoder(struct, ext_hook=hook))
    for kind, (cls, struct, hook) in _STRUCTS.items()
}
_ENVELOPE = msgspec.msgpack.Decoder(tuple[int, str, msgspec.Raw])
_STATES = {s.value: s for s in WorkerState}  # the round-trip tests cover every state
_asdict = msgspec.structs.asdict

_KIND_OF: dict[type[Any], str] = {
    **{cls: kind for kind, (cls, _) in _SCHEMAS.items()},
    **{cls: kind for kind, (cls, _) in _WIRE.items()},
}
_FIELDS_OF: dict[type[Any], tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in _KIND_OF
}
# Each schema must list exactly its dataclass's fields, or _build would make a bad instance.
for _kind, (_cls, _specs) in _SCHEMAS.items():
    assert _FIELDS_OF[_cls] == tuple(s[0] for s in _specs), _kind
for _kind, (_cls, _dec) in _WIRE.items():
    assert _FIELDS_OF[_cls] == _STRUCTS[_kind][1].__struct_fields__, _kind


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
        if v is _REQUIRED:
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
        version, kind, raw = _ENVELOPE.decode(frame)
    except msgspec.ValidationError:
        raise ProtocolError("not a corral envelope: expected [version, kind, body]") from None
    except Exception as exc:  # DecodeError, UnicodeDecodeError…: all mean "not a frame"
        raise ProtocolError(f"not valid msgpack: {type(exc).__name__}: {exc}") from None
    if version != PROTOCOL_VERSION:
        raise ProtocolError(
            f"unsupported protocol version {version!r} (this is {PROTOCOL_VERSION})"
        )
    wire = _WIRE.get(kind)
    if wire is not None:
        try:
            values = _asdict(wire[1].decode(raw))
            if kind == "status":
                values["state"] = _STATES[values["state"]]
            return _build(wire[0], values)  # type: ignore[no-any-return]
        except (msgspec.ValidationError, _Extension) as exc:
            raise ProtocolError(f"{kind}: {exc}") from None
        except Exception as exc:  # DecodeError, UnicodeDecodeError…: all mean "not a frame"
            raise ProtocolError(f"not valid msgpack: {type(exc).__name__}: {exc}") from None
    if kind not in _SCHEMAS:
        raise ProtocolError(f"unknown message kind {kind!r}")
    try:
        # msgpack's default limits are derived from the body's length, which is bounded
        # above, so a hostile frame cannot claim more than it carries.
        body = msgpack.unpackb(raw)
    except Exception as exc:  # msgpack raises several types; all mean "not a valid frame"
        raise ProtocolError(f"not valid msgpack: {type(exc).__name__}: {exc}") from None
    if type(body) is not dict:
        raise ProtocolError(f"{kind}: body must be a map, got {type(body).__name__}")
    return _build(_SCHEMAS[kind][0], _check_generic(kind, body))  # type: ignore[no-any-return]


# Request routing's hot path: one msgspec pass checks envelope and body together (~2x cheaper
# than `decode`); anything else goes through `decode`, whose error says what is wrong.
_ONE_PASS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {
    Request: msgspec.msgpack.Decoder(tuple[Literal[1], Literal["request"], _RequestWire],
                                     ext_hook=_no_ext),
    Reply: msgspec.msgpack.Decoder(tuple[Literal[1], Literal["reply"], _ReplyWire],
                                   ext_hook=_no_ext),
}
_Routed = TypeVar("_Routed", Request, Reply)


def decode_as(frame: bytes, cls: type[_Routed]) -> _Routed:
    """`decode`, for a frame that should hold a ``cls`` (`Request` or `Reply`);
    `ProtocolError` for anything else."""
    if len(frame) <= MAX_FRAME_BYTES:
        try:
            fast: _Routed = _build(cls, _asdict(_ONE_PASS[cls].decode(frame)[2]))
            return fast
        except Exception:  # any failure: let decode() name it
            pass
    msg = decode(frame)
    if type(msg) is not cls:
        raise ProtocolError(f"expected a {_KIND_OF[cls]}, got a {_KIND_OF[type(msg)]}")
    return msg


def _wire(v: Any) -> Any:
    if isinstance(v, ControlError):
        return {"code": v.code, "message": v.message}
    return v


_packb = msgpack.packb


def _encode_instructions(m: Instructions) -> bytes:
    return _packb([PROTOCOL_VERSION, "instructions", {  # type: ignore[no-any-return]
        "epoch": m.epoch, "seq": m.seq, "incarnation": m.incarnation, "lease": m.lease,
        "answers_seq": m.answers_seq, "answers_sent_at": m.answers_sent_at, "reset": m.reset,
        "add": m.add, "remove": m.remove}])


def _encode_status(m: Status) -> bytes:
    return _packb([PROTOCOL_VERSION, "status", {  # type: ignore[no-any-return]
        "worker": m.worker, "incarnation": m.incarnation, "seq": m.seq, "sent_at": m.sent_at,
        "max_load": m.max_load, "running": m.running, "state": m.state.value,
        "utilization": m.utilization, "qps": m.qps, "errors": m.errors, "applied": m.applied,
        "serve": m.serve, "failures": m.failures, "lease_held": m.lease_held}])


# A request's or reply's body is the application's: msgspec's encoder also carries what its
# decoder produces (a timestamp comes back as a datetime), so every decoded one re-encodes.
_msgspec_encode = msgspec.msgpack.Encoder().encode


def _encode_with_body(frame: list[Any]) -> bytes:
    try:
        return _msgspec_encode(frame)
    except (TypeError, OverflowError, msgspec.EncodeError) as exc:  # one type, one message
        raise TypeError(f"cannot encode {frame[1]}: {exc}") from None


def _encode_request(m: Request) -> bytes:
    return _encode_with_body([PROTOCOL_VERSION, "request", {"id": m.id, "task": m.task,
                                                            "body": m.body}])


def _encode_reply(m: Reply) -> bytes:
    return _encode_with_body([PROTOCOL_VERSION, "reply", {
        "id": m.id, "code": m.code, "body": m.body, "error": m.error, "version": m.version,
        "qps": m.qps, "utilization": m.utilization, "errors": m.errors,
        "lame_duck": m.lame_duck}])


# The messages sent at fleet scale, written out (a generic field loop costs 3x more).
_FAST: dict[type[Any], Any] = {Instructions: _encode_instructions, Status: _encode_status,
                               Request: _encode_request, Reply: _encode_reply}


def encode(msg: Message) -> bytes:
    """Encode a message into one frame. Raises TypeError for a value msgpack cannot carry."""
    fast = _FAST.get(type(msg))
    if fast is not None:
        return fast(msg)  # type: ignore[no-any-return]
    cls = type(msg)
    body = {name: _wire(getattr(msg, name)) for name in _FIELDS_OF[cls]}
    return msgpack.packb([PROTOCOL_VERSION, _KIND_OF[cls], body])  # type: ignore[no-any-return]
