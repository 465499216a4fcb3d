"""What a task source's thread counts. Plain integers, bumped only by that thread and read by
the loop at scrape time (an int read is atomic), like `supervisor.counters.Counters`."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class SourceCounters:
    queries: int = 0  # requests answered (start, --query-interval, corralctl query, SIGHUP)
    updates: int = 0  # new lists handed to the loop (from a request or a watch)
    unchanged: int = 0  # lists found equal to the last one handed over (HTTP 304 included)
    failures: int = 0  # failed reads, broken lists, lost watches, failed reconnect attempts
    reconnects: int = 0  # watches re-established after a loss (etcd)
    watch_events: int = 0  # changes a watch saw: the file changed, an etcd key was put/deleted

    def as_dict(self) -> dict[str, int]:
        """Named for export beside the core's counters (``source_…``)."""
        return {f"source_{k}": v for k, v in asdict(self).items()}
