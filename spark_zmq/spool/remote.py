"""Reading a spool's range where the read task runs: from its files where this host sees the
spool, else from the process that writes it (``serving``), over Arrow Flight.

With capture on the driver or in a capture service, the spool is a folder on one host; read
tasks run on executors that may share no storage with it. ``open_range`` is the one way a read
task gets its rows: the files when this host sees the spool (local mode, the same host, shared
storage: the spool's identity in ``spool.json`` is the one the task was planned against), the
spool's server otherwise (``ServedSpool``, handed to the task inside its partition). Either way
the rows are those of ``reader.read_range``: the server runs that very function.

A host that sees neither is told so, naming the host, the spool and the fix: never the spool
"holds nothing", which would blame the spool for a deployment's missing storage or server.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from spark_zmq.errors import SpoolError
from spark_zmq.spool.identity import IDENTITY_NAME
from spark_zmq.spool.index import Listing, Source, checked_version, versioned
from spark_zmq.spool.layout import remove_quietly, write_atomically
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.segments import SegmentFiles

if TYPE_CHECKING:
    import pyarrow.flight

#: the document in a spool folder that says where its writer serves it (``save_served``)
SERVED_NAME = "served.json"
#: the header a call carries its token in (gRPC metadata keys are lower-case)
TOKEN_HEADER = b"authorization"
#: seconds without an answer before a read task's connection counts as dead (gRPC keepalive):
#: a server whose host lost power fails the task instead of hanging it
KEEPALIVE_SECONDS = 20


class SpoolNotShared(SpoolError):
    """A read task's host sees neither the spool's folder nor a server of it."""


class SpoolServerError(SpoolError):
    """The spool's server could not be reached, or refused or failed a read."""


@dataclass(frozen=True)
class ServedSpool:
    """Where a spool is served and how to be let in: what a read task needs to read it from
    another host. ``token`` is a secret of the server's run; it goes to tasks inside their
    partitions and to ``served.json`` (readable by the spool's owner only), never to a log."""

    location: str  # grpc+tcp://host:port, or grpc+tls://host:port
    token: str
    spool_id: str  # the identity (spool.json) of the spool it serves
    #: with TLS: the server's certificate (PEM), the only one a task accepts from it
    certificate: str | None = None

    def __repr__(self) -> str:  # partitions are printed in Spark's logs: the token is not
        return f"ServedSpool({self.location!r}, spool {self.spool_id})"

    def to_json(self) -> dict[str, Any]:
        return {
            "location": self.location,
            "token": self.token,
            "spool_id": self.spool_id,
            "certificate": self.certificate,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ServedSpool:
        certificate = doc.get("certificate")
        return cls(
            str(doc["location"]),
            str(doc["token"]),
            str(doc["spool_id"]),
            None if certificate is None else str(certificate),
        )


@dataclass(frozen=True)
class ServerSettings:
    """Where and how to serve a spool (options ``spoolServer``, ``spoolServerCertificate``,
    ``spoolServerKey``). ``host`` None: the address Spark gives a driver by default
    (``default_host``); ``port`` 0: any free one; ``certificate`` and ``key``: PEM files for
    TLS (both or neither)."""

    host: str | None = None
    port: int = 0
    certificate: str | None = None
    key: str | None = None

    def resolved(self) -> tuple[str, int]:
        return (self.host or default_host(), self.port)


def default_host() -> str:
    """The address Spark gives a driver that was not told one (``Utils.findLocalInetAddress``):
    ``SPARK_LOCAL_IP``, else the address the host name resolves to, else, when that is
    loopback, an IPv4 address of an interface that is not (the last interface's first, as
    Spark takes them on Linux). Executors reach the driver there, so they reach this host
    there too."""
    explicit = os.environ.get("SPARK_LOCAL_IP", "").strip()
    if explicit:
        return explicit
    try:
        address = socket.gethostbyname(socket.gethostname())
    except OSError:
        address = "127.0.0.1"
    if not ipaddress.ip_address(address).is_loopback:
        return address
    return next(reversed(_non_loopback_addresses()), address)


def _non_loopback_addresses() -> list[str]:
    """The first IPv4 address of each of this host's interfaces other than loopback and
    link-local ones, in the interfaces' order."""
    import ifaddr

    found = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                address = ipaddress.IPv4Address(ip.ip)
                if not (address.is_loopback or address.is_link_local):
                    found.append(str(address))
                    break
    return found


# -- served.json: where the process that writes a spool serves it ------------------------------


def save_served(root: str, served: ServedSpool) -> None:
    """Say in the spool where it is served: a query's planner (``capture=service``) and batch
    reads hand that to their tasks. Readable by the spool's owner only: it holds the token."""
    data = json.dumps(versioned(served.to_json()), indent=1, sort_keys=True).encode()
    write_atomically(os.path.join(root, SERVED_NAME), data, mode=stat.S_IRUSR | stat.S_IWUSR)


def load_served(root: str) -> ServedSpool | None:
    """Where the spool at ``root`` is served, if its writer serves it (None: nobody does)."""
    path = os.path.join(root, SERVED_NAME)
    try:
        with open(path, encoding="utf-8") as f:
            return ServedSpool.from_json(checked_version(json.load(f), path))
    except FileNotFoundError:
        return None
    except (ValueError, KeyError, TypeError) as exc:
        raise SpoolError(
            f"{path} is not a spool server's address ({exc!r}); remove it, and restart the "
            f"capture that writes the spool"
        ) from None


def forget_served(root: str) -> None:
    """The spool is no longer served (its writer stops)."""
    remove_quietly(os.path.join(root, SERVED_NAME))


# -- where a read task reads ------------------------------------------------------------------


def sees_spool(root: str, spool_id: str) -> bool:
    """True if this host sees the spool ``spool_id`` at ``root`` (its own folder, or shared
    storage): another host's folder at the same path holds another identity, or none."""
    try:
        with open(os.path.join(root, IDENTITY_NAME), encoding="utf-8") as f:
            return bool(json.load(f).get("id") == spool_id)
    except (OSError, ValueError, AttributeError):
        return False


def open_range(
    root: str,
    key: str,
    start: int,
    end: int,
    spool_id: str | None = None,
    served: ServedSpool | None = None,
    files: SegmentFiles | None = None,
    listing: Listing | None = None,
) -> Iterator[tuple[int, Source, pa.Table]]:
    """(first offset, source, rows) of offsets [start, end) of partition ``key``, as
    ``reader.read_range`` gives them: from the files where this host sees the spool
    ``spool_id`` (None: the files, unchecked; ``files``: the flush files read so far;
    ``listing``: the segments as the planner saw them), else from its server ``served``;
    SpoolNotShared if neither."""
    if spool_id is None or sees_spool(root, spool_id):
        return read_range(root, key, start, end, files, listing)
    if served is not None and served.spool_id == spool_id:
        return read_served_range(served, key, start, end)
    raise SpoolNotShared(
        f"the read task on host {socket.gethostname()} does not see spool {root} (identity "
        f"{spool_id}) and nothing serves it to this host. Read tasks read the spool's files "
        f"where their host sees them, else from the process that captures: with "
        f"capture=driver or a capture service, leave option spoolServer at auto (or name an "
        f"address of the capturing host that executors reach); with capture=executors, or "
        f"to read the files directly, put spoolPath on storage every node reaches (NFS, a "
        f"cluster file system)"
    )


# -- the Flight client -------------------------------------------------------------------------


def ticket(spool_id: str, key: str, start: int, end: int) -> bytes:
    """A do_get ticket: a range of one partition of one spool."""
    return json.dumps({"spool": spool_id, "partition": key, "start": start, "end": end}).encode()


def read_served_range(
    served: ServedSpool, key: str, start: int, end: int
) -> Iterator[tuple[int, Source, pa.Table]]:
    """``read_range`` of the spool's server: each record batch carries its slice's first
    offset and source as app metadata (``serving``)."""
    from pyarrow import flight

    call = flight.FlightCallOptions(headers=[(TOKEN_HEADER, f"Bearer {served.token}".encode())])
    try:
        stream = _client(served.location, served.certificate).do_get(
            flight.Ticket(ticket(served.spool_id, key, start, end)), call
        )
        for chunk in stream:
            if chunk.app_metadata is None:
                raise SpoolServerError(
                    f"spool server at {served.location} sent rows without their offset: it "
                    f"is not a spark_zmq spool server"
                )
            slice_ = json.loads(chunk.app_metadata.to_pybytes())
            yield (
                int(slice_["first"]),
                Source.from_json(slice_["source"]),
                pa.Table.from_batches([chunk.data]),
            )
    except flight.FlightError as exc:
        raise _served_error(served, key, start, end, exc) from None


_clients: dict[tuple[str, str | None], pyarrow.flight.FlightClient] = {}
_clients_lock = threading.Lock()


def _client(location: str, certificate: str | None) -> pyarrow.flight.FlightClient:
    """One client (one gRPC channel) per server and process: Python workers are reused, so
    later tasks skip the connection's set-up. With TLS it trusts the server's certificate
    only (not the host's CAs)."""
    from pyarrow import flight

    with _clients_lock:
        client = _clients.get((location, certificate))
        if client is None:
            keepalive = KEEPALIVE_SECONDS * 1000
            client = _clients[(location, certificate)] = flight.FlightClient(
                location,
                tls_root_certs=certificate.encode() if certificate else None,
                generic_options=[
                    ("grpc.keepalive_time_ms", keepalive),
                    ("grpc.keepalive_timeout_ms", keepalive),
                ],
            )
        return client


def _served_error(
    served: ServedSpool, key: str, start: int, end: int, exc: pyarrow.flight.FlightError
) -> SpoolError:
    """What a failed call means, and what to do about it."""
    from pyarrow import flight

    where = (
        f"offsets [{start}, {end}) of partition {key!r} from the spool server at "
        f"{served.location} (spool {served.spool_id})"
    )
    if isinstance(exc, flight.FlightUnavailableError):
        return SpoolServerError(
            f"the read task on host {socket.gethostname()} cannot read {where}: it does not "
            f"answer ({_first_line(exc)}). It is served by the process that captures (the "
            f"query's driver-side reader, or a capture service) on the address of option "
            f"spoolServer (auto: the address Spark's driver takes by default): if executors "
            f"reach that host at another address (spark.driver.host), set spoolServer to it; "
            f"if the capture ended, so did its server"
        )
    if isinstance(exc, flight.FlightUnauthenticatedError):
        return SpoolServerError(
            f"cannot read {where}: the server refused the task's token. The task was planned "
            f"by another run of the capture than the one serving now (it restarted); the "
            f"query's next attempt plans with the new one"
        )
    told = exc.extra_info.decode("utf-8", "replace") if exc.extra_info else _first_line(exc)
    return SpoolServerError(f"cannot read {where}: {told}")


def _first_line(exc: BaseException) -> str:
    """gRPC's message without the detail lines it appends."""
    text = str(exc).split(". Detail:")[0].split(". gRPC client debug context")[0]
    return text.splitlines()[0] if text else type(exc).__name__
