"""`corralctl` starts a Python process per command: what it imports is its start-up time."""

from __future__ import annotations

import subprocess
import sys


def test_corralctl_does_not_import_the_router_until_asked() -> None:
    code = ("import sys; import corral.supervisor.ctl; "
            "assert 'corral.client.router' not in sys.modules, 'router imported'; "
            "from corral.client import Router, RouterConfig; "
            "assert Router.__module__ == 'corral.client.router' and RouterConfig")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr


def test_an_unknown_name_is_an_attribute_error() -> None:
    import corral.client

    try:
        corral.client.NoSuchThing  # type: ignore[attr-defined]  # noqa: B018
    except AttributeError as exc:
        assert "NoSuchThing" in str(exc)
    else:
        raise AssertionError("no AttributeError")


def test_corralctl_loads_the_verb_table_without_what_the_verbs_run_with() -> None:
    heavy = ["corral.supervisor.views", "corral.supervisor.queries", "corral.supervisor.events",
             "corral.common.routemap", "corral.common.placement", "zmq.auth"]
    code = ("import sys; import corral.supervisor.ctl; "
            f"print([m for m in {heavy!r} if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_page_cap_the_verbs_announce_is_the_one_views_apply() -> None:
    from corral.supervisor import verbs, views

    assert views.MAX_PAGE == verbs.MAX_PAGE
    assert f"capped at {verbs.MAX_PAGE}" in verbs.VERBS["workers"].args[0].help
