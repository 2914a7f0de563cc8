"""Spark's entry point for each format: a ``DataSource`` class per protocol.

``spark.readStream.format(name)`` finds the class through the ``pyspark_<name>`` module's
``DefaultSource`` (Spark imports every top-level ``pyspark_*`` module at its first data source
call), or through ``spark.dataSource.register(ZeroEQDataSource)`` and the like.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from .options import READER_OPTIONS, Options, parse_options
from .protocols.base import StreamProtocol
from .protocols.zeroeq import ZeroEQ
from .source import ZmqStreamReader, output_schema


class ZmqDataSource(DataSource):
    """A format backed by a ``StreamProtocol``; options are validated as the query is defined."""

    protocol: StreamProtocol

    @classmethod
    def name(cls) -> str:
        return cls.protocol.name

    def reader_options(self) -> Options:
        return parse_options(self.protocol.name,
                             READER_OPTIONS + self.protocol.reader_options, self.options)

    def schema(self) -> StructType:
        self.reader_options()  # fail on a bad option when the query is defined, not later
        return from_arrow_schema(output_schema(self.protocol))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return ZmqStreamReader(self.protocol, self.reader_options())


# -- one class per format (module-level, so Spark pickles them by reference) ------------------

class ZeroEQDataSource(ZmqDataSource):
    """``format("zeroeq")``: events of the publishers of a ZeroEQ session."""

    protocol = ZeroEQ()
