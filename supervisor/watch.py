"""Watching a ``file:`` task source: the list is re-read when the file changes.

Stat polling every `POLL_S` on the source's own thread: cheap (one ``stat`` a poll), portable,
and it sees both ways a file is changed — an atomic rename over it (a new inode) and a write
in place (a new size or mtime). A change is read once the file has looked the same for one
whole poll (a writer still busy is not read mid-way; bursts of writes become one read), or
after `SETTLE_MAX_S` if it never settles. So a change is applied within ``2 × POLL_S`` plus
the read, well under a second.

Two writes inside one tick of the file system's clock, of the same size, leave the same
``stat``: while the file's mtime is that recent ("racy", as git calls it) every poll reads
it again and compares a digest of the bytes, so such a write is not missed.

A file that cannot be read or does not parse is one error per change: the supervisor keeps
its last good list, and the next change is read again. (A writer that truncates and rewrites
in place can still be caught between the two; write a temporary file and rename it.)

    idle --stat differs from the last read--> settling --same stat for a poll--> read
    settling --SETTLE_MAX_S--> read          read --ok / error--> idle
"""

from __future__ import annotations

import hashlib
import time
from pathlib import Path

from corral.common.errors import TaskSourceError
from corral.common.wire.tasklist import TaskEntry, parse_text

from .sourcecounters import SourceCounters

POLL_S = 0.2
SETTLE_MAX_S = 1.0
RACY_NS = 2_000_000_000  # coarser than any file system's mtime granularity we meet (FAT: 2 s)
MAX_BYTES = 64 * 1024 * 1024

Signature = tuple[int, ...]


def read_file(path: Path) -> bytes:
    try:
        if path.stat().st_size > MAX_BYTES:
            raise TaskSourceError(f"{path}: larger than {MAX_BYTES} bytes")
        data = path.read_bytes()
    except OSError as exc:
        raise TaskSourceError(f"{path}: cannot read: {exc.strerror}") from None
    if len(data) > MAX_BYTES:
        raise TaskSourceError(f"{path}: larger than {MAX_BYTES} bytes")
    return data


def parse_file(data: bytes, path: Path) -> dict[str, TaskEntry]:
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise TaskSourceError(f"{path}: not UTF-8 text") from None
    return parse_text(text, str(path))


class FileWatch:
    """The `Fetcher`'s driver for ``file:PATH``. Polls only once it has been asked once."""

    def __init__(self, path: Path, counters: SourceCounters) -> None:
        self.path = path
        self.counters = counters
        self._armed = False
        self._read_sig: Signature | None = None  # the stat of the file as last read
        self._racy = False  # the last read may not tell a same-tick write apart
        self._digest: bytes | None = None
        self._seen_sig: Signature | None = None  # the stat at the last poll
        self._changed_at: float | None = None  # when a change was first seen (settling)

    def query(self, reset: bool) -> dict[str, TaskEntry] | None:
        self._armed = True
        self._changed_at = None
        return self._read(force=True)

    def poll(self) -> dict[str, TaskEntry] | None:
        sig = self._stat()
        if sig == self._read_sig and not self._racy:
            self._seen_sig, self._changed_at = sig, None
            return None
        now = time.monotonic()
        if self._changed_at is None:
            self._changed_at = now
            if sig != self._read_sig:
                self.counters.watch_events += 1
        settled = sig == self._seen_sig
        self._seen_sig = sig
        if not settled and now - self._changed_at < SETTLE_MAX_S:
            return None
        self._changed_at = None
        return self._read(force=False)

    def wait_s(self) -> float | None:
        return POLL_S if self._armed else None

    def close(self) -> None:
        pass

    def _stat(self) -> Signature:
        try:
            st = self.path.stat()
        except OSError as exc:
            return (-1, exc.errno or 0)
        return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)

    def _read(self, force: bool) -> dict[str, TaskEntry] | None:
        """Parse the file; ``None`` when its bytes are those last read (unless forced). The
        stat is taken first, so a write during the read shows up at the next poll."""
        sig = self._stat()
        now_ns = time.time_ns()
        self._read_sig, self._racy = sig, len(sig) == 5 and sig[3] + RACY_NS >= now_ns
        try:
            data = read_file(self.path)
        except TaskSourceError:
            self._digest = None
            raise
        digest = hashlib.blake2b(data, digest_size=16).digest()
        if digest == self._digest and not force:
            return None
        self._digest = digest  # set before parsing: a broken file is reported once
        return parse_file(data, self.path)
