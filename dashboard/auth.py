"""Who may act: the operator token, sent in a header (docs/dashboard.md, "Security").

Actions (drain, undrain, query now) exist only when the dashboard was started with
``--token-file``, and each request must carry that token in the ``X-Corral-Token`` header (or
``Authorization: Bearer …``). A header, not a cookie: a page on another site can make the
browser send its cookies, but not a header it cannot read, so actions are safe from cross-site
request forgery. A request whose ``Origin`` names another host is refused too.

    >>> check({"X-Corral-Token": "s3cret"}, "s3cret", "127.0.0.1:7780")
    >>> check({"X-Corral-Token": "nope"}, "s3cret", "127.0.0.1:7780")
    'wrong token'
    >>> check({}, None, "127.0.0.1:7780")
    'this dashboard is read-only (started without --token-file)'
    >>> check({"X-Corral-Token": "s3cret", "Origin": "http://evil.example"}, "s3cret",
    ...       "127.0.0.1:7780")
    'cross-origin request from http://evil.example'
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from corral.common.errors import ConfigError

HEADER = "X-Corral-Token"


def load_token(path: str) -> str:
    """The token in ``path`` (its first line); a `ConfigError` sentence when it is unusable."""
    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as exc:
        raise ConfigError("token_file", f"cannot read {path}: {exc.strerror}") from None
    except UnicodeDecodeError:
        raise ConfigError("token_file", f"{path} is not UTF-8 text") from None
    if len(token) < 8:
        raise ConfigError("token_file", f"{path}: the token must be at least 8 characters "
                          "on its first line")
    return token


def presented(headers: Mapping[str, str]) -> str | None:
    token = headers.get(HEADER)
    if token:
        return token
    auth = headers.get("Authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def check(headers: Mapping[str, str], token: str | None, host: str) -> str | None:
    """None when the request may act; otherwise why not (the 403's sentence)."""
    if token is None:
        return "this dashboard is read-only (started without --token-file)"
    origin = headers.get("Origin")
    if origin and origin != "null" and urlsplit(origin).netloc != host:
        return f"cross-origin request from {origin}"
    given = presented(headers)
    if not given:
        return f"no token: send it in the {HEADER} header"
    if not hmac.compare_digest(given.encode(), token.encode()):
        return "wrong token"
    return None
