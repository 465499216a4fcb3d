"""Steady subsetting (issue 31, item 6): balanced *and* low-churn for backends with stable
indexes. Each promise of docs/balancer.md checked under hypothesis on random fleets — uneven
sizes, empty indexes, seeds — and on the issue's own cases."""

from __future__ import annotations

from bisect import bisect_left

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from corral.common.balancer.steady import BITS, BLOCK, SteadyRing, vdc64
from corral.common.balancer.subsetting import (
    LOW_CHURN,
    STABLE,
    STEADY,
    assign,
    churn,
    connection_counts,
    ideal_churn,
    max_loss,
    subset,
)


def names(n: int) -> list[str]:
    return [f"b{i:04d}" for i in range(n)]


def spread(subsets: dict[int, list[str]], backends: list[str | None]) -> int:
    counts = connection_counts(subsets, backends).values()
    return max(counts) - min(counts)


def with_holes(n: int, holes: list[int]) -> list[str | None]:
    listed: list[str | None] = list(names(n))
    for h in holes:
        listed[h % n] = None
    return listed


def largest_block(ring: SteadyRing) -> int:
    """Slots (empty ones included) of the ring's largest block."""
    shift = ring._shift
    keys = ring._keys
    return max(bisect_left(keys, (b + 1) << shift) - bisect_left(keys, b << shift)
               for b in range(1 << (BITS - shift)))


@settings(max_examples=150)
@given(b=st.integers(1, 700), c=st.integers(1, 700), k=st.integers(1, 40),
       seed=st.integers(0, 9))
def test_connections_differ_by_at_most_two_when_the_clients_are_counted(
        b: int, c: int, k: int, seed: int) -> None:
    """While a block holds the K·clients/backends that balance needs — K·clients/backends ≤ 32,
    the least a block holds — or the fleet is one block (under 64 indexes), with the number of
    clients known."""
    k = min(k, b)
    assume(k * c <= 32 * b or b < 64)
    assert spread(assign(STEADY, names(b), range(c), k, seed, population=c), names(b)) <= 2


@given(b=st.integers(1, 300), k=st.integers(1, 40), holes=st.lists(st.integers(0, 299)),
       seed=st.integers(0, 9), c=st.integers(1, 200), counted=st.booleans())
def test_a_larger_subset_keeps_every_connection_of_the_smaller(
        b: int, k: int, holes: list[int], seed: int, c: int, counted: bool) -> None:
    listed = with_holes(b, holes)
    pop = c if counted else None
    small = assign(STEADY, listed, range(c), k, seed, population=pop)
    large = assign(STEADY, listed, range(c), k + 1, seed, population=pop)
    assert all(set(small[x]) <= set(large[x]) for x in small)


changes = st.sampled_from(["hole", "fill", "append", "drop-last"])


@settings(max_examples=200)
@given(b=st.integers(2 * BLOCK, 400), k=st.integers(1, 60), holes=st.lists(st.integers(0, 399),
       max_size=40), seed=st.integers(0, 9), c=st.integers(1, 300), counted=st.booleans(),
       change=changes, which=st.integers(0, 399))
def test_one_backend_coming_or_going_costs_a_client_one_connection_at_most(
        b: int, k: int, holes: list[int], seed: int, c: int, counted: bool, change: str,
        which: int) -> None:
    """In a fleet of two blocks or more, while no window reaches round into its own block
    (K ≤ backends − the largest block)."""
    listed = with_holes(b, holes)
    pop = c if counted else None
    ring = SteadyRing(listed, seed, pop)
    assume(k <= len(ring.names) - largest_block(ring))
    after = list(listed)
    present = [i for i, x in enumerate(listed) if x is not None]
    empty = [i for i, x in enumerate(listed) if x is None]
    if change == "hole":
        after[present[which % len(present)]] = None
    elif change == "fill" and empty:
        after[empty[which % len(empty)]] = "new"
    elif change == "drop-last":
        after = after[:-1]
    else:
        after.append("new")
    before = assign(STEADY, listed, range(c), k, seed, population=pop)
    assert max_loss(before, assign(STEADY, after, range(c), k, seed, population=pop)) <= 1


@given(b=st.integers(2, 2 * BLOCK - 1), k=st.integers(1, 60), seed=st.integers(0, 9),
       c=st.integers(1, 300), which=st.integers(0, 63))
def test_a_backend_leaving_a_one_block_fleet_costs_a_client_that_one_only(
        b: int, k: int, seed: int, c: int, which: int) -> None:
    """A departure leaves its index empty: no start but its own clients' moves, so even a
    window that wraps past the ring's start loses only the departed backend."""
    listed = with_holes(b, [])
    after = list(listed)
    after[which % b] = None
    before = assign(STEADY, listed, range(c), k, seed, population=c)
    assert max_loss(before, assign(STEADY, after, range(c), k, seed, population=c)) <= 1


def scale_ups(algorithm: str, b: int, k: int, steps: int) -> tuple[float, int]:
    """Cumulative churn and the worst per-client loss of ``steps`` one-backend scale-ups."""
    total, worst = 0.0, 0
    before = assign(algorithm, names(b), range(300), k, population=300)
    for size in range(b + 1, b + steps + 1):
        after = assign(algorithm, names(size), range(300), k, population=300)
        total += churn(before, after)
        worst = max(worst, max_loss(before, after))
        before = after
    return total, worst


def test_thirty_scale_ups_stay_within_twice_the_least_churn() -> None:
    """The issue's case: 300 → 330 backends one at a time, K = 30. Low-churn's starts slide
    with every resize (4×); steady re-spaces one block of about 40 per resize."""
    least = sum(ideal_churn(size - 1, size) for size in range(301, 331))
    total, worst = scale_ups(STEADY, 300, 30, 30)
    assert total <= 2 * least and worst == 1
    assert scale_ups(LOW_CHURN, 300, 30, 30)[0] > 3 * least


def test_the_issues_uneven_fleet_is_balanced_where_low_churn_was_not() -> None:
    """300 clients × 211 backends × K 13, resized to 212: low-churn spread 3."""
    for b in (211, 212):
        assert spread(assign(STEADY, names(b), range(300), 13, population=300), names(b)) <= 2
    assert spread(assign(LOW_CHURN, names(211), range(300), 13), names(211)) >= 3
    assert spread(assign(STABLE, names(300), range(300), 30), names(300)) > 2


def test_without_the_client_count_adding_a_client_moves_no_one_and_balance_is_looser() -> None:
    small = assign(STEADY, names(300), range(299), 30)
    big = assign(STEADY, names(300), range(300), 30)
    assert all(big[c] == small[c] for c in small)
    assert 2 < spread(big, names(300)) <= 4


def test_indexes_are_the_order_given_and_a_set_is_sorted() -> None:
    listed = names(50)
    turned = listed[25:] + listed[:25]
    assert assign(STEADY, listed, range(20), 5) != assign(STEADY, turned, range(20), 5)
    assert assign(STEADY, set(turned), range(20), 5) == assign(STEADY, listed, range(20), 5)
    one = subset(STEADY, listed, 7, 5, population=20)
    assert one == assign(STEADY, listed, range(20), 5, population=20)[7]


def test_every_aligned_block_holds_an_even_share_of_the_indexes() -> None:
    """The van der Corput property the balance rests on, with a seed's digital shift."""
    for n in (37, 64, 211, 300):
        for q in range(0, 5):
            for mask in (0, 0xDEADBEEF << 20):
                per_block: dict[int, int] = {}
                for i in range(n):
                    block = (vdc64(i) ^ mask) >> (BITS - q)
                    per_block[block] = per_block.get(block, 0) + 1
                assert set(per_block.values()) <= {n >> q, (n >> q) + 1}


def test_client_index_and_count_are_checked() -> None:
    ring = SteadyRing(names(10), clients=5)
    for bad, text in ((5, "not below clients=5"), (-1, "non-negative")):
        try:
            ring.start(bad)
        except ValueError as e:
            assert text in str(e)
        else:
            raise AssertionError(f"client {bad} accepted")
    assert SteadyRing([None, None]).subset(0, 3) == []
