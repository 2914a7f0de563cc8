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
one-shot SERVICES or WORKERS question, for the CLI. The thread's side is ``connection``; the
heartbeat arithmetic is ``liveness``.
"""

from __future__ import annotations

import threading
import time
import uuid
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import zmq

from spark_zmq.mailbox import Mailbox
from spark_zmq.protocols.ebus.connection import BrokerConnection, BrokerError
from spark_zmq.protocols.ebus.liveness import Liveness
from spark_zmq.protocols.ebus.outstanding import PendingRequest
from spark_zmq.protocols.ebus.wire import (
    DEFAULT_STALES_MS,
    HEARTBEAT_SECONDS,
    LIVENESS,
    RESEND_SECONDS,
    RESENDS,
    PayloadError,
    unpack,
)
from spark_zmq.security import NO_CURVE, Curve

__all__ = ["BrokerError", "Client", "ask"]


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
        max_message_bytes: int | None = None,
    ) -> None:
        self.address = address
        #: the largest frame taken from the broker (None: any); a larger one drops the
        #: connection unread (zmq's MAXMSGSIZE) and its question goes unanswered
        self.max_message_bytes = max_message_bytes
        self._mailbox = Mailbox()  # requests and questions from callers' threads
        self._connection = BrokerConnection(
            address,
            self._mailbox,
            Liveness(heartbeat, liveness),
            resend_after=resend_after,
            resends=resends,
            context=context or zmq.Context.instance(),
            curve=curve,
            max_message_bytes=max_message_bytes,
        )
        self._thread = threading.Thread(
            target=self._connection.run, name=f"spark_zmq ebus client {address}", daemon=True
        )
        self._thread.start()

    @property
    def identity(self) -> bytes:
        """The zmq identity the client has now (a new one after each reconnect)."""
        return self._connection.identity

    @property
    def reconnects(self) -> int:
        """Reconnections so far (silence or DISCONNECT)."""
        return self._connection.reconnects

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

    def ask(self, kind: str, timeout: float = 3.0, *, max_bytes: int) -> Any:
        """The broker's unpacked answer to ``SERVICES`` or ``WORKERS``, which may inflate to
        ``max_bytes`` (the caller's maxMessageBytes) at most."""
        future: Future = Future()
        request_id = uuid.uuid4().hex.encode()
        self._command("ask", (kind.encode(), request_id, future))
        try:
            frame = future.result(timeout)
        except FutureTimeout:
            self._command("forget", request_id)
            bound = (
                f", or it was over the {self.max_message_bytes}-byte bound (refused)"
                if self.max_message_bytes is not None
                else ""
            )
            raise BrokerError(
                f"no {kind} answer from the EBUS broker at {self.address} within {timeout} s{bound}"
            ) from None
        try:
            return unpack(frame, max_bytes)
        except PayloadError as exc:
            raise BrokerError(
                f"the EBUS broker at {self.address} sent a malformed {kind} answer: {exc}"
            ) from None

    def close(self) -> None:
        """Stop; requests still waiting fail with BrokerError. Idempotent."""
        if self._mailbox.closed:
            return
        self._connection.stopping = True
        self._mailbox.wake()
        self._thread.join(5)
        if not self._thread.is_alive():
            self._mailbox.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _command(self, kind: str, argument: Any) -> None:
        if self._connection.stopping or not self._thread.is_alive():
            raise BrokerError(f"the EBUS client of {self.address} is closed")
        self._mailbox.post((kind, argument))


def ask(
    address: str, kind: str, timeout: float = 3.0, curve: Curve = NO_CURVE, *, max_bytes: int
) -> Any:
    """Ask the broker at ``address`` (its frontend) ``SERVICES`` or ``WORKERS`` once (an
    answer inflating to ``max_bytes`` at most)."""
    with Client(address, curve=curve) as client:
        return client.ask(kind, timeout, max_bytes=max_bytes)
