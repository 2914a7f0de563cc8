"""ZeroEQ: event ids, ZeroConf records, session filtering, decoding, and a 0.9-style publisher.

Wire facts (``shared/protocols/zeroeq.md``): an event id is the MD5 of the event name, as two
64-bit halves; on the wire each half is little-endian, so the 16 wire bytes are
``md5[7::-1] + md5[15:7:-1]``. A message is 1 frame (empty event) or 2 (id, payload). Publishers
bind an XPUB and announce ``_zeroeq_pub._tcp`` with instance name ``host:port``; subscribers
connect one SUB per publisher and subscribe to the 16-byte ids (and to ``zeroeq::Meerkat``, by
which 0.9 publishers notice them).
"""

from __future__ import annotations

import getpass
import hashlib
import ipaddress
import os
import re
import socket
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import zmq

from ..log import logger
from ..options import Option, Options, comma_list, text
from ..spool import Source
from .base import Decoded, Discovery, Endpoint, EndpointListener, StaticDiscovery, StreamProtocol

PUBLISHER_SERVICE = "_zeroeq_pub._tcp.local."
MEERKAT = "zeroeq::Meerkat"
EVENT_ID_BYTES = 16


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
    """``host:port`` or ``tcp://host:port`` (ZeroEQ's URI forms) -> (host, port)."""
    rest = value.strip()
    if "://" in rest:
        scheme, rest = rest.split("://", 1)
        if scheme != "tcp":
            raise ValueError(f"{value!r}: only tcp:// is supported")
    host, sep, port_text = rest.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise ValueError(f"{value!r} has no port")
    host = host.strip("[]")
    if need_host and not host:
        raise ValueError(f"{value!r} has no host")
    return host, int(port_text)


def publisher_addresses(value: str) -> tuple[tuple[str, int], ...]:
    return tuple(parse_address(item) for item in comma_list(value))


@dataclass(frozen=True)
class PublisherRecord:
    """A ``_zeroeq_pub._tcp`` announcement, TXT keys lower-cased (DNS-SD keys are
    case-insensitive, and the shipped library writes ``Session`` where the seed says
    ``session``)."""

    instance_name: str
    host: str
    port: int
    txt: Mapping[str, str]

    @property
    def session(self) -> str | None:
        return self.txt.get("session")

    @classmethod
    def parse(cls, service_name: str, properties: Mapping[bytes, bytes | None]) -> "PublisherRecord":
        instance = service_name
        if instance.endswith("." + PUBLISHER_SERVICE):
            instance = instance[:-len(PUBLISHER_SERVICE) - 1]
        host, port = parse_address(instance)
        txt = {key.decode("utf-8", "replace").lower(): (value or b"").decode("utf-8", "replace")
               for key, value in properties.items()}
        return cls(instance, host, port, txt)

    def endpoint(self, subscriptions: tuple[bytes, ...]) -> Endpoint:
        metadata = {"publisher": self.instance_name}
        for key in ("session", "application", "user", "instance", "vocabulary",
                    "vocabulary_request"):
            if key in self.txt:
                metadata[key] = self.txt[key]
        return Endpoint(self.instance_name, f"tcp://{_zmq_host(self.host)}:{self.port}",
                        metadata, subscriptions)


def _zmq_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def in_session(record_session: str | None, session: str) -> bool:
    """A record without a session is accepted by everyone; an empty session filters nothing."""
    return record_session is None or session == "" or record_session == session


def resolve_interfaces(names: tuple[str, ...]) -> list[str]:
    """``discoveryInterfaces`` entries (IPv4 addresses or interface names) -> IPv4 addresses."""
    import ifaddr

    adapters = {a.nice_name: a for a in ifaddr.get_adapters()}
    addresses = []
    for name in names:
        try:
            addresses.append(str(ipaddress.IPv4Address(name)))
            continue
        except ValueError:
            pass
        adapter = adapters.get(name)
        ips = [ip.ip for ip in adapter.ips if isinstance(ip.ip, str)] if adapter else []
        if not ips:
            raise ValueError(f"discoveryInterfaces: no interface {name!r} with an IPv4 address; "
                             f"interfaces here: {', '.join(sorted(adapters)) or 'none'}")
        addresses.extend(ips)
    return addresses


def make_zeroconf(interfaces: tuple[str, ...] | None):
    """A Zeroconf instance on ``interfaces`` (None = all), IPv4 only."""
    from zeroconf import InterfaceChoice, IPVersion, Zeroconf

    chosen = InterfaceChoice.All if not interfaces else resolve_interfaces(interfaces)
    return Zeroconf(interfaces=chosen, ip_version=IPVersion.V4Only)


# -- discovery ---------------------------------------------------------------------------------

class ZeroConfDiscovery(Discovery):
    """Browses ``_zeroeq_pub._tcp``: publishers of the session join, vanished ones leave."""

    def __init__(self, session: str, interfaces: tuple[str, ...] | None,
                 subscriptions: tuple[bytes, ...]) -> None:
        self.session = session
        self.interfaces = interfaces
        self.subscriptions = subscriptions
        self._zeroconf = None
        self._browser = None
        self._joined: set[str] = set()
        self._lock = threading.Lock()

    def start(self, listener: EndpointListener) -> None:
        from zeroconf import ServiceBrowser

        self._listener = listener
        self._zeroconf = make_zeroconf(self.interfaces)
        self._browser = ServiceBrowser(self._zeroconf, PUBLISHER_SERVICE,
                                       handlers=[self._on_change])
        where = ", ".join(self.interfaces) if self.interfaces else "all interfaces"
        shown = repr(self.session) if self.session else "any session (empty session)"
        logger.info("zeroeq: browsing %s on %s for session %s", PUBLISHER_SERVICE, where, shown)

    def _on_change(self, zeroconf, service_type, name, state_change) -> None:
        from zeroconf import ServiceStateChange

        key = name[:-len(PUBLISHER_SERVICE) - 1]
        if state_change is ServiceStateChange.Removed:
            self._leave(key)
            return
        info = zeroconf.get_service_info(service_type, name, timeout=3000)
        if info is None:
            logger.warning("zeroeq: publisher %s did not answer with its record; ignored", name)
            return
        try:
            record = PublisherRecord.parse(name, info.properties)
        except ValueError as exc:
            logger.warning("zeroeq: ignoring publisher record %s: instance name is not "
                           "host:port (%s)", name, exc)
            return
        if not in_session(record.session, self.session):
            logger.info("zeroeq: publisher %s is in session %r, not %r; not subscribed",
                        record.instance_name, record.session, self.session)
            self._leave(key)  # an update may move a publisher out of our session
            return
        with self._lock:
            self._joined.add(key)
        self._listener.endpoint_joined(record.endpoint(self.subscriptions))

    def _leave(self, key: str) -> None:
        with self._lock:
            if key not in self._joined:
                return
            self._joined.discard(key)
        self._listener.endpoint_left(key)

    def close(self) -> None:
        if self._browser is not None:
            self._browser.cancel()
            self._browser = None
        if self._zeroconf is not None:
            self._zeroconf.close()
            self._zeroconf = None


# -- the protocol ------------------------------------------------------------------------------

def _events_option(value: str) -> tuple[str, ...]:
    items = comma_list(value)
    for item in items:
        parse_event(item)
    return items


def _interfaces_option(value: str) -> tuple[str, ...] | None:
    if value.strip().lower() == "all":
        return None
    return comma_list(value)


class ZeroEQ(StreamProtocol):
    name = "zeroeq"
    reader_options = (
        Option("session", text, "a session name (empty: every session)", None,
               "Read publishers of this session. Default: ZEROEQ_PUB_SESSION, else "
               "ZEROEQ_SESSION, else the user name. Empty: every publisher. A publisher that "
               "announces no session is read in any session."),
        Option("publishers", publisher_addresses, "comma-separated host:port or tcp://host:port",
               None, "Read these publishers instead of discovering them (no ZeroConf)."),
        Option("events", _events_option,
               "comma-separated event names, 32-hex wire ids or high:low ids", None,
               "Subscribe to these events only; names given here fill the `event` column. "
               "Default: every event."),
        Option("discoveryInterfaces", _interfaces_option,
               "all, or comma-separated IPv4 addresses or interface names", None,
               "Where ZeroConf browses (default: all interfaces)."),
    )
    columns = pa.schema([
        pa.field("session", pa.string()),
        pa.field("publisher", pa.string()),
        pa.field("application", pa.string()),
        pa.field("user", pa.string()),
        pa.field("instance", pa.string()),
        pa.field("event_id", pa.string()),
        pa.field("event", pa.string()),
    ])

    def subscriptions(self, options: Options) -> tuple[bytes, ...]:
        wanted = [parse_event(spec)[0] for spec in options["events"] or ()]
        # 0.9 publishers notice subscribers by their Meerkat subscription
        return tuple(wanted or [b""]) + (event_id(MEERKAT),)

    def discovery(self, options: Options) -> Discovery:
        subscriptions = self.subscriptions(options)
        if options["publishers"]:
            return StaticDiscovery([
                Endpoint(f"{host}:{port}", f"tcp://{_zmq_host(host)}:{port}",
                         {"publisher": f"{host}:{port}"}, subscriptions)
                for host, port in options["publishers"]])
        session = options["session"] if options.is_set("session") else default_session()
        return ZeroConfDiscovery(session, options["discoveryInterfaces"], subscriptions)

    def decode(self, frames: pa.ListArray, source: Source, options: Options) -> Decoded:
        n = len(frames)
        counts = pc.list_value_length(frames).to_numpy(zero_copy_only=False)
        starts = frames.offsets.to_numpy()[:-1]
        values = frames.values
        lengths = pc.binary_length(values).to_numpy(zero_copy_only=False) if len(values) else None
        has_frame = counts >= 1
        first_index = np.where(has_frame, starts, 0)
        first_length = np.where(has_frame, lengths[first_index], -1) if lengths is not None \
            else np.full(n, -1)
        ok = has_frame & (counts <= 2) & (first_length == EVENT_ID_BYTES)

        event_ids = pa.nulls(n, pa.string())
        event_names = pa.nulls(n, pa.string())
        payload = pa.repeat(pa.scalar(b"", pa.binary()), n)
        if ok.any():
            ids = values.take(pa.array(first_index)).dictionary_encode()
            names = {wire: name for wire, name in map(parse_event, options["events"] or ())
                     if name is not None}
            distinct = ids.dictionary.to_pylist()
            hex_ids = pa.array([d.hex() if len(d) == EVENT_ID_BYTES else None for d in distinct],
                               pa.string()).take(ids.indices)
            mask = pa.array(ok)
            event_ids = pc.if_else(mask, hex_ids, event_ids)
            name_of = pa.array([names.get(d) for d in distinct], pa.string()).take(ids.indices)
            event_names = pc.if_else(mask, name_of, event_names)
            second = values.take(pa.array(np.where(counts == 2, starts + 1, first_index)))
            payload = pc.if_else(pa.array(counts == 2), second, payload)

        error = pa.nulls(n, pa.string())
        bad = np.flatnonzero(~ok & has_frame)
        if len(bad):
            payload, error = _mark_malformed(frames, bad, payload)

        keep = None
        if options["events"]:
            wanted = [parse_event(spec)[0].hex() for spec in options["events"]]
            keep = pc.fill_null(pc.is_in(event_ids, pa.array(wanted, pa.string())), False)

        metadata = source.metadata
        constant = {key: pa.repeat(pa.scalar(metadata.get(key), pa.string()), n)
                    for key in ("session", "publisher", "application", "user", "instance")}
        return Decoded(payload, error,
                       {**constant, "event_id": event_ids, "event": event_names}, keep)


def _mark_malformed(frames: pa.ListArray, bad: np.ndarray,
                    payload: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Malformed messages (rare): error text, and their raw frames concatenated as payload."""
    payload_values = payload.to_pylist()
    errors: list[str | None] = [None] * len(frames)
    for row in bad:
        parts = frames[int(row)].as_py()
        sizes = ", ".join(str(len(p)) for p in parts)
        errors[row] = (f"malformed ZeroEQ message: {len(parts)} frames of {sizes} bytes; "
                       f"expected a 16-byte event id, then at most one payload frame. "
                       f"payload holds the frames concatenated")
        payload_values[row] = b"".join(parts)
    return pa.array(payload_values, pa.binary()), pa.array(errors, pa.string())


# -- a publisher (as the shipped 0.9 library's) --------------------------------------------------

class Publisher:
    """A ZeroEQ publisher speaking the shipped library's wire format.

    Binds an XPUB (send high-water mark 0, as 0.9 does, unless ``send_hwm`` says otherwise) and
    announces ``_zeroeq_pub._tcp`` with instance name ``host:port`` and TXT keys ``Type``,
    ``Instance``, ``User``, ``Application`` and ``Session`` (omitted when empty). Used by the
    demo job and the tests; pass a shared ``zeroconf`` to run many in one process.
    """

    def __init__(self, session: str | None = None, *, host: str = "127.0.0.1", port: int = 0,
                 application: str | None = None, send_hwm: int = 0, zeroconf=None,
                 interfaces: tuple[str, ...] | None = ("127.0.0.1",), announce: bool = True,
                 context: zmq.Context | None = None) -> None:
        self.session = default_session() if session is None else session
        self.socket = (context or zmq.Context.instance()).socket(zmq.XPUB)
        self.socket.setsockopt(zmq.SNDHWM, send_hwm)
        self.socket.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.socket.setsockopt(zmq.LINGER, 1000)
        bind_host = "*" if host in ("", "*", "0.0.0.0") else host
        if port:
            self.socket.bind(f"tcp://{bind_host}:{port}")
        else:
            port = self.socket.bind_to_random_port(f"tcp://{bind_host}")
        announced_host = socket.gethostname() if bind_host == "*" else host
        self.port = port
        self.instance_name = f"{announced_host}:{port}"
        self.address = f"tcp://{_zmq_host(announced_host)}:{port}"
        self.instance_id = "%x:%x" % divmod(uuid.uuid4().int, 1 << 64)
        self.application = application or os.path.basename(sys.argv[0] or "python")
        self.subscribers = 0
        self._owns_zeroconf = zeroconf is None and announce
        self._zeroconf = make_zeroconf(interfaces) if self._owns_zeroconf else zeroconf
        self._info = self._announce(announced_host) if announce else None

    def txt(self) -> dict[str, str]:
        keys = {"Type": "ZeroEQ", "Instance": self.instance_id, "User": getpass.getuser(),
                "Application": self.application}
        if self.session:
            keys["Session"] = self.session
        return keys

    def _announce(self, host: str):
        from zeroconf import ServiceInfo

        try:
            packed = [socket.inet_aton(socket.gethostbyname(host))]
        except OSError:
            packed = []
        info = ServiceInfo(PUBLISHER_SERVICE, f"{self.instance_name}.{PUBLISHER_SERVICE}",
                           addresses=packed, port=self.port, properties=self.txt(),
                           server=f"{socket.gethostname()}.local.")
        self._zeroconf.register_service(info, strict=False)
        return info

    def publish(self, event: str | bytes, payload: bytes = b"") -> None:
        """Send one event: a name or 16 wire bytes; an empty payload sends a single frame."""
        wire = event if isinstance(event, bytes) else event_id(event)
        if payload:
            self.socket.send_multipart([wire, payload], copy=len(payload) < 65536)
        else:
            self.socket.send(wire)

    def send_frames(self, frames: list[bytes]) -> None:
        """Send raw frames as they are (for tests of malformed input)."""
        self.socket.send_multipart(frames)

    def count_subscribers(self) -> int:
        """Subscribers now subscribed to Meerkat (0.9 subscribers all are), from the
        (un)subscription messages the XPUB has received so far."""
        meerkat = event_id(MEERKAT)
        while self.socket.poll(0):
            message = self.socket.recv()
            if message[1:] == meerkat:
                self.subscribers += 1 if message[:1] == b"\x01" else -1
        return self.subscribers

    def wait_for_subscribers(self, count: int = 1, timeout: float = 30.0) -> None:
        """Block until at least ``count`` subscribers are subscribed."""
        deadline = time.monotonic() + timeout
        while self.count_subscribers() < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError(f"publisher {self.instance_name}: {self.subscribers} of "
                                   f"{count} subscribers after {timeout} s")
            self.socket.poll(min(remaining, 0.1) * 1000)

    def close(self) -> None:
        if self._info is not None:
            self._zeroconf.unregister_service(self._info)
            self._info = None
        if self._owns_zeroconf and self._zeroconf is not None:
            self._zeroconf.close()
            self._zeroconf = None
        self.socket.close()
