"""Spark's entry point for each format: a ``DataSource`` class per protocol.

``spark.readStream.format(name)`` (and ``spark.read``, which reads a spool) finds the class
through the ``pyspark_<name>`` module's ``DefaultSource`` (Spark imports every top-level
``pyspark_*`` module at its first data source call), or through
``spark.dataSource.register(ZeroEQDataSource)`` and the like.
"""

from __future__ import annotations

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
)
from pyspark.sql.pandas.types import from_arrow_schema, to_arrow_schema
from pyspark.sql.types import StructType

from spark_zmq.extras import require
from spark_zmq.options import OptionError, Options, parse_options
from spark_zmq.protocols.base import SinkProtocol, StreamProtocol
from spark_zmq.protocols.ebus import EBus
from spark_zmq.protocols.goby import Goby
from spark_zmq.protocols.yamz import Yamz
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.spark.batch import ZmqBatchReader
from spark_zmq.spark.reader import ZmqStreamReader
from spark_zmq.spark.rows import output_schema
from spark_zmq.spark.writer import ZmqStreamWriter
from spark_zmq.stream_options import READER_OPTIONS, WRITER_OPTIONS


class ZmqDataSource(DataSource):
    """A format backed by a ``StreamProtocol``; options are validated as the query is defined."""

    protocol: StreamProtocol

    @classmethod
    def name(cls) -> str:
        return cls.protocol.name

    def reader_options(self) -> Options:
        require(
            self.protocol.name, f"format({self.protocol.name!r})"
        )  # a missing library is reported as the query is defined
        options = parse_options(
            self.protocol.name, READER_OPTIONS + self.protocol.reader_options, self.options
        )
        self.protocol.check_options(options)
        return options

    def _sink(self) -> SinkProtocol:
        if not isinstance(self.protocol, SinkProtocol):
            raise OptionError(f"{self.protocol.name}: this format cannot be written")
        return self.protocol

    def writer_options(self) -> Options:
        protocol = self._sink()
        require(protocol.name, f"format({protocol.name!r})")
        return parse_options(protocol.name, WRITER_OPTIONS + protocol.writer_options, self.options)

    def schema(self) -> StructType:
        self.reader_options()  # fail on a bad option when the query is defined, not later
        return from_arrow_schema(output_schema(self.protocol))

    def reader(self, schema: StructType) -> DataSourceReader:
        return ZmqBatchReader(self.protocol, self.reader_options())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ZmqStreamReader(self.protocol, self.reader_options())

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        protocol, options = self._sink(), self.writer_options()
        protocol.check_input(to_arrow_schema(schema), options)
        return ZmqStreamWriter(protocol, options)


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
