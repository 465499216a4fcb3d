"""Layered configuration: command-line flags, then ``CORRAL_*`` environment variables, then a
TOML file, then the documented default — the first that sets a key wins.

Each daemon declares its keys once as `Setting`s; the same declaration makes the click options
(with the default in ``--help``), reads the environment and the file, and checks every value.
A bad value or an unknown file key raises `ConfigError` naming the key and where it came from;
the CLIs print that one line and exit with status 2.

Pure: the caller reads the environment and the file and passes them in.

    >>> s = [Setting("lease", "seconds", 10.0, "lease length")]
    >>> resolve(s, flags={"lease": None}, env={"CORRAL_LEASE": "4.5"})
    {'lease': 4.5}
"""

from __future__ import annotations

import math
import re
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from corral.common.errors import ConfigError

# kind -> (parse from text, check a value of the right type) ; each returns the clean value or
# raises ValueError with the reason.
_ENDPOINT = re.compile(r"^(tcp://[^:\s]+:\d{1,5}|ipc://\S+|inproc://\S+)$")
_HOSTPORT = re.compile(r"^[^:\s]+:\d{1,5}$")


# The longest time any setting may name (about 31 years): beyond it a deadline or a lease on
# the wire (bounded at 1e15) could overflow, and no real setting is that long.
MAX_SECONDS = 1e9


def _float(v: Any, what: str) -> float:
    """``v`` as a float, or ValueError saying what was expected (once: the caller adds what
    it got)."""
    if isinstance(v, bool) or not isinstance(v, int | float | str):
        raise ValueError(f"expected {what}")
    try:
        return float(v)
    except ValueError:
        raise ValueError(f"expected {what}") from None


def _seconds(v: Any) -> float:
    x = _float(v, "a number of seconds")
    if not math.isfinite(x) or not 0 <= x <= MAX_SECONDS:
        raise ValueError(f"expected a number of seconds from 0 to {MAX_SECONDS:g}")
    return x


def _number(v: Any) -> float:
    x = _float(v, "a number")
    if not math.isfinite(x):
        raise ValueError("expected a finite number")
    return x


def _int(v: Any) -> int:
    if isinstance(v, bool):
        raise ValueError("expected an integer")
    if isinstance(v, float):
        if not v.is_integer():
            raise ValueError("expected an integer")
        return int(v)
    if isinstance(v, int):
        return v
    if isinstance(v, str) and re.fullmatch(r"\s*-?\d+\s*", v):
        return int(v)
    raise ValueError("expected an integer")


def _bool(v: Any) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(v, str) and v.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false")


def _str(v: Any) -> str:
    if not isinstance(v, str):
        raise ValueError("expected a string")
    return v


def _port_ok(s: str) -> bool:
    return 1 <= int(s.rsplit(":", 1)[1]) <= 65535


def _endpoint(v: Any) -> str:
    s = _str(v).strip()
    if not _ENDPOINT.match(s) or (s.startswith("tcp://") and not _port_ok(s)):
        raise ValueError("expected a ZeroMQ endpoint such as tcp://127.0.0.1:7760 "
                         "(ports 1-65535)")
    return s


def _hostport(v: Any) -> str:
    s = _str(v).strip()
    if not _HOSTPORT.match(s) or not _port_ok(s):
        raise ValueError("expected HOST:PORT such as 127.0.0.1:9464 (ports 1-65535)")
    return s


KINDS: dict[str, Callable[[Any], Any]] = {
    "seconds": _seconds,
    "number": _number,
    "int": _int,
    "bool": _bool,
    "str": _str,
    "endpoint": _endpoint,
    "hostport": _hostport,
}


@dataclass(frozen=True)
class Setting:
    """One configuration key: its kind (a key of `KINDS`), default, help, and an optional
    extra check that returns the reason a value is wrong, or None."""

    name: str
    kind: str
    default: Any
    help: str
    check: Callable[[Any], str | None] | None = None
    choices: tuple[str, ...] = ()
    metavar: str | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")

    @property
    def env(self) -> str:
        return "CORRAL_" + self.name.upper()

    def parse(self, value: Any, source: str) -> Any:
        """The clean value, or ConfigError naming this key and ``source``."""
        if value is None:
            return None
        try:
            clean = KINDS[self.kind](value)
        except ValueError as exc:
            raise ConfigError(self.name, f"{exc}, got {value!r} (from {source})") from None
        if self.choices and clean not in self.choices:
            raise ConfigError(
                self.name,
                f"expected one of {', '.join(self.choices)}, got {value!r} (from {source})",
            )
        if self.check is not None:
            reason = self.check(clean)
            if reason:
                raise ConfigError(self.name, f"{reason}, got {value!r} (from {source})")
        return clean


def positive(v: Any) -> str | None:
    return None if v > 0 else "must be > 0"


def at_least(n: float) -> Callable[[Any], str | None]:
    def check(v: Any) -> str | None:
        return None if v >= n else f"must be >= {n:g}"

    return check


def between(lo: float, hi: float) -> Callable[[Any], str | None]:
    """A check that a value lies in ``lo``..``hi`` (both included)."""
    def check(v: Any) -> str | None:
        return None if lo <= v <= hi else f"must be from {lo:g} to {hi:g}"

    return check


def parse_file(text: str, file_name: str) -> dict[str, Any]:
    """A TOML file's top-level table (keys may use - or _)."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(file_name, f"not valid TOML: {exc}") from None
    return {k.replace("-", "_"): v for k, v in data.items()}


def resolve(
    settings: Sequence[Setting],
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    file_values: Mapping[str, Any] | None = None,
    file_name: str = "config file",
) -> dict[str, Any]:
    """Every key's value: flag (not None), else environment, else file, else default."""
    known = {s.name: s for s in settings}
    file_values = file_values or {}
    unknown = sorted(k for k in file_values if k not in known)
    if unknown:
        raise ConfigError(unknown[0], f"unknown key in {file_name} (known: {', '.join(known)})")
    out: dict[str, Any] = {}
    for s in settings:
        if flags.get(s.name) is not None:
            out[s.name] = s.parse(flags[s.name], s.flag)
        elif s.env in env:
            out[s.name] = s.parse(env[s.env], s.env)
        elif s.name in file_values:
            out[s.name] = s.parse(file_values[s.name], file_name)
        else:
            out[s.name] = s.default
    return out
