"""Batch reads of a spool: ``spark.read.format(F).option("spoolPath", P).load()``.

What a stream captured stays in its spool, committed or not, until retention deletes it
(``spoolRetention``). A batch read (replay, debugging, a backfill into a table) plans the ranges
[startingOffsets, endingOffsets) of what the spool holds when the read is planned as a stream
plans a micro-batch's (grouped into at most ``maxPartitions`` read tasks, cut into at least
``minPartitions``), and reads them with the stream's own rows: the same schema, ``mode``,
``failOnDataLoss`` and gap rows. It opens no socket and writes nothing: a live stream on the
same spool goes on undisturbed (its retention may delete committed segments meanwhile, which the
read gets as one gap row naming the offsets).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition

from spark_zmq.errors import OptionError, SpoolError
from spark_zmq.log import configure_spark_worker_logging
from spark_zmq.options import Options
from spark_zmq.protocols.contract import StreamProtocol
from spark_zmq.spark.offsets import plan_tasks, ranges, resolve
from spark_zmq.spark.rows import ReadTask, SpoolRange, read_rows
from spark_zmq.spool.identity import spool_identity
from spark_zmq.spool.reader import read_snapshot
from spark_zmq.spool.remote import load_served
from spark_zmq.stream_settings import ReaderSettings


class ZmqBatchReader(DataSourceReader):
    """Reads a spool folder once, for any ``StreamProtocol``."""

    def __init__(self, protocol: StreamProtocol[Any], options: Options) -> None:
        query = ReaderSettings.of(options, protocol.read_settings(options))
        settings = query.source
        spool_path = settings.spool_path
        if not spool_path:
            raise OptionError(
                f"{protocol.name}: a batch read (spark.read) reads what a stream captured into "
                f"its spool: set option 'spoolPath' to that folder (use spark.readStream to "
                f"capture)"
            )
        if not os.path.isdir(spool_path):
            raise SpoolError(
                f"{protocol.name}: spool folder {spool_path!r} (option spoolPath) does not exist"
            )
        self.protocol = protocol
        self.query = query
        self.settings = settings
        self.spool_path = spool_path

    def partitions(self) -> Sequence[InputPartition]:
        held = read_snapshot(self.spool_path)
        first = {key: state.start for key, state in held.items()}
        end = {key: state.end for key, state in held.items()}
        starting = self.settings.starting_offsets or "earliest"
        start = resolve(starting, first, end, "earliest", "startingOffsets")
        stop = resolve(
            self.settings.ending_offsets or "latest", first, end, "latest", "endingOffsets"
        )
        for key in sorted(start):
            if stop[key] < start[key]:
                raise OptionError(
                    f"{self.protocol.name}: partition {key}: endingOffsets ({stop[key]}) is "
                    f"before startingOffsets ({start[key]})"
                )
        tasks = plan_tasks(
            ranges(start, stop, {}), self.settings.min_partitions, self.settings.read_tasks, first
        )
        spool_id, served = spool_identity(self.spool_path), load_served(self.spool_path)
        return [
            ReadTask(
                tuple(
                    SpoolRange(self.spool_path, r.key, r.start, r.end, spool_id, served)
                    for r in task
                )
            )
            for task in tasks
        ]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        configure_spark_worker_logging()
        if not isinstance(partition, ReadTask):
            return  # nothing to read: Spark still runs one task with a placeholder partition
        yield from read_rows(self.protocol, self.query.decoding, self.query.rows, partition)
