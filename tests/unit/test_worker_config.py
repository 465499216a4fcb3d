"""The worker's configuration layering and checks, routing ids, backoff delays."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from corral.common.errors import ConfigError
from corral.worker.channel import routing_id
from corral.worker.config import Backoff, LeaseLoss, default_worker_id, load

BASE = {"supervisor": "tcp://127.0.0.1:7760", "handler": "log"}


def flags(**over: Any) -> dict[str, Any]:
    return {**BASE, **over}


def test_documented_defaults() -> None:
    cfg = load(flags(), {})
    assert (cfg.report_interval, cfg.drain_timeout, cfg.stop_grace, cfg.max_load) == (
        None, 30.0, 10.0, 10.0)  # None: half the lease the supervisor grants
    assert cfg.on_lease_loss is LeaseLoss.STOP and cfg.ready_after is None
    assert cfg.worker_id == default_worker_id() and cfg.journal is None


def test_flags_beat_env_beat_file(tmp_path: Path) -> None:
    file = tmp_path / "worker.toml"
    file.write_text('report-interval = 0.25\ndrain_timeout = 7\nid = "from-file"\n'
                    'on-lease-loss = "keep"\n')
    env = {"CORRAL_DRAIN_TIMEOUT": "5.5", "CORRAL_ID": "from-env"}
    cfg = load(flags(id="from-flag"), env, str(file))
    assert cfg.worker_id == "from-flag"
    assert cfg.drain_timeout == 5.5
    assert cfg.report_interval == 0.25
    assert cfg.on_lease_loss is LeaseLoss.KEEP


@pytest.mark.parametrize(("over", "env", "key"), [
    ({"report_interval": "0"}, {}, "report_interval"),          # must be > 0
    ({"report_interval": "soon"}, {}, "report_interval"),
    ({}, {"CORRAL_MAX_LOAD": "-1"}, "max_load"),
    ({"handler": "python:mod"}, {}, "handler"),
    ({"handler": "shell"}, {}, "handler"),
    ({"handler": "exec"}, {}, "exec"),                          # exec needs --exec
    ({"exec": "sleep 1"}, {}, "exec"),                          # and only with exec
    ({"handler": "exec", "exec": "run 'unbalanced"}, {}, "exec"),
    ({"id": "x" * 257}, {}, "id"),
    ({"supervisor": "localhost:7760"}, {}, "supervisor"),
    ({"supervisor": None}, {}, "supervisor"),                   # required
    ({"handler": None}, {}, "handler"),                         # required
    ({"on_lease_loss": "pause"}, {}, "on_lease_loss"),
])
def test_bad_values_raise_one_config_error_naming_the_key(
        over: dict[str, Any], env: dict[str, str], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(flags(**over), env)
    assert err.value.key == key
    assert "\n" not in str(err.value)


def test_unknown_file_key_and_unreadable_file(tmp_path: Path) -> None:
    file = tmp_path / "worker.toml"
    file.write_text("lease = 3\n")
    with pytest.raises(ConfigError) as err:
        load(flags(), {}, str(file))
    assert err.value.key == "lease"
    with pytest.raises(ConfigError) as err:
        load(flags(), {}, str(tmp_path / "missing.toml"))
    assert err.value.key == "config"


def test_fractional_times_everywhere() -> None:
    cfg = load(flags(report_interval="0.05", drain_timeout="0.5", stop_grace="0.2",
                     ready_after="0.3"), {})
    assert (cfg.report_interval, cfg.drain_timeout, cfg.stop_grace, cfg.ready_after) == (
        0.05, 0.5, 0.2, 0.3)


def test_routing_id_is_id_at_incarnation_hex_with_the_id_cut_to_200_bytes() -> None:
    assert routing_id("w1", 0xABC) == b"w1@abc"
    long_id = "é" * 150  # 300 bytes in UTF-8
    rid = routing_id(long_id, 2**63 - 1)
    assert rid == long_id.encode()[:200] + b"@7fffffffffffffff"


def test_backoff_doubles_up_to_its_cap() -> None:
    b = Backoff(base=0.5, cap=4.0)
    assert [b.delay(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert b.delay(10**6) == 4.0


def test_zone_and_labels_from_flags_env_and_file(tmp_path: Path) -> None:
    base = {"supervisor": "tcp://127.0.0.1:7760", "handler": "log"}
    cfg = load({**base, "zone": "eu-1/rack-7", "label": ("gpu=true", "disk=ssd")},
               {"CORRAL_LABELS": "ignored=1"})
    assert cfg.zone == "eu-1/rack-7" and cfg.labels == (("disk", "ssd"), ("gpu", "true"))
    cfg = load(base, {"CORRAL_ZONE": "eu-2", "CORRAL_LABELS": "arch=arm64, gpu=false"})
    assert cfg.zone == "eu-2" and cfg.labels == (("arch", "arm64"), ("gpu", "false"))
    f = tmp_path / "w.toml"
    f.write_text('zone = "us/r1/h3"\n[labels]\ngpu = "true"\n"team.io/owner" = "media"\n')
    cfg = load(base, {}, str(f))
    assert cfg.zone == "us/r1/h3"
    assert cfg.labels == (("gpu", "true"), ("team.io/owner", "media"))
    assert load(base, {}).labels == () and load(base, {}).zone == ""
