"""The worker's I/O loop: one thread around the pure `WorkerMachine` (docs/worker.md, "The
state machine").

Each turn: wait in one `zmq.Poller` (the DEALER and the read end of a self-pipe) until the
next deadline — report, lease expiry, drain timeout, restart backoff, ready-after, a pending
SIGKILL — then turn what happened into events, in this order: signals, messages (drained with
NOBLOCK), ended tasks, readiness, and finally one `Tick`. Only this loop reads the clock. With
``--serve`` the poller also holds the serving socket (`serving.Server`); requests are answered
last in a turn, so their ownership checks see every instruction that arrived with them.

Signal handlers only enqueue the signal number; ``signal.set_wakeup_fd`` writes it to the
self-pipe as well, so the poll wakes at once (SIGCHLD included: a crashed task is seen
immediately). Every way out — the machine's `Exit`, an unexpected exception — unwinds through
one `ExitStack` whose first step stops every task that is still running.

With ``exec`` the loop also attaches to the lease keeper (`corral.worker.keeper`) — the one a
previous agent of this id left, adopting its task processes, or a fresh one — tells it every
lease extension (the machine's `LeaseExtended`, before the starts it allows), and polls its end
of their link: EOF means the keeper died, which becomes one `KeeperLost` event. SIGUSR2 hands
the tasks over to it (`HandOver`: nothing stops, the next agent adopts them); with another
handler SIGUSR2 drains, as SIGTERM does (in-process tasks cannot outlive their agent).
"""

from __future__ import annotations

import contextlib
import math
import secrets
import signal
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from types import FrameType
from typing import Any

import zmq

from corral.cli import logs
from corral.common.errors import ConfigError

from . import events as ev
from .channel import RETRY_S, Channel, routing_id
from .config import LeaseLoss, WorkerConfig
from .journal import Journal
from .keeper import Found, dismiss
from .rundir import RunDir
from .runner import Runner, TaskExecutor
from .serving import Server, Service
from .sets import Grant
from .state import Phase, WorkerMachine

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
HAND_OVER_SIGNAL = signal.SIGUSR2
READY_CHECK = 0.25  # seconds between ready() calls while starting


class DuplicateAgent(Exception):
    """Another agent with this id runs on this host (it holds the runtime directory's lock)."""


class WorkerLoop:
    """Runs one worker incarnation until it exits; `run` returns the exit status."""

    def __init__(
        self,
        cfg: WorkerConfig,
        runner: Runner,
        journal: Journal | None = None,
        *,
        incarnation: int | None = None,
        clock: Callable[[], float] = time.monotonic,
        service: Service | None = None,
    ) -> None:
        self._cfg = cfg
        self._runner = runner
        self._service = service
        self._server: Server | None = None
        self._deadline: float | None = None  # kept across turns that only served requests
        self.incarnation = incarnation if incarnation else (secrets.randbits(63) or 1)
        self._clock = clock
        self._log = logs.get("worker", worker=cfg.worker_id)
        self._lease_until = math.inf if cfg.on_lease_loss is LeaseLoss.KEEP else 0.0
        self._keeper = runner.keeper
        self._keeper_open = False  # attached, and neither lost nor handed over
        self._executor = TaskExecutor(runner, journal, self._log, lambda: self._lease_until)
        self._machine = WorkerMachine(cfg, self.incarnation, clock(),
                                      waits_for_handler=runner.has_ready)
        self._pending: deque[int] = deque()  # signal numbers, appended by handlers
        self._exit_code: int | None = None
        self._next_ready_check = 0.0
        self._watched: set[int] = set()  # adopted leaders' pidfds in the poller
        self._channel_counters: dict[str, int] = {}
        self._wake_r, self._wake_w = socket.socketpair()
        for s in (self._wake_r, self._wake_w):
            s.setblocking(False)

    @property
    def machine(self) -> WorkerMachine:
        return self._machine

    def request_stop(self) -> None:
        """What SIGTERM does, for a loop running outside the main thread (tests, embedding)."""
        self._pending.append(signal.SIGTERM)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"\0")

    def run(self) -> int:
        code = ev.EXIT_ERROR
        try:
            with contextlib.ExitStack() as stack:
                channel = self._open(stack)
                while self._exit_code is None:
                    self._step(channel)
                code = self._exit_code
        except ConfigError as exc:  # e.g. the --serve endpoint cannot be bound
            code = ev.EXIT_CONFIG
            self._log.error("configuration error", error=str(exc))
        except DuplicateAgent as exc:
            code = ev.EXIT_REFUSED
            self._log.error("another agent with this id runs on this host", error=str(exc))
        except Exception:  # the stack has unwound: every task is stopped, sockets closed
            code = ev.EXIT_ERROR
            self._log.exception("unexpected error")
        self._log.info("worker stopped", exit_code=code, **self.counters())
        return code

    def counters(self) -> dict[str, int]:
        serving = self._server.counters if self._server is not None else {}
        return {**self._machine.counters, **self._channel_counters, **serving,
                "handler_errors": self._executor.handler_errors,
                "spec_errors": self._executor.spec_errors}

    # -- set-up and tear-down ------------------------------------------------------------------

    def _open(self, stack: contextlib.ExitStack) -> Channel:
        stack.callback(self._wake_r.close)
        stack.callback(self._wake_w.close)
        ctx = zmq.Context()
        stack.callback(ctx.term)
        channel = Channel(ctx, list(self._cfg.supervisors), self._cfg.worker_id,
                          self.incarnation, self._cfg.curve_keys(), clock=self._clock)
        stack.callback(channel.close)
        self._channel_counters = channel.counters
        self._poller = zmq.Poller()
        for sock in channel.sockets:
            self._poller.register(sock, zmq.POLLIN)
        self._poller.register(self._wake_r.fileno(), zmq.POLLIN)
        self._install_signals(stack)
        if self._cfg.serve is not None:
            if self._service is None:
                raise ConfigError("serve", "--serve needs a handler with serve()")
            self._server = Server(ctx, self._cfg.serve, self._cfg.advertise, self._service,
                                  self._machine, self._clock)
            stack.callback(self._server.close)  # after the tasks stopped: not_owner to all
            self._poller.register(self._server.socket, zmq.POLLIN)
        found = None
        if self._keeper is not None:
            found = self._attach(stack)
        else:
            self._dismiss(stack)
        # Unwound first: whatever the reason for leaving but a hand-over, no task outlives
        # the agent.
        stack.callback(lambda: self._executor.close(self._clock()))
        self._log.info(
            "worker started", incarnation=format(self.incarnation, "x"),
            routing_id=routing_id(self._cfg.worker_id, self.incarnation).decode(errors="replace"),
            supervisor=self._cfg.supervisor, handler=self._cfg.handler,
            state=self._machine.phase.value, serve=self._cfg.advertise,
            keeper=self._keeper.pid if self._keeper is not None else None,
        )
        if found is not None and found.groups:
            self._adopt(found, channel)
        return channel

    def _rundir(self, stack: contextlib.ExitStack, create: bool) -> RunDir | None:
        """This id's runtime directory, locked for this agent's life (None if there is none
        and ``create`` is false)."""
        rundir = RunDir(self._cfg.worker_id)
        if create:
            try:
                rundir.create()
            except OSError as exc:
                raise ConfigError("id", f"cannot create the runtime directory {rundir.path}: "
                                  f"{exc.strerror} (set XDG_RUNTIME_DIR, or give this user "
                                  "/run/corral, e.g. systemd's RuntimeDirectory=corral)") from None
        elif not rundir.exists():
            return None
        if not rundir.lock():
            raise DuplicateAgent(f"{rundir.path} is locked by another process")
        stack.callback(rundir.close)  # unwound last: after a hand-over's H
        return rundir

    def _attach(self, stack: contextlib.ExitStack) -> Found:
        """Attach to the keeper a previous agent of this id left (adopting its tasks), or to a
        fresh one; an incompatible one's tasks are stopped first."""
        keeper = self._keeper
        assert keeper is not None
        self._rundir(stack, create=True)
        found = keeper.open()
        stack.callback(keeper.close)  # after the tasks stopped (LIFO)
        self._poller.register(keeper.fileno(), zmq.POLLIN)
        self._keeper_open = True
        if found.ended is not None:
            self._log.warning("a lease keeper of another version or other settings: its "
                              "tasks were stopped; starting fresh", reason=found.ended,
                              tasks=found.ended_tasks)
        return found

    def _dismiss(self, stack: contextlib.ExitStack) -> None:
        """No ``exec`` tasks here: a keeper an ``exec`` agent of this id left ends its tasks
        (they cannot be adopted by this handler), before this agent starts any of its own."""
        rundir = self._rundir(stack, create=False)
        ended = dismiss(rundir, self._cfg.stop_grace + 15.0) if rundir is not None else None
        if ended is not None:
            self._log.warning("a lease keeper of an exec agent with this id: its tasks were "
                              "stopped; starting fresh", reason=ended[0], tasks=ended[1])

    def _adopt(self, found: Found, channel: Channel) -> None:
        """Take over the task processes the keeper held: same pids, tokens and specs."""
        self._runner.adopt(found.groups)
        self._executor.adopted(found.groups)
        if self._cfg.on_lease_loss is LeaseLoss.STOP:
            self._lease_until = found.deadline
        now = self._clock()
        self._log.info("adopted the tasks a previous agent left running", tasks=len(found.groups),
                       keeper=self._keeper.pid if self._keeper is not None else None,
                       lease_left_s=round(found.deadline - now, 3))
        grants = {g.task: Grant(g.token, g.spec) for g in found.groups}
        self._dispatch(ev.Adopted(grants, found.deadline), now, channel)

    def _install_signals(self, stack: contextlib.ExitStack) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals are the main thread's; use request_stop() instead
        old_fd = signal.set_wakeup_fd(self._wake_w.fileno(), warn_on_full_buffer=False)
        stack.callback(signal.set_wakeup_fd, old_fd)
        for sig in (*STOP_SIGNALS, HAND_OVER_SIGNAL, signal.SIGCHLD):
            old = signal.signal(sig, self._on_signal)
            stack.callback(signal.signal, sig, old)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._pending.append(signum)

    # -- one turn ------------------------------------------------------------------------------

    def _step(self, channel: Channel) -> None:
        deadline = self._deadline
        if deadline is None:
            deadline = self._next_deadline(self._clock())
        if channel.unsent:
            deadline = min(deadline, self._clock() + RETRY_S)
        self._watch(self._runner.fds())  # what ended last turn closed its pidfd
        ready = dict(self._poller.poll(max(0, math.ceil((deadline - self._clock()) * 1000))))
        now = self._clock()
        server = self._server
        if server is not None and now < deadline and len(ready) == 1 and server.socket in ready:
            # Only requests, and nothing is due: answer them and wait again. This is a serving
            # worker's hot path, and the machine has nothing to do in it.
            self._deadline = deadline
            server.drain()
            return
        self._deadline = None
        if self._wake_r.fileno() in ready:
            self._drain_wake()
        while self._pending:
            signum = self._pending.popleft()
            if signum == HAND_OVER_SIGNAL and self._keeper is not None \
                    and self._keeper_open:
                self._dispatch(ev.HandOverRequested(), now, channel)
            elif signum in STOP_SIGNALS or signum == HAND_OVER_SIGNAL:
                self._dispatch(ev.StopRequested(), now, channel)
            # SIGCHLD needs nothing more: the executor is polled below on every turn.
        if self._keeper is not None and self._keeper_open \
                and self._keeper.fileno() in ready:
            reason = self._keeper.lost()
            if reason is not None:
                self._keeper_open = False
                self._poller.unregister(self._keeper.fileno())
                self._dispatch(ev.KeeperLost(reason), now, channel)
        if channel.unsent:
            self._swap(channel.reopen_stale())
            channel.resend()
        if any(sock in ready for sock in channel.sockets):
            for msg in channel.receive():
                self._dispatch(ev.Received(msg), now, channel)
        for event in self._executor.poll(now):
            self._dispatch(event, now, channel)
        if self._checks_ready() and now >= self._next_ready_check:
            self._next_ready_check = now + READY_CHECK
            if self._executor.ready():
                self._dispatch(ev.HandlerReady(), now, channel)
        self._dispatch(ev.Tick(), now, channel)
        if server is not None and server.socket in ready:
            server.drain()

    def _watch(self, fds: list[int]) -> None:
        """Poll the adopted leaders' pidfds (no SIGCHLD comes for them) and no others."""
        now = set(fds)
        if now == self._watched:
            return
        for fd in self._watched - now:
            with contextlib.suppress(KeyError):
                self._poller.unregister(fd)
        for fd in now - self._watched:
            self._poller.register(fd, zmq.POLLIN)
        self._watched = now

    def _swap(self, pairs: list[tuple[zmq.Socket[bytes], zmq.Socket[bytes]]]) -> None:
        """Poll the channel's reopened sockets instead of the ones they replace."""
        for old, new in pairs:
            self._poller.unregister(old)
            self._poller.register(new, zmq.POLLIN)

    def _checks_ready(self) -> bool:
        return self._machine.phase is Phase.STARTING and self._runner.has_ready

    def _next_deadline(self, now: float) -> float:
        deadline = self._machine.next_deadline()
        runner_deadline = self._runner.next_deadline(now)
        if runner_deadline is not None:
            deadline = min(deadline, runner_deadline)
        if self._checks_ready():
            deadline = min(deadline, self._next_ready_check)
        return deadline

    def _drain_wake(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while self._wake_r.recv(4096):
                pass

    def _dispatch(self, event: ev.Event, now: float, channel: Channel) -> None:
        # The outcome of an action (TaskStarted after StartTask...) is handled before any
        # other event, so the machine never sees the world change behind its back.
        queue: deque[ev.Event] = deque([event])
        while queue:
            for action in self._machine.handle(queue.popleft(), now):
                queue.extend(self._execute(action, now, channel))

    def _execute(self, action: ev.Action, now: float, channel: Channel) -> list[ev.Event]:
        match action:
            case ev.StartTask():
                return [self._executor.start(action)]
            case ev.StopTask(task, lapsed):
                return self._executor.stop(task, now, lapsed)
            case ev.LeaseExtended(expires):
                if self._cfg.on_lease_loss is LeaseLoss.STOP:
                    self._lease_until = expires
                if self._keeper is not None:
                    self._keeper.extend(expires)
            case ev.Reconnect():
                self._swap(channel.reopen_all())
            case ev.HandOver():
                self._watch([])
                if self._keeper is not None and self._keeper_open:
                    self._poller.unregister(self._keeper.fileno())
                    self._keeper_open = False
                self._executor.hand_over()
            case ev.SendStatus(status):
                channel.send(status if self._server is None else self._server.annotate(status))
            case ev.Log(level, event, fields):
                log: Any = getattr(self._log, level)
                log(event, **fields)
            case ev.Exit(code):
                self._exit_code = code
        return []
