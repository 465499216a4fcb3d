"""Protocol and codec: every message round-trips; bad bytes give ProtocolError and nothing else."""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.errors import ProtocolError
from corral.common.wire import codec, protocol
from corral.common.wire.protocol import (
    MAX_ERROR_CHARS,
    PROTOCOL_VERSION,
    ControlError,
    ControlReply,
    ControlRequest,
    Instructions,
    Refusal,
    Renewal,
    Reply,
    Request,
    Status,
    WorkerState,
)

V = PROTOCOL_VERSION
ids = st.text(min_size=1, max_size=20)
uints = st.integers(min_value=0, max_value=codec.MAX_UINT)
def _upto(bound: float) -> st.SearchStrategy[float]:
    return st.one_of(st.integers(min_value=0, max_value=int(bound)),
                     st.floats(min_value=0, max_value=bound, allow_nan=False,
                               allow_infinity=False))


numbers = _upto(1e12)
loads = _upto(protocol.MAX_LOAD)
utilizations = _upto(protocol.MAX_UTILIZATION)
rates = _upto(protocol.MAX_RATE)
epochs = st.integers(min_value=0, max_value=protocol.MAX_EPOCH)
task_maps = st.dictionaries(ids, uints, max_size=8)
task_lists = st.lists(ids, max_size=8).map(tuple)
plain = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=10)
    | st.floats(allow_nan=False, allow_infinity=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(ids, children, max_size=4),
    max_leaves=12,
)

statuses = st.builds(
    Status,
    worker=ids,
    incarnation=uints,
    seq=uints,
    sent_at=numbers,
    max_load=loads,
    running=task_maps,
    state=st.sampled_from(WorkerState),
    utilization=utilizations,
    qps=rates,
    errors=rates,
    applied=st.tuples(epochs, uints),
    serve=st.none() | ids,
    failures=task_maps,
    lease_held=st.booleans(),
    starting=task_lists,
    last_errors=st.dictionaries(ids, st.tuples(numbers, st.text(
        st.characters(blacklist_categories=("Cc", "Cs")), max_size=MAX_ERROR_CHARS)),
        max_size=3),
)
instructions = st.builds(
    Instructions,
    epoch=epochs,
    seq=uints,
    incarnation=uints,
    lease=numbers,
    answers_seq=uints,
    answers_sent_at=numbers,
    reset=st.booleans(),
    add=task_lists,
    remove=task_lists,
)
refusals = st.builds(Refusal, epoch=epochs, incarnation=uints, code=ids,
                     reason=st.text(max_size=50))
requests = st.builds(
    ControlRequest,
    request_id=uints,
    verb=ids,
    args=st.dictionaries(ids, plain, max_size=4),
)
replies = st.builds(
    ControlReply,
    request_id=uints,
    result=plain,
    error=st.none() | st.builds(ControlError, code=ids, message=st.text(max_size=50)),
)
bodies = st.recursive(  # an application's payload: any msgpack value
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=10)
    | st.binary(max_size=10) | st.floats(allow_nan=False),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5),
                                                                    children, max_size=4),
    max_leaves=12,
)
serve_requests = st.builds(Request, id=uints, task=st.none() | ids, body=bodies)
serve_replies = st.builds(
    Reply,
    id=uints,
    code=st.sampled_from(["ok", "not_owner", "error"]),
    body=bodies,
    error=st.none() | st.text(max_size=50),
    version=st.tuples(epochs, uints),
    qps=numbers,
    utilization=numbers,
    errors=numbers,
    lame_duck=st.booleans(),
)
messages = st.one_of(statuses, instructions, refusals, requests, replies, serve_requests,
                     serve_replies)


@given(messages)
def test_every_message_round_trips(msg: Any) -> None:
    assert codec.decode(codec.encode(msg)) == msg


@given(statuses)
def test_a_status_glance_reads_every_status_as_it_is(msg: Status) -> None:
    """`StatusGlance` repeats `Status`'s fields (the supervisor's hot path reads reports with
    it); only the maps and the starting list differ, left as their msgpack bytes."""
    from corral.common.wire.protocol import StatusGlance

    assert StatusGlance.__struct_fields__ == Status.__struct_fields__
    g = codec.glance_status(codec.encode(msg))
    for f in Status.__struct_fields__:
        if f in ("running", "failures", "labels", "starting", "last_errors"):
            assert bytes(getattr(g, f)) == codec.encoded(getattr(msg, f))
        else:
            assert getattr(g, f) == getattr(msg, f), f


@given(statuses)
def test_decoded_status_is_frozen(msg: Status) -> None:
    decoded = codec.decode(codec.encode(msg))
    with pytest.raises(AttributeError):
        decoded.seq = 1  # type: ignore[misc]


def test_a_body_comes_back_as_the_same_value() -> None:
    import datetime

    when = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
    for body in (b"\x00raw", {"k": [1, 2.5, None]}, when, 2**64 - 1, -(2**63)):
        assert codec.decode(codec.encode(Request(1, "t", body))) == Request(1, "t", body)
    with pytest.raises(TypeError, match="cannot encode reply"):
        codec.encode(Reply(1, body=object()))
    with pytest.raises(TypeError, match="cannot encode request"):
        codec.encode(Request(1, None, 2**64))


@given(serve_requests, serve_replies)
def test_the_hot_path_decoders_agree_with_decode(req: Request, rep: Reply) -> None:
    assert codec.decode_as(codec.encode(req), Request) == req
    assert codec.decode_as(codec.encode(rep), Reply) == rep


@pytest.mark.parametrize(("cls", "frame", "says"), [
    (Request, b"\xc1", "not valid msgpack"),
    (Request, codec.encode(Reply(1)), "expected a request, got a reply"),
    (Reply, codec.encode(Request(1, None)), "expected a reply, got a request"),
    (Request, msgpack.packb([V, "request", {"id": 1, "task": 5}]), "request: .*task"),
    (Reply, msgpack.packb([V + 1, "reply", {"id": 1}]), "version"),
])
def test_the_hot_path_decoder_gives_decodes_errors(cls: Any, frame: bytes, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        codec.decode_as(frame, cls)


def _frame(kind: str, body: Any, version: Any = PROTOCOL_VERSION) -> bytes:
    return msgpack.packb([version, kind, body])  # type: ignore[no-any-return]


GOOD_STATUS = {"worker": "w1", "incarnation": 1, "seq": 1, "sent_at": 1.5, "max_load": 4,
               "running": {"t1": 2}}


def _status(**changes: Any) -> bytes:
    body = dict(GOOD_STATUS)
    for k, v in changes.items():
        if v is _DROP:
            body.pop(k)
        else:
            body[k] = v
    return _frame("status", body)


_DROP = object()


@pytest.mark.parametrize(
    ("frame", "says"),
    [
        (b"", "not valid msgpack"),
        (b"\xc1", "not valid msgpack"),
        (msgpack.packb([V, "status", {"worker": "w"}])[:-1], "not valid msgpack"),  # truncated
        (msgpack.packb({"a": 1}), "envelope"),
        (msgpack.packb([V, "status"]), "envelope"),
        (_frame("status", {}, version=PROTOCOL_VERSION + 1), "version"),
        (_frame("status", {}, version=1), "version"),
        (_frame("status", {}, version="1"), "version"),
        (_frame("nonsense", {}), "unknown message kind"),
        (_frame("status", []), "status: Expected `object`"),
        (_frame("refusal", []), "refusal: Expected `object`, got `array`"),
        (_status(worker=_DROP), "status: .*missing required field `worker`"),
        (_status(worker=""), "status: .*worker"),
        (_status(worker="x" * 300), "status: .*worker"),
        (_status(worker=7), "status: .*worker"),
        (_status(incarnation=-1), "status: .*incarnation"),
        (_status(incarnation=True), "status: .*incarnation"),
        (_status(seq=2**64 - 1), "status: .*seq"),
        (_status(sent_at=float("nan")), "status: .*sent_at"),
        (_status(max_load=float("inf")), "status: .*max_load"),
        (_status(max_load=-1), "status: .*max_load"),
        (_status(max_load="10"), "status: .*max_load"),
        (_status(running=["t1"]), "status: .*running"),
        (_status(running={"t1": -1}), "status: .*running"),
        (_status(running={"": 1}), "status: .*running"),
        (_status(state="sleepy"), "status: .*state"),
        (_status(applied=[1]), "status: .*applied"),
        (_status(applied=[1, -2]), "status: .*applied"),
        (_status(serve=5), "status: .*serve"),
        (_status(failures={"t": "x"}), "status: .*failures"),
        (_status(lease_held=1), "status: .*lease_held"),
        (_status(utilization=-0.5), "status: .*utilization"),
        (_status(surprise=1), "unknown field"),
        (_frame("instructions", {"epoch": 1}), "instructions: .*missing required field `seq`"),
        (_frame("instructions", {"epoch": 1, "seq": 1, "incarnation": 1, "lease": 5,
                                 "answers_seq": 1, "answers_sent_at": 1, "add": "t1"}),
         "instructions: .*add"),
        (_frame("control_request", {"request_id": 1, "verb": "status", "args": []}),
         "control_request: .*args"),
        (_frame("control_request", {"request_id": 1, "verb": "status", "extra": 1}),
         "unknown field"),
        (_frame("control_reply", {"request_id": 1, "error": {"code": "x"}}),
         "control_reply: .*missing required field `message`.*error"),
        (msgpack.packb([V, "status", {**GOOD_STATUS, "worker": msgpack.ExtType(5, b"x")}]),
         "status: .*worker"),
        (_frame("control_reply", {"request_id": 1, "result": float("nan")}), "finite"),
        (msgpack.packb([V, "status", {1: 2}], strict_types=False), "status: Expected `str`"),
        (msgpack.packb([V, "refusal", {1: 2}], strict_types=False), "refusal: Expected `str`"),
        (_frame("request", {"id": 1}), "request: .*missing required field `task`"),
        (_frame("request", {"id": -1, "task": None}), "request: .*id"),
        (_frame("request", {"id": 1, "task": ""}), "request: .*task"),
        (_frame("request", {"id": 1, "task": "t" * 300}), "request: .*task"),
        (_frame("request", {"id": 1, "task": None, "extra": 1}), "request: .*unknown field"),
        (msgpack.packb([V, "request", {"id": 1, "task": "t", "body": [msgpack.ExtType(3, b"")]}]),
         "request: msgpack extension type 3 is not allowed"),
        (_frame("reply", {"id": 1, "code": "maybe"}), "reply: .*code"),
        (_frame("reply", {"id": 1, "qps": float("nan")}), "reply: .*qps"),
        (_frame("reply", {"id": 1, "utilization": -1}), "reply: .*utilization"),
        (_frame("reply", {"id": 1, "version": [1]}), "reply: .*version"),
        (_frame("reply", {"id": 1, "lame_duck": 1}), "reply: .*lame_duck"),
        (_frame("reply", {"id": 1, "error": "x" * 5000}), "reply: .*error"),
    ],
)
def test_bad_frames_give_one_clear_error(frame: bytes, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        codec.decode(frame)


def test_oversized_frame_is_refused_before_parsing() -> None:
    with pytest.raises(ProtocolError, match="exceeds"):
        codec.decode(b"\x00" * (codec.MAX_FRAME_BYTES + 1))


def test_deep_nesting_in_control_args_is_refused() -> None:
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    frame = _frame("control_request", {"request_id": 1, "verb": "x", "args": {"a": deep}})
    with pytest.raises(ProtocolError, match="nested"):
        codec.decode(frame)


def test_nil_only_where_a_field_is_nullable() -> None:
    msg = codec.decode(_status(serve=None))
    assert isinstance(msg, Status) and msg.serve is None
    for field in ("utilization", "failures", "applied", "state", "lease_held"):
        with pytest.raises(ProtocolError, match=f"status: .*{field}"):
            codec.decode(_status(**{field: None}))


def test_defaults_fill_in_for_a_minimal_status() -> None:
    msg = codec.decode(_status())
    assert msg == Status("w1", 1, 1, 1.5, 4, {"t1": 2})


def _mutations(rng: random.Random, seed_frames: list[bytes]) -> bytes:
    choice = rng.randrange(6)
    if choice == 0:
        return rng.randbytes(rng.randrange(0, 200))
    base = bytearray(rng.choice(seed_frames))
    if choice == 1 and base:  # flip bytes
        for _ in range(rng.randrange(1, 6)):
            base[rng.randrange(len(base))] = rng.randrange(256)
    elif choice == 2:  # truncate
        del base[rng.randrange(len(base) + 1):]
    elif choice == 3:  # insert junk
        pos = rng.randrange(len(base) + 1)
        base[pos:pos] = rng.randbytes(rng.randrange(1, 8))
    elif choice == 4:  # valid msgpack, random structure
        value: Any = rng.choice([None, 1, -1, 2.5, "status", b"\x00", [], {}])
        for _ in range(rng.randrange(4)):
            value = rng.choice([[value], {"k": value}, [V, "status", value]])
        return msgpack.packb(value)  # type: ignore[no-any-return]
    else:  # a real body with one field replaced by a random value
        kind, body = rng.choice(_BODIES)
        body = dict(body)
        key = rng.choice([*body, "extra"])
        body[key] = rng.choice([None, -5, 2**64 - 1, 1.5, "x", "", [1, 2], {"a": 1}, True,
                                float("nan"), b"raw"])
        return msgpack.packb([V, kind, body], strict_types=False)  # type: ignore[no-any-return]
    return bytes(base)


_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("status", GOOD_STATUS),
    ("instructions", {"epoch": 1, "seq": 2, "incarnation": 3, "lease": 5.0, "answers_seq": 4,
                      "answers_sent_at": 1.25, "reset": True, "add": ["a"], "remove": ["b"]}),
    ("refusal", {"epoch": 1, "incarnation": 2, "code": "duplicate_id", "reason": "taken"}),
    ("control_request", {"request_id": 1, "verb": "workers", "args": {"o": "json"}}),
    ("control_reply", {"request_id": 1, "result": {"x": [1]}, "error": None}),
]


def test_fuzz_random_and_mutated_frames_only_give_protocol_errors_or_messages() -> None:
    rng = random.Random(20261125)
    seeds = [msgpack.packb([V, k, b]) for k, b in _BODIES]
    outcomes = {"valid": 0, "error": 0}
    for _ in range(12_000):
        frame = _mutations(rng, seeds)
        try:
            msg = codec.decode(frame)
        except ProtocolError:
            outcomes["error"] += 1
        else:
            # Whatever decodes must be a real message that encodes and decodes to itself.
            assert codec.decode(codec.encode(msg)) == msg
            outcomes["valid"] += 1
    assert outcomes["error"] > 5_000 and outcomes["valid"] > 100, outcomes


_SERVE_BODIES: list[tuple[str, dict[str, Any]]] = [
    ("request", {"id": 7, "task": "room-1", "body": {"q": [1, "a", b"b", None]}}),
    ("request", {"id": 8, "task": None, "body": "hello"}),
    ("reply", {"id": 7, "code": "ok", "body": [1, 2], "error": None, "version": [3, 4],
               "qps": 12.5, "utilization": 0.25, "errors": 0.0, "lame_duck": False}),
    ("reply", {"id": 8, "code": "not_owner", "error": "not mine", "lame_duck": True}),
]


def test_fuzz_requests_and_replies_only_give_protocol_errors_or_messages() -> None:
    """The same mutations over request and reply frames. A body may hold NaN (it is the
    application's), so what decodes is compared by its re-encoded bytes."""
    rng = random.Random(20261126)
    seeds = [msgpack.packb([V, k, b]) for k, b in _SERVE_BODIES]
    outcomes = {"valid": 0, "error": 0}
    for _ in range(6_000):
        frame = _mutations(rng, seeds)
        if rng.random() < 0.5:  # mutate the request/reply fields themselves too
            kind, body = rng.choice(_SERVE_BODIES)
            body = dict(body)
            body[rng.choice([*body, "extra"])] = rng.choice(
                [None, -5, 2**64 - 1, 1.5, "x", "", [1, 2], {"a": 1}, True, float("nan"),
                 b"raw", msgpack.ExtType(1, b"x")])
            frame = msgpack.packb([V, kind, body], strict_types=False)
        try:
            msg = codec.decode(frame)
        except ProtocolError:
            outcomes["error"] += 1
        else:
            again = codec.encode(msg)
            assert codec.encode(codec.decode(again)) == again
            outcomes["valid"] += 1
    assert outcomes["error"] > 2_000 and outcomes["valid"] > 100, outcomes


@given(epochs, uints, uints, numbers, uints, numbers)
def test_a_renewal_is_an_empty_instruction_set_on_the_wire(
        epoch: int, seq: int, incarnation: int, lease: float, answers_seq: int,
        answers_sent_at: float) -> None:
    fields = (epoch, seq, incarnation, lease, answers_seq, answers_sent_at)
    frame = codec.encode(Renewal(*fields))
    assert frame == codec.encode(Instructions(*fields))
    assert codec.decode(frame) == Instructions(*fields)


@pytest.mark.parametrize("text", ["two\nlines", "\x1b[2J", "x" * (MAX_ERROR_CHARS + 1)])
def test_a_last_error_is_one_short_line_or_the_report_is_refused(text: str) -> None:
    """A worker's last error (issue 32) is shown by corralctl and the dashboard: one line,
    no control characters, bounded — checked where the report is decoded."""
    st_ = Status("w", 1, 1, 1.0, 10, {"t": 1}, failures={"t": 1}, last_errors={"t": (1.0, text)})
    with pytest.raises(ProtocolError, match="last_errors"):
        codec.decode(codec.encode(st_))
