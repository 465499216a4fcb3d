"""What one event decided, gathered while the core handles it; only the core drains it.

Parts write here what they decided — lines for the log, sets to send, a task query, an epoch to
persist, a stop, the heard count (HA) — and the changes to the desired assignment (`changes`:
one `Changes`). The core turns the changes into instruction sets at the event's end and hands
the actions to the daemon (`take`). While a batch of reports is open (`holding`) every action
waits for its end, in order, so a batch's renewals leave together. One object for the core's life.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from corral.common.wire.protocol import Instructions, Refusal, Renewal

from .changes import Changes
from .events import Action, Fetch, Heard, Log, PersistEpoch, Send, Stop

_NONE: list[Action] = []
_NO_FIELDS: Mapping[str, Any] = {}


class Effects:
    __slots__ = ("actions", "changes", "holding")

    def __init__(self) -> None:
        self.actions: list[Action] = []
        self.changes = Changes()
        self.holding = False  # a batch is open (`BatchStart`): actions wait for its end

    def log(self, level: str, event: str, fields: Mapping[str, Any] = _NO_FIELDS) -> None:
        self.actions.append(Log(level, event, fields))

    def send(self, identity: bytes, message: Instructions | Renewal | Refusal) -> None:
        self.actions.append(Send(identity, message))

    def fetch(self, reset: bool) -> None:
        self.actions.append(Fetch(reset))

    def persist_epoch(self, epoch: int) -> None:
        self.actions.append(PersistEpoch(epoch))

    def stop(self, reason: str) -> None:
        self.actions.append(Stop(reason))

    def heard(self, count: int) -> None:
        self.actions.append(Heard(count))

    def hold(self) -> None:
        """A batch opens: actions wait for `release`."""
        self.holding = True

    def release(self) -> None:
        self.holding = False

    def take(self) -> list[Action]:
        """The actions decided so far, handed over (none while a batch is open)."""
        if self.holding or not self.actions:
            return _NONE
        out = self.actions
        self.actions = []
        return out
