"""The worker's configuration: its `Setting`s (flags > ``CORRAL_*`` env > TOML > defaults) and
the one frozen `WorkerConfig` built from them, which every other worker module receives.

    >>> cfg = load({"supervisor": "tcp://127.0.0.1:7760", "handler": "log", "id": "w1"}, {})
    >>> cfg.report_interval, cfg.drain_timeout, cfg.stop_grace, cfg.on_lease_loss.value
    (None, 30.0, 10.0, 'stop')
"""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from corral.cli.files import read_file
from corral.cli.logs import LEVELS
from corral.cli.settings import KINDS, Setting, positive, resolve
from corral.common.errors import ConfigError
from corral.common.wire.codec import MAX_ID_CHARS
from corral.common.wire.ids import bad_char, check_id
from corral.common.wire.protocol import MAX_LABELS, MAX_LOAD

from . import template

DEFAULT_MAX_LOAD = 10.0
# Reports between changes only keep the lease: one every half of it, each answered by a renewal
# (the supervisor answers any report a fifth of a lease after its last set), and one more when
# only a quarter of the lease is left without a renewal since the last report — so one lost
# answer costs nothing, at two reports and two renewals per lease. A lost worker is found
# lease + margin after its last report whatever the interval. Changes are reported at once.
# Before the first lease is known: every second.
REPORT_FRACTION_OF_LEASE = 1 / 2
SHORT_LEASE_FRACTION = 1 / 4
FIRST_REPORT_INTERVAL = 1.0
# A lease that stays lapsed this long (half of it: the supervisor had a report interval to
# answer) opens the connections again (`events.Reconnect`). Not at the lapse itself: most
# lapses are a supervisor restart, whose new process answers the next report on the connection
# there is (docs/operations.md, "What chaos runs found").
RECONNECT_FRACTION_OF_LEASE = 1 / 2
MIN_REPORT_INTERVAL, MAX_REPORT_INTERVAL = 0.1, 60.0
DEFAULT_DRAIN_TIMEOUT = 30.0
DEFAULT_STOP_GRACE = 10.0


class LeaseLoss(StrEnum):
    """What the worker does with its tasks when its lease lapses."""

    STOP = "stop"  # exclusivity: a task never has two owners (the default)
    KEEP = "keep"  # availability: tasks keep running, possibly next to their new owner


@dataclass(frozen=True)
class Backoff:
    """Restart delays of a failing task: ``base * 2**(failures-1)``, at most ``cap``. A task
    that stays up for ``reset_after`` seconds has its consecutive-failure count cleared; it is
    longer than ``cap`` so a task that crashes every few seconds keeps counting up (and the
    supervisor can move it) instead of looking healthy between crashes.

    >>> [Backoff().delay(n) for n in (1, 2, 3, 8)]
    [0.5, 1.0, 2.0, 30.0]
    """

    base: float = 0.5
    cap: float = 30.0
    reset_after: float = 60.0

    def delay(self, failures: int) -> float:
        # min() on the exponent first, so a huge failure count cannot overflow the float.
        return min(self.cap, self.base * 2.0 ** min(max(failures - 1, 0), 64))


@dataclass(frozen=True)
class WorkerConfig:
    """Everything one worker process is told. Times are seconds (fractions allowed)."""

    supervisor: str
    worker_id: str
    handler: str
    exec_template: str | None = None
    max_load: float = DEFAULT_MAX_LOAD
    journal: Path | None = None
    report_interval: float | None = None  # None: half the lease (see above)
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT
    on_lease_loss: LeaseLoss = LeaseLoss.STOP
    stop_grace: float = DEFAULT_STOP_GRACE
    # None: readiness is the handler's ready() alone (ready at once without one).
    ready_after: float | None = None
    log_level: str = "info"
    backoff: Backoff = field(default_factory=Backoff)
    # Request serving (docs/routing.md): the endpoint to bind, and the address reported to the
    # supervisor for clients to connect to. None: the worker serves no requests.
    serve: str | None = None
    advertise: str | None = None
    # CurveZMQ: the supervisor's NAME.key and this worker's NAME.key_secret (both or neither).
    curve_server_key: str | None = None
    curve_secret_key: str | None = None
    # The failure domain ("eu-1/rack-7/host-3"; "" for none) and labels, fixed per incarnation.
    zone: str = ""
    labels: tuple[tuple[str, str], ...] = ()

    @property
    def supervisors(self) -> tuple[str, ...]:
        """Every supervisor endpoint (HA: reports go to each)."""
        return tuple(e.strip() for e in self.supervisor.split(","))

    def curve_keys(self) -> tuple[bytes, bytes, bytes] | None:
        """(the supervisor's public key, ours, our secret) for the DEALERs, or None."""
        if self.curve_server_key is None or self.curve_secret_key is None:
            return None
        import zmq.auth  # only Curve deployments load keys

        try:
            server_public, _ = zmq.auth.load_certificate(self.curve_server_key)
            public, secret = zmq.auth.load_certificate(self.curve_secret_key)
        except (OSError, ValueError) as exc:
            raise ConfigError("curve", f"cannot load a key: {exc}") from None
        if not secret:
            raise ConfigError("curve_secret_key", f"{self.curve_secret_key} holds no secret "
                                                  "key (use the .key_secret file)")
        return server_public, public, secret


def _handler_spec(v: Any) -> str | None:
    if v in ("log", "exec"):
        return None
    parts = str(v).split(":")
    if len(parts) == 3 and parts[0] == "python" and all(parts[1:]):
        return None
    return "expected log, exec or python:module:Class"


def _endpoints(v: Any) -> str | None:
    for part in str(v).split(","):
        try:
            KINDS["endpoint"](part.strip())
        except ValueError as exc:
            return f"{exc} (in {part.strip()!r})"
    return None


def _worker_id(v: Any) -> str | None:
    ch = bad_char(v) if v else None
    if ch is not None:
        return f"holds {ch}, which no id may hold"
    if not v or len(v) > MAX_ID_CHARS or v != v.strip():
        return f"must be 1 to {MAX_ID_CHARS} characters without surrounding spaces"
    return None


def _max_load(v: Any) -> str | None:
    return None if 0 < v <= MAX_LOAD else f"must be above 0 and at most {MAX_LOAD:g}"


_ZONE_PART = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_LABEL_KEY = re.compile(r"[A-Za-z0-9]([A-Za-z0-9._/-]*[A-Za-z0-9])?")


def _zone(v: Any) -> str | None:
    if v == "":
        return None
    if len(v) > MAX_ID_CHARS or not all(_ZONE_PART.fullmatch(p) for p in v.split("/")):
        return (f"expected at most {MAX_ID_CHARS} characters of '/'-separated levels of "
                "letters, digits, '.', '_' and '-', such as eu-1/rack-7/host-3")
    return None


def _label(key: Any, value: Any) -> str | None:
    """Why ``key = value`` is not a valid label, or None."""
    if not isinstance(key, str) or not _LABEL_KEY.fullmatch(key) or len(key) > MAX_ID_CHARS:
        return (f"label key {key!r}: expected letters, digits, '.', '_', '-' and '/' "
                f"(at most {MAX_ID_CHARS})")
    if not isinstance(value, str):
        return f"label {key}: expected a string value, got {value!r} (quote it)"
    why = check_id(value, f"label {key}: the value")
    if why is not None:
        return why
    if not value or len(value) > MAX_ID_CHARS or value != value.strip() or "," in value:
        return (f"label {key}: the value must be 1 to {MAX_ID_CHARS} characters, without "
                "surrounding spaces or ','")
    return None


def parse_labels(flags: tuple[str, ...] | None, env: str | None,
                 table: Any = None) -> tuple[tuple[str, str], ...]:
    """The labels from repeated ``--label KEY=VALUE`` flags, else ``CORRAL_LABELS``
    (``k=v,k2=v2``), else the TOML ``[labels]`` table; `ConfigError` for a bad one.

    >>> parse_labels(("gpu=true", "disk=ssd"), "ignored=1")
    (('disk', 'ssd'), ('gpu', 'true'))
    >>> parse_labels(None, "gpu=true, arch=arm64")
    (('arch', 'arm64'), ('gpu', 'true'))
    """
    if flags:
        source, items = "--label", [_pair(f, "--label") for f in flags]
    elif env is not None:
        source = "CORRAL_LABELS"
        items = [_pair(f.strip(), source) for f in env.split(",") if f.strip()]
    elif table is not None:
        source = "the [labels] table of the config file"
        if not isinstance(table, dict):
            raise ConfigError("labels", f"expected a table, got {table!r} (from {source})")
        items = list(table.items())
    else:
        return ()
    seen: dict[str, str] = {}
    for key, value in items:
        reason = _label(key, value)
        if reason is None and key in seen:
            reason = f"label {key} is given twice"
        if reason:
            raise ConfigError("labels", f"{reason} (from {source})")
        seen[key] = value
    if len(seen) > MAX_LABELS:
        raise ConfigError("labels", f"at most {MAX_LABELS} labels, got {len(seen)} "
                                    f"(from {source})")
    return tuple(sorted(seen.items()))


def _pair(text: str, source: str) -> tuple[str, str]:
    key, eq, value = text.partition("=")
    if not eq:
        raise ConfigError("labels", f"expected KEY=VALUE, got {text!r} (from {source})")
    return key.strip(), value.strip()


def _exec_template(v: Any) -> str | None:
    try:
        template.check(v)
    except ValueError as exc:
        return str(exc)
    return None


SETTINGS: tuple[Setting, ...] = (
    Setting("supervisor", "str", None, "the supervisor's worker endpoint (required); with "
            "supervisor HA every supervisor's, comma-separated", _endpoints,
            metavar="tcp://HOST:PORT[,…]"),
    Setting("id", "str", None, "this worker's id [default: the host name]", _worker_id,
            metavar="ID"),
    Setting("max_load", "number", DEFAULT_MAX_LOAD, f"capacity, in task-cost units (above 0, "
            f"at most {MAX_LOAD:g})", _max_load, metavar="N"),
    Setting("handler", "str", None, "what runs a task: log, exec or python:module:Class "
            "(required)", _handler_spec, metavar="HANDLER"),
    Setting("exec", "str", None, 'the command of the exec handler, e.g. "recorder --room '
            '{task}"; {task} becomes one argument, no shell', _exec_template, metavar="CMD"),
    Setting("journal", "str", None, "append a JSON line per task start and stop to this file",
            metavar="PATH"),
    Setting("report_interval", "seconds", None,
            "seconds between status reports when nothing changes (changes are reported at "
            "once) [default: half the lease the supervisor grants, and once more when only a "
            "quarter is left unrenewed; 1 s before the first]",
            positive),
    Setting("drain_timeout", "seconds", DEFAULT_DRAIN_TIMEOUT,
            "after SIGTERM, seconds to wait for tasks to be moved away before stopping them"),
    Setting("on_lease_loss", "str", LeaseLoss.STOP.value,
            "when the lease lapses: stop tasks (exclusive) or keep them (available)",
            choices=tuple(v.value for v in LeaseLoss), metavar="stop|keep"),
    Setting("stop_grace", "seconds", DEFAULT_STOP_GRACE,
            "exec handler: seconds between SIGTERM and SIGKILL of a task's process group"),
    Setting("ready_after", "seconds", None, "report ready after this many seconds even if the "
            "handler's ready() is not yet true [default: wait for ready(); ready at once "
            "without one]"),
    Setting("log_level", "str", "info", "log level", choices=LEVELS, metavar="LEVEL"),
    Setting("serve", "endpoint", None, "answer requests for the tasks it runs on this endpoint "
            "(needs a handler with serve(): log or python:module:Class)",
            metavar="tcp://HOST:PORT"),
    Setting("advertise", "endpoint", None, "the address clients connect to for --serve "
            "[default: --serve, a wildcard host replaced by the host name]",
            metavar="tcp://HOST:PORT"),
    Setting("curve_server_key", "str", None, "CurveZMQ: the supervisor's NAME.key (public) file",
            metavar="FILE"),
    Setting("curve_secret_key", "str", None, "CurveZMQ: this worker's NAME.key_secret file; "
            "the supervisor admits it only as worker NAME", metavar="FILE"),
    Setting("zone", "str", "", "this worker's failure domain, levels separated by '/' "
            "(e.g. eu-1/rack-7/host-3); replicas of a task go to distinct zones when they can",
            _zone, metavar="ZONE"),
)


def load(
    flags: Mapping[str, Any],
    env: Mapping[str, str],
    config_file: str | None = None,
) -> WorkerConfig:
    """The worker's configuration from flags, the environment and an optional TOML file, or
    `ConfigError` with one line naming the key at fault."""
    file_values = read_file(config_file) if config_file is not None else {}
    labels = parse_labels(flags.get("label"), env.get("CORRAL_LABELS"),
                          file_values.pop("labels", None))
    v = resolve(SETTINGS, flags, env, file_values, config_file or "config file")
    for required in ("supervisor", "handler"):
        if v[required] is None:
            flag = "--" + required
            raise ConfigError(required, f"missing: give {flag} (or CORRAL_{required.upper()})")
    if (v["handler"] == "exec") != (v["exec"] is not None):
        raise ConfigError("exec", "--exec is required with --handler exec, and only with it")
    if v["serve"] is not None and v["handler"] == "exec":
        raise ConfigError("serve", "--serve needs a handler with serve(): log or "
                                   "python:module:Class, not exec")
    if (v["curve_server_key"] is None) != (v["curve_secret_key"] is None):
        raise ConfigError("curve_secret_key", "--curve-server-key and --curve-secret-key go "
                                              "together")
    if v["advertise"] is not None and v["serve"] is None:
        raise ConfigError("advertise", "--advertise is only meaningful with --serve")
    return WorkerConfig(
        supervisor=v["supervisor"],
        worker_id=v["id"] if v["id"] is not None else default_worker_id(),
        handler=v["handler"],
        exec_template=v["exec"],
        max_load=float(v["max_load"]),
        journal=Path(v["journal"]) if v["journal"] else None,
        report_interval=v["report_interval"],
        drain_timeout=v["drain_timeout"],
        on_lease_loss=LeaseLoss(v["on_lease_loss"]),
        stop_grace=v["stop_grace"],
        ready_after=v["ready_after"],
        log_level=v["log_level"],
        serve=v["serve"],
        advertise=v["advertise"] or advertised(v["serve"]),
        curve_server_key=v["curve_server_key"],
        curve_secret_key=v["curve_secret_key"],
        zone=v["zone"],
        labels=labels,
    )


def advertised(endpoint: str | None) -> str | None:
    """What clients should connect to for a bound ``endpoint``: a wildcard host is replaced
    by this host's name.

    >>> advertised("tcp://127.0.0.1:7770"), advertised(None)
    ('tcp://127.0.0.1:7770', None)
    """
    if endpoint is None or not endpoint.startswith("tcp://"):
        return endpoint
    host, port = endpoint[len("tcp://"):].rsplit(":", 1)
    if host in ("*", "0.0.0.0", "[::]", "::"):
        host = socket.gethostname() or "localhost"
    return f"tcp://{host}:{port}"


def default_worker_id() -> str:
    """The host name, cut to what the protocol carries."""
    return (socket.gethostname() or "worker")[:MAX_ID_CHARS]
