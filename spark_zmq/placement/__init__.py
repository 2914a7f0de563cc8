"""Placement, on the driver: where discovery and capture run for a query (option ``capture``),
behind the one interface the reader plans offsets with (``base.Placement``).

- ``driver``: ``capture=driver``, discovery and capture in the driver-side reader process;
- ``executors``: ``capture=executors``, discovery on the driver, the partitions captured by one
  holder process per executor, which share them out and take over those of a lost one
  (``enumerator``, ``starts``, ``claim``, ``holder``, ``watch``, ``spread``, ``reach``);
- ``service``: ``capture=service``, a capture service captures (``spark-zmq capture``), the
  query only reads;
- ``guard``: what discovery reports is checked and bounded before it reaches a placement.

The files they share with holders and read tasks in the spool are ``spool.contract``'s.
``make_placement`` imports the placement it makes, when it makes it: only
``capture=executors`` needs pyspark (its claims are Spark partitions), and a capture service
or a holder process imports this package without it.
"""

from __future__ import annotations

from typing import TypeVar

from spark_zmq.placement.base import Placement
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.stream_settings import ReaderSettings

#: the format's reader settings
S = TypeVar("S")


def make_placement(
    protocol: StreamProtocol[S], settings: ReaderSettings[S], spool_path: str
) -> Placement:
    """The placement option ``capture`` names (``settings.source.placement``)."""
    kind = settings.source.placement
    if kind == "driver":
        from spark_zmq.placement.driver import DriverCapture

        return DriverCapture(protocol, settings, spool_path)
    if kind == "executors":
        from spark_zmq.placement.executors.enumerator import ExecutorCapture

        return ExecutorCapture(protocol, settings, spool_path)
    if kind == "service":
        from spark_zmq.placement.service import ServiceSpool

        return ServiceSpool(protocol, settings, spool_path)
    raise ValueError(
        f"{protocol.name}: option capture={kind!r} names no placement: "
        f"use driver, executors or service"
    )
