"""Prometheus metrics, served with prometheus_client on ``--metrics HOST:PORT``.

The loop thread owns all state. Counters and gauges are a snapshot the loop refreshes about
once a second (`refresh`); the HTTP thread only reads the snapshot (a reference swap is atomic
in CPython), so scraping never touches live state.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .queries import Queries

COUNTERS = {
    "messages_in": "messages received on the worker endpoint",
    "reports": "worker status reports handled",
    "stale_reports": "reports dropped as not newer than the last",
    "impostor_reports": "reports under another connection's id and incarnation",
    "unauthorized_reports": "reports under an id the sender's Curve key does not name",
    "refused_reports": "reports from refused incarnations",
    "bad_task_maps": "reports whose task maps were not valid (dropped)",
    "decode_errors": "frames that were not valid messages",
    "bad_frames": "messages with the wrong number of frames",
    "gc_freezes": ("times what was built (a step over 50 ms, a rebuild in slices) was moved "
                   "out of the collector's sight"),
    "control_errors": "control requests answered with an error",
    "control_replies_dropped": "control replies to a client that was gone or not reading",
    "messages_out": "messages sent to workers",
    "send_failures": "sends dropped because the worker was gone or slow",
    "joins": "workers that joined",
    "restarts": "workers that came back with a new incarnation",
    "handovers": "new incarnations that took over a hand-over their predecessor announced",
    "duplicate_ids": "second live workers refused for using a taken id",
    "contested_ids": "second processes that reported under a live worker's id",
    "lease_expiries": "workers whose lease + margin passed in silence",
    "stalls": "supervisor steps so long that worker silence counts again from their end",
    "assignment_events": "assignment events",
    "tasks_moved": "task replicas started somewhere new",
    "rebalance_moves": "replicas moved to balance the load (make-before-break)",
    "spec_changes": "tasks restarted by their owners with a new spec",
    "set_parts": "frames of instruction sets sent in parts",
    "reconciliations": "corrective instruction sets",
    "resends": "instruction sets resent as a reset after a loss",
    "task_queries": "task queries completed",
    "source_errors": "task queries that failed or were refused",
    "failures_moved": "replicas moved off a worker they kept failing on",
    "start_timeouts": "replicas moved because their worker did not start them in time",
    "fresh_ids_refused": "reports under a new worker id from a connection past its --fresh-ids",
    "bad_ids": "reports whose worker id, zone, labels or task ids hold a forbidden character",
    "epoch_claims_refused": "epochs a worker claimed to have seen that the fleet did not back",
    "source_queries": "task source requests answered",
    "source_updates": "new task lists the source handed over (asked for or watched)",
    "source_unchanged": "task lists found equal to the last one (HTTP 304 included)",
    "source_failures": "failed reads, broken lists, lost watches, failed reconnects",
    "source_reconnects": "task source watches re-established after a loss",
    "source_watch_events": "changes a task source's watch saw",
}


def snapshot(q: Queries) -> dict[str, Any]:
    """Gauges, computed on the loop thread."""
    summary = q.placement_summary()
    return {
        "workers": q.worker_states(),
        "tasks_assigned": summary["tasks_assigned"],
        "tasks_running": summary["tasks_running"],
        "tasks_pending": summary["tasks_pending"],
        "balanced": 1 if summary["balanced"] else 0,
        "zone_degraded": summary["zone_degraded"],
        "handoffs": summary["handoffs"],
        "epoch": q.lifecycle()[1],
    }


class CorralCollector(Collector):
    def __init__(self, q: Queries) -> None:
        self.gauges: dict[str, Any] = snapshot(q)
        self.counters: dict[str, float] = q.counters()

    def collect(self) -> Iterator[Any]:
        c = self.counters
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"corral_{name}", doc, value=c[name])
        yield SummaryMetricFamily("corral_assignment_event_seconds",
                                  "time spent computing assignment events (timers, task "
                                  "queries, commands, joins)",
                                  count_value=int(c["assignment_events"]),
                                  sum_value=c["assignment_seconds"])
        g = self.gauges
        workers = GaugeMetricFamily("corral_workers", "workers by state", labels=["state"])
        for state, n in sorted(g["workers"].items()):
            workers.add_metric([state], n)
        yield workers
        yield GaugeMetricFamily("corral_tasks_assigned", "tasks with at least one owner",
                                value=g["tasks_assigned"])
        yield GaugeMetricFamily("corral_tasks_running", "tasks an owner reports running",
                                value=g["tasks_running"])
        yield GaugeMetricFamily("corral_tasks_pending", "tasks short of replicas",
                                value=g["tasks_pending"])
        yield GaugeMetricFamily("corral_balanced", "1 when the placement meets the balance "
                                "criterion (no rebalance pass has moves left)",
                                value=g["balanced"])
        yield GaugeMetricFamily("corral_handoffs", "make-before-break hand-offs in flight",
                                value=g["handoffs"])
        yield GaugeMetricFamily("corral_zone_degraded", "tasks whose replicas are not spread "
                                "over failure domains as far as the live ones allow",
                                value=g["zone_degraded"])
        yield GaugeMetricFamily("corral_epoch", "the supervisor's epoch", value=g["epoch"])

    def refresh(self, q: Queries) -> None:
        """On the loop thread: new values; the HTTP thread only swaps in references."""
        self.gauges = snapshot(q)
        self.counters = q.counters()


def serve(q: Queries, hostport: str) -> CorralCollector:
    host, _, port = hostport.rpartition(":")
    registry = CollectorRegistry()
    collector = CorralCollector(q)
    registry.register(collector)
    start_http_server(int(port), addr=host, registry=registry)
    return collector
