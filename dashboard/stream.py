"""Server-Sent Events to browsers: each message is encoded once and queued for every browser,
in a bounded queue per browser. A browser that does not keep up (its queue full) is dropped —
its stream is closed, and its EventSource reconnects and starts from a fresh snapshot — never
buffered without bound.

    >>> hub = Hub(queue_size=2)
    >>> sub = hub.subscribe()
    >>> for i in range(3):
    ...     hub.publish("events", [i])
    >>> sub.dropped, hub.dropped_total, len(hub)
    (True, 1, 0)
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

QUEUE_SIZE = 256  # messages a browser may fall behind by before it is dropped
MAX_BROWSERS = 64
RETRY_MS = 2000  # how soon a dropped or disconnected EventSource comes back


def encode(kind: str, data: Any) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


class Subscriber:
    def __init__(self, queue_size: int) -> None:
        self.queue: asyncio.Queue[bytes] = asyncio.Queue(queue_size)
        self.dropped = False
        self.task: asyncio.Task[Any] | None = None  # the handler writing to this browser

    def drop(self) -> None:
        self.dropped = True
        if self.task is not None:
            self.task.cancel()


class Hub:
    def __init__(self, queue_size: int = QUEUE_SIZE, max_browsers: int = MAX_BROWSERS) -> None:
        self.queue_size = queue_size
        self.max_browsers = max_browsers
        self._subs: set[Subscriber] = set()
        self.dropped_total = 0
        self.sent_total = 0

    def __len__(self) -> int:
        return len(self._subs)

    def full(self) -> bool:
        return len(self._subs) >= self.max_browsers

    def subscribe(self) -> Subscriber:
        sub = Subscriber(self.queue_size)
        self._subs.add(sub)
        return sub

    def unsubscribe(self, sub: Subscriber) -> None:
        self._subs.discard(sub)

    def send(self, sub: Subscriber, kind: str, data: Any) -> None:
        """To one browser (its first snapshot)."""
        self._put(sub, encode(kind, data))

    def publish(self, kind: str, data: Any) -> None:
        """To every browser; the message is encoded once."""
        if not self._subs:
            return
        payload = encode(kind, data)
        for sub in list(self._subs):
            self._put(sub, payload)

    def _put(self, sub: Subscriber, payload: bytes) -> None:
        try:
            sub.queue.put_nowait(payload)
            self.sent_total += 1
        except asyncio.QueueFull:
            self.dropped_total += 1
            self.unsubscribe(sub)
            sub.drop()
