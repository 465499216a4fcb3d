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

import socket
from pathlib import Path
from typing import Any

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator

from corral.common.errors import ConfigError


def keygen(directory: str, name: str | None = None) -> tuple[Path, Path]:
    """Write NAME.key and NAME.key_secret in ``directory``; NAME defaults to the host name."""
    name = name or socket.gethostname()
    path = Path(directory)
    path.mkdir(parents=True, exist_ok=True)
    for suffix in (".key", ".key_secret"):
        if (path / f"{name}{suffix}").exists():
            raise ConfigError("name", f"{path / (name + suffix)} exists; not overwriting a key")
    public, secret = zmq.auth.create_certificates(str(path), name)
    return Path(public), Path(secret)


def load_secret(file: str, key: str) -> tuple[bytes, bytes]:
    """(public, secret) from a ``.key_secret`` file, or ConfigError naming ``key``."""
    try:
        public, secret = zmq.auth.load_certificate(file)
    except (OSError, ValueError) as exc:
        raise ConfigError(key, f"cannot load a key pair from {file}: {exc}") from None
    if not secret:
        raise ConfigError(key, f"{file} holds no secret key (use the .key_secret file)")
    return public, secret


def load_authorized(directory: str) -> dict[str, str]:
    """z85 public key -> the worker id it may report as (the key file's name)."""
    path = Path(directory)
    if not path.is_dir():
        raise ConfigError("authorized_keys", f"{directory} is not a directory")
    names: dict[str, str] = {}
    for file in sorted(path.glob("*.key")):
        try:
            public, _ = zmq.auth.load_certificate(str(file))
        except (OSError, ValueError) as exc:
            raise ConfigError("authorized_keys", f"cannot load {file}: {exc}") from None
        names[public.decode()] = file.stem
    if not names:
        raise ConfigError("authorized_keys", f"no *.key files in {directory}")
    return names


def serve(ctx: zmq.Context[Any], sock: zmq.Socket[Any], secret_file: str,
          authorized_dir: str) -> tuple[ThreadAuthenticator, dict[str, str]]:
    """Make ``sock`` a Curve server that admits only the authorised keys. Call before bind."""
    names = load_authorized(authorized_dir)
    public, secret = load_secret(secret_file, "curve_secret_key")
    auth = ThreadAuthenticator(ctx)
    auth.start()
    auth.configure_curve(domain="*", location=str(Path(authorized_dir)))
    sock.curve_secretkey = secret
    sock.curve_publickey = public
    sock.curve_server = True
    return auth, names
