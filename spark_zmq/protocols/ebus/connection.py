"""The client's thread: one DEALER socket to an EBUS broker's frontend and the spec's client
rules (heartbeats, reconnects with a new identity, resends, expiry); see ``client`` for the rules
and for the caller's side. Only this thread touches the socket; callers reach it through the
mailbox.
"""

from __future__ import annotations

import time
import uuid

import zmq

from spark_zmq.errors import PeerError
from spark_zmq.log import logger
from spark_zmq.mailbox import Mailbox
from spark_zmq.protocols.ebus.liveness import Liveness
from spark_zmq.protocols.ebus.outstanding import Outstanding, PendingRequest
from spark_zmq.protocols.ebus.wire import CLIENT, WORKER
from spark_zmq.security import Curve
from spark_zmq.units import milliseconds

#: what a broker can answer to a request
ANSWER_KINDS = (b"REPLY", b"REJECT", b"EXPIRED")
#: the questions a client can ask the broker about itself
QUESTION_KINDS = (b"SERVICES", b"WORKERS")


class BrokerError(PeerError):
    """The broker did not answer, or answered with something else."""


class BrokerConnection:
    """The connection to the broker at ``address``, run by ``run`` on the client's thread."""

    def __init__(
        self,
        address: str,
        mailbox: Mailbox,
        liveness: Liveness,
        *,
        resend_after: float,
        resends: int,
        context: zmq.Context,
        curve: Curve,
        max_message_bytes: int | None = None,
    ) -> None:
        self.address = address
        self.max_message_bytes = max_message_bytes
        self.curve = curve
        self.resend_after = resend_after
        self.resends = resends
        #: reconnections so far (silence or DISCONNECT)
        self.reconnects = 0
        self.identity = b""
        #: set by the client to end ``run``
        self.stopping = False
        self._liveness = liveness
        self._context = context
        self._socket: zmq.Socket | None = None
        self._poller = zmq.Poller()
        self._outstanding = Outstanding()
        self._mailbox = mailbox

    def run(self) -> None:
        self._poller.register(self._mailbox, zmq.POLLIN)
        self._connect()
        try:
            while not self.stopping:
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
        if self.max_message_bytes is not None:
            self._socket.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
        self._socket.connect(self.address)
        self._poller.register(self._socket, zmq.POLLIN)
        self._liveness.connected()

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
        return min(self._liveness.next_due(), self._outstanding.next_due())

    def _receive(self) -> None:
        while True:
            try:
                frames = self._connected.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            if self._liveness.heard():
                self._log_back()
            self._on_message(frames)

    def _log_back(self) -> None:
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
        silent = self._liveness.lost(now)
        if silent is not None:
            liveness = self._liveness.liveness
            warn = not self._liveness.outage
            self._reconnect(f"sent nothing for {silent:.1f} s ({liveness} heartbeats)", warn=warn)
            self._liveness.outage = True
        elif self._liveness.ping_due(now):
            self._send(b"PING")

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
