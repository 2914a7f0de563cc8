"""A stand-in gobyd, written from the fact sheet: the Manager and the Router.

For tests, demos and users without Goby. A real Goby client can use it:

- Router: an XSUB (publishers) and an XPUB (subscribers) joined by a zmq proxy. IPC binds
  ``ipc://{base}.xpub`` and ``ipc://{base}.xsub``; TCP binds random ports.
- Manager: a REP on ``ipc://{base}.manager`` or ``tcp://{host}:{tcp_port}``; it answers
  PROVIDE_PUB_SUB_SOCKETS with the Router's sockets (for TCP, without an address: the client
  uses the Manager's) and PROVIDE_HOLD_STATE with the hold state.
- Hold responder: a SUB and a PUB of its own on the Router answer the clients' hold requests on
  the internal identifiers. ``hold`` stays true until every client in ``required_clients`` has
  sent ``ready=true``.

Anything that listens binds to loopback unless ``host`` says otherwise. With a ``Curve`` holding
a secret key, the Manager and both Router sockets are CURVE servers (with its allow-list, if
any); a real gobyd has no CURVE, so this is for deployments of the stand-in only.
"""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterable
from typing import Any  # protobuf messages: classes built at run time (messages)

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.goby.manager import DEFAULT_PLATFORM, ipc_base
from spark_zmq.protocols.goby.messages import (
    HOLD_REQUEST_PREFIX,
    HOLD_RESPONSE_PREFIX,
    PROVIDE_HOLD_STATE,
    PROVIDE_PUB_SUB_SOCKETS,
    manager_messages,
)
from spark_zmq.protocols.goby.wire import thread_hash
from spark_zmq.security import NO_CURVE, Curve

#: messages the Router queues per peer before it drops (zmq's pub/sub never blocks)
ROUTER_HIGH_WATER_MARK = 100_000


class GobyDaemon:
    """Manager + Router + hold responder; IPC unless ``tcp_port`` is given (0 picks a port)."""

    def __init__(
        self,
        platform: str = DEFAULT_PLATFORM,
        socket_name: str | None = None,
        tcp_port: int | None = None,
        host: str = "127.0.0.1",
        required_clients: Iterable[str] = (),
        context: zmq.Context | None = None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self._context = context or zmq.Context.instance()
        self.transport = "tcp" if tcp_port is not None else "ipc"
        self.base = ipc_base(platform, socket_name)
        self.host = host
        self.required_clients = frozenset(required_clients)
        self.ready_clients: set[str] = set()
        #: (name, pid) of every client that asked for sockets or for the hold state
        self.clients: set[tuple[str, int]] = set()
        #: (name, pid) of the clients that asked for the hold state on the Router
        self.hold_askers: set[tuple[str, int]] = set()
        self._lock = threading.Lock()
        self._router = _Router(self._context, self.transport, self.base, host, curve)
        self.xpub_port, self.xsub_port = self._router.xpub_port, self._router.xsub_port
        self.tcp_port = tcp_port
        self._rep = curve.as_server(self._context.socket(zmq.REP))
        self._rep.setsockopt(zmq.LINGER, 0)
        try:
            if self.transport == "ipc" or tcp_port:
                self._rep.bind(self.manager_endpoint)
            else:
                self.tcp_port = self._rep.bind_to_random_port(f"tcp://{host}")
        except zmq.ZMQError as exc:
            self._rep.close(0)
            self._router.close()
            raise OSError(
                f"gobyd: cannot bind its Manager at {self.manager_endpoint}: {exc}"
            ) from None
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name="spark_zmq gobyd manager", daemon=True
        )
        self._thread.start()
        logger.info(
            "gobyd: manager at %s, router XPUB %s, XSUB %s%s%s",
            self.manager_endpoint,
            self._router.xpub_endpoint,
            self._router.xsub_endpoint,
            ", CURVE" if curve.serves else "",
            f", holding until {', '.join(sorted(self.required_clients))} are ready"
            if self.required_clients
            else "",
        )

    @property
    def manager_endpoint(self) -> str:
        if self.transport == "ipc":
            return f"ipc://{self.base}.manager"
        return f"tcp://{self.host}:{self.tcp_port}"

    @property
    def xpub_endpoint(self) -> str:
        return self._router.xpub_endpoint

    @property
    def xsub_endpoint(self) -> str:
        return self._router.xsub_endpoint

    @property
    def hold(self) -> bool:
        with self._lock:
            return not self.required_clients <= self.ready_clients

    # -- the manager thread --------------------------------------------------------------------

    def _run(self) -> None:
        sub = self._context.socket(zmq.SUB)
        pub = self._context.socket(zmq.PUB)
        for sock in (sub, pub):
            sock.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.SUBSCRIBE, HOLD_REQUEST_PREFIX)
        sub.connect(self._router.inproc_xpub)
        pub.connect(self._router.inproc_xsub)
        response_identifier = HOLD_RESPONSE_PREFIX + f"{os.getpid()}/{thread_hash()}/\0".encode()
        poller = zmq.Poller()
        poller.register(self._rep, zmq.POLLIN)
        poller.register(sub, zmq.POLLIN)
        try:
            while not self._stopping.is_set():
                for sock, _ in poller.poll(100):
                    if sock is self._rep:
                        self._rep.send(self._answer(self._rep.recv()))
                    else:
                        self._answer_hold(sub.recv(), pub, response_identifier)
        finally:
            for sock in (sub, pub, self._rep):
                sock.close(0)

    def _answer(self, frame: bytes) -> bytes:
        request = manager_messages().ManagerRequest()
        try:
            request.ParseFromString(frame)
        except Exception as exc:
            logger.warning(
                "gobyd: a %d-byte request that is not a ManagerRequest (%s); "
                "answered with an empty frame",
                len(frame),
                exc,
            )
            return b""
        return self._response(request).SerializeToString()

    def _answer_hold(self, message: bytes, pub: zmq.Socket, identifier: bytes) -> None:
        _, nul, payload = message.partition(b"\0")
        request = manager_messages().ManagerRequest()
        try:
            request.ParseFromString(payload)
        except Exception:
            logger.warning("gobyd: ignored a malformed hold request (%d bytes)", len(message))
            return
        if nul and request.request == PROVIDE_HOLD_STATE:
            with self._lock:
                self.hold_askers.add((request.client_name, request.client_pid))
            pub.send(identifier + self._response(request).SerializeToString())

    def _response(self, request: Any) -> Any:
        self._note(request)
        response = manager_messages().ManagerResponse(
            request=request.request,
            client_name=request.client_name,
            client_pid=request.client_pid,
            hold=self.hold,
        )
        if request.request == PROVIDE_PUB_SUB_SOCKETS:
            Socket = manager_messages().Socket
            response.subscribe_socket.CopyFrom(self._socket(Socket.SUBSCRIBE, "xpub"))
            response.publish_socket.CopyFrom(self._socket(Socket.PUBLISH, "xsub"))
        return response

    def _note(self, request: Any) -> None:
        client = (request.client_name, request.client_pid)
        lifted = False
        with self._lock:
            if client not in self.clients:
                self.clients.add(client)
                logger.info("gobyd: client %s (pid %d) joined", *client)
            if request.ready and request.client_name not in self.ready_clients:
                held = not self.required_clients <= self.ready_clients
                self.ready_clients.add(request.client_name)
                lifted = held and self.required_clients <= self.ready_clients
        if lifted:
            logger.info(
                "gobyd: hold lifted: every required client is ready (%s)",
                ", ".join(sorted(self.required_clients)),
            )

    def _socket(self, socket_type: int, which: str) -> Any:
        Socket = manager_messages().Socket
        socket = Socket(socket_type=socket_type, connect_or_bind=Socket.CONNECT)
        if self.transport == "ipc":
            socket.transport = Socket.IPC
            socket.socket_name = f"{self.base}.{which}"
        else:
            socket.transport = Socket.TCP
            socket.ethernet_port = self.xpub_port if which == "xpub" else self.xsub_port
        return socket

    def close(self) -> None:
        self._stopping.set()
        self._thread.join(3)
        self._router.close()
        logger.info("gobyd: manager at %s stopped", self.manager_endpoint)


class _Router:
    """XSUB and XPUB joined by a zmq proxy on its own thread; also bound in-process for the
    hold responder."""

    def __init__(
        self, context: zmq.Context, transport: str, base: str, host: str, curve: Curve
    ) -> None:
        self._xsub = context.socket(zmq.XSUB)
        self._xpub = context.socket(zmq.XPUB)
        for sock in (self._xsub, self._xpub):
            sock.setsockopt(zmq.LINGER, 0)
            curve.as_server(sock)
            sock.setsockopt(zmq.SNDHWM, ROUTER_HIGH_WATER_MARK)
            sock.setsockopt(zmq.RCVHWM, ROUTER_HIGH_WATER_MARK)
        try:
            if transport == "ipc":
                self.xpub_port = self.xsub_port = None
                self.xpub_endpoint, self.xsub_endpoint = f"ipc://{base}.xpub", f"ipc://{base}.xsub"
                self._xpub.bind(self.xpub_endpoint)
                self._xsub.bind(self.xsub_endpoint)
            else:
                self.xpub_port = self._xpub.bind_to_random_port(f"tcp://{host}")
                self.xsub_port = self._xsub.bind_to_random_port(f"tcp://{host}")
                self.xpub_endpoint = f"tcp://{host}:{self.xpub_port}"
                self.xsub_endpoint = f"tcp://{host}:{self.xsub_port}"
        except zmq.ZMQError as exc:
            self._xsub.close(0)
            self._xpub.close(0)
            raise OSError(
                f"gobyd: cannot bind its router ({transport}, {base or host}): {exc}"
            ) from None
        # unique per router, not id(self): a closed router's inproc names are released by
        # ZeroMQ's reaper some time after close, and a new object may get the old id
        name = f"inproc://spark_zmq-gobyd-{uuid.uuid4().hex}"
        self.inproc_xpub, self.inproc_xsub = f"{name}.xpub", f"{name}.xsub"
        self._xpub.bind(self.inproc_xpub)
        self._xsub.bind(self.inproc_xsub)
        self._control = context.socket(zmq.PAIR)
        self._control_peer = context.socket(zmq.PAIR)
        self._control.bind(f"{name}.control")
        self._control_peer.connect(f"{name}.control")
        self._thread = threading.Thread(
            target=self._run, name="spark_zmq gobyd router", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        try:
            zmq.proxy_steerable(self._xsub, self._xpub, None, self._control)
        except zmq.ZMQError as exc:
            logger.warning("gobyd: router stopped: %s", exc)
        finally:
            for sock in (self._xsub, self._xpub, self._control):
                sock.close(0)

    def close(self) -> None:
        self._control_peer.send(b"TERMINATE")
        self._thread.join(3)
        self._control_peer.close(0)
