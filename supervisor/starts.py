"""Assigned is not running: the replicas a worker was given and does not report running yet.

An assignment covers its task only once its owner reports the task running (not in its
``starting`` list). Every replica sent to a worker that does not already run it waits here,
with the time it was sent, until a report of that worker shows it running; one that is still
waiting after ``--start-timeout`` has *timed out*: the core moves it and keeps it off that
worker like a failing task. A task the worker tries and fails to start is the failure
policy's (``--max-failures``), not this one's: its clock starts again.

    waiting -> running    a report shows it running there (it leaves this table)
    waiting -> waiting    the worker reports it failing (restart backoff): clock restarted
    waiting -> timed out  --start-timeout passed: moved, excluded there for the cool-down
    waiting -> (gone)     no longer that worker's (moved, removed), or the worker is gone

The table is also how `Queries` tells *running* tasks from merely *assigned* ones without
looking at the whole fleet: a task that runs nowhere has an owner waiting here.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from .records import WorkerRecord


class Starts:
    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._waiting: dict[str, dict[str, float]] = {}  # worker -> task -> waiting since
        self._by_task: dict[str, set[str]] = {}  # task -> workers it waits on

    def __len__(self) -> int:
        return len(self._by_task)

    def sizes(self) -> dict[str, int]:
        return {"starts_workers": len(self._waiting), "starts_tasks": len(self._by_task)}

    def sent(self, rec: WorkerRecord, tasks: Iterable[str], now: float) -> None:
        """``rec`` was told to run ``tasks``: those it does not run yet wait from now."""
        st = rec.status
        running, starting = st.running, st.starting
        mine = None
        for task in tasks:
            if task in running and task not in starting:
                continue
            if mine is None:
                mine = self._waiting.setdefault(rec.id, {})
            if task not in mine:
                mine[task] = now
                self._by_task.setdefault(task, set()).add(rec.id)

    def waits_on(self, worker: str) -> bool:
        return worker in self._waiting

    def check(self, rec: WorkerRecord, desired: Mapping[str, None], now: float) -> list[str]:
        """``rec`` reported. What it should run and does not wait (from now, if they did not
        already); what runs, or is no longer its, leaves the table; a task it reports
        failing starts its clock again; those waiting past the timeout are returned and leave
        the table (the caller moves them)."""
        st = rec.status
        running, starting = st.running, st.starting
        if not starting and running.keys() >= desired.keys():  # everything it should run runs
            if rec.id in self._waiting:
                self.forget_worker(rec.id)
            return []
        mine = self._waiting.setdefault(rec.id, {})
        for task in desired:
            if (task not in running or task in starting) and task not in mine:
                mine[task] = now
                self._by_task.setdefault(task, set()).add(rec.id)
        failures = st.failures
        late: list[str] = []
        for task, since in list(mine.items()):
            if task not in desired or (task in running and task not in starting):
                self._drop(rec.id, task)
            elif task in failures:
                mine[task] = now  # it tries: failing is the failure policy's business
            elif now - since >= self.timeout:
                late.append(task)
                self._drop(rec.id, task)
        if not mine:
            self._waiting.pop(rec.id, None)
        return late

    def tasks(self) -> Collection[str]:
        """The tasks some worker was given and does not run yet: the only ones that may not
        run anywhere (every assignment sent waits here until its worker runs it)."""
        return self._by_task.keys()

    def waiting(self, worker: str) -> Mapping[str, float]:
        return self._waiting.get(worker, {})

    def forget_worker(self, worker: str) -> None:
        for task in self._waiting.pop(worker, {}):
            self._unlink(task, worker)

    def forget_task(self, task: str) -> None:
        for worker in self._by_task.pop(task, ()):
            mine = self._waiting.get(worker)
            if mine is not None:
                mine.pop(task, None)
                if not mine:
                    del self._waiting[worker]

    def clear(self) -> None:
        self._waiting, self._by_task = {}, {}

    def _drop(self, worker: str, task: str) -> None:
        del self._waiting[worker][task]  # (an emptied worker entry is removed by the caller)
        self._unlink(task, worker)

    def _unlink(self, task: str, worker: str) -> None:
        ws = self._by_task.get(task)
        if ws is not None:
            ws.discard(worker)
            if not ws:
                del self._by_task[task]
