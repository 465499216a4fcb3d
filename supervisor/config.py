"""The supervisor's configuration: every key once, with its default and its check.

Flags beat ``CORRAL_*`` environment variables, which beat the TOML file (``--config``), which
beats the default. `load` raises `ConfigError` (the CLI prints it and exits 2).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from corral.cli.files import read_file
from corral.cli.logs import LEVELS
from corral.cli.settings import Setting, at_least, between, positive, resolve
from corral.common.errors import ConfigError
from corral.common.placement import LEAST_UTILIZED, PREFER, SPREADS, STRATEGIES

SETTINGS: tuple[Setting, ...] = (
    Setting("bind", "endpoint", "tcp://127.0.0.1:7760", "where workers connect (ZeroMQ "
            "endpoint); an address other hosts reach needs --authorized-keys or --insecure"),
    Setting("control", "endpoint", "tcp://127.0.0.1:7761", "where corralctl connects; an "
            "address other hosts reach needs --control-keys or --insecure"),
    Setting("insecure", "bool", False, "allow --bind or --control on an address other hosts "
            "reach without Curve keys (anyone who reaches it may report as any worker, or "
            "drain and stop: logged at start)"),
    Setting(
        "tasks", "str", "",
        "task source: file:PATH (lines, JSON or TOML; re-read when it changes), cmd:COMMAND, "
        "http(s)://URL, etcd://HOST:PORT[,HOST:PORT…]/PREFIX (one key per task, watched), "
        "python:module:function", metavar="SOURCE",
    ),
    Setting("replicas", "int", 1, "how many workers run each task", between(1, 1000)),
    Setting("strategy", "str", LEAST_UTILIZED, "placement strategy", choices=STRATEGIES),
    Setting("zone_spread", "str", PREFER, "prefer: replicas in distinct zones as far as the live "
            "ones allow; require: never two in one zone, the rest wait pending", choices=SPREADS),
    Setting("warmup", "seconds", 30.0, "listen and rebuild from worker reports before assigning"),
    Setting("expect_workers", "int", 0, "end warm-up early once this many workers reported "
            "(0: wait the whole warm-up)", between(0, 10_000_000)),
    Setting("query_interval", "seconds", 1800.0, "how often to re-read the task source",
            positive),
    Setting("query_retry", "seconds", 10.0, "retry delay after the first query failed", positive),
    Setting("tick", "seconds", 0.5, "timer wheel tick (timeouts fire at most this late)",
            positive),
    Setting("lease", "seconds", 10.0, "worker lease: a silent worker stops its tasks after it",
            positive),
    Setting("lease_margin", "seconds", 2.0,
            "extra wait before a silent worker's tasks are given to others"),
    Setting("renew_interval", "seconds", 0.0,
            "answer a worker's report at least this often (0: lease / 5; workers report "
            "every lease / 2 by default, so each report is answered)"),
    Setting("report_interval", "seconds", 1.0,
            "the workers' report interval (reconciliation waits this long)", positive),
    Setting("rebalance_tolerance", "number", 0.0,
            "the balance criterion's τ: a move is made while it lowers the larger "
            "utilization by more than this (0: on equal workers, loads within one)",
            between(0, 1)),
    Setting("move_budget", "int", 20, "most tasks one rebalance event moves",
            between(0, 10_000_000)),
    Setting("settle", "seconds", 1.0, "a worker arriving while replicas wait for a place opens "
            "a window this long: placing waits for the workers arriving in it and spreads over "
            "them all (0: place at once)", between(0, 60)),
    Setting("max_failures", "int", 3,
            "consecutive failures of a task on a worker before it moves elsewhere",
            between(1, 1_000_000)),
    Setting("failure_cooldown", "seconds", 300.0,
            "how long a task stays off a worker it kept failing on (or did not start)",
            positive),
    Setting("start_timeout", "seconds", 60.0,
            "a task a worker was given and does not report running after this long moves "
            "elsewhere, and stays off that worker for --failure-cooldown", positive),
    Setting("fresh_ids", "int", 64,
            "new worker ids one connection may bring at once (then this many a minute); a "
            "flood of made-up ids is dropped and counted", at_least(1)),
    Setting("source_timeout", "seconds", 30.0, "timeout of a cmd: or http: task query",
            positive),
    Setting("allow_empty", "bool", False, "let an empty task list remove every task"),
    Setting("metrics", "hostport", "", "serve Prometheus metrics on HOST:PORT",
            metavar="HOST:PORT"),
    Setting("state_file", "str", "", "where the epoch is kept "
            "[default: $XDG_STATE_HOME/corral/supervisor.epoch]", metavar="PATH"),
    Setting("forget_after", "seconds", 3600.0, "drop an inactive worker from the registry after",
            positive),
    Setting("curve_secret_key", "str", "", "CurveZMQ: this supervisor's NAME.key_secret file "
            "(with --authorized-keys and/or --control-keys)",
            metavar="FILE"),
    Setting("authorized_keys", "str", "", "CurveZMQ: directory of the workers' NAME.key files; "
            "a worker may report only as NAME", metavar="DIR"),
    Setting("control_keys", "str", "", "CurveZMQ on the control endpoint too: directory of the "
            "NAME.key files of those who may use corralctl (needs --curve-secret-key; "
            "with or without --authorized-keys)",
            metavar="DIR"),
    Setting("ha", "str", "", "high availability: etcd://HOST:PORT[,HOST:PORT…]; the elected "
            "leader acts, standbys keep their view warm", metavar="ETCD"),
    Setting("ha_key", "str", "/corral/leader", "HA: the etcd key that names the leader"),
    Setting("ha_ttl", "seconds", 3.0, "HA: the leader's etcd lease; a standby takes over about "
            "this long after the leader stops", at_least(2)),
    Setting("name", "str", "", "this supervisor's name in corralctl status and etcd "
            "[default: HOST:PORT of --bind]"),
    Setting("log_level", "str", "info", "log level", choices=LEVELS),
    Setting("log_json", "bool", None, "JSON log lines (default: when stderr is not a terminal)"),
)


@dataclass(frozen=True)
class SupervisorConfig:
    bind: str = "tcp://127.0.0.1:7760"
    control: str = "tcp://127.0.0.1:7761"
    insecure: bool = False
    tasks: str = ""
    replicas: int = 1
    strategy: str = LEAST_UTILIZED
    zone_spread: str = PREFER
    warmup: float = 30.0
    expect_workers: int = 0
    query_interval: float = 1800.0
    query_retry: float = 10.0
    tick: float = 0.5
    lease: float = 10.0
    lease_margin: float = 2.0
    renew_interval: float = 0.0
    report_interval: float = 1.0
    rebalance_tolerance: float = 0.0
    move_budget: int = 20
    settle: float = 1.0
    max_failures: int = 3
    failure_cooldown: float = 300.0
    start_timeout: float = 60.0
    fresh_ids: int = 64
    source_timeout: float = 30.0
    allow_empty: bool = False
    metrics: str = ""
    state_file: str = ""
    forget_after: float = 3600.0
    curve_secret_key: str = ""
    authorized_keys: str = ""
    control_keys: str = ""
    ha: str = ""
    ha_key: str = "/corral/leader"
    ha_ttl: float = 3.0
    name: str = ""
    log_level: str = "info"
    log_json: bool | None = None
    notes: tuple[str, ...] = ()  # what `load` changed and why, for the log at start

    def exposed(self) -> list[str]:
        """What an endpoint on an address other hosts reach, without Curve, lets anyone who
        reaches it do (empty when nothing is exposed)."""
        out = []
        if not local(self.bind) and not self.authorized_keys:
            out.append(f"{self.bind}: anyone who reaches it may report as any worker")
        if not local(self.control) and not self.control_keys:
            out.append(f"{self.control}: anyone who reaches it may drain workers, change "
                       "what runs and stop the supervisor")
        return out

    @property
    def renew_every(self) -> float:
        return self.renew_interval if self.renew_interval > 0 else self.lease / 5

    def epoch_path(self) -> Path:
        if self.state_file:
            return Path(self.state_file)
        base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        return Path(base) / "corral" / "supervisor.epoch"


def load(
    flags: Mapping[str, Any], env: Mapping[str, str], config_path: str | None
) -> SupervisorConfig:
    """Resolve flags, environment and file into a checked config."""
    file_values = read_file(config_path) if config_path else {}
    values = resolve(SETTINGS, flags, env, file_values, config_path or "config file")
    if not values["tasks"]:
        raise ConfigError("tasks", "a task source is required (--tasks SOURCE)")
    if values["renew_interval"] and values["renew_interval"] >= values["lease"]:
        raise ConfigError("renew_interval", "must be shorter than the lease")
    if values["ha"]:
        from .ha import parse_endpoints

        parse_endpoints(values["ha"])
        if values["lease"] <= values["ha_ttl"] + values["tick"]:
            raise ConfigError("lease", "with --ha it must be longer than --ha-ttl + --tick, so "
                                       "a failover ends before any worker's lease does")
    # Curve protects either endpoint or both; each needs the supervisor's own key pair.
    for key in ("authorized_keys", "control_keys"):
        if values[key] and not values["curve_secret_key"]:
            raise ConfigError(key, f"--{key.replace('_', '-')} needs --curve-secret-key (the "
                                   "supervisor's key pair)")
    if values["curve_secret_key"] and not (values["authorized_keys"] or values["control_keys"]):
        raise ConfigError("curve_secret_key", "--curve-secret-key protects nothing alone: give "
                          "--authorized-keys (the worker endpoint), --control-keys (the control "
                          "endpoint) or both")
    notes = []
    # A warm-up must hear the fleet: at least one report interval of the workers (they report
    # every half lease by default), unless --expect-workers ends it once all have reported.
    floor = max(values["report_interval"], values["lease"] / 2)
    if values["warmup"] < floor:
        notes.append(f"--warmup {values['warmup']:g} raised to {floor:g} s: the workers report "
                     f"every {floor:g} s (half the lease), and a shorter warm-up ends before "
                     "it has heard them all (a restart would then move tasks that run); "
                     "--expect-workers still ends it as soon as that many have reported")
        values["warmup"] = floor
    values["notes"] = tuple(notes)
    cfg = SupervisorConfig(**values)
    exposed = cfg.exposed()
    if exposed and not cfg.insecure:
        key = "bind" if not local(cfg.bind) and not cfg.authorized_keys else "control"
        raise ConfigError(key, f"{exposed[0]}; protect it with Curve keys "
                          f"(--{'authorized' if key == 'bind' else 'control'}-keys), bind it "
                          "to loopback, or accept that with --insecure")
    return cfg


def local(endpoint: str) -> bool:
    """Whether only this host can reach ``endpoint``: a loopback address, ipc:// or inproc://.

    >>> local("tcp://127.0.0.1:7760"), local("tcp://[::1]:7760"), local("tcp://0.0.0.0:7760")
    (True, True, False)
    """
    if not endpoint.startswith("tcp://"):
        return True
    host = endpoint[len("tcp://"):].rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name or an interface: other hosts may reach it
        return False
