"""`corralctl`: inspect and steer a running supervisor. Its commands come from the verb
table (corral.common.wire.verbs); tables for people, ``-o json`` for scripts."""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from typing import Any

import click

from corral.cli.usage import CONTEXT, OneLineErrors
from corral.client.control import DEFAULT_CONTROL, ControlClient, CurveKeys
from corral.client.errors import ControlFailed, Unreachable
from corral.common.errors import ConfigError, ProtocolError
from corral.common.wire.protocol import MAX_UINT
from corral.common.wire.verbs import VERBS, Verb

from .tables import cell, pairs, printable, table


@click.group(cls=OneLineErrors, context_settings=CONTEXT)
@click.option("--control", envvar="CORRAL_CONTROL", default=DEFAULT_CONTROL, show_default=True,
              help="the supervisor's control endpoint; with HA, several separated by commas: "
              "the leader answers (env CORRAL_CONTROL)")
@click.option("--timeout", type=click.FloatRange(0, 3600, min_open=True), default=3.0,
              show_default=True, help="seconds to wait for an answer (per endpoint), above 0 "
              "and at most 3600")
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

    Lists (workers, tasks, assignments) come in pages from the supervisor; without --limit
    corralctl fetches them all. Exit status: 0 on success, 1 when the supervisor is unreachable
    or answers with an error, 2 for bad usage.
    """
    curve = None
    if curve_server_key or curve_secret_key:
        if not (curve_server_key and curve_secret_key):
            raise click.UsageError("--curve-server-key and --curve-secret-key go together")
        try:
            curve = CurveKeys.load(curve_server_key, curve_secret_key)
        except ConfigError as exc:
            raise click.UsageError(exc.message) from None
    try:
        client = ControlClient(control, curve=curve, timeout=timeout)
    except ConfigError as exc:
        raise click.UsageError(f"--control: {exc.message}") from None
    ctx.call_on_close(client.close)
    ctx.obj = {"client": client, "output": output}


def _call(ctx: click.Context, verb: str, args: dict[str, Any]) -> Any:
    try:
        return ctx.obj["client"].call(verb, args)
    except (Unreachable, ControlFailed) as exc:
        click.echo(f"corralctl: {printable(str(exc))}", err=True)
        sys.exit(1)


def _call_all(ctx: click.Context, verb: str, args: dict[str, Any], key: str) -> Any:
    """Every page of a paged list (unless --limit asked for one page)."""
    result = _call(ctx, verb, args)
    if args.get("limit"):
        return result
    while result.get("next") is not None:
        more = _call(ctx, verb, {**args, "after": result["next"]})
        rows = more[key]
        if isinstance(rows, dict):
            result[key].update(rows)
        else:
            result[key].extend(rows)
        result["next"] = more.get("next")
    return result


def _fmt_status(r: dict[str, Any]) -> str:
    return pairs(r)


def _fmt_workers(r: dict[str, Any]) -> str:
    rows = [[w["id"], w["state"], w.get("zone") or "-", f"{w['running']:g}/{w['max_load']:g}",
             percent(w["utilization"]), f"{w['last_report_age_s']:.1f}s", w["address"],
             w.get("conflict") or ""] for w in r["workers"]]
    out = table(rows, ["WORKER", "STATE", "ZONE", "RUNNING", "UTIL", "LAST REPORT", "ADDRESS",
                       "NOTE"])
    return _warmup(r) + out + _more(r)


def percent(u: float) -> str:
    """A utilization as a whole percent, halves rounded up: the dashboard rounds the same way
    (1/40 is 3 % on both)."""
    return f"{math.floor(u * 100 + 0.5)}%"


def _more(r: dict[str, Any]) -> str:
    return f"\n… more after {cell(r['next'])} (--after {cell(r['next'])})" if r.get("next") \
        else ""


def _warmup(r: dict[str, Any]) -> str:
    """Why a listing is empty while the supervisor warms up (it assigns nothing yet)."""
    w = r.get("warmup")
    if not w:
        return ""
    expected = f" of {w['expected']} expected" if w.get("expected") else ""
    return (f"warming up: {w['workers']}{expected} workers reported, ends in "
            f"{w['ends_in_s']:.0f} s (nothing is assigned before)\n")


def _fmt_tasks(r: dict[str, Any]) -> str:
    rows = [[t["task"], ",".join(t["owners"]) or "-",
             ",".join(str(t["tokens"].get(o, "-")) for o in t["owners"]) or "-",
             str(t["missing"]) if t["missing"] else "",
             t.get("pending_reason") or "", ",".join(t["failing_on"]),
             _last_error(t.get("last_error"), r.get("now"))] for t in r["tasks"]]
    return _warmup(r) + table(rows, ["TASK", "OWNERS", "TOKENS", "MISSING", "WHY PENDING",
                                     "FAILING ON", "LAST ERROR"]) + _more(r)


def _last_error(e: dict[str, Any] | None, now: float | None) -> str:
    """A task's last failure: where, how long ago, and what."""
    if not e:
        return ""
    ago = f" {now - e['t']:.0f}s ago" if now is not None else ""
    return f"{e['worker']}{ago}: {e['error']}"


def _fmt_assignments(r: dict[str, Any]) -> str:
    rows = [[t, ", ".join(ws) or "-"] for t, ws in r["assignments"].items()]
    out = _warmup(r) + f"version {r['version']}\n" + table(rows, ["TASK", "WORKERS"])
    if r["pending"]:
        out += f"\npending: {cell(r['pending'])}"
    return out + _more(r)


def _fmt_map(r: dict[str, Any] | None) -> str:
    if r is None:
        return "up to date"
    rows = [[t, ", ".join(ws) or "-"] for t, ws in sorted(r["tasks"].items())]
    workers = [[w, e["state"], e["serve"]] for w, e in sorted(r["workers"].items())]
    return (f"version {r['version']}\n" + table(rows, ["TASK", "SERVED BY"]) + "\n\n"
            + table(workers, ["WORKER", "STATE", "SERVE"]))


def _fmt_route(r: dict[str, Any]) -> str:
    head = f"map version {r['version']}\n"
    if "key" in r:
        head += f"key {cell(r['key'])} -> task {cell(r['task'])} (hash ring of {r['ring']})\n"
    else:
        head += f"task {cell(r['task'])}\n"
    rows = [[o["worker"], o["state"], o["serve"], o["why"]] for o in r["owners"]]
    owners = table(rows, ["OWNER", "STATE", "SERVE", "WHY"]) + "\n" if rows else ""
    return head + owners + cell(r["verdict"])


def _fmt_events(r: dict[str, Any]) -> str:
    lines = [f"… {r['missed']} events missed (the feed holds the newest "
             f"{r['last'] - r['first'] + 1})"] if r.get("missed") else []
    lines += [_fmt_event(e, r["now"]) for e in r["events"]]
    lines.append(f"cursor {r['cursor']} (--after {r['cursor']} for what comes next)")
    return "\n".join(lines)


def _fmt_done(r: Any) -> str:
    """What a verb that acts answers: its fields, one a line."""
    return pairs(r) if isinstance(r, dict) else cell(r)


PAGED = {"workers": "workers", "tasks": "tasks", "assignments": "assignments"}
FORMATS: dict[str, Callable[[Any], str]] = {
    "status": _fmt_status, "counters": _fmt_status, "workers": _fmt_workers, "tasks": _fmt_tasks,
    "assignments": _fmt_assignments, "map": _fmt_map, "events": _fmt_events,
}
# More than the verb table's one line, where a field needs its meaning explained.
DETAILS = {
    "status": """\b
balanced       the balance criterion holds now: no single move of a replica to a
               worker that may take it would lower the larger of the two
               utilizations (docs/supervisor.md, "Balance criterion"); null until
               the supervisor runs
moves_planned  the moves the remaining rebalance passes would make (0 when balanced)
rebalancing    a rebalance pass is scheduled: something changed since the last one
warmup         while warming up: workers reported, expected, seconds left
tasks_failing  tasks failing on some worker (corralctl tasks: LAST ERROR says why)
source_error   the task source's last failure and since when (the last good list
               stays); null when its last read was good""",
}


def _make_command(verb: Verb) -> click.Command:
    def callback(**kw: Any) -> None:
        ctx = click.get_current_context()
        args = {k: v for k, v in kw.items() if v not in (None, False)}
        key = PAGED.get(verb.name)
        result = (_call_all(ctx, verb.name, args, key) if key else
                  _call(ctx, verb.name, args))
        if ctx.obj["output"] == "json":
            click.echo(json.dumps(_as_json(verb.name, result), indent=2, sort_keys=True))
        else:
            click.echo(FORMATS.get(verb.name, _fmt_done)(result))

    params: list[click.Parameter] = []
    for a in verb.args:
        if a.positional:
            params.append(click.Argument([a.name], required=a.required))
        elif a.kind is bool:
            params.append(click.Option([f"--{a.name}"], is_flag=True, help=a.help))
        elif a.kind is int:
            params.append(click.Option([f"--{a.name.replace('_', '-')}", a.name],
                                       type=click.IntRange(min=a.minimum, max=MAX_UINT),
                                       help=a.help))
        else:
            params.append(click.Option([f"--{a.name}"], help=a.help))
    text = verb.help + "." + (f"\n\n{DETAILS[verb.name]}" if verb.name in DETAILS else "")
    return click.Command(verb.name, callback=callback, params=params, help=text)


def _as_json(verb: str, result: Any) -> Any:
    """JSON for scripts: a task's spec travels as canonical JSON text (the wire's check of
    plain values allows no empty keys); scripts get it as the object it is."""
    if verb == "tasks":
        for t in result["tasks"]:
            if isinstance(t.get("spec"), str):
                t["spec"] = json.loads(t["spec"])
    return result


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
    from corral.common.wire import routemap  # only this command reads a map (and its ring)

    from .routes import explain

    try:
        result = explain(routemap.parse(_call(ctx, "map", {})), task=task, key=key)
    except (LookupError, ProtocolError) as exc:
        click.echo(f"corralctl: {printable(str(exc.args[0] if exc.args else exc))}", err=True)
        sys.exit(1)
    if ctx.obj["output"] == "json":
        click.echo(json.dumps(result, indent=2, sort_keys=True))
    else:
        click.echo(_fmt_route(result))
    if not result["goes_to"]:  # a request for it would fail: say so in the exit status
        sys.exit(1)


def _fmt_event(e: dict[str, Any], now: float) -> str:
    fields = " ".join(f"{cell(k)}={cell(v)}" for k, v in e.items()
                      if k not in ("seq", "t", "kind") and v not in (None, ""))
    return f"{e['seq']:>7}  {now - e['t']:7.1f}s ago  {cell(e['kind']):<10} {fields}"


@main.command()
@click.option("--interval", type=click.FloatRange(0, 3600, min_open=True), default=1.0,
              show_default=True, help="seconds between asks for new events (at most 3600)")
@click.option("--count", type=click.IntRange(0, MAX_UINT), default=0,
              help="stop after this many asks (0: never)")
@click.option("--kind", multiple=True, help="only events of this kind (repeatable): join, "
              "timeout, move, handoff, rebalance, tasks, role, refused, …")
@click.pass_context
def watch(ctx: click.Context, interval: float, count: int, kind: tuple[str, ...]) -> None:
    """Follow the supervisor's change feed: joins, timeouts, moves and why, hand-offs, task
    lists, HA role changes, refusals — as they happen (newest last)."""
    n, cursor = 0, None
    try:
        while True:
            args: dict[str, Any] = {} if cursor is None else {"after": cursor}
            page = _call(ctx, "events", args)
            if page["missed"]:
                click.echo(f"… {page['missed']} events missed (the feed holds the newest "
                           f"{page['last'] - page['first'] + 1})")
            for e in page["events"]:
                if not kind or e["kind"] in kind:
                    if ctx.obj["output"] == "json":
                        click.echo(json.dumps(e, sort_keys=True))
                    else:
                        click.echo(_fmt_event(e, page["now"]))
            cursor = page["cursor"]
            n += 1
            if count and n >= count:
                return
            time.sleep(interval)
    except KeyboardInterrupt:
        return
