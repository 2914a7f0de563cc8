"""Makes ``spark.readStream.format("ebus")`` work with no ``register()`` call: Spark imports
every top-level ``pyspark_*`` module and registers its ``DefaultSource``."""

from spark_zmq.spark.datasource import EBusDataSource as DefaultSource

__all__ = ["DefaultSource"]
