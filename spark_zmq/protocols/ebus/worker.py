"""An EBUS worker: registers a service on a broker's backend and answers its requests.

For demos, tests and the CLI (``python -m spark_zmq ebus worker``): it speaks the fact sheet's
worker dialect (READY first, HEARTBEAT every 500 ms, REPLY or REJECT per REQ), so a broker of the
reference implementation would take it as one of its own.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from typing import Any

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.ebus.wire import HEARTBEAT_SECONDS, WORKER, pack, unpack
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.stream_options import WRITER_MAX_MESSAGE_BYTES
from spark_zmq.units import milliseconds

#: what a request (or, for the CLI, an answer) may inflate to at most, where no query's options
#: say: the default maxMessageBytes
DEFAULT_MAX_BYTES: int = WRITER_MAX_MESSAGE_BYTES.parsed_default()


class Worker:
    """Serves ``service`` on the broker backend at ``address`` with ``handler(data) -> result``
    (unpacked values) on a daemon thread; a handler that raises makes a REJECT, and so does a
    request whose data inflates to more than ``max_bytes``."""

    def __init__(
        self,
        address: str,
        service: str,
        handler: Callable[[Any], Any],
        *,
        curve: Curve = NO_CURVE,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        self.service = service
        self.max_bytes = max_bytes
        self.handler = handler
        self.identity = b"W/%s/%s" % (service.encode(), uuid.uuid4().hex.encode())
        self._socket = curve.as_client(zmq.Context.instance().socket(zmq.DEALER))
        self._socket.setsockopt(zmq.IDENTITY, self.identity)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._socket.send_multipart([WORKER, b"READY", b"null", service.encode()])
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"ebus worker {service}", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                if self._socket.poll(milliseconds(HEARTBEAT_SECONDS)):
                    self._on_message(self._socket.recv_multipart())
                self._socket.send_multipart([WORKER, b"HEARTBEAT"])
        finally:
            self._socket.send_multipart([WORKER, b"DISCONNECT", self.service.encode(), b"stop"])
            self._socket.close(0)

    def _on_message(self, frames: list[bytes]) -> None:
        kind = frames[1] if len(frames) > 1 else b""
        if kind == b"REQ" and len(frames) >= 4:
            request_id = frames[2]
            try:
                answer = [
                    b"REPLY",
                    request_id,
                    pack(self.handler(unpack(frames[3], self.max_bytes))),
                ]
            except Exception as exc:  # the client gets a REJECT, the worker goes on
                logger.warning(
                    "ebus worker %s: request %r failed: %s", self.service, request_id, exc
                )
                answer = [b"REJECT", request_id, b"null"]
            self._socket.send_multipart([WORKER, *answer])
        elif kind == b"DISCONNECT":
            logger.warning(
                "ebus worker %s: the broker disconnected it: %s", self.service, frames[2:3]
            )
            self._stopping.set()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2)
