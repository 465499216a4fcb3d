"""The per-worker runtime directory: where a worker's lease keeper listens, so that the next
agent with the same id on the same host finds it (docs/worker.md, "Hand-over and adoption").

``$XDG_RUNTIME_DIR/corral/<name>/``, or ``/run/corral/<name>/`` when the variable is unset;
``<name>`` is the worker id made safe for a file name (its first 40 letters, digits, ``.``,
``_`` and ``-``, others as ``_``) and a hash of the whole id, so two ids never share one. It
holds ``keeper.sock`` (the keeper's listening socket) and ``agent.lock``, which the agent of
that id holds for its whole life: a second agent of one id on one host waits for it, briefly
(a hand-over's successor may start before its predecessor has quite gone), then gives up. And
``keeper.lock``, which a keeper holds for its life (the agent takes it, then hands it to the
keeper it spawns): a fresh keeper starts only once an old one has ended every task it had.

A socket path is limited to 107 bytes; a longer one is reached through the directory's own
descriptor (``/proc/self/fd/N/keeper.sock``), which Linux resolves like the real path.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import time
from pathlib import Path

SOCKET = "keeper.sock"
LOCK = "agent.lock"
KEEPER_LOCK = "keeper.lock"  # held by the live keeper: a fresh one waits for the old to end
LOCK_WAIT = 5.0  # how long a second agent of one id waits for the first to go
LOCK_POLL = 0.05
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")
_MAX_SUN_PATH = 107


def base(env: dict[str, str] | os._Environ[str] | None = None) -> Path:
    """``$XDG_RUNTIME_DIR/corral``, or ``/run/corral``."""
    env = os.environ if env is None else env
    runtime = env.get("XDG_RUNTIME_DIR")
    return Path(runtime) / "corral" if runtime else Path("/run/corral")


def name(worker_id: str) -> str:
    """The directory name of a worker id.

    >>> name("w1")
    'w1-60c5590f72eef292'
    >>> name("eu/host 7")
    'eu_host_7-4b356b02c6166acb'
    """
    digest = hashlib.sha256(worker_id.encode("utf-8", "surrogateescape")).hexdigest()[:16]
    return f"{_UNSAFE.sub('_', worker_id[:40])}-{digest}"


class RunDir:
    """One worker id's runtime directory. `create` makes it (an ``exec`` agent needs it);
    `exists` is enough for an agent that only looks for a keeper left behind."""

    def __init__(self, worker_id: str, root: Path | None = None) -> None:
        self.path = (root if root is not None else base()) / name(worker_id)
        self._dirfd: int | None = None
        self._lock: int | None = None

    @classmethod
    def at(cls, path: Path) -> RunDir:
        """The runtime directory at ``path`` (whatever id it is for)."""
        rundir = cls("")
        rundir.path = path
        return rundir

    def exists(self) -> bool:
        return self.path.is_dir()

    def create(self) -> None:
        """Make the directory (and its parents), private to this user; OSError if it cannot."""
        self.path.mkdir(mode=0o700, parents=True, exist_ok=True)

    def socket_address(self) -> str:
        """The keeper socket's path, or the short form of it through the directory's fd."""
        full = str(self.path / SOCKET)
        if len(full.encode()) <= _MAX_SUN_PATH:
            return full
        if self._dirfd is None:
            self._dirfd = os.open(self.path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        return f"/proc/self/fd/{self._dirfd}/{SOCKET}"

    def remove_socket(self) -> None:
        """Unlink a socket nobody listens on any more (its keeper was killed)."""
        with contextlib.suppress(FileNotFoundError):
            (self.path / SOCKET).unlink()

    def lock(self, wait: float = LOCK_WAIT) -> bool:
        """Hold ``agent.lock`` for this process's life; False if another agent held it for
        ``wait`` seconds."""
        self._lock = _flock(self.path / LOCK, wait)
        return self._lock is not None

    def keeper_lock(self, wait: float) -> int | None:
        """``keeper.lock``, once no keeper holds it (waiting up to ``wait`` seconds for an old
        one to end its tasks): an fd for the new keeper to inherit, or None."""
        return _flock(self.path / KEEPER_LOCK, wait)

    def close(self) -> None:
        """Let go of the lock and the directory's descriptor (the process's exit does too)."""
        for fd in (self._lock, self._dirfd):
            if fd is not None:
                os.close(fd)
        self._lock = self._dirfd = None


def _flock(path: Path, wait: float) -> int | None:
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(LOCK_POLL)
            continue
        return fd
