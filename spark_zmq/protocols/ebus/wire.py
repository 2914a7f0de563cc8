"""EBUS wire facts (``shared/protocols/ebus.md``, the reference implementation's dialect).

A broadcast is two frames, ``[channel, pack(data)]``. ``pack(x)`` is
``zlib-deflate(BSON({"l": x}))``; the literal frame ``null`` stands for a null payload.
Subscriptions are zmq prefixes. The broker speaks for itself on the channel ``ebus``.
"""

from __future__ import annotations

import zlib
from typing import Any

import bson
from bson import json_util

CLIENT = b"EBC01"
WORKER = b"EBW01"
#: the channel on which the broker announces its own state
BROKER_CHANNEL = "ebus"
NULL = b"null"

FRONTEND_PORT = 5000
BACKEND_PORT = 5001
PUB_PORT = 5002     # broker's XSUB: publishers connect a PUB here
SUB_PORT = 5003     # broker's XPUB: subscribers connect a SUB here


class PayloadError(ValueError):
    """A payload that is not ``zlib(BSON({"l": value}))`` or ``null``."""


def pack(value: Any) -> bytes:
    """The packed frame of ``value`` (None packs as the literal ``null``)."""
    if value is None:
        return NULL
    return zlib.compress(bson.encode({"l": value}))


def unpack(frame: bytes) -> Any:
    """The value of a packed frame; PayloadError says which layer is wrong."""
    if frame == NULL:
        return None
    try:
        document = zlib.decompress(frame)
    except zlib.error:
        try:                                     # a raw deflate stream, without zlib's header
            document = zlib.decompress(frame, -zlib.MAX_WBITS)
        except zlib.error:
            raise PayloadError(f"not zlib-deflated ({len(frame)} bytes)") from None
    try:
        decoded = bson.decode(document)
    except Exception as exc:                      # bson raises InvalidBSON and friends
        raise PayloadError(f"not a BSON document after inflating: {exc}") from None
    if "l" not in decoded:
        raise PayloadError(f"BSON document without key 'l' (keys: {', '.join(decoded)})")
    return decoded["l"]


def to_json(value: Any) -> str:
    """JSON text of an unpacked value (BSON types such as binary or dates as extended JSON)."""
    return json_util.dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)


def from_json(text: str) -> Any:
    return json_util.loads(text)
