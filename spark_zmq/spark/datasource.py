"""Spark's entry point for each format: a ``DataSource`` class per protocol.

``spark.readStream.format(name)`` (and ``spark.read``, which reads a spool) finds the class
through the ``pyspark_<name>`` module's ``DefaultSource`` (Spark imports every top-level
``pyspark_*`` module at its first data source call), or through
``spark.dataSource.register(ZeroEQDataSource)`` and the like.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from spark_zmq.extras import require
from spark_zmq.options import OptionError, Options
from spark_zmq.protocols.contract import SinkProtocol, StreamProtocol
from spark_zmq.protocols.ebus import EBus
from spark_zmq.protocols.goby import Goby
from spark_zmq.protocols.yamz import Yamz
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.spark.batch import ZmqBatchReader
from spark_zmq.spark.reader import ZmqStreamReader
from spark_zmq.spark.rows import output_schema
from spark_zmq.spark.writer import ZmqStreamWriter


class ZmqDataSource(DataSource):
    """A format backed by a ``StreamProtocol``; options are validated as the query is defined."""

    protocol: StreamProtocol[Any]

    @classmethod
    def name(cls) -> str:
        return cls.protocol.name

    def reader_options(self) -> Options:
        require(
            self.protocol.name, f"format({self.protocol.name!r})"
        )  # a missing library is reported as the query is defined
        options = self.protocol.parse_reader_options(self.options)
        self.protocol.read_settings(options)  # values wrong together fail here too
        return options

    def _sink(self) -> SinkProtocol[Any]:
        if not isinstance(self.protocol, SinkProtocol):
            raise OptionError(f"{self.protocol.name}: this format cannot be written")
        return self.protocol

    def writer_options(self) -> Options:
        protocol = self._sink()
        require(protocol.name, f"format({protocol.name!r})")
        return protocol.parse_writer_options(self.options)

    def schema(self) -> StructType:
        self.reader_options()  # fail on a bad option when the query is defined, not later
        return from_arrow_schema(output_schema(self.protocol))

    def reader(self, schema: StructType) -> DataSourceReader:
        return ZmqBatchReader(self.protocol, self.reader_options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ZmqStreamReader(self.protocol, self.reader_options())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        protocol, options = self._sink(), self.writer_options()
        writer = ZmqStreamWriter(protocol, options)
        protocol.check_input(to_arrow_schema(schema), writer.format_settings)
        return writer


# -- one class per format (module-level, so Spark pickles them by reference) ------------------


class ZeroEQDataSource(ZmqDataSource):
    """``format("zeroeq")``: events of the publishers of a ZeroEQ session."""

    protocol = ZeroEQ()


class EBusDataSource(ZmqDataSource):
    """``format("ebus")``: broadcasts on EBUS broker channels."""

    protocol = EBus()


class GobyDataSource(ZmqDataSource):
    """``format("goby")``: Goby3 messages through gobyd's Manager and Router."""

    protocol = Goby()


class YamzDataSource(ZmqDataSource):
    """``format("yamz")``: sockets named by yamz addresses, found through Zyre."""

    protocol = Yamz()
