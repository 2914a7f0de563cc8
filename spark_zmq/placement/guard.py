"""Between discovery and capture: what peers announce is checked before anything is opened for
it, and how many endpoints a query reads at once is bounded.

Discovery makes endpoints out of what peers announce on the network (mDNS records, Zyre
headers, broker answers), and nothing there is authenticated. So before an endpoint reaches a
placement (and becomes sockets, a spool folder, a capture process) the guard refuses one whose
key or address is unusable (``Endpoint.problem``), and holds back new endpoints beyond
``maxEndpoints``: those wait (as many again at most, first come first served) until an endpoint
that is read leaves.
Each refusal is logged once per endpoint; holding back is logged once per episode, with counts.
"""

from __future__ import annotations

import threading
import time

from spark_zmq.errors import shown
from spark_zmq.log import logger
from spark_zmq.protocols.contract import Endpoint, EndpointListener
from spark_zmq.protocols.refused import RefusedEndpoints

#: seconds between two log lines about endpoints held back at maxEndpoints
HELD_BACK_LOG_SECONDS = 60.0


class EndpointGuard:
    """An ``EndpointListener`` that passes checked endpoints on to ``listener``, at most
    ``max_endpoints`` at once. Discovery calls it from its own threads.

    Invariants: ``listener`` has been told of exactly the endpoints in ``_admitted``, each
    with the last description discovery gave; ``_waiting`` holds at most ``max_endpoints``
    endpoints, none of them admitted."""

    def __init__(self, listener: EndpointListener, name: str, max_endpoints: int) -> None:
        self.listener = listener
        self.name = name
        self.max_endpoints = max_endpoints
        self._admitted: set[str] = set()
        self._waiting: dict[str, Endpoint] = {}  # in the order they came
        self._refused = RefusedEndpoints(name, max_endpoints)
        self._held_back = 0  # endpoints held back since the last log line about it
        self._held_back_logged = float("-inf")
        self._lock = threading.Lock()

    def held(self) -> tuple[int, int]:
        """Endpoints waiting at ``max_endpoints`` now, and endpoints refused now."""
        with self._lock:
            return len(self._waiting), len(self._refused)

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        problem = endpoint.problem()
        with self._lock:
            if problem is None:
                self._refused.forget(endpoint.key)
                admitted = self._admit(endpoint)
            else:
                self._refused.refuse(endpoint, problem)
                admitted = False
            was_read = problem is not None and endpoint.key in self._admitted
        if admitted:
            self.listener.endpoint_joined(endpoint)
        elif was_read:  # it was read; what it announces now cannot be
            self.endpoint_left(endpoint.key)

    def endpoint_left(self, key: str) -> None:
        with self._lock:
            self._waiting.pop(key, None)
            if key not in self._admitted:
                return
            self._admitted.discard(key)
            successor = self._next_waiting()
        self.listener.endpoint_left(key)
        if successor is not None:
            logger.info(
                "%s: endpoint %s is read now that another left (maxEndpoints %d)",
                self.name,
                successor.describe(),
                self.max_endpoints,
            )
            self.listener.endpoint_joined(successor)

    def _admit(self, endpoint: Endpoint) -> bool:
        """Whether ``endpoint`` (without a problem) goes on to the listener now; else it
        waits (called under the lock)."""
        if endpoint.key in self._admitted or len(self._admitted) < self.max_endpoints:
            self._admitted.add(endpoint.key)
            return True
        self._hold_back(endpoint)
        return False

    def _hold_back(self, endpoint: Endpoint) -> None:
        if endpoint.key in self._waiting or len(self._waiting) < self.max_endpoints:
            self._waiting[endpoint.key] = endpoint
        # else: first come, first served; discovery reports it again when it announces again
        self._held_back += 1
        now = time.monotonic()
        if now - self._held_back_logged < HELD_BACK_LOG_SECONDS:
            return
        if self._held_back_logged == float("-inf"):
            logger.warning(
                "%s: maxEndpoints (%d) reached: endpoint %s waits, as will any other new one, "
                "until an endpoint that is read leaves. Raise maxEndpoints if this query "
                "should read more, or check who announces them",
                self.name,
                self.max_endpoints,
                shown(endpoint.key),
            )
        else:
            logger.warning(
                "%s: maxEndpoints (%d): %d more endpoints held back in the last %g s, such as %s",
                self.name,
                self.max_endpoints,
                self._held_back,
                HELD_BACK_LOG_SECONDS,
                shown(endpoint.key),
            )
        self._held_back_logged, self._held_back = now, 0

    def _next_waiting(self) -> Endpoint | None:
        """The endpoint that has waited longest, now admitted (called under the lock)."""
        if not self._waiting or len(self._admitted) >= self.max_endpoints:
            return None
        key = next(iter(self._waiting))
        endpoint = self._waiting.pop(key)
        self._admitted.add(key)
        return endpoint


def guarded(listener: EndpointListener, name: str, max_endpoints: int) -> EndpointGuard:
    """``listener`` behind a guard with the query's ``maxEndpoints``."""
    return EndpointGuard(listener, name, max_endpoints)
