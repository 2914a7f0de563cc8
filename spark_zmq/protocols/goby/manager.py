"""The client side of gobyd's Manager: where it is, the socket exchange, the hold handshake.

A client asks the Manager (REQ -> REP, one serialized protobuf each way) for the Router's
sockets, then subscribes on the Router's XPUB and publishes to its XSUB. A publisher also takes
part in the hold handshake: it asks for the hold state every 100 ms on an internal identifier
and must not publish while gobyd answers ``hold``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import zmq

from spark_zmq.errors import PeerError, PeerTimeout
from spark_zmq.log import logger
from spark_zmq.protocols.addresses import AddressError, ipc_address, tcp_address
from spark_zmq.protocols.goby.messages import (
    HOLD_REQUEST_PREFIX,
    HOLD_RESPONSE_PREFIX,
    PROVIDE_HOLD_STATE,
    PROVIDE_PUB_SUB_SOCKETS,
    manager_messages,
)
from spark_zmq.protocols.goby.wire import thread_hash
from spark_zmq.protocols.oneshot import ask_once
from spark_zmq.security import NO_CURVE, Curve
from spark_zmq.units import milliseconds

DEFAULT_PLATFORM = "default_goby_platform"
DEFAULT_TCP_PORT = 11144
DEFAULT_TIMEOUT = 5.0
#: how often a client asks for the hold state while held, as a C++ client does
HOLD_REQUEST_INTERVAL = 0.1
#: the largest answer taken from gobyd's Manager (64 KiB): a ManagerResponse holds two Socket
#: records (a path or host of at most a few hundred bytes each), so anything larger is not
#: gobyd's; zmq drops it unread (MAXMSGSIZE)
MAX_MANAGER_MESSAGE_BYTES = 64 * 1024


class ManagerError(PeerError):
    """gobyd's Manager answered with something a client cannot use."""


class ManagerUnreachable(ManagerError, PeerTimeout):
    """gobyd's Manager did not answer within the timeout."""


class HoldTimeout(PeerTimeout):
    """gobyd kept holding publications for longer than the hold timeout."""


def ipc_base(platform: str = DEFAULT_PLATFORM, socket_name: str | None = None) -> str:
    """The base path of gobyd's IPC sockets: its ``socket_name``, else ``/tmp/goby_{platform}``."""
    return socket_name or f"/tmp/goby_{platform}"


@dataclass(frozen=True)
class ManagerAddress:
    """Where gobyd's Manager listens; ``host`` is the TCP host that the Router's sockets share
    (gobyd leaves their address out)."""

    endpoint: str
    host: str | None = None

    @classmethod
    def ipc(
        cls, platform: str = DEFAULT_PLATFORM, socket_name: str | None = None
    ) -> ManagerAddress:
        return cls(f"ipc://{ipc_base(platform, socket_name)}.manager")

    @classmethod
    def tcp(cls, host: str = "127.0.0.1", port: int = DEFAULT_TCP_PORT) -> ManagerAddress:
        return cls(f"tcp://{host}:{port}", host)

    @property
    def label(self) -> str:
        """The address without its transport, for partition keys and logs."""
        return self.endpoint.split("://", 1)[-1]


@dataclass(frozen=True)
class Router:
    """The Router's addresses as a client uses them."""

    subscribe: str  # the XPUB: a SUB connects here
    publish: str  # the XSUB: a PUB connects here


def ask(
    manager: ManagerAddress,
    request: Any,
    timeout: float,
    context: zmq.Context | None = None,
    curve: Curve = NO_CURVE,
) -> Any:
    """Send one ManagerRequest and return the ManagerResponse, checked to be the answer; the
    send and the answer together take at most ``timeout`` s (``oneshot``)."""
    frames = ask_once(
        manager.endpoint,
        [request.SerializeToString()],
        timeout,
        context=context,
        curve=curve,
        max_reply_bytes=MAX_MANAGER_MESSAGE_BYTES,
    )
    if frames is None:
        raise _unreachable(manager, timeout)
    reply = b"".join(frames)
    response = manager_messages().ManagerResponse()
    try:
        response.ParseFromString(reply)
    except Exception as exc:  # protobuf's DecodeError, or missing required fields
        raise ManagerError(
            f"gobyd's Manager at {manager.endpoint} answered with "
            f"{len(reply)} bytes that are not a ManagerResponse: {exc}"
        ) from None
    if (response.request, response.client_name, response.client_pid) != (
        request.request,
        request.client_name,
        request.client_pid,
    ):
        raise ManagerError(
            f"gobyd's Manager at {manager.endpoint} answered another request "
            f"({response.request}, {response.client_name!r}, "
            f"{response.client_pid})"
        )
    return response


def _unreachable(manager: ManagerAddress, timeout: float) -> ManagerUnreachable:
    return ManagerUnreachable(
        f"gobyd's Manager at {manager.endpoint} did not answer within {timeout:g} s "
        f"(managerTimeout): is gobyd running there, with this platform, socket name or port? "
        f"(An answer over {MAX_MANAGER_MESSAGE_BYTES} bytes is refused, and ends the same way.)"
    )


def request_router(
    manager: ManagerAddress,
    client_name: str,
    client_pid: int,
    timeout: float,
    context: zmq.Context | None = None,
    curve: Curve = NO_CURVE,
) -> Router:
    """Ask the Manager for the Router's sockets (PROVIDE_PUB_SUB_SOCKETS)."""
    request = manager_messages().ManagerRequest(
        request=PROVIDE_PUB_SUB_SOCKETS, client_name=client_name, client_pid=client_pid
    )
    response = ask(manager, request, timeout, context, curve)
    if not (response.HasField("subscribe_socket") and response.HasField("publish_socket")):
        raise ManagerError(
            f"gobyd's Manager at {manager.endpoint} gave no subscribe or no publish socket"
        )
    return Router(
        endpoint_of(response.subscribe_socket, manager, "subscribe_socket"),
        endpoint_of(response.publish_socket, manager, "publish_socket"),
    )


def endpoint_of(socket: Any, manager: ManagerAddress, field: str = "socket") -> str:
    """The zmq address of a Socket the Manager handed out (its ``field`` of the response),
    checked to be one zmq connects to: it becomes the address of capture's sockets, whose
    failure would end the query, so a bad one is refused here, naming gobyd and the field."""
    Socket = manager_messages().Socket
    try:
        if socket.transport == Socket.IPC:
            if not socket.socket_name:
                raise AddressError("an IPC socket without a socket_name")
            return ipc_address(socket.socket_name)
        if socket.transport == Socket.TCP:
            given = socket.HasField("ethernet_address")
            host = socket.ethernet_address if given else manager.host
            return tcp_address(host or socket.ethernet_address, socket.ethernet_port)
    except AddressError as exc:
        raise ManagerError(
            f"gobyd's Manager at {manager.endpoint} gave a {field} that cannot be connected "
            f"to ({exc}); refused"
        ) from None
    name = Socket.Transport.Name(socket.transport)
    raise ManagerError(
        f"gobyd's Manager at {manager.endpoint} gave a {field} on transport "
        f"{name}; only IPC and TCP are supported"
    )


def hold_request_message(client_name: str, client_pid: int, ready: bool) -> bytes:
    """One frame asking for the hold state, from this thread."""
    request = manager_messages().ManagerRequest(
        request=PROVIDE_HOLD_STATE, client_name=client_name, client_pid=client_pid, ready=ready
    )
    return (
        HOLD_REQUEST_PREFIX
        + f"{client_pid}/{thread_hash()}/\0".encode()
        + request.SerializeToString()
    )


class HoldHandshake:
    """A client's side of the hold handshake: asks every 100 ms until gobyd lifts the hold.

    ``publish`` sends one frame through the client's publish socket; the answers come on a SUB
    of the Router's XPUB subscribed to the response identifier. Only answers with this client's
    name and pid count. Once lifted the hold is not asked about again, as with a C++ client.
    """

    def __init__(
        self,
        router: Router,
        client_name: str,
        client_pid: int,
        publish: Callable[[bytes], None],
        ready: bool = True,
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.router = router
        self.client_name = client_name
        self.client_pid = client_pid
        self.ready = ready
        self.held = True
        #: whether gobyd answered at all (a first answer without hold is not logged)
        self.answered = False
        self._publish = publish
        self._next_request = 0.0
        self._sub = curve.as_client((context or zmq.Context.instance()).socket(zmq.SUB))
        self._sub.setsockopt(zmq.LINGER, 0)
        self._sub.setsockopt(zmq.SUBSCRIBE, HOLD_RESPONSE_PREFIX)
        self._sub.connect(router.subscribe)

    def poll(self, timeout: float = 0.0) -> bool:
        """Ask if it is time to, take the answers that arrive within ``timeout``; still held?"""
        if not self.held:
            return False
        now = time.monotonic()
        if now >= self._next_request:
            self._publish(hold_request_message(self.client_name, self.client_pid, self.ready))
            self._next_request = now + HOLD_REQUEST_INTERVAL
        wait = min(timeout, max(0.0, self._next_request - now))
        if self._sub.poll(milliseconds(wait)):
            while self._sub.poll(0):
                self._take(self._sub.recv())
        return self.held

    def _take(self, message: bytes) -> None:
        _, nul, payload = message.partition(b"\0")
        response = manager_messages().ManagerResponse()
        try:
            response.ParseFromString(payload)
        except Exception:
            return  # not an answer for anyone; a C++ client ignores it too
        if not (
            nul
            and response.request == PROVIDE_HOLD_STATE
            and response.client_name == self.client_name
            and response.client_pid == self.client_pid
        ):
            return
        if response.hold and not self.answered:
            logger.info(
                "goby client %s: gobyd holds publications until the clients it "
                "requires are ready; waiting",
                self.client_name,
            )
        elif not response.hold and self.answered:
            logger.info("goby client %s: gobyd lifted the hold", self.client_name)
        self.answered = True
        self.held = response.hold

    def wait_lifted(self, timeout: float | None) -> None:
        """Return once gobyd lifts the hold; HoldTimeout after ``timeout`` seconds (None: no
        limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll(HOLD_REQUEST_INTERVAL):
            if timeout is not None and deadline is not None and time.monotonic() >= deadline:
                raise HoldTimeout(self._timeout_text(timeout))

    def _timeout_text(self, timeout: float) -> str:
        if not self.answered:
            return (
                f"gobyd (router {self.router.publish}) did not answer the hold requests of "
                f"client {self.client_name!r} within {timeout:g} s (holdTimeout)"
            )
        return (
            f"gobyd (router {self.router.publish}) still holds publications of client "
            f"{self.client_name!r} after {timeout:g} s (holdTimeout): a client it requires "
            f"has not reported ready"
        )

    def close(self) -> None:
        self._sub.close(0)
