"""Reading a command's TOML configuration file (the pure parsing is `settings.parse_file`)."""

from __future__ import annotations

from typing import Any

from corral.cli.settings import parse_file
from corral.common.errors import ConfigError


def read_file(path: str) -> dict[str, Any]:
    """A TOML configuration file's keys, or ConfigError("config", …) if it cannot be read."""
    try:
        with open(path) as f:
            text = f.read()
    except OSError as exc:
        raise ConfigError("config", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError("config", f"{path} is not UTF-8 text") from None
    return parse_file(text, path)
