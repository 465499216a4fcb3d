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
