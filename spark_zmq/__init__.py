"""ZeroMQ-based systems as Spark Structured Streaming sources and sinks.

``spark.readStream.format("zeroeq")`` works once this package is installed (see
``pyspark_zeroeq``). The architecture: discovery -> assignment -> capture -> spool -> read;
``spark_zmq.source`` is the one generic reader, ``spark_zmq.protocols.*`` one module per system.
"""

__version__ = "0.1.0"
