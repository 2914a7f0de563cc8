"""Discovery of gobyd's Router through its Manager, followed across gobyd restarts.

At start the Manager must answer within ``managerTimeout``, else the query fails with an error
naming the address. Then discovery asks it again every ``POLL_SECONDS``: a gobyd restarted on
TCP binds its Router on new random ports, and the partitions (one per subscription prefix,
keyed by prefix and Manager address, so the keys stay the same) are announced again at the new
address; capture then reopens them and their offsets continue. While the Manager does not
answer, capture keeps its sockets (zmq reconnects by itself when the addresses come back, as
they do on IPC).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

from spark_zmq.log import logger
from spark_zmq.protocols.contract import Discovery, Endpoint, EndpointListener
from spark_zmq.protocols.goby.manager import ManagerAddress, ManagerError, Router, request_router
from spark_zmq.security import NO_CURVE, Curve

#: how often the Manager is asked whether the Router moved
POLL_SECONDS = 1.0


class ManagerDiscovery(Discovery):
    """One endpoint per prefix on the Router that gobyd's Manager hands out."""

    def __init__(
        self,
        manager: ManagerAddress,
        client_name: str,
        timeout: float,
        prefixes: tuple[bytes, ...],
        endpoint_of: Callable[[bytes, Router], Endpoint],
        curve: Curve = NO_CURVE,
    ) -> None:
        self.manager = manager
        self.curve = curve
        self.client_name = client_name
        self.timeout = timeout
        self.prefixes = prefixes
        self.endpoint_of = endpoint_of
        self.router: Router | None = None
        self._unanswered = False
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, listener: EndpointListener) -> None:
        self._listener = listener
        router = self._request_router()
        self._announce(router)
        logger.info(
            "goby: gobyd's Manager at %s hands out the router %s; reading %s",
            self.manager.endpoint,
            router.subscribe,
            ", ".join(p.decode("utf-8", "replace") for p in self.prefixes),
        )
        self._thread = threading.Thread(
            target=self._run, name="spark_zmq goby manager", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(POLL_SECONDS):
            try:
                router = self._request_router()
            except ManagerError as exc:
                if not self._unanswered:
                    logger.warning(
                        "goby: %s; still reading from %s, asking again every %g s",
                        exc,
                        self.router.subscribe if self.router else "(no router yet)",
                        POLL_SECONDS,
                    )
                self._unanswered = True
                continue
            if self._unanswered:
                logger.info("goby: gobyd's Manager at %s answers again", self.manager.endpoint)
                self._unanswered = False
            old = self.router
            if old is not None and router != old and not self._stopping.is_set():
                logger.info(
                    "goby: gobyd at %s moved its router from %s to %s (a restart); reconnecting",
                    self.manager.endpoint,
                    old.subscribe,
                    router.subscribe,
                )
                self._announce(router)

    def _request_router(self) -> Router:
        return request_router(
            self.manager, self.client_name, os.getpid(), self.timeout, curve=self.curve
        )

    def _announce(self, router: Router) -> None:
        self.router = router
        for prefix in self.prefixes:
            self._listener.endpoint_joined(self.endpoint_of(prefix, router))

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 2)
