"""corral.client's names are loaded on first use, and the verb table (data, in corral.common.wire)
is the one the supervisor runs. (What corralctl imports at start-up is checked in a fresh
process: tests/component/test_packaging.py.)"""

from __future__ import annotations


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
