"""The supervisor's epoch (its fencing token) survives restarts in a small state file.

Each start takes the stored epoch + 1 and stores it once its endpoints are bound (a start that
fails consumes no epoch), before saying anything to a worker; the
write goes to a temporary file that is fsynced and renamed over the old one, so a crash leaves
either the old epoch or the new one, never a torn file. (Should the file be lost, the core
still raises its epoch above any a worker reports having applied, during warm-up.)
"""

from __future__ import annotations

import os
from pathlib import Path

from corral.common.errors import ConfigError
from corral.common.wire.protocol import MAX_STATE_EPOCH


def load(path: Path) -> int:
    try:
        text = path.read_text().strip()
    except FileNotFoundError:
        return 0
    except OSError as exc:
        raise ConfigError("state_file", f"cannot read {path}: {exc.strerror}") from None
    if not text.isdigit() or len(text) > 20 or int(text) >= MAX_STATE_EPOCH:
        raise ConfigError("state_file", f"{path} holds {text[:40]!r}, not an epoch number "
                                        f"below {MAX_STATE_EPOCH}; fix or delete it")
    return int(text)


def save(path: Path, epoch: int) -> None:
    if not 0 < epoch <= MAX_STATE_EPOCH:  # the core never holds one out of range; say so
        raise ValueError(f"epoch {epoch} is outside 1..{MAX_STATE_EPOCH}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        with open(tmp, "w") as f:
            f.write(f"{epoch}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError("state_file", f"cannot write {path}: {exc.strerror}") from None


def check_writable(path: Path) -> None:
    """Fail before binding anything if the epoch could not be stored (`ConfigError`)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError("state_file", f"cannot create {path.parent}: {exc.strerror}") from None
    if not os.access(path.parent, os.W_OK | os.X_OK):
        raise ConfigError("state_file", f"cannot write in {path.parent}")


def next_epoch(path: Path) -> int:
    epoch = load(path) + 1
    save(path, epoch)
    return epoch
