"""Planning, on the driver: discovery -> assignment -> claims, behind the one interface the
reader plans offsets with (``placement.Placement``); ``make_placement`` picks the placement
that option ``capture`` names."""

from __future__ import annotations

from typing import TypeVar

from spark_zmq.planning.driver import DriverCapture
from spark_zmq.planning.executors import ExecutorCapture
from spark_zmq.planning.placement import Placement
from spark_zmq.planning.service import ServiceSpool
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.stream_settings import ReaderSettings

#: the format's reader settings
S = TypeVar("S")


def make_placement(
    protocol: StreamProtocol[S], settings: ReaderSettings[S], spool_path: str
) -> Placement:
    """The placement option ``capture`` names (``settings.source.placement``)."""
    kinds: dict[str, type[Placement]] = {
        "driver": DriverCapture,
        "executors": ExecutorCapture,
        "service": ServiceSpool,
    }
    return kinds[settings.source.placement](protocol, settings, spool_path)
