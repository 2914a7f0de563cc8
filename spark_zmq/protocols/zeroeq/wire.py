"""ZeroEQ's wire: event ids, URIs, sessions, and the request/reply frames.

Facts from ``shared/protocols/zeroeq.md``: an event id is the MD5 of the event name, as two
64-bit halves; on the wire each half is little-endian, so the 16 wire bytes are
``md5[7::-1] + md5[15:7:-1]``. A message is 1 frame (empty event) or 2 (id, payload).
Request/reply messages, as a REP socket sees them, are ``[16-byte type id][optional payload]``
(the shipped client's DEALER adds ``[counter][empty]``, which REP keeps as the envelope).
"""

from __future__ import annotations

import getpass
import hashlib
import os
import re

from spark_zmq.options import comma_list
from spark_zmq.protocols.addresses import AddressError, bracketed, check_host

PUBLISHER_SERVICE = "_zeroeq_pub._tcp.local."
SUBSCRIBER_SERVICE = "_zeroeq_sub._tcp.local."
MEERKAT = "zeroeq::Meerkat"
EVENT_ID_BYTES = 16
#: the reply type of an unknown request or a failed handler (as the shipped library's)
NO_REPLY_TYPE = bytes(16)

# -- event ids ---------------------------------------------------------------------------------


def event_id(name: str) -> bytes:
    """The 16 wire bytes of the event named ``name``."""
    digest = hashlib.md5(name.encode("utf-8")).digest()
    return digest[7::-1] + digest[15:7:-1]


def event_id_text(wire: bytes) -> str:
    """ZeroEQ's text form ``%x:%x`` (high:low, no padding) of 16 wire bytes."""
    high = int.from_bytes(wire[:8], "little")
    low = int.from_bytes(wire[8:], "little")
    return f"{high:x}:{low:x}"


_WIRE_HEX = re.compile(r"[0-9a-fA-F]{32}")
_TEXT_ID = re.compile(r"([0-9a-fA-F]{1,16}):([0-9a-fA-F]{1,16})")


def parse_event(spec: str) -> tuple[bytes, str | None]:
    """An ``events`` entry: 32 hex chars (wire order), ``high:low`` text form, or a name.
    Returns the wire id and the name when one was given."""
    if _WIRE_HEX.fullmatch(spec):
        return bytes.fromhex(spec), None
    match = _TEXT_ID.fullmatch(spec)
    if match:
        high, low = (int(part, 16) for part in match.groups())
        return high.to_bytes(8, "little") + low.to_bytes(8, "little"), None
    return event_id(spec), spec


# -- sessions and records ----------------------------------------------------------------------


def default_session() -> str:
    """``ZEROEQ_PUB_SESSION``, else ``ZEROEQ_SESSION`` (the revised seed's name), else the user."""
    for variable in ("ZEROEQ_PUB_SESSION", "ZEROEQ_SESSION"):
        if variable in os.environ:
            return os.environ[variable]
    return getpass.getuser()


def parse_address(value: str, *, need_host: bool = True) -> tuple[str, int]:
    """``host:port`` or ``tcp://host:port`` (ZeroEQ's URI forms) -> (host, port).

    Peers' instance names and ``vocabulary_request`` values come through here, so the host
    must be one zmq's connect takes (``addresses.check_host``): a name zmq refuses would
    otherwise fail the socket that meets it (capture's, ending the query)."""
    rest = value.strip()
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme != "tcp":
            raise ValueError(f"{value!r}: only tcp:// is supported")
    host, sep, port_text = rest.rpartition(":")
    if not sep or not (port_text.isascii() and port_text.isdigit()) or len(port_text) > 5:
        raise ValueError(f"{value!r} has no port")
    if not 0 < int(port_text) < 65536:
        raise ValueError(f"{value!r} has no port")
    host = host.strip("[]")
    if need_host and not host:
        raise ValueError(f"{value!r} has no host")
    if host:
        try:
            check_host(host)
        except AddressError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
    return host, int(port_text)


def tcp_endpoint(value: str) -> str:
    """The zmq address of a ZeroEQ URI (``host:port`` or ``tcp://host:port``), checked as
    ``parse_address`` does."""
    host, port = parse_address(value)
    return f"tcp://{zmq_host(host)}:{port}"


def publisher_addresses(value: str) -> tuple[tuple[str, int], ...]:
    return tuple(parse_address(item) for item in comma_list(value))


def zmq_host(host: str) -> str:
    """A host as it goes in a zmq tcp:// address (IPv6 in brackets)."""
    return bracketed(host)


def in_session(record_session: str | None, session: str) -> bool:
    """A record without a session is accepted by everyone; an empty session filters nothing."""
    return record_session is None or session == "" or record_session == session


def events_option(value: str) -> tuple[str, ...]:
    """Validate a comma-separated list of event names or ids."""
    items = comma_list(value)
    for item in items:
        parse_event(item)
    return items
