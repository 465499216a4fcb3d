"""Task sources (the seed's "Spider"): where the supervisor's task list comes from.

``--tasks SOURCE``:

* ``file:PATH`` — one id per line, or JSON / TOML (by extension) with full entries; watched:
  re-read within a second of a change (supervisor/watch.py);
* ``cmd:COMMAND`` — a shell command whose stdout lines (or JSON, if it starts with ``[`` or
  ``{``) are the tasks; a non-zero exit or a timeout is a failure;
* ``http://…`` / ``https://…`` — a URL returning JSON; asked with ``If-None-Match`` (or
  ``If-Modified-Since``), so an unchanged list costs one 304;
* ``python:module:function`` — a function returning ids, a mapping of id to cost or to entry,
  or entry dicts;
* ``etcd://HOST:PORT[,HOST:PORT…]/PREFIX`` — one key per task, kept current by a watch
  (supervisor/etcdsource.py).

Every failure — unreachable, timed out, malformed — is one `TaskSourceError` with a sentence;
the supervisor logs it and keeps its last good list. Everything runs on the `Fetcher`'s thread,
because a query may take seconds and the loop must keep renewing leases meanwhile.
"""

from __future__ import annotations

import importlib
import subprocess
import threading
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from corral.cli import logs
from corral.common.errors import ConfigError, TaskSourceError
from corral.common.wire.tasklist import TaskEntry, normalize, parse_json, parse_lines

from . import etcdsource
from .events import TasksFetched
from .sourcecounters import SourceCounters
from .watch import MAX_BYTES, FileWatch, parse_file, read_file

Tasks = dict[str, TaskEntry]


@dataclass(frozen=True)
class TaskSource:
    kind: str  # file | cmd | http | python | etcd
    target: str

    @classmethod
    def parse(cls, spec: str) -> TaskSource:
        """From ``--tasks``; a malformed spec is a configuration error."""
        if spec.startswith(("http://", "https://")):
            return cls("http", spec)
        if spec.startswith("etcd://"):
            etcdsource.parse_target(spec)
            return cls("etcd", spec)
        kind, sep, target = spec.partition(":")
        if not sep or kind not in ("file", "cmd", "python") or not target:
            raise ConfigError("tasks", f"expected file:PATH, cmd:COMMAND, http(s)://URL, "
                                       f"python:module:function or etcd://HOST:PORT/PREFIX, "
                                       f"got {spec!r}")
        if kind == "python" and target.count(":") != 1:
            raise ConfigError("tasks", f"expected python:module:function, got {spec!r}")
        return cls(kind, target)

    def __str__(self) -> str:
        return self.target if self.kind in ("http", "etcd") else f"{self.kind}:{self.target}"

    def check_at_start(self, allow_empty: bool) -> None:
        """A task file that does not exist is a mistake at start (a typo would otherwise give
        a supervisor with no tasks, silently); `ConfigError` unless ``allow_empty``. Other
        failures of a file, and every other source, are judged at each query."""
        if self.kind == "file" and not allow_empty and not Path(self.target).exists():
            raise ConfigError("tasks", f"{self.target}: no such file (create it, or give "
                                       "--allow-empty to start with no tasks)")

    def fetch(self, timeout: float) -> Tasks:
        """Read the list once (no watching, no conditional request)."""
        try:
            return getattr(self, f"_fetch_{self.kind}")(timeout)  # type: ignore[no-any-return]
        except TaskSourceError:
            raise
        except Exception as exc:  # whatever the source does wrong becomes one clear error
            raise TaskSourceError(f"{self}: {type(exc).__name__}: {exc}") from None

    def _fetch_file(self, timeout: float) -> Tasks:
        path = Path(self.target)
        return parse_file(read_file(path), path)

    def _fetch_cmd(self, timeout: float) -> Tasks:
        try:
            done = subprocess.run(self.target, shell=True, capture_output=True, text=True,
                                  timeout=timeout, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise TaskSourceError(f"cmd:{self.target}: no answer within {timeout:g} s") from None
        if done.returncode != 0:
            err = done.stderr.strip().splitlines()[-1:] or ["(no stderr)"]
            raise TaskSourceError(f"cmd:{self.target}: exit status {done.returncode}: {err[0]}")
        out = done.stdout
        if out.lstrip().startswith(("[", "{")):
            return parse_json(out, f"cmd:{self.target}")
        return parse_lines(out, f"cmd:{self.target}")

    def _fetch_http(self, timeout: float) -> Tasks:
        tasks, _ = fetch_http(self.target, timeout, None)
        assert tasks is not None  # only a conditional request can be answered "unchanged"
        return tasks

    def _fetch_python(self, timeout: float) -> Tasks:
        module, _, name = self.target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        return normalize(fn(), f"python:{self.target}")

    def _fetch_etcd(self, timeout: float) -> Tasks:
        return etcdsource.fetch_once(self.target, timeout)


@dataclass(frozen=True)
class Validators:
    """What an HTTP server said identifies its answer, for the next conditional request."""

    etag: str | None = None
    last_modified: str | None = None


def fetch_http(url: str, timeout: float,
               known: Validators | None) -> tuple[Tasks | None, Validators | None]:
    """GET the list; with ``known`` validators, ask only if it changed: ``(None, known)`` when
    the server answers 304 Not Modified. ``If-None-Match`` is preferred; ``If-Modified-Since``
    is sent only when the server gave no ETag."""
    headers = {"Accept": "application/json"}
    if known is not None and known.etag:
        headers["If-None-Match"] = known.etag
    elif known is not None and known.last_modified:
        headers["If-Modified-Since"] = known.last_modified
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                    timeout=timeout) as resp:
            body = resp.read(MAX_BYTES + 1)
            etag, modified = resp.headers.get("ETag"), resp.headers.get("Last-Modified")
    except urllib.error.HTTPError as exc:
        exc.close()
        if exc.code == 304 and known is not None:
            return None, known
        raise TaskSourceError(f"{url}: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise TaskSourceError(f"{url}: unreachable: {reason}") from None
    if len(body) > MAX_BYTES:
        raise TaskSourceError(f"{url}: answer larger than {MAX_BYTES} bytes")
    tasks = parse_json(body.decode("utf-8", "replace"), url)
    return tasks, Validators(etag, modified) if etag or modified else None


class Driver(Protocol):
    """How a `Fetcher` reads one kind of source; called only from the fetcher's thread."""

    def query(self, reset: bool) -> Tasks | None:
        """Read the list now (``None``: known unchanged; never for a reset). Raises
        `TaskSourceError`."""

    def poll(self) -> Tasks | None:
        """A watch's turn: a new list, or ``None`` for nothing new. Raises `TaskSourceError`."""

    def wait_s(self) -> float | None:
        """Seconds until `poll` is due; ``None``: only when nudged or asked."""

    def close(self) -> None: ...


class _Asked:
    """cmd:, python: and http(s): sources tell nothing by themselves; they are read when the
    supervisor asks. HTTP remembers its validators to ask conditionally."""

    def __init__(self, source: TaskSource, timeout: float) -> None:
        self.source = source
        self.timeout = timeout
        self._validators: Validators | None = None

    def query(self, reset: bool) -> Tasks | None:
        if self.source.kind != "http":
            return self.source.fetch(self.timeout)
        tasks, self._validators = fetch_http(self.source.target, self.timeout,
                                             None if reset else self._validators)
        return tasks

    def poll(self) -> Tasks | None:
        return None

    def wait_s(self) -> float | None:
        return None

    def close(self) -> None:
        pass


class Fetcher:
    """The supervisor's side of its task source: one thread that runs the queries the loop
    asks for (`request`) and, for sources that tell (file:, etcd:), watches them once asked
    once. Results go to `results` (then `wake` is called); the loop pops them.

    A request while another runs is remembered and run after it (with reset if either asked
    for it). A list equal to the last one handed over is not handed over again unless the
    request asked for a reset: "unchanged" is no event at all (counted in
    ``counters.unchanged``), except the first after a failure (the source is good again). A
    reset whose query failed is owed: the next list handed over carries ``reset=True``. `stop`
    ends the thread and the watch; call it once, at shutdown.
    """

    def __init__(self, source: TaskSource, timeout: float, wake: Callable[[], None],
                 log: Any = None) -> None:
        self.source = source
        self.timeout = timeout
        self.counters = SourceCounters()
        self.results: deque[TasksFetched] = deque()
        self._wake = wake
        self.log = log if log is not None else logs.get("tasks", source=str(source))
        self._cond = threading.Condition()
        self._pending: bool | None = None  # a queued request's reset flag
        self._working = False
        self._nudged = False
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._last: Tasks | None = None  # the last list handed over
        self._owed_reset = False
        self._failed = False  # the last outcome was an error: the next good one is handed over
        self._driver: Driver
        if source.kind == "file":
            self._driver = FileWatch(Path(source.target), self.counters)
        elif source.kind == "etcd":
            self._driver = etcdsource.EtcdSource(source.target, timeout, self.counters,
                                                 self._nudge, self.log)
        else:
            self._driver = _Asked(source, timeout)

    def start(self) -> None:
        """Start the thread (`request` starts it too). Nothing is read until a request."""
        with self._cond:
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="task-source",
                                                daemon=True)
                self._thread.start()

    def stop(self, wait: float = 10.0) -> bool:
        """End the thread and any watch; False if a query still running (a slow cmd:, http:
        or python: source) did not end within ``wait`` s (its daemon thread is abandoned)."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(wait)
        self._driver.close()
        return thread is None or not thread.is_alive()

    def request(self, reset: bool) -> None:
        with self._cond:
            self._pending = bool(self._pending) or reset
            self._cond.notify_all()
        self.start()

    def busy(self) -> bool:
        """A request is queued or running."""
        with self._cond:
            return self._pending is not None or self._working

    def _nudge(self) -> None:  # a watch's own thread: something arrived
        with self._cond:
            self._nudged = True
            self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not (self._stopping or self._pending is not None or self._nudged):
                    if not self._cond.wait(self._driver.wait_s()):
                        break  # a watch's poll is due
                if self._stopping:
                    return
                reset, self._pending, self._nudged = self._pending, None, False
                self._working = reset is not None
            try:
                if reset is not None:
                    tasks = self._driver.query(reset or self._owed_reset)
                else:
                    tasks = self._driver.poll()
                error = None
            except TaskSourceError as exc:
                tasks, error = None, str(exc)
            except Exception as exc:  # a driver's bug must not end the thread
                tasks, error = None, f"{self.source}: {type(exc).__name__}: {exc}"
            result = self._outcome(tasks, error, reset)
            with self._cond:
                self._working = False
                if result is not None:
                    self.results.append(result)
            if result is not None:
                try:
                    self._wake()
                except Exception as exc:  # the loop is going away; keep the thread alive
                    self.log.warning("could not wake the loop", error=str(exc))

    def _outcome(self, tasks: Tasks | None, error: str | None,
                 reset: bool | None) -> TasksFetched | None:
        """What to hand over, if anything, and count it. ``reset`` is None for a watch's poll."""
        if reset is not None:
            self.counters.queries += 1
        if error is not None:
            self.counters.failures += 1
            self._owed_reset = self._owed_reset or bool(reset)
            self._failed = True
            return TasksFetched(None, error, bool(reset))
        if tasks is None:  # a watch saw nothing new; or asked, and the source said so (304)
            if reset is None:
                return None
            self.counters.unchanged += 1
            return self._mended()
        again = bool(reset) or self._owed_reset
        if not again and tasks == self._last:
            self.counters.unchanged += 1
            return self._mended()
        self._last, self._owed_reset, self._failed = tasks, False, False
        self.counters.updates += 1
        # events.py still types the list as {id: cost} until the core takes entries.
        return TasksFetched(tasks, None, again)

    def _mended(self) -> TasksFetched | None:
        """An unchanged list after a failure is handed over once all the same: the source is
        good again, and the core clears the error it shows (`corralctl status`)."""
        if not self._failed or self._last is None:
            return None
        self._failed = False
        return TasksFetched(self._last, None, False)
