"""The agent's side of the lease keeper: a small process, not frozen with the agent, that ends
the ``exec`` tasks' process groups when the worker's lease lapses (`keeperproc` is the
process; its docstring has the whole contract).

A lease protects only if its holder can act on expiry. The agent acts on it itself when it
runs; the keeper acts when the agent cannot — SIGSTOPped, paused in a debugger, swapping,
stuck. One keeper per worker (``python -I -S``, the standard library only, ~10 MB), started
with the agent's loop and told over a ``SOCK_SEQPACKET`` pair:

* every lease extension (`extend`), before any task it allows is started;
* every task's process group, by the task's own process between fork and exec
  (`child_hook`): a freeze of the agent at any instant leaves no group unknown to it.

Lifecycle::

    created -> running    `start`: the process is spawned
    running -> lost       its end of the pair reads EOF: it died (`lost` says how); the agent
                          stops its tasks and exits with EXIT_KEEPER_LOST
    running -> closed     `close`: the agent closes its end on the way out (every task has
                          stopped by then); the keeper ends what may be left and exits
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

PROCESS = Path(__file__).with_name("keeperproc.py")
CLOSE_WAIT = 6.0  # the keeper's own LAST_WAIT, and a little more


class KeeperLink:
    def __init__(self, grace: float, stop_on_lapse: bool, journal: Path | None,
                 worker_id: str) -> None:
        self._args = [f"{grace:.6g}", "stop" if stop_on_lapse else "keep",
                      str(journal) if journal is not None else "-", worker_id]
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-S", "-B", str(PROCESS), str(theirs.fileno()),
                 *self._args], pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL)
        ours.setblocking(False)
        self._sock = ours

    def fileno(self) -> int:
        """Readable once the keeper is gone (EOF): poll it with the agent's sockets."""
        assert self._sock is not None
        return self._sock.fileno()

    def extend(self, expires: float) -> None:
        """The lease now lasts until ``expires`` (CLOCK_MONOTONIC)."""
        self._send(b"L%r" % expires)

    def child_hook(self, task: str) -> Callable[[], None]:
        """For a task's process, between fork and exec: register its group with the keeper.
        Only a write(2) of one record (async-signal-safe); a full socket makes the start fail
        (the task is retried), never blocks."""
        fd = self.fileno()
        name = task.encode("utf-8", "surrogateescape")

        def hook() -> None:
            os.write(fd, b"+%d %s" % (os.getpid(), name))

        return hook

    def lost(self) -> str | None:
        """Why the keeper is gone, or None while it runs."""
        if self._sock is None or self._proc is None:
            return "the keeper was never started"
        try:
            if self._sock.recv(1) != b"":
                return None  # it never writes; nothing to read means it is there
        except BlockingIOError:
            return None
        except OSError as exc:
            return f"its socket failed: {exc}"
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(0.5)
        code = self._proc.returncode
        if code is None:
            return "it closed its socket"
        return f"killed by signal {-code}" if code < 0 else f"exited with status {code}"

    def close(self) -> None:
        """Close our end (the keeper ends whatever may be left, then exits) and reap it."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._proc is not None:
            try:
                self._proc.wait(CLOSE_WAIT)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(CLOSE_WAIT)

    def _send(self, record: bytes) -> None:
        if self._sock is None:
            return
        # A full socket means a keeper that stopped reading: EOF follows, or it is frozen
        # together with us. Either way there is nothing better to do than go on.
        with contextlib.suppress(BlockingIOError, BrokenPipeError, ConnectionError):
            self._sock.send(record)
