"""Spark's side: the data sources, the one generic stream reader and writer, offsets and
admission control, and sessions on this machine."""
