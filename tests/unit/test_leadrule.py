"""The rule that makes leadership follow the fleet (supervisor/leadrule.py): clearly more, a
margin both ways (so it never flaps), a hold of one keep-alive period, at once from nobody."""

from __future__ import annotations

import doctest

from hypothesis import given
from hypothesis import strategies as st

from corral.supervisor import leadrule
from corral.supervisor.leadrule import better, margin, resign_now

counts = st.integers(min_value=0, max_value=200_000)


def test_doctests() -> None:
    assert doctest.testmod(leadrule).failed == 0


@given(counts, counts)
def test_two_supervisors_never_each_hear_clearly_more_than_the_other(a: int, b: int) -> None:
    assert not (better(a, {"b": b}) and better(b, {"a": a}))


@given(counts, counts, counts)
def test_switching_back_needs_the_gap_to_swing_by_both_margins(a: int, b: int, a2: int) -> None:
    """Leadership moved from A (hearing a) to B (hearing b); it moves back only once A hears
    clearly more than B: the gap has swung by at least the two margins, never by noise."""
    if better(a, {"b": b}) is None:
        return
    if better(b, {"a": a2}) is not None:
        assert (a2 - b) - (a - b) >= margin(b) + margin(a2)


@given(counts, st.dictionaries(st.sampled_from("bcdef"), st.one_of(st.none(), counts)))
def test_the_best_member_is_named_only_when_clearly_ahead(
        mine: int, others: dict[str, int | None]) -> None:
    pick = better(mine, others)
    known = {n: c for n, c in others.items() if c is not None}
    if pick is None:
        assert not known or max(known.values()) - mine < margin(max(known.values()))
    else:
        name, count = pick
        assert known[name] == count == max(known.values())
        assert count - mine >= margin(count) >= 1
        # Every member picks the same one: the greatest name among the best.
        assert name == max(n for n, c in known.items() if c == count)


def test_members_that_publish_no_count_are_left_out() -> None:
    assert better(0, {"old": None}) is None
    assert better(1, {"old": None, "b": 5}) == ("b", 5)


def test_a_leader_resigns_after_a_keep_alive_period_or_at_once_when_it_hears_nobody() -> None:
    ttl = 3.0
    assert not resign_now(2, None, 10.0, ttl)
    assert not resign_now(2, 10.0, 10.9, ttl)
    assert resign_now(2, 10.0, 11.0, ttl)
    assert resign_now(0, 10.0, 10.0, ttl)
