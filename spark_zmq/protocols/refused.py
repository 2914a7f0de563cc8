"""Endpoints that discovery reported but that are refused (a partition key or address that
``spark_zmq.protocols.addresses`` does not accept, a peer over its bounds): remembered, so that
each refusal is logged once however often discovery reports the endpoint again."""

from __future__ import annotations

from spark_zmq.log import logger
from spark_zmq.protocols.contract import Endpoint


class RefusedEndpoints:
    """The endpoints refused so far and why, so that each refusal is logged once however often
    discovery reports the endpoint again; at most ``limit`` are remembered (peers choose the
    keys), the oldest forgotten first."""

    def __init__(self, name: str, limit: int) -> None:
        self.name = name
        self.limit = limit
        self._problems: dict[str, str] = {}  # key -> the problem logged for it

    def __len__(self) -> int:
        return len(self._problems)

    def refuse(self, endpoint: Endpoint, problem: str) -> None:
        """Log that ``endpoint`` is refused for ``problem``, unless that was logged last."""
        if self._problems.get(endpoint.key) == problem:
            return
        if endpoint.key not in self._problems and len(self._problems) >= self.limit:
            del self._problems[next(iter(self._problems))]
        self._problems[endpoint.key] = problem
        logger.warning(
            "%s: endpoint %s refused: %s; the other endpoints are read as usual",
            self.name,
            endpoint.describe(),
            problem,
        )

    def forget(self, key: str) -> None:
        """``key`` was taken: a later refusal of it is logged again."""
        self._problems.pop(key, None)
