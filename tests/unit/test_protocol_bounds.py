"""Every number a peer sends is range-checked where it is decoded: for each message and each
numeric field, values just past its documented bound (and negative, NaN, infinite ones) are
refused by `codec.decode`, and values at the bound are accepted. The bounds are the ones
docs/protocol.md lists ("Bounds")."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from corral.common.errors import ProtocolError
from corral.common.wire import codec, protocol
from corral.common.wire.protocol import (
    MAX_EPOCH,
    MAX_LOAD,
    MAX_NUMBER,
    MAX_RATE,
    MAX_UINT,
    MAX_UTILIZATION,
    PROTOCOL_VERSION,
)

ROOT = Path(__file__).resolve().parents[2]

# kind -> a valid body, and its numeric fields with their bounds (None: a tuple's element).
STATUS = {"worker": "w", "incarnation": 1, "seq": 1, "sent_at": 1.0, "max_load": 10.0,
          "running": {"t": 5}}
INSTRUCTIONS = {"epoch": 3, "seq": 1, "incarnation": 1, "lease": 5.0, "answers_seq": 1,
                "answers_sent_at": 1.0, "add": ["t"], "tokens": {"t": 9}}
BOUNDS: dict[str, tuple[dict[str, Any], dict[str, float]]] = {
    "status": (STATUS, {"incarnation": MAX_UINT, "seq": MAX_UINT, "sent_at": MAX_NUMBER,
                        "max_load": MAX_LOAD, "utilization": MAX_UTILIZATION,
                        "qps": MAX_RATE, "errors": MAX_RATE, "applied.0": MAX_EPOCH,
                        "applied.1": MAX_UINT, "running.t": MAX_UINT,
                        "failures.t": MAX_UINT}),
    "instructions": (INSTRUCTIONS, {"epoch": MAX_EPOCH, "seq": MAX_UINT,
                                    "incarnation": MAX_UINT, "lease": MAX_NUMBER,
                                    "answers_seq": MAX_UINT, "answers_sent_at": MAX_NUMBER,
                                    "tokens.t": MAX_UINT, "part": MAX_UINT,
                                    "parts": protocol.MAX_PARTS}),
    "refusal": ({"epoch": 1, "incarnation": 1, "code": "x", "reason": "y"},
                {"epoch": MAX_EPOCH, "incarnation": MAX_UINT}),
    "control_request": ({"request_id": 1, "verb": "status"}, {"request_id": MAX_UINT}),
}
FIELDS = [(kind, f) for kind, (_, fields) in BOUNDS.items() for f in fields]


def frame(kind: str, field: str, value: Any) -> bytes:
    body, _ = BOUNDS[kind]
    body = {k: (dict(v) if isinstance(v, dict) else v) for k, v in body.items()}
    name, _, key = field.partition(".")
    if name in ("applied",):
        pair = [1, 1]
        pair[int(key)] = value
        body[name] = pair
    elif key:
        body.setdefault(name, {})
        body[name] = {**body[name], key: value}
    else:
        body[name] = value
    if kind == "instructions" and name in ("part", "parts"):
        body["parts"] = value if name == "parts" else MAX_UINT
    return msgpack.packb([PROTOCOL_VERSION, kind, body])


def refused(data: bytes) -> bool:
    try:
        codec.decode(data)
    except ProtocolError:
        return True
    return False


@pytest.mark.parametrize(("kind", "field"), FIELDS)
def test_the_bound_itself_is_accepted(kind: str, field: str) -> None:
    bound = BOUNDS[kind][1][field]
    value: Any = int(bound) if bound == int(bound) and bound <= MAX_UINT else bound
    if kind == "instructions" and field == "part":
        return  # a part number is below its parts (checked by the codec): no bound of its own
    assert not refused(frame(kind, field, value)), (kind, field, value)


@pytest.mark.parametrize(("kind", "field"), FIELDS)
@given(data=st.data())
def test_anything_past_the_bound_is_refused(kind: str, field: str, data: st.DataObject) -> None:
    bound = BOUNDS[kind][1][field]
    integer = bound == int(bound) and field not in ("sent_at", "max_load", "utilization",
                                                   "qps", "errors", "lease",
                                                   "answers_sent_at")
    past = st.one_of(
        st.integers(min_value=int(bound) + 1, max_value=2**64 - 1) if integer else
        st.floats(min_value=bound, exclude_min=True, allow_nan=False),
        st.integers(min_value=-(2**63), max_value=-1),
        st.floats(max_value=-1e-300, allow_nan=False),
        st.sampled_from([math.nan, math.inf, -math.inf]),
    )
    value = data.draw(past)
    assert refused(frame(kind, field, value)), (kind, field, value)


def test_docs_list_a_bound_for_every_field_here() -> None:
    text = (ROOT / "docs" / "protocol.md").read_text()
    section = text[text.index("## Bounds"):]
    missing = [f"{kind}.{field.split('.')[0]}" for kind, field in FIELDS
               if f"`{field.split('.')[0]}`" not in section]
    assert missing == []
