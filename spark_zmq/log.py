"""The package's logger: one line per event that matters (endpoint joined/left, gap, reconnect).

Spark runs our code in Python worker processes whose stderr ends up in the driver's or the
executor's log; those processes configure no logging, so we attach a stderr handler once unless
the application configured the ``spark_zmq`` logger itself. ``SPARK_ZMQ_LOG_LEVEL`` sets the level.
"""

import logging
import os
import sys

logger = logging.getLogger("spark_zmq")

if not logger.handlers:
    _handler = logging.StreamHandler(sys.stderr)
    _handler.setFormatter(logging.Formatter("%(asctime)s spark_zmq %(levelname)s %(message)s"))
    logger.addHandler(_handler)
    logger.setLevel(os.environ.get("SPARK_ZMQ_LOG_LEVEL", "INFO").upper())
    logger.propagate = False
