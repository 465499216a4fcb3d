"""Task sources (the seed's "Spider"): where the supervisor's task list comes from.

``--tasks SOURCE``:

* ``file:PATH`` — one id per line, or JSON / TOML (by extension) with full entries;
* ``cmd:COMMAND`` — a shell command whose stdout lines (or JSON, if it starts with ``[`` or
  ``{``) are the tasks; a non-zero exit or a timeout is a failure;
* ``http://…`` / ``https://…`` — a URL returning JSON;
* ``python:module:function`` — a function returning ids, a mapping of id to cost or to entry,
  or entry dicts.

Every failure — unreachable, timed out, malformed — is one `TaskSourceError` with a sentence;
the supervisor logs it and keeps its last good list. Fetches run on a worker thread (see
`Fetcher`) because a query may take seconds and the loop must keep renewing leases meanwhile.
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
from typing import Any, cast

from corral.common.errors import ConfigError, TaskSourceError
from corral.common.tasklist import TaskEntry, normalize, parse_json, parse_lines, parse_text

from .events import TasksFetched

MAX_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class TaskSource:
    kind: str  # file | cmd | http | python
    target: str

    @classmethod
    def parse(cls, spec: str) -> TaskSource:
        """From ``--tasks``; a malformed spec is a configuration error."""
        if spec.startswith(("http://", "https://")):
            return cls("http", spec)
        kind, sep, target = spec.partition(":")
        if not sep or kind not in ("file", "cmd", "python") or not target:
            raise ConfigError("tasks", f"expected file:PATH, cmd:COMMAND, http(s)://URL or "
                                       f"python:module:function, got {spec!r}")
        if kind == "python" and target.count(":") != 1:
            raise ConfigError("tasks", f"expected python:module:function, got {spec!r}")
        return cls(kind, target)

    def __str__(self) -> str:
        return self.target if self.kind == "http" else f"{self.kind}:{self.target}"

    def fetch(self, timeout: float) -> dict[str, TaskEntry]:
        try:
            return getattr(self, f"_fetch_{self.kind}")(timeout)  # type: ignore[no-any-return]
        except TaskSourceError:
            raise
        except Exception as exc:  # whatever the source does wrong becomes one clear error
            raise TaskSourceError(f"{self}: {type(exc).__name__}: {exc}") from None

    def _fetch_file(self, timeout: float) -> dict[str, TaskEntry]:
        path = Path(self.target)
        try:
            if path.stat().st_size > MAX_BYTES:
                raise TaskSourceError(f"{path}: larger than {MAX_BYTES} bytes")
            text = path.read_text()
        except OSError as exc:
            raise TaskSourceError(f"{path}: cannot read: {exc.strerror}") from None
        except UnicodeDecodeError:
            raise TaskSourceError(f"{path}: not UTF-8 text") from None
        return parse_text(text, str(path))

    def _fetch_cmd(self, timeout: float) -> dict[str, TaskEntry]:
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

    def _fetch_http(self, timeout: float) -> dict[str, TaskEntry]:
        try:
            with urllib.request.urlopen(self.target, timeout=timeout) as resp:
                body = resp.read(MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            raise TaskSourceError(f"{self.target}: HTTP {exc.code} {exc.reason}") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise TaskSourceError(f"{self.target}: unreachable: {reason}") from None
        if len(body) > MAX_BYTES:
            raise TaskSourceError(f"{self.target}: answer larger than {MAX_BYTES} bytes")
        return parse_json(body.decode("utf-8", "replace"), self.target)

    def _fetch_python(self, timeout: float) -> dict[str, TaskEntry]:
        module, _, name = self.target.partition(":")
        fn = getattr(importlib.import_module(module), name)
        return normalize(fn(), f"python:{self.target}")


class Fetcher:
    """Runs one task query at a time off the loop thread. A request while one runs is
    remembered and run after it (with reset if either asked for it)."""

    def __init__(self, source: TaskSource, timeout: float, wake: Callable[[], None]) -> None:
        self.source = source
        self.timeout = timeout
        self._wake = wake
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._again: bool | None = None  # a queued request's reset flag
        self.results: deque[TasksFetched] = deque()

    def request(self, reset: bool) -> None:
        with self._lock:
            if self._thread is not None:
                self._again = bool(self._again) or reset
                return
            self._start(reset)

    def _start(self, reset: bool) -> None:
        self._thread = threading.Thread(target=self._run, args=(reset,), name="task-query",
                                        daemon=True)
        self._thread.start()

    def _run(self, reset: bool) -> None:
        try:
            # events.py still types the list as {id: cost} until the core takes entries.
            result = TasksFetched(cast(Any, self.source.fetch(self.timeout)), None, reset)
        except TaskSourceError as exc:
            result = TasksFetched(None, str(exc), reset)
        with self._lock:
            self.results.append(result)
            self._thread = None
            if self._again is not None:
                again, self._again = self._again, None
                self._start(again)
        self._wake()

    def busy(self) -> bool:
        with self._lock:
            return self._thread is not None
