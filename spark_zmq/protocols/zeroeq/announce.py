"""ZeroConf records of ZeroEQ publishers (``_zeroeq_pub._tcp``) and subscribers
(``_zeroeq_sub._tcp``): parsing what others announce, and announcing ourselves.

TXT keys are read lower-cased (DNS-SD keys are case-insensitive, and the shipped library
writes ``Session`` where the seed says ``session``). python-zeroconf rejects these service
names in strict mode, so registration and browsing run with ``strict=False``.

Our records go on the wire as a ZeroEQ peer writes them (the instance name as one DNS label,
an SRV target host of our own): ``mdns`` says how, and why.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

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
            raise ValueError(
                f"discoveryInterfaces: no interface {name!r} with an IPv4 address; "
                f"interfaces here: {', '.join(sorted(adapters)) or 'none'}"
            )
        addresses.extend(ips)
    return addresses


def make_zeroconf(interfaces: tuple[str, ...] | None) -> ZeroEQZeroconf:
    """A Zeroconf instance on ``interfaces`` (None = all), IPv4 only, that writes instance
    names as ZeroEQ peers do (see ``ZeroEQZeroconf``).

    Made on a thread of its own when this thread runs an asyncio loop (Jupyter's kernel does):
    Zeroconf would attach to that loop, and its blocking calls (registering a service) would
    then wait on the very loop they block. Elsewhere it starts its own loop thread."""
    from zeroconf import InterfaceChoice, IPVersion

    from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf

    chosen = InterfaceChoice.All if not interfaces else resolve_interfaces(interfaces)

    def make() -> ZeroEQZeroconf:
        return ZeroEQZeroconf(interfaces=chosen, ip_version=IPVersion.V4Only)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return make()
    with ThreadPoolExecutor(1, thread_name_prefix="spark_zmq zeroconf") as helper:
        return helper.submit(make).result()


class Announcement:
    """Our own record on ZeroConf: registered once, its TXT keys updated in place.

    Its instance name goes on the wire as one label, and its SRV target is a host name of its
    own (see ``mdns``), so ``zeroconf`` must come from ``make_zeroconf``."""

    def __init__(
        self,
        zeroconf: Zeroconf,
        service: str,
        instance_name: str,
        host: str,
        port: int,
        txt: dict[str, str],
    ) -> None:
        from zeroconf import ServiceInfo

        from spark_zmq.protocols.zeroeq.mdns import ZeroEQZeroconf, own_host_name

        if not isinstance(zeroconf, ZeroEQZeroconf):
            raise TypeError(
                "a ZeroEQ announcement needs a Zeroconf made by make_zeroconf(): "
                "a plain one writes the instance name as several DNS labels, "
                "which C++ peers (avahi) reject"
            )
        try:
            packed = [socket.inet_aton(socket.gethostbyname(host))]
        except OSError:
            packed = []
        zeroconf.keep_one_label(instance_name)
        self._zeroconf = zeroconf
        info = ServiceInfo(
            service,
            f"{instance_name}.{service}",
            addresses=packed,
            port=port,
            properties=txt,
            server=own_host_name(port),
        )
        zeroconf.register_service(info, strict=False)
        self._info: ServiceInfo | None = info
        self.txt = dict(txt)
        self._lock = threading.Lock()  # updates come from tasks and discovery threads

    def update(self, txt: dict[str, str]) -> None:
        with self._lock:
            if txt != self.txt and self._info is not None:
                self._update(self._info, txt)

    def _update(self, info: ServiceInfo, txt: dict[str, str]) -> None:
        from zeroconf import ServiceInfo

        self._info = updated = ServiceInfo(
            info.type,
            info.name,
            addresses=info.addresses,
            port=info.port,
            properties=txt,
            server=info.server,
        )
        # Not update_service: that blocks for the rebroadcasts (~0.7 s); a publisher calls this
        # when it sends a new event, and should not wait for its announcement.
        loop = self._zeroconf.loop
        if loop is not None:  # None once zeroconf is closed: nothing to update then
            asyncio.run_coroutine_threadsafe(self._zeroconf.async_update_service(updated), loop)
        self.txt = dict(txt)

    def close(self) -> None:
        with self._lock:
            info, self._info = self._info, None
        if info is not None:
            self._zeroconf.unregister_service(info)
