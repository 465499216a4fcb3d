"""Diffs: merging one into another is the same as making its changes one by one."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from corral.common.placement.diff import Diff

WORKERS = st.sampled_from(["w1", "w2", "w3", "ü 4"])
TASKS = st.sampled_from(["a", "b", "c", "d", "e"])
OPS = st.lists(st.tuples(st.booleans(), WORKERS, TASKS), max_size=30)


def build(ops: list[tuple[bool, str, str]]) -> Diff:
    d = Diff()
    for add, w, t in ops:
        (d.add if add else d.remove)(w, t)
    return d


def reference_merge(into: Diff, other: Diff) -> Diff:
    """What merge means: each of the other's removals, then its additions, one at a time."""
    for w, d in other.workers.items():
        for t in d.remove:
            into.remove(w, t)
        for t in d.add:
            into.add(w, t)
    return into


def state(d: Diff) -> dict[str, tuple[list[str], list[str]]]:
    return {w: (list(x.add), list(x.remove)) for w, x in d.workers.items()}


@settings(max_examples=300, deadline=None)
@given(OPS, OPS, OPS)
def test_merge_makes_the_other_diffs_changes_one_by_one(first: list, second: list,
                                                        later: list) -> None:
    merged = build(first).merge(build(second))
    assert state(merged) == state(reference_merge(build(first), build(second)))
    # The merged diff shares nothing with the one merged in: changing either later leaves
    # the other as it was.
    other = build(second)
    merged = build(first).merge(other)
    before = state(merged)
    for add, w, t in later:
        (other.add if add else other.remove)(w, t)
    assert state(merged) == before
    snapshot = state(other)
    for add, w, t in later:
        (merged.add if add else merged.remove)(w, t)
    assert state(other) == snapshot
