"""Supervisor configuration: precedence, and one clear line with exit status 2 for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.common.errors import ConfigError
from corral.supervisor import config, epochs


def test_precedence_flag_env_file_default(tmp_path: Path) -> None:
    f = tmp_path / "c.toml"
    f.write_text('tasks = "file:x"\nlease = 7\nwarmup = 3\nquery-interval = 9\n')
    cfg = config.load({"lease": "5", "warmup": None}, {"CORRAL_WARMUP": "2.5",
                                                       "CORRAL_LEASE": "6"}, str(f))
    assert cfg.lease == 5.0  # flag
    assert cfg.warmup == 2.5  # env over file
    assert cfg.query_interval == 9.0  # file
    assert cfg.tick == 0.5  # default
    assert cfg.renew_every == 5.0 / 5


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("lease = -3\ntasks = 'file:x'", "lease"),
        ("unknown_key = 1\ntasks = 'file:x'", "unknown_key: unknown key"),
        ("tasks = [", "not valid TOML"),
        ("tasks = 'file:x'\nallow_empty = 'sure'", "allow_empty: expected true or false"),
    ],
)
def test_bad_config_files(tmp_path: Path, text: str, says: str) -> None:
    f = tmp_path / "c.toml"
    f.write_text(text)
    with pytest.raises(ConfigError, match=says):
        config.load({}, {}, str(f))


def test_bad_env_value_names_the_variable() -> None:
    with pytest.raises(ConfigError, match="CORRAL_TICK"):
        config.load({"tasks": "file:x"}, {"CORRAL_TICK": "fast"}, None)


def test_epochs_only_grow_and_survive_restarts(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "epoch"
    assert [epochs.next_epoch(path) for _ in range(3)] == [1, 2, 3]
    epochs.save(path, 10)
    assert epochs.next_epoch(path) == 11
    path.write_text("garbage")
    with pytest.raises(ConfigError, match="not an epoch number"):
        epochs.next_epoch(path)


def test_docs_list_every_setting_verb_and_counter() -> None:
    from corral.supervisor.metrics import COUNTERS
    from corral.supervisor.verbs import VERBS

    text = (Path(__file__).resolve().parents[2] / "docs" / "supervisor.md").read_text()
    missing = [s.flag for s in config.SETTINGS if f"`{s.flag}`" not in text]
    missing += [v for v in VERBS if f"`corralctl {v}" not in text]
    missing += [c for c in COUNTERS if f"`corral_{c}_total`" not in text]
    assert missing == [], f"docs/supervisor.md does not mention {missing}"


def test_a_warm_up_shorter_than_the_workers_report_interval_is_raised_and_says_why() -> None:
    """A restart that hears only part of the fleet moves what runs: the warm-up lasts at least
    one report interval of the workers (half the lease by default)."""
    cfg = config.load({"tasks": "file:t", "warmup": 1.0, "lease": 3.0}, {}, None)
    assert cfg.warmup == 1.5 and len(cfg.notes) == 1 and "raised to 1.5" in cfg.notes[0]
    cfg = config.load({"tasks": "file:t", "warmup": 1.0, "report_interval": 4.0}, {}, None)
    assert cfg.warmup == 5.0  # half the default 10 s lease is the larger
    cfg = config.load({"tasks": "file:t", "warmup": 9.0}, {}, None)
    assert cfg.warmup == 9.0 and cfg.notes == ()


def test_endpoints_bind_loopback_unless_told_otherwise() -> None:
    """Issue 28: the README's by-hand commands bound the unauthenticated worker endpoint on
    every interface. Loopback by default; elsewhere Curve keys or --insecure, which the
    daemon logs (`exposed`)."""
    cfg = config.load({"tasks": "file:x"}, {}, None)
    assert (cfg.bind, cfg.control, cfg.exposed()) == ("tcp://127.0.0.1:7760",
                                                      "tcp://127.0.0.1:7761", [])
    cfg = config.load({"tasks": "file:x", "bind": "tcp://0.0.0.0:7760", "insecure": True}, {},
                      None)
    assert cfg.exposed() == ["tcp://0.0.0.0:7760: anyone who reaches it may report as any "
                             "worker"]
    cfg = config.load({"tasks": "file:x", "bind": "tcp://10.0.0.5:7760",
                       "curve_secret_key": "s", "authorized_keys": "d"}, {}, None)
    assert cfg.exposed() == []
