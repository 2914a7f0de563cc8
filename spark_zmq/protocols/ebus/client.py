"""EBUS client and worker sides that the CLI and the demo peers use.

``ask`` sends one SERVICES or WORKERS question to a broker's frontend and returns the unpacked
answer. ``Worker`` registers a service on a broker's backend (READY first), answers each REQ
through a handler, and heartbeats, as the fact sheet's workers do.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

import zmq

from ...log import logger
from .routing import HEARTBEAT_SECONDS
from .wire import CLIENT, WORKER, PayloadError, pack, unpack


class BrokerError(RuntimeError):
    """The broker did not answer, or answered with something else."""


def ask(address: str, kind: str, timeout: float = 3.0) -> Any:
    """Ask the broker at ``address`` (its frontend) ``SERVICES`` or ``WORKERS``."""
    sock = zmq.Context.instance().socket(zmq.DEALER)
    sock.setsockopt(zmq.IDENTITY, b"C" + uuid.uuid4().hex.encode())
    sock.setsockopt(zmq.LINGER, 0)
    request_id = uuid.uuid4().hex.encode()
    try:
        sock.connect(address)
        sock.send_multipart([b"", CLIENT, kind.encode(), request_id])
        while sock.poll(timeout * 1000):
            frames = sock.recv_multipart()
            if frames[2:4] == [kind.encode(), request_id] and len(frames) > 4:
                return unpack(frames[4])
        raise BrokerError(f"no {kind} answer from the EBUS broker at {address} within "
                          f"{timeout} s")
    except PayloadError as exc:
        raise BrokerError(f"the EBUS broker at {address} sent a malformed {kind} answer: "
                          f"{exc}") from None
    finally:
        sock.close(0)


class Worker:
    """Serves ``service`` on the broker backend at ``address`` with ``handler(data) -> result``
    (unpacked values) on a daemon thread; a handler that raises makes a REJECT."""

    def __init__(self, address: str, service: str, handler: Callable[[Any], Any]) -> None:
        self.service = service
        self.handler = handler
        self.identity = b"W/%s/%s" % (service.encode(), uuid.uuid4().hex.encode())
        self._socket = zmq.Context.instance().socket(zmq.DEALER)
        self._socket.setsockopt(zmq.IDENTITY, self.identity)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.connect(address)
        self._socket.send_multipart([WORKER, b"READY", b"null", service.encode()])
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"ebus worker {service}",
                                        daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stopping.is_set():
                if self._socket.poll(HEARTBEAT_SECONDS * 1000):
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
                answer = [b"REPLY", request_id, pack(self.handler(unpack(frames[3])))]
            except Exception as exc:       # the client gets a REJECT, the worker goes on
                logger.warning("ebus worker %s: request %r failed: %s", self.service,
                               request_id, exc)
                answer = [b"REJECT", request_id, b"null"]
            self._socket.send_multipart([WORKER, *answer])
        elif kind == b"DISCONNECT":
            logger.warning("ebus worker %s: the broker disconnected it: %s", self.service,
                           frames[2:3])
            self._stopping.set()

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(2)
