"""Capture: the zmq sockets, the poll loop that appends what they receive to the spool, and
the holder process that runs it on an executor."""
