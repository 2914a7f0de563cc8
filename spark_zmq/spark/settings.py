"""The generic reader's options, typed: what a stream or batch read of any format takes from
the options it shares with every other format (``stream_options``), read once when the reader
is made. What shapes the rows of a read task is ``rows.ReadSettings``; what a capture process
takes is ``capture.assignment.CaptureSettings``."""

from __future__ import annotations

from dataclasses import dataclass

from spark_zmq.options import Options
from spark_zmq.stream_options import OffsetSpec


@dataclass(frozen=True)
class SourceSettings:
    """Where a read starts and ends, where its spool is, and how micro-batches are admitted.

    ``spool_path`` is None when option ``spoolPath`` is not set (a stream then spools to a
    default folder; a batch read cannot run); ``starting_offsets``/``ending_offsets`` are None
    when not set (each kind of read has its own default)."""

    spool_path: str | None
    starting_offsets: OffsetSpec | None
    ending_offsets: OffsetSpec | None
    max_records_per_trigger: int | None
    min_records_per_trigger: int | None
    max_trigger_delay: float
    capture_on_executors: bool
    #: minPartitions: the fewest read tasks a read is split into (None: one per partition)
    min_partitions: int | None

    @classmethod
    def of(cls, options: Options) -> SourceSettings:
        return cls(
            spool_path=options["spoolPath"],
            starting_offsets=options["startingOffsets"],
            ending_offsets=options["endingOffsets"],
            max_records_per_trigger=options["maxRecordsPerTrigger"],
            min_records_per_trigger=options["minRecordsPerTrigger"],
            max_trigger_delay=options["maxTriggerDelay"],
            capture_on_executors=options["capture"] == "executors",
            min_partitions=options["minPartitions"],
        )
