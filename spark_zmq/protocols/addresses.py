"""Addresses that peers hand us to connect to, checked before a socket sees them.

zmq's connect refuses some addresses outright (EINVAL): a host that starts with ``-``, ``_``
or ``.``, that holds a space or a letter outside ASCII; a tcp port that is not a number; an
``ipc://`` path longer than a Unix socket path holds (ENAMETOOLONG). Peers' announcements (a
ZeroConf record, a Zyre header, gobyd's Manager) are not ours to trust, and the socket that
would meet such an address may be capture's, whose failure ends the query. So discovery checks
every address a peer gives against these rules where it reads it, and refuses a bad one there,
naming the peer and the field.

The rules are a subset of what zmq takes (a host name is letters, digits, ``.``, ``-`` and
``_`` starting with a letter or digit; IP literals as ``ipaddress`` reads them), so an address
that passes here is one zmq connects to (or keeps trying to, for a name that does not resolve).
"""

from __future__ import annotations

import ipaddress
import re

from spark_zmq.errors import ProtocolError

#: a host name as zmq's connect takes it (its own check is looser), at most 253 characters
HOST_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
#: the longest path of an ``ipc://`` address: a Unix socket path (``sun_path``, 108 bytes on
#: Linux) less its terminating NUL
IPC_PATH_BYTES = 107
#: the longest inproc name we take from a peer (zmq has no limit; no real one is this long)
INPROC_NAME_BYTES = 256


class AddressError(ProtocolError):
    """An address from a peer that zmq would refuse to connect to."""


def check_host(host: str) -> str:
    """``host`` (brackets of an IPv6 literal already stripped) when zmq's connect takes it."""
    if HOST_NAME.fullmatch(host):
        return host
    try:
        ipaddress.IPv6Address(host)  # a zone (fe80::1%eth0) included
    except ValueError:
        raise AddressError(
            f"host {host!r} is neither an IP address nor a host name (letters, digits, "
            f"'.', '-' and '_', starting with a letter or digit, at most 253 characters)"
        ) from None
    return host


def check_port(port: int | str) -> int:
    """A tcp port to connect to: 1 to 65535 (decimal ASCII digits when given as text)."""
    if isinstance(port, str):
        if not (port.isascii() and port.isdigit() and len(port) <= 5):
            raise AddressError(f"port {port!r} is not a number from 1 to 65535")
        port = int(port)
    if not 0 < port < 65536:
        raise AddressError(f"port {port} is not a number from 1 to 65535")
    return port


def bracketed(host: str) -> str:
    """``host`` as it goes before ``:port`` in an address or a URL: an IPv6 literal in
    brackets, anything else as it is."""
    return f"[{host}]" if ":" in host else host


def tcp_address(host: str, port: int | str) -> str:
    """``tcp://host:port``, host and port checked (an IPv6 host goes in brackets)."""
    host = check_host(host.strip("[]") if host.startswith("[") else host)
    return f"tcp://{bracketed(host)}:{check_port(port)}"


def ipc_address(path: str) -> str:
    """``ipc://path``, the path checked: not empty, no NUL, short enough for a socket path."""
    if not path or "\0" in path:
        raise AddressError(f"ipc path {path!r} is empty or holds a NUL")
    if len(path.encode("utf-8")) > IPC_PATH_BYTES:
        raise AddressError(
            f"ipc path {path[:40]!r}... is {len(path.encode('utf-8'))} bytes; a Unix socket "
            f"path holds at most {IPC_PATH_BYTES}"
        )
    return f"ipc://{path}"


def connect_address(address: str) -> str:
    """A ``tcp://``, ``ipc://`` or ``inproc://`` address that zmq's connect takes, as given;
    AddressError says what is wrong with it."""
    scheme, separator, rest = address.partition("://")
    if scheme == "tcp" and separator:
        host, colon, port = rest.rpartition(":")
        if not colon or not host:
            raise AddressError(f"{address!r}: a tcp address needs host:port")
        if host.startswith("[") != host.endswith("]"):
            raise AddressError(f"{address!r}: unbalanced brackets around the host")
        tcp_address(host, port)
        return address
    if scheme == "ipc" and separator:
        return ipc_address(rest)
    if scheme == "inproc" and separator:
        if not rest or "\0" in rest or len(rest.encode("utf-8")) > INPROC_NAME_BYTES:
            raise AddressError(f"{address[:60]!r}: an inproc name must be 1 to 256 bytes")
        return address
    raise AddressError(f"{address[:60]!r} is not a tcp://, ipc:// or inproc:// address")


#: the longest partition key accepted (a key is a folder name, a column value in every row and
#: an entry in every offset Spark checkpoints; discovery makes it from what peers announce)
MAX_KEY_BYTES = 1024
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")


def address_problem(address: str) -> str | None:
    """Why capture must not connect to ``address`` (a zmq endpoint, from a peer or a user), or
    None: a ``tcp://``, ``ipc://`` or ``inproc://`` address that zmq's connect takes
    (``addresses.connect_address``), without control characters."""
    if CONTROL_CHARACTERS.search(address):
        return "its address holds control characters"
    try:
        connect_address(address)
    except AddressError as exc:
        return str(exc)
    return None


def key_problem(key: str) -> str | None:
    """Why ``key`` cannot name a partition, or None (see MAX_KEY_BYTES)."""
    if not key:
        return "its partition key is empty"
    if CONTROL_CHARACTERS.search(key):
        return "its partition key holds control characters"
    try:
        size = len(key.encode("utf-8"))
    except UnicodeEncodeError:
        return "its partition key is not valid Unicode"
    if size > MAX_KEY_BYTES:
        return f"its partition key has {size} bytes (at most {MAX_KEY_BYTES})"
    return None
