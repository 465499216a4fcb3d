"""`corralctl`: inspect and steer a running supervisor. Its commands come from the verb
registry (supervisor/verbs.py); tables for people, ``-o json`` for scripts."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from typing import Any

import click
import zmq.auth

from corral.common import routemap
from corral.common.errors import ProtocolError
from corral.common.usage import CONTEXT, OneLineErrors

from .client import DEFAULT_CONTROL, ControlFailed, Unreachable, request
from .verbs import VERBS, Verb


@click.group(cls=OneLineErrors, context_settings=CONTEXT)
@click.option("--control", envvar="CORRAL_CONTROL", default=DEFAULT_CONTROL, show_default=True,
              help="the supervisor's control endpoint (env CORRAL_CONTROL)")
@click.option("--timeout", type=float, default=3.0, show_default=True,
              help="seconds to wait for an answer")
@click.option("-o", "--output", type=click.Choice(["table", "json"]), default="table",
              show_default=True, help="tables for people, JSON for scripts")
@click.option("--curve-server-key", envvar="CORRAL_CURVE_SERVER_KEY", metavar="FILE",
              help="CurveZMQ: the supervisor's NAME.key, when its control endpoint is protected "
              "(--control-keys)")
@click.option("--curve-secret-key", envvar="CORRAL_CURVE_SECRET_KEY", metavar="FILE",
              help="CurveZMQ: your NAME.key_secret (its NAME.key in the supervisor's "
              "--control-keys directory)")
@click.pass_context
def main(ctx: click.Context, control: str, timeout: float, output: str,
         curve_server_key: str | None, curve_secret_key: str | None) -> None:
    """Inspect and steer a running corral supervisor.

    Exit status: 0 on success, 1 when the supervisor is unreachable or answers with an error,
    2 for bad usage.
    """
    curve = None
    if curve_server_key or curve_secret_key:
        if not (curve_server_key and curve_secret_key):
            raise click.UsageError("--curve-server-key and --curve-secret-key go together")
        try:
            server, _ = zmq.auth.load_certificate(curve_server_key)
            public, secret = zmq.auth.load_certificate(curve_secret_key)
        except (OSError, ValueError) as exc:
            raise click.UsageError(f"cannot load a key: {exc}") from None
        if not secret:
            raise click.UsageError(f"{curve_secret_key} holds no secret key (.key_secret)")
        curve = (server, public, secret)
    ctx.obj = {"control": control, "timeout": timeout, "output": output, "curve": curve}


def _call(ctx: click.Context, verb: str, args: dict[str, Any]) -> Any:
    o = ctx.obj
    try:
        return request(o["control"], verb, args, o["timeout"], o["curve"])
    except (Unreachable, ControlFailed) as exc:
        click.echo(f"corralctl: {exc}", err=True)
        sys.exit(1)


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()
             for r in [header, *rows]]
    return "\n".join(lines)


def _fmt_status(r: dict[str, Any]) -> str:
    return "\n".join(f"{k:<16}{v}" for k, v in r.items())


def _fmt_workers(r: dict[str, Any]) -> str:
    rows = [[w["id"], w["state"], f"{w['running']:g}/{w['max_load']:g}",
             f"{w['utilization']:.0%}", f"{w['last_report_age_s']:.1f}s", w["address"],
             w.get("conflict") or ""] for w in r["workers"]]
    return _table(rows, ["WORKER", "STATE", "RUNNING", "UTIL", "LAST REPORT", "ADDRESS", "NOTE"])


def _fmt_tasks(r: dict[str, Any]) -> str:
    rows = [[t["task"], ",".join(t["owners"]) or "-", str(t["missing"]) if t["missing"] else "",
             ",".join(t["failing_on"])] for t in r["tasks"]]
    return _table(rows, ["TASK", "OWNERS", "MISSING", "FAILING ON"])


def _fmt_assignments(r: dict[str, Any]) -> str:
    rows = [[t, ", ".join(ws) or "-"] for t, ws in r["assignments"].items()]
    out = f"version {r['version']}\n" + _table(rows, ["TASK", "WORKERS"])
    if r["pending"]:
        out += f"\npending: {', '.join(r['pending'])}"
    return out


def _fmt_map(r: dict[str, Any] | None) -> str:
    if r is None:
        return "up to date"
    rows = [[t, ", ".join(ws) or "-"] for t, ws in sorted(r["tasks"].items())]
    workers = [[w, e["state"], e["serve"]] for w, e in sorted(r["workers"].items())]
    return (f"version {r['version']}\n" + _table(rows, ["TASK", "SERVED BY"]) + "\n\n"
            + _table(workers, ["WORKER", "STATE", "SERVE"]))


def _fmt_route(r: dict[str, Any]) -> str:
    head = f"map version {r['version']}\n"
    if "key" in r:
        head += f"key {r['key']} -> task {r['task']} (hash ring of {r['ring']})\n"
    else:
        head += f"task {r['task']}\n"
    rows = [[o["worker"], o["state"], o["serve"], o["why"]] for o in r["owners"]]
    table = _table(rows, ["OWNER", "STATE", "SERVE", "WHY"]) + "\n" if rows else ""
    return head + table + str(r["verdict"])


FORMATS: dict[str, Callable[[Any], str]] = {
    "status": _fmt_status, "counters": _fmt_status, "workers": _fmt_workers, "tasks": _fmt_tasks,
    "assignments": _fmt_assignments, "map": _fmt_map,
}


def _make_command(verb: Verb) -> click.Command:
    def callback(**kw: Any) -> None:
        ctx = click.get_current_context()
        args = {k: v for k, v in kw.items() if v not in (None, False)}
        result = _call(ctx, verb.name, args)
        if ctx.obj["output"] == "json":
            click.echo(json.dumps(result, indent=2, sort_keys=True))
        else:
            fmt = FORMATS.get(verb.name)
            click.echo(fmt(result) if fmt else ", ".join(f"{k}: {v}" for k, v in result.items()))

    params: list[click.Parameter] = []
    for a in verb.args:
        if a.positional:
            params.append(click.Argument([a.name], required=a.required))
        elif a.kind is bool:
            params.append(click.Option([f"--{a.name}"], is_flag=True, help=a.help))
        elif a.kind is int:
            params.append(click.Option([f"--{a.name.replace('_', '-')}", a.name], type=int,
                                       help=a.help))
        else:
            params.append(click.Option([f"--{a.name}"], help=a.help))
    return click.Command(verb.name, callback=callback, params=params, help=verb.help + ".")


for _verb in VERBS.values():
    main.add_command(_make_command(_verb))


@main.command()
@click.argument("task", required=False)
@click.option("--key", help="a request key: the task is the key's on the hash ring of tasks")
@click.pass_context
def route(ctx: click.Context, task: str | None, key: str | None) -> None:
    """Where a request for TASK (or for --key KEY) would go, and why, by the current map.

    A client also avoids owners it has found refusing or at its flow-control limit, which
    only it knows."""
    if (task is None) == (key is None):
        raise click.UsageError("give a TASK or --key KEY (one of them)")
    try:
        result = routemap.explain(routemap.parse(_call(ctx, "map", {})), task=task, key=key)
    except (LookupError, ProtocolError) as exc:
        click.echo(f"corralctl: {exc.args[0] if exc.args else exc}", err=True)
        sys.exit(1)
    if ctx.obj["output"] == "json":
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(_fmt_route(result))


@main.command()
@click.option("--interval", type=float, default=2.0, show_default=True, help="seconds between")
@click.option("--count", type=int, default=0, help="stop after this many refreshes (0: never)")
@click.pass_context
def watch(ctx: click.Context, interval: float, count: int) -> None:
    """Refresh status and workers until interrupted."""
    n = 0
    try:
        while True:
            status = _call(ctx, "status", {})
            workers = _call(ctx, "workers", {})
            if sys.stdout.isatty():
                click.clear()
            click.echo(_fmt_status(status) + "\n\n" + _fmt_workers(workers) + "\n")
            n += 1
            if count and n >= count:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
