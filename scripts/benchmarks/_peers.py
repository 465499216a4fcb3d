"""Adapters that run the comparison peers (kafka-python assignors, uhashring) on corral's
terms: tasks are partitions of one topic, workers are group members. Benchmarks only."""

from __future__ import annotations

from collections import namedtuple
from typing import Any

from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor
from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from kafka.structs import TopicPartition
from uhashring import HashRing

TOPIC = "tasks"
_Member = namedtuple("_Member", "member_id group_instance_id metadata")


class _Cluster:
    """The two calls the assignors make of a broker's cluster metadata."""

    def __init__(self, ntasks: int) -> None:
        self._partitions = set(range(ntasks))

    def topics(self) -> set[str]:
        return {TOPIC}

    def partitions_for_topic(self, topic: str) -> set[int]:
        return self._partitions


def _result(assignment: dict[str, Any], task_ids: list[str]) -> dict[str, str]:
    owner = {}
    for member, a in assignment.items():
        for _topic, parts in a.assigned_partitions:
            for p in parts:
                owner[task_ids[p]] = member
    return owner


def kafka_roundrobin(task_ids: list[str], workers: list[str]) -> dict[str, str]:
    members = [_Member(w, None, RoundRobinPartitionAssignor.metadata([TOPIC])) for w in workers]
    return _result(RoundRobinPartitionAssignor.assign(_Cluster(len(task_ids)), members), task_ids)


def kafka_sticky(
    task_ids: list[str], workers: list[str], previous: dict[str, str] | None = None
) -> dict[str, str]:
    """Sticky, told the previous owner of each partition through member user data."""
    index = {t: i for i, t in enumerate(task_ids)}
    held: dict[str, list[TopicPartition]] = {w: [] for w in workers}
    for task, w in (previous or {}).items():
        if w in held:
            held[w].append(TopicPartition(TOPIC, index[task]))
    members = [
        _Member(w, None, StickyPartitionAssignor._metadata([TOPIC], held[w] or None, 1))
        for w in workers
    ]
    return _result(StickyPartitionAssignor().assign(_Cluster(len(task_ids)), members), task_ids)


def uhashring_ring(workers: dict[str, float]) -> HashRing:
    """A weighted ring: each worker's weight is its max load (uhashring scales vnodes by it)."""
    return HashRing(nodes={w: {"weight": max(1, round(cap / 10))} for w, cap in workers.items()})


def uhashring_assign(ring: HashRing, task_ids: list[str]) -> dict[str, str]:
    return {t: ring.get_node(t) for t in task_ids}
