"""`corral-dashboard`: parse, set up logging, serve the page until SIGTERM or SIGINT.

Usage errors are one line and exit status 2; a port that cannot be bound, exit status 1.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from corral.cli import logs
from corral.client import ControlClient, CurveKeys
from corral.client.control import DEFAULT_CONTROL, parse_endpoints
from corral.common.errors import ConfigError

from . import auth
from .follower import FollowConfig

PROG = "corral-dashboard"
DEFAULT_LISTEN = "127.0.0.1:7780"

DESCRIPTION = """\
A live web page of a corral fleet: every worker's state and utilization, the balance over
the last hour, the tasks with their owners and fencing tokens, every move as it happens, and
who leads under HA. It follows the supervisor (the leader, under HA) through its control
endpoint with one client, and pushes what changes to the browsers (Server-Sent Events).

It listens on loopback by default. Actions (drain, undrain, query now) exist only with
--token-file: the page then asks for that token, and every action request must carry it in
the X-Corral-Token header; without it the page is read-only and the API answers 403. Put it
behind a TLS proxy before listening beyond loopback.
"""


@dataclass(frozen=True)
class DashboardConfig:
    control: tuple[str, ...]
    host: str
    port: int
    curve: CurveKeys | None
    token: str | None
    timeout: float
    log_level: str
    log_json: bool | None
    follow: FollowConfig


class _Formatter(argparse.RawDescriptionHelpFormatter):
    def add_usage(self, usage: Any, actions: Any, groups: Any, prefix: str | None = None) -> None:
        super().add_usage(usage, actions, groups, prefix or "Usage: ")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        print(f"{PROG}: {message}", file=sys.stderr)
        sys.exit(2)


def parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = _Parser(prog=PROG, description=DESCRIPTION, formatter_class=_Formatter)
    p.add_argument("--control", default=env("CORRAL_CONTROL", DEFAULT_CONTROL),
                   metavar="ENDPOINT[,ENDPOINT…]",
                   help="the supervisor's control endpoint; with HA, every supervisor's, "
                   f"separated by commas: the leader is followed [default: {DEFAULT_CONTROL}] "
                   "(env CORRAL_CONTROL)")
    p.add_argument("--listen", default=env("CORRAL_DASHBOARD_LISTEN", DEFAULT_LISTEN),
                   metavar="HOST:PORT", help=f"where the page is served [default: "
                   f"{DEFAULT_LISTEN}, loopback only] (env CORRAL_DASHBOARD_LISTEN)")
    p.add_argument("--token-file", default=env("CORRAL_DASHBOARD_TOKEN_FILE"), metavar="FILE",
                   help="enable actions: the operator token is this file's first line "
                   "(at least 8 characters); without it the page is read-only "
                   "(env CORRAL_DASHBOARD_TOKEN_FILE)")
    p.add_argument("--curve-server-key", default=env("CORRAL_CURVE_SERVER_KEY"),
                   metavar="FILE", help="CurveZMQ: the supervisor's NAME.key, when its control "
                   "endpoint is protected (--control-keys) (env CORRAL_CURVE_SERVER_KEY)")
    p.add_argument("--curve-secret-key", default=env("CORRAL_CURVE_SECRET_KEY"),
                   metavar="FILE", help="CurveZMQ: the dashboard's NAME.key_secret (its "
                   "NAME.key in the supervisor's --control-keys) (env CORRAL_CURVE_SECRET_KEY)")
    p.add_argument("--timeout", type=float, default=3.0, metavar="SECONDS",
                   help="seconds to wait for a supervisor's answer (per endpoint) [default: 3]")
    p.add_argument("--events-every", type=float, default=1.0, metavar="SECONDS",
                   help="how often the change feed is asked [default: 1]")
    p.add_argument("--status-every", type=float, default=2.0, metavar="SECONDS",
                   help="how often the status is asked [default: 2]")
    p.add_argument("--listing-budget", type=float, default=0.01, metavar="SHARE",
                   help="share of the supervisor's time the complete worker listings may "
                   "take; they are paced by their own cost [default: 0.01]")
    p.add_argument("--log-level", default=env("CORRAL_LOG_LEVEL", "info"),
                   choices=logs.LEVELS, help="log level [default: info]")
    p.add_argument("--log-json", action=argparse.BooleanOptionalAction, default=None,
                   help="JSON log lines [default: when stderr is not a terminal]")
    return p


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError("listen", f"{text!r} is not HOST:PORT (a port from 1 to 65535)")
    return host.strip("[]"), int(port)


def load(argv: Sequence[str] | None = None) -> DashboardConfig:
    """The configuration from the command line; `ConfigError` with a sentence if unusable."""
    a = parser().parse_args(argv)
    for name in ("timeout", "events_every", "status_every"):
        if not getattr(a, name) > 0:
            raise ConfigError(name, f"--{name.replace('_', '-')} must be above 0")
    if not 0 < a.listing_budget <= 1:
        raise ConfigError("listing_budget", "--listing-budget must be above 0 and at most 1")
    host, port = parse_listen(a.listen)
    curve = None
    if a.curve_server_key or a.curve_secret_key:
        if not (a.curve_server_key and a.curve_secret_key):
            raise ConfigError("curve", "--curve-server-key and --curve-secret-key go together")
        curve = CurveKeys.load(a.curve_server_key, a.curve_secret_key)
    token = auth.load_token(a.token_file) if a.token_file else None
    follow = FollowConfig(events_every=a.events_every, status_every=a.status_every,
                          budget=a.listing_budget)
    return DashboardConfig(parse_endpoints(a.control), host, port, curve, token, a.timeout,
                           a.log_level, a.log_json, follow)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        cfg = load(argv)
    except ConfigError as exc:
        print(f"{PROG}: {exc.message}", file=sys.stderr)
        sys.exit(2)
    logs.configure(cfg.log_level, cfg.log_json)
    try:
        sock = socket.create_server((cfg.host, cfg.port), reuse_port=False)
    except OSError as exc:
        print(f"{PROG}: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}", file=sys.stderr)
        sys.exit(1)
    from .web import serve  # aiohttp: imported only once the arguments are good

    serve(cfg, sock, ControlClient(list(cfg.control), curve=cfg.curve, timeout=cfg.timeout))
