"""The seed's Vocabulary: the events one publisher or subscriber has registered, announced in
its ZeroConf record and answered over request/reply.

Request type ``zeroeq::vocabulary::Request`` (no payload); reply type
``zeroeq::vocabulary::Reply`` with a UTF-8 JSON payload::

    {"role": "publisher" | "subscriber",
     "events": [{"id": "<32 hex, wire order>", "text": "<high:low>", "name": "<name or null>"}]}

The TXT key ``vocabulary`` holds the ids in ZeroEQ's text form (``high:low``), ``;``-separated.
A TXT string holds at most 255 bytes, so it lists as many ids as fit; the reply lists them all.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence

from spark_zmq.protocols.zeroeq.reqrep import ReplyServer, request
from spark_zmq.protocols.zeroeq.wire import _WIRE_HEX, event_id, event_id_text, parse_event
from spark_zmq.security import NO_CURVE, Curve

VOCABULARY_REQUEST = event_id("zeroeq::vocabulary::Request")
VOCABULARY_REPLY = event_id("zeroeq::vocabulary::Reply")
#: a DNS-SD TXT string is at most 255 bytes, ``vocabulary=`` included
TXT_VALUE_BYTES = 255 - len("vocabulary=")
#: the largest vocabulary reply frame taken from a peer (1 MiB). A reply lists event ids and
#: names, about 100 bytes an event (id, its text form, a name): 1 MiB holds some 10,000 events,
#: far more than any publisher registers, while a hostile server cannot make the driver hold
#: more than this (zmq drops a larger frame unread). A constant rather than the query's
#: ``maxMessageBytes``: that option bounds the events read, which can be far larger.
MAX_REPLY_BYTES = 1 << 20


class Vocabulary:
    """Registered events of one publisher or subscriber, served on a REP socket bound at
    ``bind`` (one address, or several): ``addresses`` are the bound ones, ``address`` the first.

    ``on_change`` is called (from the registering thread) when an event is added or removed,
    so the owner can update its announcement.
    """

    def __init__(
        self,
        role: str,
        bind: str | Sequence[str],
        on_change: Callable[[], None] | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.role = role
        self._events: dict[bytes, str | None] = {}
        self._lock = threading.Lock()
        self.on_change = on_change
        self._server = ReplyServer(
            bind, {VOCABULARY_REQUEST: self._reply}, name=f"zeroeq {role} vocabulary", curve=curve
        )
        self.address = self._server.address
        self.addresses = self._server.addresses

    def register(self, wire: bytes, name: str | None = None) -> bool:
        """Add an event; True if it is new (a name given later fills in a missing one)."""
        with self._lock:
            known = wire in self._events
            if known and (name is None or self._events[wire] == name):
                return False
            self._events[wire] = name or self._events.get(wire)
        if not known and self.on_change:
            self.on_change()
        return not known

    def unregister(self, wire: bytes) -> bool:
        with self._lock:
            removed = self._events.pop(wire, False) is not False
        if removed and self.on_change:
            self.on_change()
        return removed

    def __contains__(self, wire: bytes) -> bool:
        return wire in self._events

    def events(self) -> dict[bytes, str | None]:
        with self._lock:
            return dict(self._events)

    def txt_value(self) -> str:
        """The ids that fit in one TXT string, in registration order."""
        value = ""
        for wire in self.events():
            item = event_id_text(wire)
            candidate = f"{value};{item}" if value else item
            if len(candidate) > TXT_VALUE_BYTES:
                break
            value = candidate
        return value

    def _reply(self, payload: bytes) -> tuple[bytes, bytes]:
        return VOCABULARY_REPLY, encode_reply(self.role, self.events())

    def close(self) -> None:
        self._server.close()


def encode_reply(role: str, events: dict[bytes, str | None]) -> bytes:
    return json.dumps(
        {
            "role": role,
            "events": [
                {"id": wire.hex(), "text": event_id_text(wire), "name": name}
                for wire, name in events.items()
            ],
        }
    ).encode()


def request_vocabulary(
    address: str, timeout: float = 2.0, curve: Curve = NO_CURVE
) -> dict[bytes, str | None]:
    """Ask the vocabulary server at ``address``: {wire id: name or None}. A reply frame over
    MAX_REPLY_BYTES is refused unread (RequestError, as for no reply)."""
    reply_type, payload = request(
        address, VOCABULARY_REQUEST, timeout=timeout, curve=curve, max_reply_bytes=MAX_REPLY_BYTES
    )
    if reply_type != VOCABULARY_REPLY:
        raise ValueError(f"{address}: not a vocabulary reply")
    try:
        events = json.loads(payload)["events"]
        vocabulary = {_wire_of(e["id"]): e.get("name") for e in events}
    except (ValueError, KeyError, TypeError, RecursionError) as exc:
        raise ValueError(f"{address}: malformed vocabulary reply: {exc}") from None
    if not all(name is None or isinstance(name, str) for name in vocabulary.values()):
        raise ValueError(f"{address}: malformed vocabulary reply: a name that is not a string")
    return vocabulary


def _wire_of(hex_id: str) -> bytes:
    """The 16 wire bytes of an id in a reply; ValueError unless it is 32 hex digits."""
    if not (isinstance(hex_id, str) and _WIRE_HEX.fullmatch(hex_id)):
        raise ValueError(f"event id {hex_id!r} is not 32 hex digits")
    return bytes.fromhex(hex_id)


def parse_vocabulary_txt(value: str | None) -> set[bytes]:
    """Ids of a TXT ``vocabulary`` value (text or 32-hex forms; anything else is skipped)."""
    ids = set()
    for item in (value or "").split(";"):
        item = item.strip()
        if not item:
            continue
        wire, name = parse_event(item)
        if name is None:  # an entry that is not an id is not guessed at as a name
            ids.add(wire)
    return ids
