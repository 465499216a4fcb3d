"""`corral-worker`: the worker agent's command line. It parses, sets up logging, builds the
handler and hands over to `WorkerLoop` (docs/worker.md has the whole story)."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from corral.cli import logs
from corral.cli.options import click_options
from corral.cli.usage import CONTEXT, OneLineErrors
from corral.common.errors import ConfigError

from . import config as worker_config
from .events import EXIT_CONFIG
from .handlers import load_handler
from .journal import Journal
from .loop import WorkerLoop
from .runner import CallRunner, Runner, build
from .serving import Service


@click.group(cls=OneLineErrors, context_settings=CONTEXT)
def main() -> None:
    """The corral worker agent: reports to a supervisor and runs the tasks it is given."""


@main.command()
@click.option("--config", "config_file", metavar="FILE", default=None,
              help="a TOML file of the same keys (flags and CORRAL_* variables win over it)")
@click.option("--label", "label", multiple=True, metavar="KEY=VALUE",
              help="a label of this worker, repeatable (env CORRAL_LABELS=k=v,k2=v2; TOML: a "
                   "[labels] table); tasks may require labels")
@click_options(worker_config.SETTINGS)
def run(config_file: str | None, **flags: Any) -> None:
    """Run the worker agent until it is told to stop.

    It reports its state to the supervisor every --report-interval, runs the tasks the
    supervisor gives it, and gives them up by itself if its lease lapses. SIGTERM (or a first
    SIGINT) drains it: it takes nothing new and exits once its tasks have been moved away, or
    after --drain-timeout; a second SIGTERM/SIGINT stops its tasks and exits at once. SIGUSR2
    hands exec tasks over: they keep running, and the next agent with this id on this host
    adopts them (other handlers drain, as on SIGTERM).

    \b
    Exit status: 0 stopped normally (or handed over), 1 unexpected error (logged),
    2 configuration error (one line on stderr), 3 refused by the supervisor (e.g. its id is in
    use) or another agent with this id runs on this host, 4 the lease keeper of exec tasks
    died (the tasks were stopped first).
    """
    try:
        cfg = worker_config.load(flags, os.environ, config_file)
        logs.configure(cfg.log_level)  # before the handler is built: its constructor may log
        runner, service = _build(cfg)
        journal = _open_journal(cfg)
    except ConfigError as exc:
        click.echo(f"corral-worker: configuration error: {exc}", err=True)
        sys.exit(EXIT_CONFIG)
    sys.exit(WorkerLoop(cfg, runner, journal, service=service).run())


def _build(cfg: worker_config.WorkerConfig) -> tuple[Runner, Service | None]:
    """The runner, and with --serve the handler's serving methods (config.load has refused
    --serve with exec)."""
    if cfg.serve is None:
        return build(cfg), None
    handler = load_handler(cfg.handler)
    return CallRunner(handler), Service.of(handler)


def _open_journal(cfg: worker_config.WorkerConfig) -> Journal | None:
    if cfg.journal is None:
        return None
    try:
        return Journal(cfg.journal, cfg.worker_id)
    except OSError as exc:
        raise ConfigError("journal", f"cannot open {cfg.journal}: {exc.strerror}") from None
