"""ZeroEQ request/reply: a REP server on its own thread, and a one-shot REQ client.

A request is ``[16-byte request type id][optional payload]`` and its reply
``[16-byte reply type id][optional payload]``; the type ids are event ids of type names. An
unknown request type, or a handler that fails, gets the all-zero reply type and no payload, as
from the shipped library. The vocabulary and the management port are both such servers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence

import zmq

from spark_zmq.errors import PeerError
from spark_zmq.log import logger
from spark_zmq.protocols.oneshot import ask_once
from spark_zmq.protocols.zeroeq.wire import EVENT_ID_BYTES, NO_REPLY_TYPE
from spark_zmq.security import NO_CURVE, Curve

#: a handler gets the request payload and returns (reply type id, reply payload)
Handler = Callable[[bytes], "tuple[bytes, bytes]"]
#: the largest request frame a server takes (64 KiB): requests are a type id and a small JSON
#: body (a management request names a publisher, an event and its name), and anyone who can
#: reach the port may send one, so a larger frame is dropped unread (zmq's MAXMSGSIZE)
MAX_REQUEST_BYTES = 64 * 1024


class RequestError(PeerError):
    """A request that got no reply, or the all-zero (unknown/failed) reply."""


class ReplyServer:
    """Binds a REP socket at ``bind`` (one zmq address, or several: one socket listening at
    each) and answers requests by their type id on a daemon thread; a request frame over
    MAX_REQUEST_BYTES drops its connection unanswered. ``addresses`` are the bound ones, in
    the order given (``address`` the first)."""

    def __init__(
        self,
        bind: str | Sequence[str],
        handlers: dict[bytes, Handler],
        name: str,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.name = name
        self.handlers = handlers
        self._socket = curve.as_server((context or zmq.Context.instance()).socket(zmq.REP))
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST_BYTES)
        addresses = []
        for where in [bind] if isinstance(bind, str) else bind:
            try:
                self._socket.bind(where)
            except zmq.ZMQError as exc:
                self._socket.close()
                raise ValueError(f"{name}: cannot bind {where}: {exc}") from None
            addresses.append(self._socket.getsockopt_string(zmq.LAST_ENDPOINT))
        if not addresses:
            self._socket.close()
            raise ValueError(f"{name}: nowhere to bind")
        self.addresses = tuple(addresses)
        self.address = addresses[0]
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._serve, name=f"spark_zmq {name}", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        try:
            while not self._stopping.is_set():
                if not self._socket.poll(100):
                    continue
                frames = self._socket.recv_multipart()
                self._socket.send_multipart(self._answer(frames))
        except zmq.ZMQError as exc:
            if not self._stopping.is_set():
                logger.error("%s: stopped serving: %s", self.name, exc)
        finally:
            self._socket.close(0)

    def _answer(self, frames: list[bytes]) -> list[bytes]:
        if not frames or len(frames[0]) != EVENT_ID_BYTES or len(frames) > 2:
            logger.warning(
                "%s: malformed request of %d frames; answered with no reply type",
                self.name,
                len(frames),
            )
            return [NO_REPLY_TYPE]
        handler = self.handlers.get(frames[0])
        if handler is None:
            return [NO_REPLY_TYPE]
        try:
            reply_type, payload = handler(frames[1] if len(frames) == 2 else b"")
        except Exception:
            logger.exception("%s: request handler failed", self.name)
            return [NO_REPLY_TYPE]
        return [reply_type, payload] if payload else [reply_type]

    def close(self) -> None:
        self._stopping.set()
        if threading.current_thread() is not self._thread:
            self._thread.join(2)


def request(
    address: str,
    request_type: bytes,
    payload: bytes = b"",
    *,
    timeout: float = 2.0,
    context: zmq.Context | None = None,
    curve: Curve = NO_CURVE,
    max_reply_bytes: int | None = None,
) -> tuple[bytes, bytes]:
    """Send one request to the REP server at ``address``; (reply type id, reply payload).

    ``timeout`` bounds the send and the reply together (``oneshot``). ``max_reply_bytes``
    bounds each frame of the reply; a larger one ends the request as one with no reply, and
    the error says so."""
    frames = ask_once(
        address,
        [request_type, payload] if payload else [request_type],
        timeout,
        context=context,
        curve=curve,
        max_reply_bytes=max_reply_bytes,
    )
    if frames is None:
        why = (
            f", or its reply was over the {max_reply_bytes}-byte bound (refused)"
            if max_reply_bytes is not None
            else ""
        )
        if curve.server_key:
            why += "; a CURVE server that does not allow our key never answers"
        raise RequestError(f"no reply from {address} within {timeout} s{why}")
    if not frames or frames[0] == NO_REPLY_TYPE:
        raise RequestError(f"{address} does not know this request (all-zero reply type)")
    return frames[0], frames[1] if len(frames) > 1 else b""
