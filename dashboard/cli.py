"""`corral-dashboard`: parse, set up logging, serve the page until SIGTERM or SIGINT.

A thin click command like the other CLIs: flags, then ``CORRAL_*`` environment variables, then
the defaults shown in ``--help``. Usage errors are one line and exit status 2; a port that
cannot be bound, exit status 1. `load` turns a command line into the checked `DashboardConfig`.
"""

from __future__ import annotations

import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import click

from corral.cli import logs
from corral.cli.usage import CONTEXT, OneLineCommand
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
    hosts: auth.Hosts


@click.command(PROG, cls=OneLineCommand, context_settings=CONTEXT, help=DESCRIPTION)
@click.option("--control", envvar="CORRAL_CONTROL", default=DEFAULT_CONTROL,
              metavar="ENDPOINT[,ENDPOINT…]",
              help="the supervisor's control endpoint; with HA, every supervisor's, separated by "
              f"commas: the leader is followed [default: {DEFAULT_CONTROL}] (env CORRAL_CONTROL)")
@click.option("--listen", envvar="CORRAL_DASHBOARD_LISTEN", default=DEFAULT_LISTEN,
              metavar="HOST:PORT", help=f"where the page is served [default: {DEFAULT_LISTEN}, "
              "loopback only] (env CORRAL_DASHBOARD_LISTEN)")
@click.option("--allow-host", "allow_host", multiple=True, metavar="NAME",
              help="a host name browsers may use for this dashboard, repeatable (a TLS proxy's "
              "name, this host's name); the --listen address (and localhost on loopback) is "
              "always allowed; any other Host is refused (DNS rebinding)")
@click.option("--token-file", envvar="CORRAL_DASHBOARD_TOKEN_FILE", metavar="FILE",
              help="enable actions: the operator token is this file's first line (at least 8 "
              "characters); without it the page is read-only [default: none] "
              "(env CORRAL_DASHBOARD_TOKEN_FILE)")
@click.option("--curve-server-key", envvar="CORRAL_CURVE_SERVER_KEY", metavar="FILE",
              help="CurveZMQ: the supervisor's NAME.key, when its control endpoint is protected "
              "(--control-keys) [default: none] (env CORRAL_CURVE_SERVER_KEY)")
@click.option("--curve-secret-key", envvar="CORRAL_CURVE_SECRET_KEY", metavar="FILE",
              help="CurveZMQ: the dashboard's NAME.key_secret (its NAME.key in the supervisor's "
              "--control-keys) [default: none] (env CORRAL_CURVE_SECRET_KEY)")
@click.option("--timeout", type=float, default=3.0, metavar="SECONDS",
              help="seconds to wait for a supervisor's answer (per endpoint) [default: 3]")
@click.option("--events-every", type=float, default=1.0, metavar="SECONDS",
              help="how often the change feed is asked [default: 1]")
@click.option("--status-every", type=float, default=2.0, metavar="SECONDS",
              help="how often the status is asked [default: 2]")
@click.option("--listing-budget", type=float, default=0.01, metavar="SHARE",
              help="share of the supervisor's time the complete worker listings may take; they "
              "are paced by their own cost [default: 0.01]")
@click.option("--log-level", envvar="CORRAL_LOG_LEVEL", type=click.Choice(logs.LEVELS),
              default="info", help="log level [default: info] (env CORRAL_LOG_LEVEL)")
@click.option("--log-json/--no-log-json", default=None,
              help="JSON log lines [default: when stderr is not a terminal]")
def main(**options: Any) -> None:
    try:
        cfg = _checked(options)
    except ConfigError as exc:
        click.echo(f"{PROG}: {exc.message}", err=True)
        sys.exit(2)
    logs.configure(cfg.log_level, cfg.log_json)
    try:
        from .web import serve  # aiohttp: imported only once the arguments are good
    except ModuleNotFoundError as exc:  # a broken install: one line, not a traceback
        click.echo(f"{PROG}: cannot start: the module {exc.name!r} is missing (aiohttp comes "
                   "with corral: pip install --force-reinstall corral)", err=True)
        sys.exit(1)
    try:
        sock = socket.create_server((cfg.host, cfg.port), reuse_port=False)
    except OSError as exc:
        click.echo(f"{PROG}: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}", err=True)
        sys.exit(1)

    serve(cfg, sock, ControlClient(list(cfg.control), curve=cfg.curve, timeout=cfg.timeout))


def parse_listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) <= 65535:
        raise ConfigError("listen", f"{text!r} is not HOST:PORT (a port from 1 to 65535)")
    return host.strip("[]"), int(port)


def load(argv: Sequence[str] | None = None) -> DashboardConfig:
    """The configuration from the command line; `ConfigError` with a sentence if unusable
    (click's `UsageError` for a flag it cannot parse)."""
    args = sys.argv[1:] if argv is None else list(argv)
    with main.make_context(PROG, args) as ctx:
        return _checked(ctx.params)


def _checked(a: dict[str, Any]) -> DashboardConfig:
    """The parsed options as a `DashboardConfig`, after the checks click cannot make."""
    for name in ("timeout", "events_every", "status_every"):
        if not 0 < a[name] <= 3600:
            raise ConfigError(name, f"--{name.replace('_', '-')} must be above 0 and at most "
                                    "3600")
    if not 0 < a["listing_budget"] <= 1:
        raise ConfigError("listing_budget", "--listing-budget must be above 0 and at most 1")
    host, port = parse_listen(a["listen"])
    for name in a["allow_host"]:
        if not name or len(name) > 253 or any(c in name for c in " /:@[]") or \
                not name.isprintable():
            raise ConfigError("allow_host", f"--allow-host {name!r} is not a host name")
    if host in ("0.0.0.0", "::", "") and not a["allow_host"]:
        raise ConfigError("allow_host", f"--listen {a['listen']} answers on every address: "
                          "give --allow-host NAME for each name browsers will use")
    curve = None
    server_key, secret_key = a["curve_server_key"], a["curve_secret_key"]
    if server_key or secret_key:
        if not (server_key and secret_key):
            raise ConfigError("curve", "--curve-server-key and --curve-secret-key go together")
        curve = CurveKeys.load(server_key, secret_key)
    token = auth.load_token(a["token_file"]) if a["token_file"] else None
    follow = FollowConfig(events_every=a["events_every"], status_every=a["status_every"],
                          budget=a["listing_budget"])
    return DashboardConfig(parse_endpoints(a["control"]), host, port, curve, token, a["timeout"],
                           a["log_level"], a["log_json"], follow,
                           auth.Hosts.of(host, a["allow_host"]))
