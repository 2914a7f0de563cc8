"""Makes ``spark.readStream.format("yamz")`` work with no ``register()`` call: Spark imports
every top-level ``pyspark_*`` module and registers its ``DefaultSource``."""

from spark_zmq.spark.datasource import YamzDataSource as DefaultSource

__all__ = ["DefaultSource"]
