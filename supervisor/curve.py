"""CurveZMQ for the worker channel: keys, the authenticator, and ids bound to keys.

Each worker has a key pair made by `corral-supervisor keygen DIR --name NAME` (pyzmq's
certificate format: ``NAME.key`` with the public key, ``NAME.key_secret`` with both). The
supervisor has its own pair (``--curve-secret-key``) and a directory of the workers' public
keys (``--authorized-keys``). ZeroMQ's ZAP handshake refuses a connection whose key is not in
that directory before any of its messages arrive. An authorised worker may report only under
the id that names its key file (``alice.key`` → ``alice``): the supervisor reads each
message's ``User-Id`` (the sender's public key) and refuses a report under another id.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from corral.common.errors import ConfigError


def keygen(directory: str, name: str | None = None) -> tuple[Path, Path]:
    """Write NAME.key (mode 0644) and NAME.key_secret (0600) in ``directory``, made 0700 when
    it is new; NAME defaults to the host name. The secret is never readable by others, not even
    for an instant: the files are created under a umask of 077."""
    name = name or socket.gethostname()
    path = Path(directory)
    for suffix in (".key", ".key_secret"):
        if (path / f"{name}{suffix}").exists():
            raise ConfigError("name", f"{path / (name + suffix)} exists; not overwriting a key")
    old = os.umask(0o077)
    try:
        path.mkdir(mode=0o700, parents=True, exist_ok=True)
        public, secret = zmq.auth.create_certificates(str(path), name)
    except OSError as exc:
        raise ConfigError("directory", f"cannot write keys in {path}: {exc.strerror}") from None
    finally:
        os.umask(old)
    os.chmod(public, 0o644)  # the public half is meant to be copied around
    return Path(public), Path(secret)


def open_to_others(directory: str | Path) -> bool:
    """Whether others than its owner may list or enter ``directory``."""
    return bool(os.stat(directory).st_mode & 0o077)


def load_secret(file: str, key: str) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file, or ConfigError naming ``key``."""
    try:
        public, secret = zmq.auth.load_certificate(file)
    except (OSError, ValueError) as exc:
        raise ConfigError(key, f"cannot load a key pair from {file}: {exc}") from None
    if not secret:
        raise ConfigError(key, f"{file} holds no secret key (use the .key_secret file)")
    return public, secret


def load_authorized(directory: str, key: str = "authorized_keys") -> dict[str, str]:
    """z85 public key -> the name it is admitted as (the key file's name)."""
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError(key, f"{directory} is not a directory")
    names: dict[str, str] = {}
    for file in sorted(path.glob("*.key")):
        try:
            public, _ = zmq.auth.load_certificate(str(file))
        except (OSError, ValueError) as exc:
            raise ConfigError(key, f"cannot load {file}: {exc}") from None
        names[public.decode()] = file.stem
    if not names:
        raise ConfigError(key, f"no *.key files in {directory}")
    return names


class Guard:
    """One ZAP authenticator for the daemon; each protected socket gets its own domain (and
    so its own directory of admitted keys): workers on one, corralctl users on the other."""

    def __init__(self, ctx: zmq.Context[Any], secret_file: str) -> None:
        self.public, self.secret = load_secret(secret_file, "curve_secret_key")
        self.auth = ThreadAuthenticator(ctx)
        self.auth.start()

    def protect(self, sock: zmq.Socket[Any], domain: str, directory: str,
                key: str) -> dict[str, str]:
        """Make ``sock`` a Curve server admitting only the keys in ``directory`` (call before
        bind); returns their names by public key."""
        names = load_authorized(directory, key)
        self.auth.configure_curve(domain=domain, location=str(Path(directory)))
        sock.zap_domain = domain.encode()
        sock.curve_secretkey = self.secret
        sock.curve_publickey = self.public
        sock.curve_server = True
        return names

    def stop(self) -> None:
        self.auth.stop()
