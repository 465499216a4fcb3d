"""The wire format: a versioned msgpack envelope ``[version, kind, {field: value}]``.

The schema of each message is its class in `protocol` (one definition: field names, types,
defaults and bounds); this module only frames it. `decode` is the edge where untrusted bytes
enter: whatever they are, it returns a valid message or raises `ProtocolError` with one clear
sentence, and never raises anything else. msgspec checks every field's type and range while it
parses (in C), refuses unknown and missing fields, accepts nil only where a field is nullable,
and builds the frozen message directly. What msgspec cannot express is checked here after the
parse: control arguments and results must be plain values (string keys, finite numbers, no
deeper than `MAX_PLAIN_DEPTH`), as JSON output and scripts expect. Sizes are bounded, so a
hostile frame cannot make a daemon allocate without limit.
"""

from __future__ import annotations

import math
from typing import Any, Literal, TypeVar

import msgspec

from ..errors import ProtocolError
from .protocol import (
    KINDS,
    MAX_FRAME_BYTES,
    MAX_ID_CHARS,
    MAX_TASKS,
    MAX_TEXT_CHARS,
    MAX_UINT,
    PROTOCOL_VERSION,
    ControlReply,
    ControlRequest,
    Instructions,
    Message,
    Renewal,
    Status,
    StatusGlance,
)

__all__ = ["MAX_FRAME_BYTES", "MAX_ID_CHARS", "MAX_TASKS", "MAX_TEXT_CHARS", "MAX_UINT",
           "decode", "decode_as", "encode", "encoded", "glance_status"]

MAX_PLAIN_DEPTH = 16


class _Extension(Exception):
    """An extension type in an application's body (raised inside msgspec's parse)."""


def _no_ext(code: int, data: memoryview) -> Any:
    raise _Extension(f"msgpack extension type {code} is not allowed")


_KIND_TO_CLASS: dict[str, type[Any]] = {kind: cls for cls, kind in KINDS.items()}
_KIND_OF: dict[type[Any], str] = dict(KINDS)
# An application's body (requests, replies) may be any msgpack value but an extension type.
_BODY_KINDS = frozenset({"request", "reply"})
_DECODERS: dict[str, msgspec.msgpack.Decoder[Any]] = {
    kind: msgspec.msgpack.Decoder(cls, ext_hook=_no_ext if kind in _BODY_KINDS else None)
    for kind, cls in _KIND_TO_CLASS.items()
}
_ENVELOPE = msgspec.msgpack.Decoder(tuple[int, str, msgspec.Raw])
# One pass over envelope and body for a frame whose kind the caller expects (~2x cheaper than
# `decode`: the supervisor's reports, the router's replies); any failure falls back to
# `decode`, whose error says what is wrong.
_ONE_PASS: dict[type[Any], msgspec.msgpack.Decoder[Any]] = {
    cls: msgspec.msgpack.Decoder(
        tuple[Literal[PROTOCOL_VERSION], Literal[kind], cls],  # type: ignore[valid-type]
        ext_hook=_no_ext if kind in _BODY_KINDS else None)
    for cls, kind in KINDS.items()
}


def _fail(path: str, expected: str, value: Any) -> ProtocolError:
    shown = repr(value)
    if len(shown) > 60:
        shown = shown[:57] + "..."
    return ProtocolError(f"{path}: expected {expected}, got {type(value).__name__} {shown}")


def _plain(path: str, v: Any, depth: int = 0) -> Any:
    """Check a plain value (nil, bool, int, float, str, list, map with string keys)."""
    if depth > MAX_PLAIN_DEPTH:
        raise ProtocolError(f"{path}: nested deeper than {MAX_PLAIN_DEPTH} levels")
    t = type(v)
    if v is None or t is bool or t is int or t is str:
        return v
    if t is float:
        if math.isnan(v) or math.isinf(v):  # JSON output cannot carry them
            raise _fail(path, "a finite number", v)
        return v
    if t is list:
        for x in v:
            _plain(path, x, depth + 1)
        return v
    if t is dict:
        for k, x in v.items():
            if type(k) is not str or not 0 < len(k) <= MAX_ID_CHARS:
                raise _fail(f"{path} key", f"a non-empty string of at most {MAX_ID_CHARS} "
                            "characters", k)
            _plain(path, x, depth + 1)
        return v
    raise _fail(path, "a plain value", v)


def _after(msg: Any) -> Any:
    """The checks msgspec cannot express, on a freshly decoded message."""
    t = type(msg)
    if t is ControlRequest:
        _plain("control_request.args", msg.args)
    elif t is ControlReply:
        _plain("control_reply.result", msg.result)
    return msg


def _parse(kind: str, raw: Any) -> Any:
    try:
        return _after(_DECODERS[kind].decode(raw))
    except (msgspec.ValidationError, _Extension) as exc:
        raise ProtocolError(f"{kind}: {exc}") from None
    except ProtocolError:
        raise
    except Exception as exc:  # DecodeError, UnicodeDecodeError…: all mean "not a frame"
        raise ProtocolError(f"not valid msgpack: {type(exc).__name__}: {exc}") from None


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
    if kind not in _DECODERS:
        raise ProtocolError(f"unknown message kind {kind!r}")
    return _parse(kind, raw)  # type: ignore[no-any-return]


_M = TypeVar("_M", bound=Message)


def decode_as(frame: bytes, cls: type[_M]) -> _M:
    """`decode`, for a frame that should hold a ``cls``; `ProtocolError` for anything else
    (including a valid message of another kind)."""
    if type(frame) is bytes and len(frame) <= MAX_FRAME_BYTES:
        try:
            fast: _M = _after(_ONE_PASS[cls].decode(frame)[2])
            return fast
        except Exception:  # any failure: let decode() name it
            pass
    msg = decode(frame)
    if type(msg) is not cls:
        raise ProtocolError(f"expected a {_KIND_OF[cls]}, got a {KINDS[type(msg)]}")
    return msg


_GLANCE = msgspec.msgpack.Decoder(
    tuple[Literal[PROTOCOL_VERSION], Literal[KINDS[Status]], StatusGlance])  # type: ignore[valid-type]


def glance_status(frame: bytes) -> StatusGlance:
    """A `Status` frame with its maps unread (`StatusGlance`); `ProtocolError` for a frame
    that is not one (what `decode_as(frame, Status)` would say)."""
    if type(frame) is bytes and len(frame) <= MAX_FRAME_BYTES:
        try:
            glance: StatusGlance = _GLANCE.decode(frame)[2]
            return glance
        except Exception:  # any failure: let decode() name it
            pass
    decode_as(frame, Status)  # raises, naming what is wrong
    raise ProtocolError("a status whose maps are not msgpack maps")  # (cannot happen)


# msgspec's encoder also carries what its decoder produces (a timestamp in an application's
# body comes back as a datetime), so every decoded message re-encodes.
_encode = msgspec.msgpack.Encoder().encode


def encoded(value: Any) -> bytes:
    """A value's msgpack bytes, as a peer encodes it (a report's maps: `StatusGlance`)."""
    return _encode(value)


# What each type is sent as: every message under its own kind, and a `Renewal` as the
# instruction set it is (decoded, it is an `Instructions`).
_SENT_AS: dict[type[Any], str] = {**KINDS, Renewal: KINDS[Instructions]}


def encode(msg: Message | Renewal) -> bytes:
    """Encode a message into one frame. Raises TypeError for a value msgpack cannot carry."""
    kind = _SENT_AS.get(type(msg))
    if kind is None:
        raise TypeError(f"not a message: {type(msg).__name__}")
    try:
        return _encode((PROTOCOL_VERSION, kind, msg))
    except (TypeError, OverflowError, msgspec.EncodeError) as exc:  # one type, one message
        raise TypeError(f"cannot encode {kind}: {exc}") from None
