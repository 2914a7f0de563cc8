"""Serving a spool's ranges to read tasks on hosts that do not see its folder: Arrow Flight.

With capture on the driver or in a capture service, the spool is a folder on one host's disk,
and read tasks run on executors that may share no storage with it. The process that writes
the spool therefore serves it (``SpoolServer``, pyarrow's Arrow Flight over gRPC): a
``do_get`` whose ticket names an offset range of one partition (``remote.ticket``) is
answered with the rows of ``reader.read_range`` for that range, each record batch carrying its
slice's first offset and source as app metadata. Tasks that see the folder read its files
(``remote.open_range``); the server is for the others.

Invariants:

- Only the query's tasks read: every call must carry the server's token (random, made when the
  server starts, handed to tasks inside their partitions and kept in ``served.json``, which only
  the spool's owner can read; never logged). A call without it is refused before anything is
  read.
- A ticket names the spool by its identity; a task planned against another spool is refused,
  never served this one's rows.
- The server only reads: a range gives the same rows as long as the spool holds it, so a
  retried task reads what its failed attempt read (exactly once, as with the files).
- It listens on one address, the one it announces (``location``), never on every interface.
"""

from __future__ import annotations

import hmac
import json
import secrets
from collections.abc import Callable, Iterator

import pyarrow as pa
from pyarrow import flight

from spark_zmq.errors import SpoolError
from spark_zmq.log import logger
from spark_zmq.protocols.addresses import bracketed
from spark_zmq.spool.index import Listing
from spark_zmq.spool.layout import SPOOL_SCHEMA
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.remote import (
    TOKEN_HEADER,
    ServedSpool,
    ServerSettings,
    forget_served,
    save_served,
)
from spark_zmq.spool.segments import SegmentFiles


def _location(scheme: str, host: str, port: int) -> str:
    return f"{scheme}://{bracketed(host)}:{port}"


def _tls(settings: ServerSettings) -> tuple[str | None, list[flight.CertKeyPair]]:
    """The certificate (PEM) tasks are to trust, and the server's key pairs: none without
    ``spoolServerCertificate`` and ``spoolServerKey``."""
    if settings.certificate is None or settings.key is None:
        return None, []
    try:
        with open(settings.certificate, encoding="ascii") as f:
            certificate = f.read()
        with open(settings.key, encoding="ascii") as f:
            key = f.read()
    except (OSError, ValueError) as exc:
        raise SpoolError(
            f"cannot read the spool server's certificate or key (options "
            f"spoolServerCertificate, spoolServerKey): {exc}"
        ) from None
    return certificate, [flight.CertKeyPair(certificate, key)]


class _TokenCheck(flight.ServerMiddlewareFactory):
    """Refuses every call that does not carry the server's token."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self._expected = f"Bearer {token}".encode()

    def start_call(self, info: flight.CallInfo, headers: dict[str, list[str]]) -> None:
        given = headers.get(TOKEN_HEADER.decode(), [])
        if not any(hmac.compare_digest(value.encode(), self._expected) for value in given):
            raise flight.FlightUnauthenticatedError(
                "spark_zmq spool server: this call does not carry the token of the server's run"
            )


class SpoolServer(flight.FlightServerBase):
    """Serves ranges of the spool at ``root`` (identity ``spool_id``) to whoever has the
    token (module doc). ``start`` listens and says where in ``served.json``."""

    def __init__(
        self,
        root: str,
        spool_id: str,
        settings: ServerSettings,
        listing: Callable[[str, int, int], Listing | None] | None = None,
    ) -> None:
        """``listing``: a range's segments as the process that writes the spool holds them
        (``Spool.listing``), so that a call loads no index; None: each call loads it."""
        host, port = settings.resolved()
        token = secrets.token_urlsafe(32)
        certificate, pairs = _tls(settings)
        scheme = "grpc+tls" if certificate else "grpc+tcp"
        try:
            super().__init__(
                _location(scheme, host, port),
                tls_certificates=pairs,
                middleware={"token": _TokenCheck(token)},
            )
        except (flight.FlightError, OSError, pa.ArrowException) as exc:
            raise SpoolError(
                f"cannot serve spool {root} on {host}:{port} (option spoolServer): {exc}. "
                f"Give spoolServer an address of this host (and a free port), or off"
            ) from None
        self.root = root
        self._listing = listing
        #: the flush files read last, shared by the calls (a task's ranges read the same files)
        self._files = SegmentFiles()
        self.served = ServedSpool(_location(scheme, host, self.port), token, spool_id, certificate)

    def start(self) -> None:
        """Say where the spool is served (``served.json``) and log it once."""
        save_served(self.root, self.served)
        logger.info(
            "spool %s is served to read tasks on other hosts at %s (Arrow Flight%s; only "
            "tasks of this capture's run have its token)",
            self.root,
            self.served.location,
            ", TLS" if self.served.certificate else "",
        )

    def do_get(
        self, context: flight.ServerCallContext, ticket: flight.Ticket
    ) -> flight.FlightDataStream:
        key, start, end = self._range(ticket.ticket)
        return flight.GeneratorStream(SPOOL_SCHEMA, self._slices(key, start, end))

    def _range(self, raw: bytes) -> tuple[str, int, int]:
        """The range a ticket asks for, checked to be of this spool."""
        try:
            asked = json.loads(raw)
            spool, key = str(asked["spool"]), str(asked["partition"])
            start, end = int(asked["start"]), int(asked["end"])
        except (ValueError, KeyError, TypeError):
            raise _refusal("the ticket is not a spool range") from None
        if spool != self.served.spool_id:
            raise _refusal(
                f"this server serves spool {self.served.spool_id} ({self.root}), not {spool}: "
                f"the task was planned against another spool"
            )
        if not 0 <= start <= end:
            raise _refusal(f"[{start}, {end}) is not a range of offsets")
        return key, start, end

    def _slices(self, key: str, start: int, end: int) -> Iterator[tuple[pa.RecordBatch, bytes]]:
        try:
            listing = self._listing(key, start, end) if self._listing is not None else None
            slices = read_range(self.root, key, start, end, self._files, listing)
            for first, source, table in slices:
                offset = first
                for batch in table.replace_schema_metadata(None).to_batches():
                    slice_ = {"first": offset, "source": source.to_json()}
                    yield batch, json.dumps(slice_).encode()
                    offset += batch.num_rows
        except SpoolError as exc:
            raise _refusal(str(exc)) from None

    def close(self) -> None:
        """Stop serving (calls under way are cut) and say so in the spool."""
        forget_served(self.root)
        self.shutdown()


def _refusal(text: str) -> flight.FlightServerError:
    """An error whose text reaches the read task whole (as ``extra_info``)."""
    return flight.FlightServerError(text, extra_info=text.encode())
