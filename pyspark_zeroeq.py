"""Makes ``spark.readStream.format("zeroeq")`` work with no ``register()`` call: Spark imports
every top-level ``pyspark_*`` module and registers its ``DefaultSource``."""

from spark_zmq.spark.datasource import ZeroEQDataSource as DefaultSource

__all__ = ["DefaultSource"]
