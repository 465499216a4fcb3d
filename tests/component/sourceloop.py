"""What the source tests share: a stand-in for the daemon's loop around a real `Fetcher`, and
the fixture that stops every fetcher a test made and checks its threads are gone."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from corral.supervisor.events import TasksFetched
from corral.supervisor.sources import Fetcher, TaskSource

from ..support import wait_until

THREADS = {"task-source", "etcd-task-watch"}


class Loop:
    """Stands in for the daemon's loop: a Fetcher whose results it collects."""

    def __init__(self, spec: str, timeout: float = 5.0) -> None:
        self.fetcher = Fetcher(TaskSource.parse(spec), timeout, self._woken)
        self.seen: list[TasksFetched] = []
        self.lock = threading.Lock()

    def _woken(self) -> None:
        with self.lock:
            while self.fetcher.results:
                self.seen.append(self.fetcher.results.popleft())

    def got(self, n: int) -> list[TasksFetched]:
        wait_until(lambda: len(self.seen) >= n, timeout=10, what=f"{n} results")
        return self.seen

    def lists(self) -> list[dict[str, Any] | None]:
        with self.lock:
            return [None if r.tasks is None else dict(r.tasks) for r in self.seen]


class Loops:
    def __init__(self) -> None:
        self.made: list[Loop] = []

    def asked(self, spec: str, timeout: float = 5.0) -> Loop:
        """A loop on the source that has asked for its list once, with reset, as at start."""
        loop = self.new(spec, timeout)
        loop.fetcher.request(reset=True)
        return loop

    def new(self, spec: str, timeout: float = 5.0) -> Loop:
        loop = Loop(spec, timeout)
        self.made.append(loop)
        return loop


@pytest.fixture(name="loops")
def loops_fixture() -> Iterator[Loops]:
    loops = Loops()
    try:
        yield loops
    finally:
        for loop in loops.made:
            assert loop.fetcher.stop(), "the source's thread did not stop"
        names = {t.name for t in threading.enumerate()}
        assert not names & THREADS, names
