"""`corralctl` starts a Python process per command: what it imports is its start-up time. It is
a client: it reads the verb table (data, in corral.common.wire) and nothing of the supervisor."""

from __future__ import annotations

import subprocess
import sys


def _imported_by_corralctl(names: list[str]) -> list[str]:
    code = ("import sys; import corral.client.ctl; "
            f"print([m for m in {names!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    return eval(out.stdout)  # a list literal printed just above


def test_corralctl_imports_neither_the_supervisor_nor_the_router_nor_curve() -> None:
    heavy = ["corral.supervisor", "corral.client.router", "corral.common.placement",
             "corral.common.wire.routemap", "zmq.auth"]
    assert _imported_by_corralctl(heavy) == []


def test_the_router_is_imported_on_first_use() -> None:
    from corral.client import Router, RouterConfig

    assert Router.__module__ == "corral.client.router" and RouterConfig


def test_an_unknown_name_is_an_attribute_error() -> None:
    import corral.client

    try:
        corral.client.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_every_verb_in_the_table_has_a_runner_and_no_runner_lacks_a_verb() -> None:
    from corral.common.wire.verbs import VERBS
    from corral.supervisor.verbs import RUNNERS

    assert set(RUNNERS) == set(VERBS)


def test_the_page_cap_the_verbs_announce_is_the_one_views_apply() -> None:
    from corral.common.wire import verbs
    from corral.supervisor import views

    assert views.MAX_PAGE == verbs.MAX_PAGE
    assert f"capped at {verbs.MAX_PAGE}" in verbs.VERBS["workers"].args[0].help
