"""The EBUS broker's request routing: clients on the frontend ROUTER, workers on the backend.

Follows the reference implementation (``shared/protocols/ebus.md``), so that its clients and
workers and ours behave the same against either broker:

- Every frontend message is read **by position**, whatever its type:
  ``[identity, '', sender, type, service, requestId, data, stalesMs]`` (missing frames read as
  empty). SERVICES and WORKERS answers echo index 5, which the reference client leaves empty.
- A worker registers first with ``['EBW01', 'READY', 'null', service]``; anything before READY,
  or a second READY, gets it a DISCONNECT. The broker heartbeats workers every 500 ms and drops
  one that stayed silent for 5 heartbeats.
- A client's ``REQ`` goes to the least-loaded worker of the service. A request for a service
  with no worker (yet) is **held** until one registers, then dispatched, in arrival order; the
  requests of a worker that is dropped are held again. A duplicate request id is answered from
  the reply cache (5 s).
- A request still unanswered after ``stalesMs`` gets ``REJECT, requestId`` with **no data
  frame**: that is how the reference broker says "expired" (it never sends EXPIRED, which its
  client does not understand). A worker's REJECT always carries a data frame (``null`` at
  least), so a client tells the two apart.
- ``PING`` is answered with ``HEARTBEAT``; ``SERVICES`` and ``WORKERS`` with the registered
  service names and ``[{id, service, load}]``, packed.

Everything runs on one thread; the broker announces ``ebus/workers`` through the relay when the
set of services changes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.ebus.wire import (
    CLIENT,
    DEFAULT_STALES_MS,
    HEARTBEAT_SECONDS,
    LIVENESS,
    REPLY_CACHE_SECONDS,
    WORKER,
    pack,
)


@dataclass
class _Worker:
    identity: bytes
    service: str
    load: int = 0
    seen: float = field(default_factory=time.monotonic)


@dataclass
class _Pending:
    """A request on its way: with a worker, or held (``worker`` None) until one registers."""

    client: bytes
    service: str
    request_id: bytes
    data: bytes
    stales_ms: int
    expires: float
    worker: bytes | None = None


#: positions of a frontend message's frames after the identity, as the reference broker reads
_SENDER, _TYPE, _SERVICE, _REQUEST_ID, _DATA, _STALES = range(2, 8)


class RequestRouter:
    """Frontend (clients) and backend (workers) of a broker; see the module docstring."""

    def __init__(
        self,
        frontend: zmq.Socket,
        backend: zmq.Socket,
        on_services_changed: Callable[[list[str]], None],
    ) -> None:
        self.frontend = frontend
        self.backend = backend
        self.on_services_changed = on_services_changed
        self.workers: dict[bytes, _Worker] = {}
        self.pending: dict[bytes, _Pending] = {}
        self.replies: dict[bytes, tuple[float, list[bytes]]] = {}
        self._next_heartbeat = time.monotonic()

    # -- clients -------------------------------------------------------------------------------

    def from_client(self, frames: list[bytes]) -> None:
        """One frontend message, read by position as the reference broker reads it."""
        identity = frames[0]
        field = frames + [b""] * (_STALES + 1 - len(frames))
        if field[_SENDER] != CLIENT:
            logger.warning(
                "ebus broker: a frontend message from %r whose frame 2 is %r, not %r; ignored",
                identity,
                field[_SENDER][:16],
                CLIENT,
            )
            return
        kind, request_id = field[_TYPE], field[_REQUEST_ID]
        if kind in (b"REQ", b"REQUEST"):
            self._request(
                identity,
                field[_SERVICE],
                request_id,
                field[_DATA] or b"null",
                _stales_ms(field[_STALES]),
            )
        elif kind == b"PING":
            self._to_client(identity, b"HEARTBEAT")
        elif kind == b"SERVICES":
            names = sorted({w.service for w in self.workers.values()})
            self._to_client(identity, b"SERVICES", request_id, pack(names))
        elif kind == b"WORKERS":
            listing = [
                {"id": w.identity.decode("utf-8", "replace"), "service": w.service, "load": w.load}
                for w in self.workers.values()
            ]
            self._to_client(identity, b"WORKERS", request_id, pack(listing))
        elif kind == b"CANCEL":
            pending = self.pending.pop(request_id, None)
            if pending is not None and pending.worker is not None:
                self._to_worker(pending.worker, b"CANCEL", request_id)
                self._unload(pending.worker)

    def _request(
        self, client: bytes, service: bytes, request_id: bytes, data: bytes, stales: int
    ) -> None:
        cached = self.replies.get(request_id)
        if cached is not None:
            self._to_client(client, *cached[1])
            return
        if request_id in self.pending:  # a resend of a request still being worked on
            self.pending[request_id].client = client
            return
        pending = _Pending(
            client,
            service.decode("utf-8", "replace"),
            request_id,
            data,
            stales,
            time.monotonic() + stales / 1000.0,
        )
        self.pending[request_id] = pending
        self._dispatch(pending)

    def _dispatch(self, pending: _Pending) -> None:
        """Give a request to the least-loaded worker of its service; without one, it stays
        held (``worker`` None) until a worker registers or it expires."""
        candidates = [w for w in self.workers.values() if w.service == pending.service]
        if not candidates:
            pending.worker = None
            return
        worker = min(candidates, key=lambda w: w.load)
        worker.load += 1
        pending.worker = worker.identity
        self._to_worker(
            worker.identity,
            b"REQ",
            pending.request_id,
            pending.data,
            str(pending.stales_ms).encode(),
        )

    def _to_client(self, identity: bytes, kind: bytes, *args: bytes) -> None:
        self.frontend.send_multipart([identity, b"", WORKER, kind, *args])

    # -- workers -------------------------------------------------------------------------------

    def from_worker(self, frames: list[bytes]) -> None:
        identity, body = frames[0], frames[1:]
        if len(body) < 2 or body[0] != WORKER:
            logger.warning(
                "ebus broker: malformed message from worker %r; disconnecting it", identity
            )
            self._to_worker(identity, b"DISCONNECT", b"malformed message")
            return
        kind, args = body[1], body[2:]
        worker = self.workers.get(identity)
        if kind == b"READY":
            self._ready(identity, worker, args)
            return
        if worker is None:
            self._to_worker(identity, b"DISCONNECT", b"not registered: send READY first")
            return
        worker.seen = time.monotonic()
        if kind in (b"REPLY", b"REJECT") and args:
            self._answer(worker, kind, args)
        elif kind == b"PING":
            self._to_worker(identity, b"HEARTBEAT")
        elif kind == b"DISCONNECT":
            self._drop(identity, "it disconnected")

    def _ready(self, identity: bytes, worker: _Worker | None, args: list[bytes]) -> None:
        if worker is not None or len(args) < 2:
            self._to_worker(identity, b"DISCONNECT", b"READY twice, or without a service")
            self._drop(identity, "a second READY")
            return
        service = args[1].decode("utf-8", "replace")
        self.workers[identity] = _Worker(identity, service)
        logger.info(
            "ebus broker: worker %s registered for service %r",
            identity.decode("utf-8", "replace"),
            service,
        )
        self._services_changed()
        for pending in list(self.pending.values()):  # arrival order: dicts keep it
            if pending.worker is None and pending.service == service:
                self._dispatch(pending)

    def _answer(self, worker: _Worker, kind: bytes, args: list[bytes]) -> None:
        request_id = args[0]
        pending = self.pending.pop(request_id, None)
        self._unload(worker.identity)
        if pending is None:
            return  # expired or cancelled meanwhile
        message = [kind, request_id, args[1] if len(args) > 1 else b"null"]
        self.replies[request_id] = (time.monotonic() + REPLY_CACHE_SECONDS, message)
        self._to_client(pending.client, *message)

    def _to_worker(self, identity: bytes, kind: bytes, *args: bytes) -> None:
        self.backend.send_multipart([identity, CLIENT, kind, *args])

    def _unload(self, identity: bytes) -> None:
        worker = self.workers.get(identity)
        if worker is not None and worker.load > 0:
            worker.load -= 1

    def _drop(self, identity: bytes, why: str) -> None:
        worker = self.workers.pop(identity, None)
        if worker is None:
            return
        logger.info(
            "ebus broker: worker %s of %r removed: %s",
            identity.decode("utf-8", "replace"),
            worker.service,
            why,
        )
        for pending in list(self.pending.values()):
            if pending.worker == identity:  # held again: another worker, or expiry
                self._dispatch(pending)
        self._services_changed()

    def _services_changed(self) -> None:
        self.on_services_changed(sorted({w.service for w in self.workers.values()}))

    # -- time ----------------------------------------------------------------------------------

    def tick(self) -> float:
        """Heartbeats, worker expiry, request expiry, reply-cache cleanup; the next due time."""
        now = time.monotonic()
        if now >= self._next_heartbeat:
            for identity in list(self.workers):
                self._to_worker(identity, b"HEARTBEAT")
            self._next_heartbeat = now + HEARTBEAT_SECONDS
        for identity, worker in list(self.workers.items()):
            if now - worker.seen > HEARTBEAT_SECONDS * LIVENESS:
                self._drop(identity, f"silent for {LIVENESS} heartbeats")
        for request_id, pending in list(self.pending.items()):
            if now >= pending.expires:  # expired: REJECT with no data frame
                del self.pending[request_id]
                if pending.worker is not None:
                    self._unload(pending.worker)
                self._to_client(pending.client, b"REJECT", request_id)
        for request_id, (until, _) in list(self.replies.items()):
            if now >= until:
                del self.replies[request_id]
        return self._next_heartbeat


#: the longest request lifetime a broker keeps (JavaScript's longest timer, ~24.8 days)
MAX_STALES_MS = 2**31 - 1


def _stales_ms(frame: bytes) -> int:
    try:
        return min(max(1, int(frame.decode() or DEFAULT_STALES_MS)), MAX_STALES_MS)
    except ValueError:
        return DEFAULT_STALES_MS
