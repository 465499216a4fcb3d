"""Reconciliation: corrections converge, claims resolve deterministically."""

from __future__ import annotations

import doctest

from hypothesis import given
from hypothesis import strategies as st

from corral.common.placement import reconcile
from corral.common.placement.reconcile import correction, resolve_claims

task_sets = st.sets(st.sampled_from([f"t{i}" for i in range(12)]))


def apply(running: set[str], c: reconcile.Correction) -> set[str]:
    """What a worker does with a correction (the worker-side rule, written independently)."""
    if c.reset:
        return set(c.add)
    return (running - set(c.remove)) | set(c.add)


@given(task_sets, task_sets, st.booleans())
def test_correction_converges(running: set[str], desired: set[str], reset: bool) -> None:
    c = correction(running, desired, reset=reset)
    assert apply(running, c) == desired
    assert bool(c) == (reset or running != desired)
    if not reset:
        assert not set(c.add) & running and set(c.remove) <= running


@given(
    st.dictionaries(
        st.sampled_from(["a", "b", "c"]),
        st.lists(st.tuples(st.sampled_from(["w1", "w2", "w3", "w4"]), st.integers(0, 3)),
                 unique_by=lambda c: c[0], max_size=4),
    ),
    st.integers(1, 3),
)
def test_claims_keep_highest_epoch_then_lowest_id(
    claims: dict[str, list[tuple[str, int]]], replicas: int
) -> None:
    kept, surplus = resolve_claims(claims, replicas)
    for task, claimants in claims.items():
        assert len(kept[task]) == min(replicas, len(claimants))
        assert sorted(kept[task] + surplus.get(task, [])) == sorted(w for w, _ in claimants)
        epoch = dict(claimants)
        for k in kept[task]:
            for s in surplus.get(task, []):
                assert (epoch[k], -int(k[1:])) > (epoch[s], -int(s[1:]))
        # The order of the claims does not matter.
        assert resolve_claims({task: list(reversed(claimants))}, replicas)[0][task] == kept[task]


def test_doctests() -> None:
    assert doctest.testmod(reconcile).failed == 0
