"""ZeroMQ-based systems as Spark Structured Streaming sources and sinks.

``spark.readStream.format("zeroeq")`` works once this package is installed (see
``pyspark_zeroeq``). The subpackages follow a message from the wire to a Spark row:

- ``protocols``: one subpackage per system (wire format, discovery, decoding, writing);
- ``planning``: discovery -> assignment -> claims, where capture runs (driver or executors);
- ``capture``: the zmq sockets and the poll loop, and the holder process on an executor;
- ``spool``: what capture received, kept per partition until Spark commits it;
- ``spark``: the data sources, the one generic stream reader and writer, offsets;
- ``cli``: the command line; ``testing``: clusters, demo peers and probes for tests.
"""

__version__ = "0.2.0"
