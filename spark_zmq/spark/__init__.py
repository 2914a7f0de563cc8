"""Spark's side: the data sources, the one generic stream reader and writer, offsets and
admission control, and sessions on this machine."""

from spark_zmq.extras import require

require(
    "spark", "spark_zmq's data sources"
)  # a clear error, with the supported versions, rather than pyspark's own
