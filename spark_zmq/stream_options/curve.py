"""CURVE options, for readers and writers of every format (``spark_zmq.security`` applies
them). Each is defined once (see ``spark_zmq.options``)."""

from __future__ import annotations

from typing import Any

from spark_zmq import security
from spark_zmq.options import (
    Option,
    Options,
)

KEY = "a 40-character Z85 key or a zmq.auth key file"

CURVE_SERVER_KEY = Option(
    "curveServerKey",
    security.public_key,
    KEY,
    None,
    "CURVE: the public key of the server this side connects to (publisher, broker, "
    "gobyd); the connection is then encrypted and the server authenticated.",
)

CURVE_PUBLIC_KEY = Option(
    "curvePublicKey",
    security.public_key,
    KEY,
    None,
    "CURVE: this side's public key (derived from `curveSecretKey` when not given).",
)

CURVE_SECRET_KEY = Option(
    "curveSecretKey",
    security.secret_key,
    KEY,
    None,
    "CURVE: this side's secret key. A side that binds (a writer's socket, a reader's "
    "management port) becomes a CURVE server; a client without one uses a fresh key "
    "pair.",
)

CURVE_CLIENT_KEYS = Option(
    "curveClientKeys",
    security.public_keys,
    "comma-separated keys or key files, or a folder of .key files",
    None,
    "CURVE: the client public keys a CURVE server of this side accepts. Default: any "
    "client that completes the handshake (the management port then refuses all).",
)

CURVE_OPTIONS: tuple[Option[Any], ...] = (
    CURVE_SERVER_KEY,
    CURVE_PUBLIC_KEY,
    CURVE_SECRET_KEY,
    CURVE_CLIENT_KEYS,
)


def curve_of(options: Options) -> security.Curve:
    """The query's CURVE settings, from its options (a reader's or a writer's)."""
    return security.Curve.of_keys(
        options.get(CURVE_SERVER_KEY),
        options.get(CURVE_PUBLIC_KEY),
        options.get(CURVE_SECRET_KEY),
        options.get(CURVE_CLIENT_KEYS),
    )
