"""Planning, on the driver: discovery -> assignment -> claims, behind the one interface the
reader plans offsets with (``placement.Placement``); ``make_placement`` picks the placement
that option ``capture`` names."""

from __future__ import annotations

from spark_zmq.options import Options
from spark_zmq.planning.driver import DriverCapture
from spark_zmq.planning.executors import ExecutorCapture
from spark_zmq.planning.placement import Placement
from spark_zmq.planning.service import ServiceSpool
from spark_zmq.protocols.base import StreamProtocol


def make_placement(protocol: StreamProtocol, options: Options, spool_path: str) -> Placement:
    """The placement option ``capture`` names."""
    kinds: dict[str, type[Placement]] = {
        "driver": DriverCapture,
        "executors": ExecutorCapture,
        "service": ServiceSpool,
    }
    return kinds[options["capture"]](protocol, options, spool_path)
