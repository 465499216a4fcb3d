"""Who may ask and who may act (docs/dashboard.md, "Security").

**Hosts.** Every request must name an allowed host in its ``Host`` header: the ``--listen``
address (and ``localhost`` when that is loopback) and each ``--allow-host NAME``. A page on
another site that rebinds its DNS name to this address (DNS rebinding) sends its own name, and
is refused before it can read anything.

**Actions** (drain, undrain, query now) exist only when the dashboard was started with
``--token-file``, and each request must carry that token in the ``X-Corral-Token`` header (or
``Authorization: Bearer …``). A header, not a cookie: a page on another site can make the
browser send its cookies, but not a header it cannot read, so actions are safe from cross-site
request forgery. A request whose ``Origin`` is not an allowed host is refused too. A wrong
token is logged, and each client address may have one token checked per `GUESS_EVERY_S`.

    >>> hosts = Hosts.of("127.0.0.1", ())
    >>> check({"X-Corral-Token": "s3cret"}, "s3cret", hosts)
    >>> check({"X-Corral-Token": "nope"}, "s3cret", hosts)
    'wrong token'
    >>> check({}, None, hosts)
    'this dashboard is read-only (started without --token-file)'
    >>> check({"X-Corral-Token": "s3cret", "Origin": "http://evil.example"}, "s3cret", hosts)
    'cross-origin request from http://evil.example'
    >>> hosts.allows("localhost:7780"), hosts.allows("evil.example:7780")
    (True, False)
"""

from __future__ import annotations

import hmac
import ipaddress
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from corral.common.errors import ConfigError

HEADER = "X-Corral-Token"
GUESS_EVERY_S = 1.0  # one token checked per client address per second: wrong ones are slowed
ALL_GUESSES_PER_S = 20.0  # and at most this many a second from all addresses together
MAX_TRACKED = 4096  # client addresses remembered by the throttle (the oldest forgotten first)


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def host_of(value: str) -> str:
    """The host name of a ``Host`` header or an Origin's netloc, lower-cased, without the
    port (``[::1]:7780`` → ``::1``)."""
    value = value.strip().lower()
    if value.startswith("["):
        return value[1:value.find("]")] if "]" in value else value
    return value.rsplit(":", 1)[0] if value.count(":") == 1 else value


@dataclass(frozen=True)
class Hosts:
    """The names browsers may use for this dashboard."""

    names: frozenset[str]

    @classmethod
    def of(cls, listen_host: str, allowed: Iterable[str]) -> Hosts:
        names = {listen_host.lower(), *(a.lower() for a in allowed)}
        if _is_loopback(listen_host):
            names |= {"localhost", "127.0.0.1", "::1"}
        return cls(frozenset(names))

    def allows(self, host: str | None) -> bool:
        return bool(host) and host_of(host or "") in self.names


class Throttle:
    """Token checks, rationed: a client address that presented a wrong token has its next one
    checked only `GUESS_EVERY_S` later, and all addresses together at most `ALL_GUESSES_PER_S`
    wrong ones a second. Pure: the caller passes the time.

    >>> t = Throttle()
    >>> t.wait("10.0.0.9", 0.0), t.refused("10.0.0.9", 0.0), t.wait("10.0.0.9", 0.4)
    (0.0, None, 0.6)
    >>> t.wait("10.0.0.9", 1.0), t.wait("10.0.0.7", 0.4)
    (0.0, 0.0)
    """

    def __init__(self) -> None:
        self._next: OrderedDict[str, float] = OrderedDict()
        self._all_next = 0.0

    def wait(self, peer: str, now: float) -> float:
        """Seconds until a token from ``peer`` may be checked (0: now)."""
        return max(0.0, self._next.get(peer, 0.0) - now, self._all_next - now)

    def refused(self, peer: str, now: float) -> None:
        """``peer`` presented a wrong token at ``now``."""
        self._next.pop(peer, None)
        self._next[peer] = now + GUESS_EVERY_S
        while len(self._next) > MAX_TRACKED:
            self._next.popitem(last=False)
        self._all_next = max(self._all_next, now) + 1.0 / ALL_GUESSES_PER_S


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


def check(headers: Mapping[str, str], token: str | None, hosts: Hosts) -> str | None:
    """None when the request may act; otherwise why not (the 403's sentence)."""
    if token is None:
        return "this dashboard is read-only (started without --token-file)"
    origin = headers.get("Origin")
    if origin and not hosts.allows(urlsplit(origin).netloc):
        return f"cross-origin request from {origin[:200]}"
    given = presented(headers)
    if not given:
        return f"no token: send it in the {HEADER} header"
    if not hmac.compare_digest(given.encode(), token.encode()):
        return "wrong token"
    return None
