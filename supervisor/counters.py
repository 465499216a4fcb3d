"""What the supervisor counts. Plain integers bumped on the hot path (a Prometheus counter's
lock would cost more than the work); `supervisor.metrics` exports them at scrape time.

Each counter has one owner: `Counters` are the core's decisions, `IoCounters` the daemon's
bytes and sockets. The ``counters`` verb and the metrics show both.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class Counters:
    reports: int = 0  # status messages handled
    stale_reports: int = 0  # not newer than the last from that worker: dropped
    impostor_reports: int = 0  # an id and incarnation from a connection not its own
    unauthorized_reports: int = 0  # Curve: a report under an id its key does not name
    bad_task_maps: int = 0  # reports whose task maps were not valid (read past the glance)
    refused_reports: int = 0  # from an incarnation that was refused
    contested_ids: int = 0  # a second process reported under a live worker's id
    joins: int = 0
    fresh_ids_refused: int = 0  # reports under a new id from a connection past its --fresh-ids
    bad_ids: int = 0  # reports whose worker id, zone, labels or task ids hold a forbidden char
    start_timeouts: int = 0  # replicas moved because their worker did not start them in time
    restarts: int = 0  # a worker id came back with a new incarnation
    handovers: int = 0  # a new incarnation took over a hand-over its predecessor announced
    revivals: int = 0  # an inactive worker reported again
    duplicate_ids: int = 0  # second live processes refused for using a taken id
    lease_expiries: int = 0  # workers whose timeout fired
    stalls: int = 0  # steps so long that silence was counted again from their end
    foreign_epochs: int = 0  # reports showing a newer epoch than ours while running
    epoch_claims_refused: int = 0  # epochs a worker claimed that the fleet did not back
    assignment_events: int = 0
    tasks_moved: int = 0  # replicas started somewhere new
    rebalance_moves: int = 0  # replicas moved to balance the load (make-before-break)
    spec_changes: int = 0  # tasks restarted by their owners with a new spec
    reconciliations: int = 0  # corrective instruction sets
    resends: int = 0  # instruction sets sent again as a reset because one was lost
    set_parts: int = 0  # frames of instruction sets sent in parts (big sets)
    task_queries: int = 0
    source_errors: int = 0
    failures_moved: int = 0  # replicas moved off a worker they kept failing on

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass
class IoCounters:
    messages_in: int = 0  # every message received on the worker endpoint
    decode_errors: int = 0  # frames that were not valid messages
    bad_frames: int = 0  # wrong number of frames on the worker socket
    messages_out: int = 0
    send_failures: int = 0  # peer gone or its queue full
    control_errors: int = 0  # control requests answered with an error
    control_replies_dropped: int = 0  # replies to a client that was gone or not reading
    gc_freezes: int = 0  # times what was built was frozen (gc.freeze): long steps, rebuild ends
    assignment_seconds: float = 0.0  # time spent in core steps that were assignment events

    def as_dict(self) -> dict[str, float]:
        return asdict(self)
