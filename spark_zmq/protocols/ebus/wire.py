"""EBUS wire facts (``shared/protocols/ebus.md``, the reference implementation's dialect).

A broadcast is two frames, ``[channel, pack(data)]``. ``pack(x)`` is
``zlib-deflate(BSON({"l": x}))``; the literal frame ``null`` stands for a null payload.
Subscriptions are zmq prefixes. The broker speaks for itself on channels under ``ebus/``
(``ebus/started``, ``ebus/shutdown``, ``ebus/workers``), each ``pack({ebusmessage, ...})``;
clients and workers subscribe to the prefix ``ebus`` and so get all three.
"""

from __future__ import annotations

import zlib
from typing import Any

from spark_zmq.errors import PayloadError
from spark_zmq.extras import optional
from spark_zmq.protocols.extjson import from_json, to_json

bson = optional("bson")

CLIENT = b"EBC01"
WORKER = b"EBW01"
#: the prefix of the channels on which the broker announces its own state
BROKER_CHANNEL = "ebus"
STARTED_CHANNEL = "ebus/started"  # {ebusmessage: "broker starting"}
SHUTDOWN_CHANNEL = "ebus/shutdown"  # {ebusmessage: "broker stopping"}
WORKERS_CHANNEL = "ebus/workers"  # {ebusmessage: "active workers", workers: [names]}
NULL = b"null"

FRONTEND_PORT = 5000
BACKEND_PORT = 5001
PUB_PORT = 5002  # broker's XSUB: publishers connect a PUB here
SUB_PORT = 5003  # broker's XPUB: subscribers connect a SUB here

#: the peers' timing, as the reference implementation's
HEARTBEAT_SECONDS = 0.5  # a peer PINGs when it heard nothing for this long
LIVENESS = 5  # heartbeats missed before a peer is taken for gone
DEFAULT_STALES_MS = 3000  # a request's lifetime unless it says otherwise
RESEND_SECONDS = 1.0  # an unanswered request is resent after this long ...
RESENDS = 3  # ... at most this many times, with the same request id
REPLY_CACHE_SECONDS = 5.0  # how long a broker answers a duplicate request id from its cache


def is_broker_channel(channel: str | None) -> bool:
    """A channel the broker speaks on: ``ebus`` itself or one under ``ebus/`` (not ``ebusy``)."""
    return channel is not None and (
        channel == BROKER_CHANNEL or channel.startswith(BROKER_CHANNEL + "/")
    )


def pack(value: Any) -> bytes:
    """The packed frame of ``value`` (None packs as the literal ``null``)."""
    if value is None:
        return NULL
    return zlib.compress(bson.encode({"l": value}))


def unpack(frame: bytes, max_bytes: int) -> Any:
    """The value of a packed frame; PayloadError says which layer is wrong. The BSON document
    may inflate to ``max_bytes`` at most (the side's ``maxMessageBytes``): deflate packs a
    gigabyte of zeros into a megabyte, and a peer's frame must not make us hold more than a
    message's worth of bytes."""
    if frame == NULL:
        return None
    document = inflate(frame, max_bytes)
    decode = bson.decode  # outside the try: a missing bson is not a malformed payload
    try:
        decoded = decode(document)
    except Exception as exc:  # bson raises InvalidBSON and friends
        raise PayloadError(f"not a BSON document after inflating: {exc}") from None
    if "l" not in decoded:
        raise PayloadError(f"BSON document without key 'l' (keys: {', '.join(decoded)})")
    return decoded["l"]


def inflate(frame: bytes, max_bytes: int) -> bytes:
    """The bytes a zlib stream (or a raw deflate stream, without zlib's header) inflates to,
    at most ``max_bytes`` of them; PayloadError when the frame is neither, or inflates to
    more. Data after the end of the stream is ignored, as zlib.decompress ignores it."""
    for wbits in (zlib.MAX_WBITS, -zlib.MAX_WBITS):
        inflater = zlib.decompressobj(wbits)
        try:
            document = inflater.decompress(frame, max_bytes + 1)
        except zlib.error:
            continue
        if len(document) > max_bytes:
            raise PayloadError(
                f"{len(frame)} bytes of deflated data inflate to more than {max_bytes} bytes "
                f"(maxMessageBytes); raise maxMessageBytes if such messages are expected"
            )
        if inflater.eof:
            return document
    raise PayloadError(f"not zlib-deflated ({len(frame)} bytes)")


def answer_json(frame: bytes, max_bytes: int) -> str | None:
    """JSON text of the data frame of a reply: packed as the reference peers pack it (inflating
    to ``max_bytes`` at most), or JSON text as the spec writes it; None when it is neither."""
    try:
        return to_json(unpack(frame, max_bytes))
    except PayloadError:
        pass
    try:
        text = frame.decode("utf-8")
        from_json(text)
        return text
    except ValueError:
        return None
