"""`corral-supervisor`: parse, set up logging, call one library function (the daemon)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from corral.cli import logs
from corral.cli.options import click_options
from corral.cli.usage import CONTEXT, OneLineErrors
from corral.common.errors import ConfigError

from . import config as config_mod
from . import curve, fdlimit


@click.group(cls=OneLineErrors, context_settings=CONTEXT)
def main() -> None:
    """The corral supervisor: owns the task list, watches workers, assigns tasks."""


@main.command()
@click.option("--config", "config_path", metavar="FILE",
              help="TOML file with any of the keys below (flags and CORRAL_* env win over it)")
@click_options(config_mod.SETTINGS)
def run(config_path: str | None, **flags: Any) -> None:
    """Run the supervisor daemon.

    It warms up (listens, renews the leases of workers that report, rebuilds the assignment
    from the tasks they already run), then queries the task source and assigns every task,
    then runs on events only: worker reports, timeouts, task queries, control commands.
    Every time value is in seconds and may be fractional. SIGTERM or SIGINT stops it (exit
    status 0); SIGHUP queries the task source now.
    """
    try:
        cfg = config_mod.load(flags, os.environ, config_path)
    except ConfigError as exc:
        click.echo(f"corral-supervisor: configuration error: {exc}", err=True)
        sys.exit(2)
    logs.configure(cfg.log_level, cfg.log_json)
    for note in cfg.notes:
        logs.get("corral.supervisor").warning(note)
    _, files = fdlimit.raise_soft_limit()
    if files < fdlimit.ROOM:
        logs.get("corral.supervisor").warning(
            "few open files allowed: each worker connection takes one; raise LimitNOFILE",
            limit=files)
    # Imported here: the daemon is most of the start-up time, which a bad flag need not pay.
    from .daemon import Daemon
    from .endpoints import BindError

    try:
        daemon = Daemon(cfg)
        code = daemon.run()
    except ConfigError as exc:
        click.echo(f"corral-supervisor: configuration error: {exc}", err=True)
        sys.exit(2)
    except BindError as exc:
        click.echo(f"corral-supervisor: {exc}", err=True)
        sys.exit(1)
    sys.exit(code)


@main.command()
@click.argument("directory", metavar="DIR")
@click.option("--name", help="the key's name: a worker's id, or any name for the supervisor's "
              "own key [default: the host name]")
def keygen(directory: str, name: str | None) -> None:
    """Make a CurveZMQ key pair: DIR/NAME.key (public) and DIR/NAME.key_secret.

    Give a worker its NAME.key_secret and the supervisor's NAME.key; copy the worker's NAME.key
    into the supervisor's --authorized-keys directory. A worker may then report only as NAME.
    """
    try:
        public, secret = curve.keygen(directory, name)
    except ConfigError as exc:
        click.echo(f"corral-supervisor keygen: {exc}", err=True)
        sys.exit(2)
    click.echo(f"wrote {public} and {secret} (mode 0600)")
    if curve.open_to_others(directory):
        click.echo(f"corral-supervisor keygen: note: {directory} is open to other users; "
                   f"keep secret keys in a directory of mode 0700 (chmod 700 {directory})",
                   err=True)
