"""A writer's publisher on gobyd's Router, after the Manager exchange and under its hold.

The Manager hands out the Router's XSUB; messages go there through ``xpub.XPubSender``
(back-pressure rather than drops, subscriptions seen for ``waitForSubscribers``). Like a C++
Goby client, nothing is published while gobyd holds: the first send of a held publisher waits,
asking for the hold state every 100 ms, so a task's rows stay buffered in the task, in order,
and all go out once the hold lifts (or the task fails after ``holdTimeout``). A task never ends
with rows that a hold kept back.

When the connection to the Router drops (gobyd restarted; on TCP its Router has new ports), the
next send asks the Manager again, connects to the Router it names and goes through the hold
handshake anew. Its first answer also shows that the new Router's subscriptions have arrived
(they precede it on the same connection), so the messages that follow are not sent into the void.
"""

from __future__ import annotations

import os

import zmq

from spark_zmq.log import logger
from spark_zmq.protocols.contract import SinkPublisher
from spark_zmq.protocols.goby.manager import HoldHandshake, ManagerAddress, Router, request_router
from spark_zmq.protocols.xpub import XPubSender
from spark_zmq.security import NO_CURVE, Curve


class GobyPublisher(SinkPublisher):
    """Publishes through the Router that gobyd's Manager at ``manager`` hands out."""

    def __init__(
        self,
        manager: ManagerAddress,
        client_name: str,
        *,
        manager_timeout: float,
        hold_timeout: float | None,
        send_hwm: int,
        send_timeout: float | None,
        curve: Curve = NO_CURVE,
    ) -> None:
        self.manager = manager
        self.client_name = client_name
        self.manager_timeout = manager_timeout
        self.hold_timeout = hold_timeout
        self.curve = curve
        self.send_hwm = send_hwm
        self.send_timeout = send_timeout
        self._connect(self._request_router())

    def _request_router(self) -> Router:
        return request_router(
            self.manager, self.client_name, os.getpid(), self.manager_timeout, curve=self.curve
        )

    def _connect(self, router: Router) -> None:
        self.router = router
        self.name = f"{self.client_name}@{router.publish}"
        self._xpub = XPubSender(
            router.publish, send_hwm=self.send_hwm, send_timeout=self.send_timeout, curve=self.curve
        )
        self._monitor = self._xpub.socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        self._hold = HoldHandshake(
            router, self.client_name, os.getpid(), self._send_frame, curve=self.curve
        )

    def _send_frame(self, frame: bytes) -> None:
        self._xpub.send([frame])

    def send(self, frames: list[bytes]) -> None:
        self._prepare()
        self._xpub.send(frames)

    def sending_socket(self) -> zmq.Socket:
        self._prepare()
        return self._xpub.socket

    def timeout_error(self) -> Exception:
        return self._xpub.timeout_error()

    def _prepare(self) -> None:
        """Before a send: reconnect if the Router connection dropped, wait while gobyd holds."""
        if self._monitor.poll(0):
            self._reconnect()
        if self._hold.held:
            self._hold.wait_lifted(self.hold_timeout)

    def _reconnect(self) -> None:
        """The Router connection dropped: ask the Manager where the Router is now (if it
        does not answer, the drop stays noted and the next send asks again)."""
        router = self._request_router()
        logger.info(
            "goby writer %s: lost the router connection; gobyd's Manager now hands "
            "out %s; reconnecting",
            self.name,
            router.publish,
        )
        self._disconnect()
        self._connect(router)

    def subscribers(self, topic: bytes) -> int:
        return self._xpub.subscribers(topic)

    def _disconnect(self) -> None:
        self._hold.close()
        self._xpub.socket.disable_monitor()
        self._monitor.close(0)
        self._xpub.close()

    def close(self) -> None:
        self._disconnect()
