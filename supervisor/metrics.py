"""Prometheus metrics, served with prometheus_client on ``--metrics HOST:PORT``.

The loop thread owns all state. Counters are plain integers the core bumps; gauges are a
snapshot the loop refreshes about once a second. The HTTP thread only reads those two (an int
read and a reference swap are atomic in CPython), so scraping never touches live dicts.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from .core import SupervisorCore

COUNTERS = {
    "messages_in": "messages received on the worker endpoint",
    "reports": "worker status reports handled",
    "stale_reports": "reports dropped as not newer than the last",
    "impostor_reports": "reports under another connection's id and incarnation",
    "unauthorized_reports": "reports under an id the sender's Curve key does not name",
    "refused_reports": "reports from refused incarnations",
    "decode_errors": "frames that were not valid messages",
    "bad_frames": "messages with the wrong number of frames",
    "control_errors": "control requests answered with an error",
    "control_replies_dropped": "control replies to a client that was gone or not reading",
    "messages_out": "messages sent to workers",
    "send_failures": "sends dropped because the worker was gone or slow",
    "joins": "workers that joined",
    "restarts": "workers that came back with a new incarnation",
    "duplicate_ids": "second live workers refused for using a taken id",
    "lease_expiries": "workers whose lease + margin passed in silence",
    "assignment_events": "assignment events",
    "tasks_moved": "task replicas started somewhere new",
    "reconciliations": "corrective instruction sets",
    "resends": "instruction sets resent as a reset after a loss",
    "task_queries": "task queries completed",
    "source_errors": "task queries that failed or were refused",
    "failures_moved": "replicas moved off a worker they kept failing on",
}


def snapshot(core: SupervisorCore) -> dict[str, Any]:
    """Gauges, computed on the loop thread."""
    by_state: dict[str, int] = {}
    for rec in core.workers.values():
        state = rec.display_state
        by_state[state] = by_state.get(state, 0) + 1
    p = core.placement
    return {
        "workers": by_state,
        "tasks_assigned": sum(1 for t in p.tasks if p.owners(t)),
        "tasks_pending": len(p.pending()),
        "epoch": core.epoch,
    }


class CorralCollector(Collector):
    def __init__(self, core: SupervisorCore) -> None:
        self.core = core
        self.gauges: dict[str, Any] = snapshot(core)

    def collect(self) -> Iterator[Any]:
        c = self.core.counters
        for name, doc in COUNTERS.items():
            yield CounterMetricFamily(f"corral_{name}", doc, value=getattr(c, name))
        yield SummaryMetricFamily("corral_assignment_event_seconds",
                                  "time spent computing assignment events (timers, task "
                                  "queries, commands, joins)",
                                  count_value=c.assignment_events,
                                  sum_value=c.assignment_seconds)
        g = self.gauges
        workers = GaugeMetricFamily("corral_workers", "workers by state", labels=["state"])
        for state, n in sorted(g["workers"].items()):
            workers.add_metric([state], n)
        yield workers
        yield GaugeMetricFamily("corral_tasks_assigned", "tasks with at least one owner",
                                value=g["tasks_assigned"])
        yield GaugeMetricFamily("corral_tasks_pending", "tasks short of replicas",
                                value=g["tasks_pending"])
        yield GaugeMetricFamily("corral_epoch", "the supervisor's epoch", value=g["epoch"])


def serve(core: SupervisorCore, hostport: str) -> CorralCollector:
    host, _, port = hostport.rpartition(":")
    registry = CollectorRegistry()
    collector = CorralCollector(core)
    registry.register(collector)
    start_http_server(int(port), addr=host, registry=registry)
    return collector
