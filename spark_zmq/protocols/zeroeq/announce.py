"""ZeroConf records of ZeroEQ publishers (``_zeroeq_pub._tcp``) and subscribers
(``_zeroeq_sub._tcp``): parsing what others announce, and announcing ourselves.

TXT keys are read lower-cased (DNS-SD keys are case-insensitive, and the shipped library
writes ``Session`` where the seed says ``session``). python-zeroconf rejects these service
names in strict mode, so registration and browsing run with ``strict=False``.

Our records go on the wire as a ZeroEQ peer writes them (the instance name as one DNS label,
an SRV target host of our own): ``mdns`` says how, and why. They are announced per link, each
with that link's addresses only, through one responder per link (``Responders``): ``links``
says which address goes on which link.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Callable, Coroutine, Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spark_zmq.protocols.zeroeq.links import Link, links_of
from spark_zmq.protocols.zeroeq.vocabulary import parse_vocabulary_txt
from spark_zmq.protocols.zeroeq.wire import (
    PUBLISHER_SERVICE,
    SUBSCRIBER_SERVICE,
    parse_address,
    zmq_host,
)

if TYPE_CHECKING:
    from zeroconf import ServiceInfo, Zeroconf

    from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf


@dataclass(frozen=True)
class Record:
    """One announcement: its instance name and TXT keys (lower-cased)."""

    service: str
    instance_name: str
    txt: Mapping[str, str]

    @property
    def session(self) -> str | None:
        return self.txt.get("session")

    @property
    def vocabulary(self) -> set[bytes]:
        return parse_vocabulary_txt(self.txt.get("vocabulary"))

    @property
    def vocabulary_request(self) -> str | None:
        return self.txt.get("vocabulary_request") or None

    @classmethod
    def parse(cls, service_name: str, properties: Mapping[bytes, bytes | None]) -> Record:
        service = (
            SUBSCRIBER_SERVICE if service_name.endswith(SUBSCRIBER_SERVICE) else PUBLISHER_SERVICE
        )
        instance = service_name
        if instance.endswith("." + service):
            instance = instance[: -len(service) - 1]
        txt = {
            key.decode("utf-8", "replace").lower(): (value or b"").decode("utf-8", "replace")
            for key, value in properties.items()
        }
        return cls(service, instance, txt)


@dataclass(frozen=True)
class PublisherRecord(Record):
    """A ``_zeroeq_pub._tcp`` announcement; subscribers connect to the instance name."""

    host: str = ""
    port: int = 0

    @classmethod
    def parse(cls, service_name: str, properties: Mapping[bytes, bytes | None]) -> PublisherRecord:
        record = Record.parse(service_name, properties)
        host, port = parse_address(record.instance_name)
        return cls(PUBLISHER_SERVICE, record.instance_name, record.txt, host, port)

    @property
    def address(self) -> str:
        return f"tcp://{zmq_host(self.host)}:{self.port}"


def txt_variants(zeroconf: Zeroconf, name: str) -> list[dict[str, str]]:
    """Every TXT record of the service instance ``name`` that ``zeroconf`` has heard, keys
    lower-cased. A side announces a record per link (``Responders``), and a browser on the same
    host hears them all: the loopback one can hold what the others leave out (a management
    port on loopback), so a local tool looks at each, not at the one a resolver keeps."""
    from zeroconf import DNSText

    return [
        dict(Record.parse(name, _txt_pairs(entry.text)).txt)
        for entry in zeroconf.cache.entries_with_name(name)
        if isinstance(entry, DNSText)
    ]


def _txt_pairs(text: bytes) -> dict[bytes, bytes | None]:
    """A TXT record's length-prefixed strings as ``key=value`` pairs (RFC 6763 6.3-6.4)."""
    pairs: dict[bytes, bytes | None] = {}
    at = 0
    while at < len(text):
        item = text[at + 1 : at + 1 + text[at]]
        at += 1 + text[at]
        key, equals, value = item.partition(b"=")
        if key and key.lower() not in {k.lower() for k in pairs}:
            pairs[key] = value if equals else None
    return pairs


def resolve_interfaces(names: tuple[str, ...]) -> list[str]:
    """``discoveryInterfaces`` entries (IPv4 addresses of this host or interface names) -> the
    IPv4 addresses they stand for; ValueError names an entry that is neither."""
    return [address for link in links_of(names) for address in link.addresses]


def make_zeroconf(interfaces: tuple[str, ...] | None) -> ZeroEQZeroconf:
    """A Zeroconf instance on ``interfaces`` (None = all), IPv4 only, that writes instance
    names as ZeroEQ peers do (see ``ZeroEQZeroconf``). When ``interfaces`` come to one link it
    is that link's responder (``ZeroEQZeroconf.link``), which an ``Announcement`` can use."""
    links = links_of(interfaces) if interfaces else None
    if links is not None and len(links) == 1:
        return link_zeroconf(links[0])
    return _made(lambda: _zeroconf(None if links is None else [link.address for link in links]))


def link_zeroconf(link: Link) -> ZeroEQZeroconf:
    """The mDNS responder of one link: it sends on that link only, and answers that link's
    hosts only (``mdns``)."""
    return _made(lambda: _zeroconf([link.address], link))


def _zeroconf(addresses: list[str] | None, link: Link | None = None) -> ZeroEQZeroconf:
    from zeroconf import InterfaceChoice, IPVersion

    from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf

    chosen = InterfaceChoice.All if addresses is None else addresses
    return ZeroEQZeroconf(interfaces=chosen, ip_version=IPVersion.V4Only, link=link)


def _made(make: Callable[[], ZeroEQZeroconf]) -> ZeroEQZeroconf:
    """``make()``, on a thread of its own when this thread runs an asyncio loop (Jupyter's
    kernel does): Zeroconf would attach to that loop, and its blocking calls (registering a
    service) would then wait on the very loop they block. Elsewhere it starts its own loop
    thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return make()
    with ThreadPoolExecutor(1, thread_name_prefix="spark_zmq zeroconf") as helper:
        return helper.submit(make).result()


class Responders:
    """One mDNS responder per link that a side announces on (see ``links``): a link's records
    go out through its own responder, so each carries that link's addresses only.

    Made for ``interfaces`` (``discoveryInterfaces``; None = every interface), or around one
    link's responder that the caller owns (``borrowing``). Closes the responders it made."""

    def __init__(self, zeroconfs: list[ZeroEQZeroconf], owned: bool) -> None:
        self.zeroconfs = zeroconfs
        self._owned = owned

    @classmethod
    def on(cls, interfaces: tuple[str, ...] | None) -> Responders:
        """A responder for each link of ``interfaces``; ValueError names a wrong entry."""
        made: list[ZeroEQZeroconf] = []
        try:
            for link in links_of(interfaces):
                made.append(link_zeroconf(link))
        except Exception:
            for zeroconf in made:
                zeroconf.close()
            raise
        return cls(made, owned=True)

    @classmethod
    def borrowing(cls, zeroconf: ZeroEQZeroconf) -> Responders:
        """The responder of one link, made (and closed) by the caller."""
        from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf

        if not isinstance(zeroconf, ZeroEQZeroconf) or zeroconf.link is None:
            raise TypeError(
                "a ZeroEQ announcement needs a Zeroconf made by make_zeroconf() for one "
                "interface, such as make_zeroconf(('127.0.0.1',)): a plain one writes the "
                "instance name as several DNS labels, which C++ peers (avahi) reject, and "
                "one on several interfaces would send one link's addresses to the others"
            )
        return cls([zeroconf], owned=False)

    @property
    def links(self) -> list[Link]:
        return [zeroconf.link for zeroconf in self.zeroconfs if zeroconf.link is not None]

    def close(self) -> None:
        if self._owned:
            for zeroconf in self.zeroconfs:
                zeroconf.close()
        self.zeroconfs = []


@dataclass(frozen=True)
class LinkRecord:
    """What one link's record of an announcement says: the instance name, the address of its A
    record, the port of its SRV record, and its TXT keys."""

    instance_name: str
    address: str
    port: int
    txt: Mapping[str, str]


#: seconds to wait for the records of an announcement to be registered on every link (their
#: first announcements take about a second; the links are registered side by side)
REGISTER_TIMEOUT = 10.0


class Announcement:
    """Our own service on ZeroConf: on each link of ``responders``, the record that
    ``record_of(link)`` gives (None: none on that link), registered once; ``update`` announces
    changed TXT keys in place.

    Invariant: a record goes out only through its own link's responder, so every address in it
    is one the link's hosts reach (``links.announced_host`` decides them). The records share
    one SRV target host name of our own (see ``mdns.own_host_name``), each link with its own
    address record, as avahi announces a host."""

    def __init__(
        self,
        responders: Responders,
        service: str,
        record_of: Callable[[Link], LinkRecord | None],
    ) -> None:
        from spark_zmq.protocols.zeroeq.mdns import own_host_name

        self.service = service
        self._record_of = record_of
        self._lock = threading.Lock()  # updates come from tasks and discovery threads
        records = {z: r for z in responders.zeroconfs if (r := record_of(_link(z))) is not None}
        server = own_host_name(next(iter(records.values())).port) if records else ""
        self._infos: dict[ZeroEQZeroconf, ServiceInfo] = {}
        for zeroconf, record in records.items():
            zeroconf.keep_one_label(record.instance_name)
            self._infos[zeroconf] = _info(service, record, server)
        try:
            self._on_each(_register, self._infos)
        except BaseException:
            with contextlib.suppress(Exception):  # (a link that did not register cannot)
                self.close()  # the links that did register withdraw their records
            raise
        #: each link's record as announced, by link name
        self.records = {_link(z).name: r for z, r in records.items()}

    def update(self) -> None:
        """Announce again the records whose TXT keys changed (``record_of`` gives them)."""
        from zeroconf import ServiceInfo

        with self._lock:
            for zeroconf, info in list(self._infos.items()):
                record = self._record_of(_link(zeroconf))
                if record is None or dict(record.txt) == dict(
                    self.records[_link(zeroconf).name].txt
                ):
                    continue
                self._infos[zeroconf] = updated = ServiceInfo(
                    info.type,
                    info.name,
                    addresses=info.addresses,
                    port=info.port,
                    properties=dict(record.txt),
                    server=info.server,
                )
                self.records[_link(zeroconf).name] = record
                # Not update_service: that blocks for the rebroadcasts (~0.7 s); a publisher
                # calls this when it sends a new event, and should not wait for its records.
                loop = zeroconf.loop
                if loop is not None:  # None once zeroconf is closed: nothing to update then
                    asyncio.run_coroutine_threadsafe(zeroconf.async_update_service(updated), loop)

    def close(self) -> None:
        """Withdraw every record (goodbyes on each link)."""
        with self._lock:
            infos, self._infos = self._infos, {}
        self._on_each(_unregister, infos)

    @staticmethod
    def _on_each(
        action: Callable[[ZeroEQZeroconf, ServiceInfo], Coroutine[Any, Any, None]],
        infos: Mapping[ZeroEQZeroconf, ServiceInfo],
    ) -> None:
        """``action`` for every link's record, on each responder's loop at once; the first
        failure is raised once all have ended."""
        futures: list[Future] = []
        for zeroconf, info in infos.items():
            if zeroconf.loop is not None and not zeroconf.done:
                futures.append(
                    asyncio.run_coroutine_threadsafe(action(zeroconf, info), zeroconf.loop)
                )
        failures = []
        for future in futures:
            try:
                future.result(REGISTER_TIMEOUT)
            except Exception as exc:
                failures.append(exc)
        if failures:
            raise failures[0]


def _link(zeroconf: ZeroEQZeroconf) -> Link:
    assert zeroconf.link is not None  # (Responders hold per-link responders only)
    return zeroconf.link


def _info(service: str, record: LinkRecord, server: str) -> ServiceInfo:
    from zeroconf import ServiceInfo

    return ServiceInfo(
        service,
        f"{record.instance_name}.{service}",
        addresses=[socket.inet_aton(record.address)],
        port=record.port,
        properties=dict(record.txt),
        server=server,
    )


async def _register(zeroconf: ZeroEQZeroconf, info: ServiceInfo) -> None:
    """Register without probing (``cooperating_responders``): every responder of the host
    hears every link (``mdns``), so each would take its siblings' records of the same name
    (a reader's UUID, a publisher's name on loopback and its first link) for a conflict. Our
    names are unique by construction, a UUID or the ``address:port`` of a socket bound here."""
    broadcast = await zeroconf.async_register_service(
        info, cooperating_responders=True, strict=False
    )
    await broadcast


async def _unregister(zeroconf: ZeroEQZeroconf, info: ServiceInfo) -> None:
    await (await zeroconf.async_unregister_service(info))
