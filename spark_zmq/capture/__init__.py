"""Capture: the zmq sockets and the poll loop that appends what they receive to the spool.
Where it runs (the driver, a holder process on an executor, a capture service) is
``spark_zmq.placement``'s; nothing here needs Spark."""
