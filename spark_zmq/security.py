"""CURVE security (RFC 26/CurveZMQ) for the zmq sockets the package opens, from options.

One set of options (``spark_zmq.stream_options.CURVE_OPTIONS``) for readers and writers of every
format:

- ``curveServerKey``: the public key of the server this side connects to (a publisher, a broker,
  gobyd). Setting it makes the connecting sockets CURVE clients.
- ``curvePublicKey`` / ``curveSecretKey``: this side's own key pair. A side that binds (a writer's
  XPUB, a reader's management port) becomes a CURVE server with it; a client without one gets a
  fresh key pair for the process (encrypted, but the server cannot tell who it is).
- ``curveClientKeys``: the public keys a server accepts (ZAP). Without it a CURVE server accepts
  any client that completes the handshake; the management port then refuses every request.

Keys are Z85 text (40 characters) or key files as ``zmq.auth.create_certificates`` writes them.
"""

from __future__ import annotations

import itertools
import os
import threading
from dataclasses import dataclass

import zmq
import zmq.auth
from zmq.auth.thread import ThreadAuthenticator
from zmq.utils import z85

from spark_zmq.log import logger


def _key_or_file(value: str, part: str) -> bytes:
    """A Z85 key, or the ``part`` ("public" or "secret") key of a zmq.auth key file."""
    value = value.strip()
    if len(value) == 40 and not os.path.exists(value):
        try:
            z85.decode(value)
        except (ValueError, KeyError):
            raise ValueError("not a Z85 key") from None
        return value.encode()
    if not os.path.isfile(value):
        raise ValueError(f"neither a 40-character Z85 key nor a key file: {value!r}")
    try:
        public, secret = zmq.auth.load_certificate(value)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{value} is not a zmq.auth key file ({exc})") from None
    key = public if part == "public" else secret
    if key is None:
        raise ValueError(f"{value} holds no {part} key")
    return key


def public_key(value: str) -> bytes:
    return _key_or_file(value, "public")


def secret_key(value: str) -> bytes:
    key = _key_or_file(value, "secret")
    if os.path.isfile(value.strip()):
        _warn_if_others_can_read(value.strip())
    return key


#: secret key files already warned about in this process
_warned: set[str] = set()


def _warn_if_others_can_read(path: str) -> None:
    """A secret key file that its group or others may read is as good as published: say so
    once per file and process, as ssh does of a private key (it refuses; a query goes on)."""
    mode = os.stat(path).st_mode & 0o777
    if mode & 0o077 and path not in _warned:
        _warned.add(path)
        logger.warning(
            "curveSecretKey: the key file %s can be read by %s (mode %o): anyone who reads "
            "it can pose as this side. Run: chmod 600 %s",
            path,
            "others" if mode & 0o007 else "its group",
            mode,
            path,
        )


def public_keys(value: str) -> tuple[bytes, ...]:
    """Comma-separated Z85 keys or key files, or a folder of ``*.key`` files."""
    value = value.strip()
    if os.path.isdir(value):
        names = sorted(n for n in os.listdir(value) if n.endswith(".key"))
        return tuple(public_key(os.path.join(value, n)) for n in names)
    return tuple(public_key(item) for item in value.split(",") if item.strip())


@dataclass(frozen=True)
class Curve:
    """The CURVE settings of one query, applied to each socket it opens."""

    server_key: bytes | None = None
    public_key: bytes | None = None
    secret_key: bytes | None = None
    client_keys: tuple[bytes, ...] | None = None

    @classmethod
    def of_keys(
        cls,
        server_key: bytes | None,
        public_key: bytes | None,
        secret_key: bytes | None,
        client_keys: tuple[bytes, ...] | None,
    ) -> Curve:
        """The settings of the four CURVE options' values: the public key, when not given,
        derived from the secret one."""
        public = public_key or (zmq.curve_public(secret_key) if secret_key else None)
        return cls(server_key, public, secret_key, client_keys)

    def as_client(self, sock: zmq.Socket) -> zmq.Socket:
        """Make a connecting socket a CURVE client, if a server key is set."""
        if self.server_key:
            public, secret = (
                (self.public_key, self.secret_key) if self.secret_key else _process_key_pair()
            )
            sock.curve_serverkey = self.server_key
            sock.curve_publickey = public
            sock.curve_secretkey = secret
        return sock

    @property
    def serves(self) -> bool:
        return bool(self.secret_key)

    def as_server(self, sock: zmq.Socket) -> zmq.Socket:
        """Make a binding socket a CURVE server (with its allow-list), if a secret key is set."""
        if self.secret_key:
            sock.curve_server = True
            sock.curve_secretkey = self.secret_key
            sock.curve_publickey = self.public_key
            if self.client_keys is not None:
                sock.zap_domain = _allow(sock.context, self.client_keys).encode()
        return sock


_pair: tuple[bytes, bytes] | None = None
_lock = threading.Lock()
_authenticators: dict[int, ThreadAuthenticator] = {}
_domains = itertools.count(1)


#: no CURVE: every socket as zmq opens it
NO_CURVE = Curve()


def _process_key_pair() -> tuple[bytes, bytes]:
    global _pair
    with _lock:
        if _pair is None:
            _pair = zmq.curve_keypair()
        return _pair


class _AllowList:
    def __init__(self, keys: tuple[bytes, ...]) -> None:
        self.keys = frozenset(keys)

    def callback(self, domain: str, key: bytes) -> bool:
        return key in self.keys


def _allow(context: zmq.Context, keys: tuple[bytes, ...]) -> str:
    """A ZAP domain of ``context`` that accepts exactly ``keys`` (one authenticator thread per
    context, as ZAP has one handler per context)."""
    with _lock:
        auth = _authenticators.get(id(context))
        if auth is None:
            auth = _authenticators[id(context)] = ThreadAuthenticator(context)
            auth.start()
        domain = f"spark_zmq-{next(_domains)}"
        auth.configure_curve_callback(domain, _AllowList(keys))
    return domain
