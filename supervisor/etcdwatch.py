"""etcd through its JSON gateway, for the etcd task source: a paged range read at one revision,
and a watch stream on a thread of our own.

etcd3gw (the `ha` extra) is synchronous, and its own watch runs on an executor thread that can
be neither joined nor told apart from a quiet stream when etcd dies. So `WatchStream` holds its
own thread and session and reads the gateway's JSON lines itself: a stream quiet for `IDLE_S`
is re-opened from the next revision (which also notices a peer that vanished without closing
the connection), and `stop` shuts its socket down, so the thread ends at once and is joined.
etcd3gw is still what connects, finds the API path and maps HTTP errors (`connect`, `range`).
"""

from __future__ import annotations

import base64
import contextlib
import json
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

RANGE_PAGE = 5000
IDLE_S = 10.0  # a watch stream silent this long is re-opened from the next revision
CONNECT_S = 2.0


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def unb64(text: str) -> bytes:
    return base64.b64decode(text)


def range_end(prefix: bytes) -> bytes:
    return prefix[:-1] + bytes([prefix[-1] + 1])  # the prefix ends with "/", never 0xff


def connect(endpoint: tuple[str, int], timeout: float) -> Any:
    import etcd3gw  # the `ha` extra: only deployments that use etcd need it

    return etcd3gw.client(host=endpoint[0], port=endpoint[1], timeout=timeout)


def read_range(client: Any, prefix: bytes) -> tuple[list[tuple[bytes, bytes]], int]:
    """Every key under the prefix, in pages, all at the first page's revision."""
    rows: list[tuple[bytes, bytes]] = []
    start, revision = prefix, 0
    while True:
        body: dict[str, Any] = {"key": b64(start), "range_end": b64(range_end(prefix)),
                                "limit": RANGE_PAGE}
        if revision:
            body["revision"] = revision
        answer = client.post(client.get_url("/kv/range"), json=body)
        revision = revision or int(answer["header"]["revision"])
        kvs = answer.get("kvs", [])
        rows.extend((unb64(kv["key"]), unb64(kv.get("value", ""))) for kv in kvs)
        if not answer.get("more") or not kvs:
            return rows, revision
        start = rows[-1][0] + b"\0"


def why(exc: BaseException) -> str:
    detail = getattr(exc, "detail_text", None) or str(exc)  # etcd3gw's errors keep it apart
    return f"{type(exc).__name__}: {detail}"[:300]


class WatchStream:
    """One etcd watch on its own thread. Events go to `inbox` as ``("events", [...])``, then
    `nudge` is called; the end goes as ``("lost", reason)`` or ``("resync", reason)`` (the
    watch was cancelled, e.g. its revision was compacted: read everything again)."""

    def __init__(self, client: Any, prefix: bytes, revision: int,
                 nudge: Callable[[], None]) -> None:
        import requests

        self.inbox: deque[tuple[str, Any]] = deque()
        self.revision = revision  # the next revision to watch from
        self.opened = 0  # streams opened: 1, then one more after every quiet IDLE_S
        self._url = client.get_url("/watch")
        self._key = {"key": b64(prefix), "range_end": b64(range_end(prefix))}
        self._nudge = nudge
        self._session = requests.Session()
        self._lock = threading.Lock()
        self._stopped = False
        self._response: Any = None
        self._thread = threading.Thread(target=self._run, name="etcd-task-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            response = self._response
        sock = getattr(getattr(getattr(response, "raw", None), "connection", None), "sock", None)
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked reading it
        self._thread.join(CONNECT_S + IDLE_S)
        self._session.close()

    def _run(self) -> None:
        end: tuple[str, str] | None = None
        try:
            while end is None and not self._stopped:
                end = self._follow()
        except Exception as exc:
            end = ("lost", why(exc))
        with self._lock:
            if self._stopped:
                return
        self.inbox.append(end or ("lost", "stopped"))
        self._nudge()

    def _follow(self) -> tuple[str, str] | None:
        """Read one stream until it ends (how) or has been quiet for IDLE_S (None)."""
        from requests.exceptions import ConnectionError as Broken
        from urllib3.exceptions import ReadTimeoutError

        body: dict[str, Any] = {"create_request": {**self._key,
                                                   "start_revision": self.revision}}
        response = self._session.post(self._url, json=body, stream=True,
                                      timeout=(CONNECT_S, IDLE_S))
        self.opened += 1
        with self._lock:
            self._response = response
            stopped = self._stopped
        try:
            if stopped:
                return ("lost", "stopped")
            if response.status_code != 200:
                return ("lost", f"watch refused: HTTP {response.status_code}")
            for line in _lines(response):
                end = self._take(json.loads(line))
                if end is not None:
                    return end
            return ("lost", "etcd closed the watch")
        except Broken as exc:
            if exc.args and isinstance(exc.args[0], ReadTimeoutError):
                return None  # quiet for IDLE_S: open it again from the next revision
            raise
        finally:
            with self._lock:
                self._response = None
            response.close()

    def _take(self, message: dict[str, Any]) -> tuple[str, str] | None:
        if "error" in message:
            return ("lost", f"etcd: {message['error'].get('message', message['error'])}")
        result = message.get("result", {})
        if result.get("canceled"):
            return ("resync", f"watch cancelled: {result.get('cancel_reason') or result}")
        events = result.get("events")
        if events:
            self.revision = max(int(e["kv"]["mod_revision"]) for e in events) + 1
            self.inbox.append(("events", events))
            self._nudge()
        return None


def _lines(response: Any) -> Iterator[bytes]:
    """The gateway writes one JSON object a line; chunks need not follow lines."""
    parts: list[bytes] = []
    for chunk in response.iter_content(chunk_size=None):
        while (cut := chunk.find(b"\n")) >= 0:
            parts.append(chunk[:cut])
            line, parts, chunk = b"".join(parts), [], chunk[cut + 1:]
            if line.strip():
                yield line
        if chunk:
            parts.append(chunk)
