"""The supervisor daemon: one thread, one `zmq.Poller` loop around `SupervisorCore`. No policy.

The loop only does I/O: it drains every ready message with NOBLOCK (a blocking or asyncio
receive per message is several times slower), decodes at the edge (bad input is
counted and dropped, never fatal), steps the core with the clock's time, and carries out the
actions it returns. Everything it decides nothing about: who may speak, what to refuse, when a
leader must stop — all of that is the core's. Its poll timeout is the core's next deadline.
Signals only enqueue a control verb and wake the poll through a self-pipe; there is one
shutdown path (`close`).

Sets leave through the `Outbox` (outbox.py): at once when nothing waits, else queued and paced
at most `MAX_SENDS` a loop turn; the peers it finds gone come back as `PeerGone` events.

Lifecycle of the daemon object (not the core's phases)::

    created (sockets bound, epoch stored) -> running (run() entered) -> closed (close())
"""

from __future__ import annotations

import signal
import time
from collections import deque
from collections.abc import Callable
from typing import Any

import zmq

from corral.cli import logs
from corral.common.errors import ProtocolError
from corral.common.wire import codec

from . import epochs, metrics, verbs
from .config import SupervisorConfig
from .controlserver import ControlServer
from .core import SupervisorCore
from .counters import IoCounters
from .cyclegc import CycleCollector
from .endpoints import Endpoints
from .events import (
    Action,
    BatchEnd,
    BatchStart,
    Continue,
    Event,
    Fetch,
    Heard,
    Log,
    PeerGone,
    PersistEpoch,
    RawReport,
    RoleChanged,
    Send,
    Stalled,
    Stop,
    Tick,
)
from .ha import Election, parse_endpoints
from .lifecycle import DEADLINE_PASSED
from .outbox import Outbox
from .role import Role
from .sources import Fetcher, TaskSource

# Plain ints and two recv() calls instead of pyzmq's enum flags and recv_multipart(): half the
# cost of moving a message.
NOBLOCK = int(zmq.NOBLOCK)
RCVMORE = int(zmq.RCVMORE)
MAX_BATCH = 5000  # messages drained per wake-up before timers and control get a turn
MAX_TIMER_DELAY = 1.0  # timers wait at most this long for a backlog of reports to drain
# After a wake-up that drained everything, wait this long (never past the core's next deadline)
# so the next reports arrive as a batch: a wake-up costs more than a report, and the lease
# margin is seconds (BENCHMARKS.md, "Design measurements": the coalescing pause).
COALESCE_S = 0.05
# A step that keeps the loop from reading for longer than this (a full placement of a very
# large task list) is reported to the core as a stall: worker silence counts from its end.
STALL_S = 1.0
# Under a backlog, after a slice of the rebuild the loop reads for this many times as long: an
# even share, so neither reading nor the rebuild starves the other.
SLICE_SHARE = 1.0
_CONTINUE = Continue()
_BATCH_START, _BATCH_END = BatchStart(), BatchEnd()


class Daemon:
    def __init__(self, config: SupervisorConfig, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], object] | None = None, log: Any = None) -> None:
        self.config = config
        self.clock = clock
        # The coalescing pause (`COALESCE_S`); by default it ends early for a control request
        # or a wake-up (`_pause_for_reports`).
        self._sleep = sleep if sleep is not None else self._pause_for_reports
        self.log = log if log is not None else logs.get("supervisor")
        self.source = TaskSource.parse(config.tasks)
        self.epoch_path = config.epoch_path()
        # With HA the epoch is the election's fencing token; the state file is for one. It is
        # stored only once the endpoints are bound: a start that fails consumes no epoch.
        epoch = 0 if config.ha else epochs.load(self.epoch_path) + 1
        if not config.ha:
            epochs.check_writable(self.epoch_path)
        self.source.check_at_start(config.allow_empty)
        self.core = SupervisorCore(config, epoch, clock())
        self.io = IoCounters()
        self.gc = CycleCollector(self.io)  # when Python's cycle collector runs (cyclegc.py)
        self.core.queries.attach(self.io)
        self._signals: deque[int] = deque()
        self._roles: deque[Role] = deque()
        self._stopping = False
        self._closed = False
        self.exit_code = 0
        self.election: Election | None = None
        self.endpoints = Endpoints(config)  # bound, or BindError / ConfigError
        if not config.ha:
            try:
                epochs.save(self.epoch_path, epoch)
            except BaseException:
                self.endpoints.close()
                raise
        self.router, self.control = self.endpoints.router, self.endpoints.control
        self.outbox = Outbox(self.router, self.io)
        self.controls = ControlServer(self.control, self.io)
        self.key_names = self.endpoints.key_names
        self.fetcher = Fetcher(self.source, config.source_timeout, self.wake, self.log)
        self.core.queries.attach(self.fetcher.counters)
        self.collector = (metrics.serve(self.core.queries, config.metrics)
                          if config.metrics else None)
        self._next_snapshot = clock() + 1.0
        self._slice_due = float("-inf")  # under a backlog, the next slice waits until then
        self._read_until = clock()  # the last time no report waited unread
        self.poller = zmq.Poller()
        self.poller.register(self.router, zmq.POLLIN)
        self.poller.register(self.control, zmq.POLLIN)
        # A plain socket comes back from poll() as its file descriptor, not as the object.
        self._wake_fd = self.endpoints.wake_r.fileno()
        self.poller.register(self._wake_fd, zmq.POLLIN)
        self._between = zmq.Poller()  # what ends a coalescing pause: all but the reports
        self._between.register(self.control, zmq.POLLIN)
        self._between.register(self._wake_fd, zmq.POLLIN)

    def _pause_for_reports(self, seconds: float) -> bool:
        """Let reports gather for ``seconds``, but answer a control request (`corralctl`) or a
        wake-up (a task query's answer, a signal) at once: an operator does not wait out the
        pause (at 100,000 workers it and the batch behind it doubled a first page's time).
        True when something other than reports ended it."""
        return bool(self._between.poll(int(seconds * 1000) + 1))

    def wake(self) -> None:
        """Wake the loop's poll (from any thread)."""
        self.endpoints.wake()

    # -- running -------------------------------------------------------------------------------

    def run(self) -> int:
        """Run until asked to stop; returns the exit status. Always closes."""
        old_handlers: dict[int, Any] = {}
        old_wakeup = -1
        try:
            old_wakeup = signal.set_wakeup_fd(self.endpoints.wakeup_fd(),
                                              warn_on_full_buffer=False)
            for signum in verbs.SIGNALS:
                old_handlers[signum] = signal.signal(signum, self._on_signal)
            if self.config.ha:
                self.election = self._elect()
            cfg = self.config
            for exposed in cfg.exposed():  # only with --insecure (config.load refuses else)
                self.log.warning("listening without Curve on an address other hosts reach "
                                 "(--insecure)", exposes=exposed)
            self.log.info("supervisor listening", bind=cfg.bind, control=cfg.control,
                          epoch=self.core.life.epoch, tasks=str(self.source),
                          warmup_s=cfg.warmup, lease_s=cfg.lease, metrics=cfg.metrics or None)
            while not self._stopping:
                self.step()
        finally:
            for signum, handler in old_handlers.items():
                signal.signal(signum, handler)
            if old_wakeup != -1 or old_handlers:
                signal.set_wakeup_fd(old_wakeup)
            self.close()
        self.log.info("supervisor stopped")
        return self.exit_code

    def _elect(self) -> Election:
        cfg = self.config
        name = cfg.name or cfg.bind.rsplit("/", 1)[-1]
        info = {"name": name, "bind": cfg.bind, "control": cfg.control}

        def notify(role: Role) -> None:  # on the election's thread: only enqueue and wake
            self._roles.append(role)
            self.wake()

        election = Election(parse_endpoints(cfg.ha), cfg.ha_key, cfg.ha_ttl, info, notify,
                            self.log, heard=self.core.hearing.count)
        election.start()
        return election

    def _on_signal(self, signum: int, frame: Any) -> None:
        self._signals.append(signum)  # only enqueue; the loop does the work

    @property
    def stopping(self) -> bool:
        return self._stopping

    def poll_timeout(self, now: float) -> float:
        """Seconds the loop may sleep in poll: until the core's next deadline or the next
        metrics snapshot; none while sends wait in the queue or the core is busy."""
        if self.outbox.waiting or self.core.busy:
            return 0.0
        deadline = self.core.next_deadline()
        until = deadline if deadline is not None else now + 60.0
        if self.collector is not None:
            until = min(until, self._next_snapshot)
        return max(0.0, until - now)

    def step(self, max_wait: float | None = None) -> None:
        """One turn of the loop: wait for input or the next deadline, then handle everything
        that is ready."""
        wait = self.poll_timeout(self.clock())
        if max_wait is not None:
            wait = min(wait, max_wait)
        ready = dict(self.poller.poll(int(wait * 1000) + (1 if wait > 0 else 0)))
        now = self.clock()
        core = self.core
        # Before anything is read or answered: a leader past its etcd deadline stops (a frozen
        # process wakes with reports waiting), and what the election decided counts first.
        if core.life.deadline_passed(now):  # (not a Tick: that judges silences, unread yet)
            self._roles.appendleft(Role(False, error=DEADLINE_PASSED))
        while self._roles:
            role = self._roles.popleft()
            self._step(RoleChanged(role), now)
            if not role.leader and self.election is not None:
                self.election.demoted()  # a resigning leader waits for this
        handled = self._drain_workers(now) if self.router in ready else 0
        if handled < MAX_BATCH:  # no report waits unread: silence may be judged up to now
            self._read_until = now
        if self.control in ready:
            self._execute(self.controls.serve(self.core, now))
        if self._wake_fd in ready:
            self.endpoints.drain_wake()
        while self._signals:
            verb, args = verbs.SIGNALS[self._signals.popleft()]
            self._execute(verbs.call(core, verb, dict(args), now)[2])
        fetched = bool(self.fetcher.results)
        while self.fetcher.results:
            self._step(self.fetcher.results.popleft(), now)
        # Timers fire only when one is due. While a backlog drains (a full batch was read)
        # they wait, up to MAX_TIMER_DELAY (a leader's etcd deadline never waits); a worker's
        # silence is judged as of `_read_until`, the last time no report waited unread.
        due = core.next_deadline()
        if due is not None and now >= due and (
                handled < MAX_BATCH or now - due >= MAX_TIMER_DELAY
                or core.life.deadline_passed(now)):
            self._step(Tick(self._read_until), now)
        # Work cut into slices (the warm-up's rebuild) takes a slice whenever the reports that
        # were waiting have been read; under a backlog, about half the time (reading gets
        # SLICE_SHARE times as long as the last slice took): a backlog never stops it, and
        # silence is judged as of the last time nothing waited unread. Not in the turn that
        # took a task list: what arrived while it was read goes first.
        if core.busy and not fetched and (handled < MAX_BATCH
                                          or self.clock() >= self._slice_due):
            self.gc.busy(True)
            t0 = time.perf_counter()
            self._step(_CONTINUE, now)
            took = time.perf_counter() - t0
            self._slice_due = self.clock() + SLICE_SHARE * took
        if self.gc.paused and not core.busy:  # the sliced work ended (or was dropped)
            self.gc.busy(False)
        self.outbox.flush()
        self._peers_gone(now)
        if now >= self._next_snapshot:
            self._next_snapshot = now + 1.0
            if self.collector is not None:
                self.collector.refresh(core.queries)
        if 0 < handled < MAX_BATCH and not self._signals and not self.outbox.queued \
                and not core.busy:
            due = core.next_deadline()
            pause = COALESCE_S if due is None else min(COALESCE_S, due - self.clock())
            if pause > 0:
                self._sleep(pause)

    def _peers_gone(self, now: float) -> None:
        """Step the core with each peer a send found gone (a contender may take its id); what
        those steps send may find more, handed back on the next rounds or the next turn."""
        for _ in range(8):
            gone = self.outbox.take_gone()
            if not gone:
                return
            for identity in gone:
                self._step(PeerGone(identity), now)

    def _step(self, event: Event, now: float) -> None:
        """Step the core with one event."""
        before, t0 = self.core.counters.assignment_events, time.perf_counter()
        actions = self.core.handle(event, now)
        self._stepped(before, time.perf_counter() - t0, actions)

    def _stepped(self, before: int, busy: float, actions: list[Action]) -> None:
        """A step took ``busy`` seconds and decided ``actions``: an assignment event's time
        goes to the metric, a long step is a stall."""
        if self.core.counters.assignment_events != before:
            self.io.assignment_seconds += busy
        self._execute(actions)
        self.gc.after_step(busy)
        if busy > STALL_S:
            self._execute(self.core.handle(Stalled(busy), self.clock()))

    # -- input ---------------------------------------------------------------------------------

    def _drain_workers(self, now: float) -> int:
        """Handle every ready worker message (up to MAX_BATCH) as it is read, in one batch
        (`BatchStart` .. `BatchEnd`: placement that arrivals ask for runs once, at the end,
        and renewals leave together then); returns how many. The batch is one step."""
        router, io, core = self.router, self.io, self.core
        recv, more, glance_status, handle = router.recv, router.get, codec.glance_status, \
            core.handle
        key_names = self.key_names
        key_name = None
        n = 0
        before, t0 = core.counters.assignment_events, time.perf_counter()
        handle(_BATCH_START, now)
        try:
            while n < MAX_BATCH:
                try:
                    identity = recv(NOBLOCK)
                    # The identity and at least one frame come atomically; the frame says
                    # "more?" without a getsockopt (which builds an enum per call).
                    frame = recv(NOBLOCK, copy=False)
                except zmq.Again:
                    break
                n += 1
                payload = frame.bytes
                if key_names is not None:  # Curve: the frame says whose key sent it
                    key_name = key_names.get(str(frame.get("User-Id")))
                if frame.more:  # a worker sends one frame; drop the rest of this message
                    while more(RCVMORE):
                        recv(NOBLOCK)
                    io.bad_frames += 1
                    continue
                try:  # the task maps stay encoded: the core reads them only if they changed
                    glance = glance_status(payload)
                except ProtocolError as exc:
                    io.decode_errors += 1
                    self.log.debug("bad frame from a worker", error=str(exc))
                    continue
                actions = handle(RawReport(identity, glance, payload, key_name), now)
                if actions:  # (none: in a batch they wait for its end, and leave together)
                    self._execute(actions)
        finally:
            io.messages_in += n
            actions = handle(_BATCH_END, now)
        self._stepped(before, time.perf_counter() - t0, actions)
        return n

    # -- output --------------------------------------------------------------------------------

    def _execute(self, actions: list[Action]) -> None:
        """Carry out the core's actions. Sets leave at once when nothing waits in the outbox
        and there are at most MAX_SENDS (the usual case: a batch's renewals); otherwise they
        queue, in order, and leave MAX_SENDS a loop turn."""
        out, log = self.outbox, self.log
        direct = out.direct(len(actions))
        for a in actions:
            if type(a) is Send:
                if direct:
                    out.send(a)
                else:
                    out.put(a)
            elif type(a) is Log:
                getattr(log, a.level)(a.event, **a.fields)
            elif type(a) is Fetch:
                self.fetcher.request(a.reset)
            elif type(a) is Heard:
                if self.election is not None:
                    self.election.heard(a.count)
            elif type(a) is PersistEpoch:
                epochs.save(self.epoch_path, a.epoch)
            elif type(a) is Stop:
                log.info("stopping", reason=a.reason)
                self._stopping = True
        out.after_put()

    def close(self) -> None:
        """The one shutdown path: stop the election (a leader gives its key up, so a standby
        takes over at once) and the task source, close every socket. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.gc.busy(False)  # stopped mid-rebuild: the collector runs again in this process
        if self.election is not None:
            self.election.stop()
            self.election = None
        if not self.fetcher.stop():
            self.log.warning("a task query did not end in time; its thread is left behind")
        self.endpoints.close()
