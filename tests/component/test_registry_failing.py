"""The registry's set of failing workers (what `status` counts failing tasks from, instead of
every record) stays the set of workers whose last report lists failures, whatever happens:
joins, reports, restarts, contenders, silence, revivals, forgetting."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.common.timers import TimerWheel
from corral.common.wire.protocol import Status
from corral.supervisor.counters import Counters
from corral.supervisor.registry import Registry

WORKERS = ("a", "b", "weird id/ü", "c")

op = st.one_of(
    st.tuples(st.just("report"), st.sampled_from(WORKERS), st.integers(1, 3),
              st.booleans()),
    st.tuples(st.just("wait"), st.floats(0.1, 20.0)),
    st.tuples(st.just("forget"), st.sampled_from(WORKERS)),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(op, max_size=40))
def test_failing_set_follows_every_record(ops: list[tuple]) -> None:
    now = 0.0
    reg = Registry(TimerWheel(0.5, now), Counters(), silence=12.0, forget_after=60.0, now=now)
    seqs: dict[tuple[str, int], int] = {}
    for o in ops:
        if o[0] == "report":
            _, worker, inc, failing = o
            seq = seqs[(worker, inc)] = seqs.get((worker, inc), 0) + 1
            status = Status(worker, inc, seq, now, 10.0, {"t1": 1, "t2": 2},
                            failures={"t1": 2} if failing else {})
            reg.classify(f"{worker}/{inc}".encode(), status, now)  # a rival waits if live
        elif o[0] == "wait":
            now += o[1]
            for rec in reg.expire(now):
                if rec.contender is not None:  # the core lets a waiting process take over
                    reg.accept_contender(rec, now)
        else:
            reg.forget(o[1])
        assert reg.failing == {r.id for r in reg if r.status.failures}
