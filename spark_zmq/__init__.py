"""ZeroMQ-based systems as Spark Structured Streaming sources and sinks.

``spark.readStream.format("zeroeq")`` works once this package is installed (see
``pyspark_zeroeq``). The subpackages follow a message from the wire to a Spark row:

- ``protocols``: one subpackage per system (wire format, discovery, decoding, writing);
- ``placement``: where discovery and capture run (driver, executors' holder processes, a
  capture service), behind the one interface the reader plans offsets with;
- ``capture``: the zmq sockets and the poll loop;
- ``spool``: what capture received, kept per partition until Spark commits it;
- ``spark``: the data sources, the one generic stream reader and writer, offsets;
- ``cli``: the command line; ``testing``: clusters, demo peers and probes for tests.
"""

__version__ = "0.2.0"
