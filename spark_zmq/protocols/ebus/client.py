"""The client side of an EBUS broker's frontend: requests to services, SERVICES and WORKERS.

``Client`` is long-lived and keeps the spec's client rules on a thread of its own (a zmq socket
belongs to one thread, and heartbeats must go on while callers wait for answers):

- any message from the broker counts as a heartbeat; after ``heartbeat`` seconds of silence it
  PINGs, and it answers the broker's PING with HEARTBEAT;
- after ``liveness`` heartbeats of silence, or on the broker's DISCONNECT, it closes its socket
  and reconnects with a new identity (``C`` + uuid), sending every unexpired request again with
  the same request id: a broker that restarted gets it anew, one that did not answers from its
  reply cache or routes the answer to the new identity;
- an unanswered request is resent after ``resend_after`` seconds, at most ``resends`` times,
  with its id, and expires after its ``stalesMs`` (the broker is told with CANCEL);
- answers to request ids it does not know are discarded;
- a REJECT without a data frame is the broker's word for "expired" (the reference broker
  never sends EXPIRED; a worker's REJECT always has data, ``null`` at least), so it resolves
  as EXPIRED, like an EXPIRED message and like the client's own expiry;
- SERVICES and WORKERS go out as the reference broker reads them, with our id at index 5
  (``['', 'EBC01', 'SERVICES', '', id]``); the reference broker echoes it, but its own client
  sends none, so an answer with an empty id settles the oldest question of its type.

Callers get ``concurrent.futures.Future`` objects resolved with an ``Answer``. ``ask`` is a
one-shot SERVICES or WORKERS question, for the CLI.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import zmq

from spark_zmq.errors import PeerError
from spark_zmq.log import logger
from spark_zmq.mailbox import Mailbox
from spark_zmq.protocols.ebus.outstanding import Outstanding, PendingRequest
from spark_zmq.protocols.ebus.wire import (
    CLIENT,
    DEFAULT_STALES_MS,
    HEARTBEAT_SECONDS,
    LIVENESS,
    RESEND_SECONDS,
    RESENDS,
    WORKER,
    PayloadError,
    unpack,
)
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.units import milliseconds

#: what a broker can answer to a request
ANSWER_KINDS = (b"REPLY", b"REJECT", b"EXPIRED")
#: the questions a client can ask the broker about itself
QUESTION_KINDS = (b"SERVICES", b"WORKERS")


class BrokerError(PeerError):
    """The broker did not answer, or answered with something else."""


class Client:
    """A client of the broker frontend at ``address``; see the module docstring."""

    def __init__(
        self,
        address: str,
        *,
        heartbeat: float = HEARTBEAT_SECONDS,
        liveness: int = LIVENESS,
        resend_after: float = RESEND_SECONDS,
        resends: int = RESENDS,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.address = address
        self.curve = curve
        self.heartbeat = heartbeat
        self.liveness = liveness
        self.resend_after = resend_after
        self.resends = resends
        #: reconnections so far (silence or DISCONNECT)
        self.reconnects = 0
        self.identity = b""
        self._context = context or zmq.Context.instance()
        self._socket: zmq.Socket | None = None
        self._poller = zmq.Poller()
        self._outstanding = Outstanding()
        self._mailbox = Mailbox()  # requests and questions from callers' threads
        self._stopping = False
        self._last_heard = self._next_ping = 0.0
        self._outage = False  # a silence was logged and the broker not heard since
        self._thread = threading.Thread(
            target=self._run, name=f"spark_zmq ebus client {address}", daemon=True
        )
        self._thread.start()

    # -- any thread ----------------------------------------------------------------------------

    def request(
        self,
        service: str,
        data: bytes,
        *,
        request_id: str | None = None,
        stales_ms: int = DEFAULT_STALES_MS,
    ) -> Future:
        """Send ``data`` (a packed frame) to ``service``; the future resolves to an Answer."""
        future: Future = Future()
        request_id_bytes = (request_id or uuid.uuid4().hex).encode("utf-8")
        self._command(
            "request",
            PendingRequest(
                service.encode("utf-8"),
                request_id_bytes,
                data,
                stales_ms,
                time.monotonic() + stales_ms / 1000,
                [future],
            ),
        )
        return future

    def ask(self, kind: str, timeout: float = 3.0) -> Any:
        """The broker's unpacked answer to ``SERVICES`` or ``WORKERS``."""
        future: Future = Future()
        request_id = uuid.uuid4().hex.encode()
        self._command("ask", (kind.encode(), request_id, future))
        try:
            frame = future.result(timeout)
        except FutureTimeout:
            self._command("forget", request_id)
            raise BrokerError(
                f"no {kind} answer from the EBUS broker at {self.address} within {timeout} s"
            ) from None
        try:
            return unpack(frame)
        except PayloadError as exc:
            raise BrokerError(
                f"the EBUS broker at {self.address} sent a malformed {kind} answer: {exc}"
            ) from None

    def close(self) -> None:
        """Stop; requests still waiting fail with BrokerError. Idempotent."""
        if self._mailbox.closed:
            return
        self._stopping = True
        self._mailbox.wake()
        self._thread.join(5)
        if not self._thread.is_alive():
            self._mailbox.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    def _command(self, kind: str, argument: Any) -> None:
        if self._stopping or not self._thread.is_alive():
            raise BrokerError(f"the EBUS client of {self.address} is closed")
        self._mailbox.post((kind, argument))

    # -- the client's thread -------------------------------------------------------------------

    def _run(self) -> None:
        self._poller.register(self._mailbox, zmq.POLLIN)
        self._connect()
        try:
            while not self._stopping:
                timeout = max(0.0, self._next_due() - time.monotonic())
                for item, _ in self._poller.poll(milliseconds(timeout)):
                    if item is self._socket:
                        self._receive()
                    else:
                        self._apply_commands()
                self._keep_alive()
                self._resend_and_expire()
        except Exception:
            logger.exception("ebus client of %s stopped by an error", self.address)
        finally:
            self._shutdown()

    def _connect(self) -> None:
        self.identity = b"C" + uuid.uuid4().hex.encode()
        self._socket = self.curve.as_client(self._context.socket(zmq.DEALER))
        self._socket.setsockopt(zmq.IDENTITY, self.identity)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(self.address)
        self._poller.register(self._socket, zmq.POLLIN)
        self._last_heard = time.monotonic()
        self._next_ping = self._last_heard + self.heartbeat

    @property
    def _connected(self) -> zmq.Socket:
        """The socket to the broker (BrokerError once the client is closed)."""
        if self._socket is None:
            raise BrokerError(f"ebus client {self.identity.decode()}: closed")
        return self._socket

    def _reconnect(self, why: str, *, warn: bool) -> None:
        """Close the socket, connect anew with a new identity, send what is unanswered again."""
        old = self.identity.decode()
        self._poller.unregister(self._connected)
        self._connected.close(0)
        self._connect()
        self.reconnects += 1
        log = logger.warning if warn else logger.debug
        log(
            "ebus client: the broker at %s %s; reconnecting as %s (was %s), %d requests to send "
            "again",
            self.address,
            why,
            self.identity.decode(),
            old,
            len(self._outstanding.requests),
        )
        for request in self._outstanding.requests.values():
            self._send_request(request, spend=False)
        for request_id, (question, _) in self._outstanding.questions.items():
            self._ask(question, request_id)

    def _next_due(self) -> float:
        due = min(self._next_ping, self._last_heard + self.heartbeat * self.liveness)
        return min(due, self._outstanding.next_due())

    def _receive(self) -> None:
        while True:
            try:
                frames = self._connected.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            self._heard()
            self._on_message(frames)

    def _heard(self) -> None:
        self._last_heard = time.monotonic()
        self._next_ping = self._last_heard + self.heartbeat
        if self._outage:
            self._outage = False
            logger.info(
                "ebus client: the broker at %s answers again (as %s, %d reconnects so far)",
                self.address,
                self.identity.decode(),
                self.reconnects,
            )

    def _on_message(self, frames: list[bytes]) -> None:
        body = frames[1:] if frames[:1] == [b""] else frames
        if len(body) < 2 or body[0] != WORKER:
            logger.debug("ebus client: discarded a message not from the broker: %r", frames[:3])
            return
        kind, args = body[1], body[2:]
        if kind == b"PING":
            self._send(b"HEARTBEAT")
        elif kind in ANSWER_KINDS and args:
            self._outstanding.answered(kind, args)
        elif kind in QUESTION_KINDS and len(args) >= 2:
            self._outstanding.question_answered(kind, args[0], args[1])
        elif kind == b"DISCONNECT":
            reason = args[0].decode("utf-8", "replace") if args else "no reason given"
            self._reconnect(f"asked it to disconnect ({reason})", warn=True)

    def _keep_alive(self) -> None:
        now = time.monotonic()
        silent = now - self._last_heard
        if silent >= self.heartbeat * self.liveness:
            self._reconnect(
                f"sent nothing for {silent:.1f} s ({self.liveness} heartbeats)",
                warn=not self._outage,
            )
            self._outage = True
        elif now >= self._next_ping:
            self._send(b"PING")
            self._next_ping = now + self.heartbeat

    def _resend_and_expire(self) -> None:
        now = time.monotonic()
        for request in self._outstanding.expire(now):
            self._send(b"CANCEL", request.service, request.request_id)
        for request in self._outstanding.requests.values():
            if now >= request.next_send:
                self._send_request(request)

    def _send_request(self, request: PendingRequest, *, spend: bool = True) -> None:
        """Send (or resend: ``spend`` says whether it counts against ``resends``)."""
        if not self._send(
            b"REQ",
            request.service,
            request.request_id,
            request.data,
            str(request.stales_ms).encode(),
        ):
            request.next_send = time.monotonic() + self.resend_after  # queue full: later
            return
        if request.sends and spend:
            request.resends_left -= 1
        request.sends += 1
        more = request.resends_left > 0
        request.next_send = time.monotonic() + self.resend_after if more else float("inf")

    def _ask(self, question: bytes, request_id: bytes) -> None:
        """SERVICES or WORKERS, with the id at index 5 where the reference broker reads it."""
        self._send(question, b"", request_id)

    def _send(self, kind: bytes, *args: bytes) -> bool:
        """Send without blocking; False when zmq's queue to the broker is full (try later)."""
        try:
            self._connected.send_multipart([b"", CLIENT, kind, *args], zmq.NOBLOCK)
            return True
        except zmq.Again:
            return False

    def _apply_commands(self) -> None:
        for kind, argument in self._mailbox.take():
            if kind == "request":
                self._new_request(argument)
            elif kind == "ask":
                question, request_id, future = argument
                self._outstanding.questions[request_id] = (question, future)
                self._ask(question, request_id)
            else:
                self._outstanding.questions.pop(argument, None)

    def _new_request(self, request: PendingRequest) -> None:
        if self._outstanding.add(request, self.resends):
            self._send_request(request)

    def _shutdown(self) -> None:
        if self._socket is not None:
            self._socket.close(0)
        self._outstanding.fail_all(
            BrokerError(f"the EBUS client of {self.address} closed before an answer came")
        )


def ask(address: str, kind: str, timeout: float = 3.0, curve: Curve = NO_CURVE) -> Any:
    """Ask the broker at ``address`` (its frontend) ``SERVICES`` or ``WORKERS`` once."""
    with Client(address, curve=curve) as client:
        return client.ask(kind, timeout)
