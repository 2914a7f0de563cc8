"""What a ZeroEQ peer on another host sees and reaches, for tests/protocols/zeroeq/
test_zeroeq_hosts.py, which runs this in a network namespace of its own (``support.hosts``).
Written from shared/protocols/zeroeq.md with plain python-zeroconf and pyzmq, not with the
package's code:

    browse SERVICE SECONDS
        browses SERVICE (``_zeroeq_pub._tcp.local.``, ``_zeroeq_sub._tcp.local.``) on every
        interface for SECONDS and prints one JSON line per instance found: its name, and every
        record of it that reached this host (not only the one python-zeroconf would resolve):
        the TXT records (keys lower-cased), the SRV records (port, target) and the addresses of
        the A records of those targets
    vocabulary ADDRESS
        asks the vocabulary server at ADDRESS (``zeroeq::vocabulary::Request``) and prints the
        reply's JSON
    request ADDRESS TYPE
        sends a request of type TYPE (an event name) with no payload to the REP server at
        ADDRESS and prints the reply's type name-less id (hex) and payload as JSON
    subscribe ADDRESS EVENT COUNT
        connects a SUB to ADDRESS, subscribed to EVENT and Meerkat, and prints each of COUNT
        messages as a JSON list of hex frames
"""

from __future__ import annotations

import hashlib
import json
import socket
import sys
import time

import zmq
from zeroconf import (
    DNSAddress,
    DNSService,
    DNSText,
    InterfaceChoice,
    IPVersion,
    ServiceBrowser,
    ServiceStateChange,
    Zeroconf,
)


def event_id(name: str) -> bytes:
    """The fact sheet's wire id: each 8-byte half of the MD5 digest byte-reversed."""
    digest = hashlib.md5(name.encode()).digest()
    return digest[7::-1] + digest[15:7:-1]


def browse(service: str, seconds: float) -> None:
    zeroconf = Zeroconf(interfaces=InterfaceChoice.All, ip_version=IPVersion.V4Only)
    names: set[str] = set()

    def on_change(zeroconf, service_type, name, state_change) -> None:
        if state_change is not ServiceStateChange.Removed:
            names.add(name)

    browser = ServiceBrowser(zeroconf, service, handlers=[on_change])
    time.sleep(seconds)
    browser.cancel()
    for name in sorted(names):
        zeroconf.get_service_info(service, name, timeout=3000)  # asks for whatever is missing
        print(json.dumps(records_of(zeroconf, name[: -len(service) - 1], name)), flush=True)
    zeroconf.close()


def records_of(zeroconf: Zeroconf, instance: str, name: str) -> dict:
    """Every TXT, SRV and A record of instance ``name`` in the cache."""
    entries = zeroconf.cache.entries_with_name(name)
    services = [e for e in entries if isinstance(e, DNSService)]
    hosts = {s.server for s in services}
    addresses = {
        socket.inet_ntoa(a.address)
        for host in hosts
        for a in zeroconf.cache.entries_with_name(host)
        if isinstance(a, DNSAddress) and len(a.address) == 4
    }
    return {
        "name": instance,
        "txt": [txt_keys(e.text) for e in entries if isinstance(e, DNSText)],
        "srv": sorted([s.port, s.server] for s in services),
        "addresses": sorted(addresses),
    }


def txt_keys(text: bytes) -> dict[str, str]:
    """A TXT record's strings (length-prefixed ``key=value``) as a dict, keys lower-cased."""
    keys, i = {}, 0
    while i < len(text):
        item = text[i + 1 : i + 1 + text[i]].decode()
        i += 1 + text[i]
        key, _, value = item.partition("=")
        keys[key.lower()] = value
    return keys


def request(address: str, request_type: bytes) -> list[bytes]:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(address)
    sock.send(request_type)
    if not sock.poll(10_000):
        sys.exit(f"no reply from {address} within 10 s")
    return sock.recv_multipart()


def subscribe(address: str, event: str, count: int) -> None:
    sock = zmq.Context.instance().socket(zmq.SUB)
    sock.setsockopt(zmq.LINGER, 0)
    for name in (event, "zeroeq::Meerkat"):
        sock.setsockopt(zmq.SUBSCRIBE, event_id(name))
    sock.connect(address)
    for _ in range(count):
        if not sock.poll(60_000):
            sys.exit(f"no message from {address} within 60 s")
        print(json.dumps([frame.hex() for frame in sock.recv_multipart()]), flush=True)


def main(command: str, *args: str) -> None:
    if command == "browse":
        browse(args[0], float(args[1]))
    elif command == "vocabulary":
        reply = request(args[0], event_id("zeroeq::vocabulary::Request"))
        assert reply[0] == event_id("zeroeq::vocabulary::Reply"), reply
        print(reply[1].decode())
    elif command == "request":
        reply = request(args[0], event_id(args[1]))
        print(json.dumps({"type": reply[0].hex(), "payload": b"".join(reply[1:]).decode()}))
    elif command == "subscribe":
        subscribe(args[0], args[1], int(args[2]))
    else:
        sys.exit(f"unknown command {command}")


if __name__ == "__main__":
    main(*sys.argv[1:])
