"""A Spark session on this machine that listens on loopback only.

For the demo job, the notebook, the tests and the benchmarks: they run discovery inside a
private network namespace (or restricted to 127.0.0.1), and Spark itself must not look for or
bind to any other address there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # (imported where used: pyspark is an extra)
    from pyspark.sql import SparkSession

import os
import sys
from collections.abc import Mapping

LOOPBACK = "127.0.0.1"


def loopback_session(
    app_name: str, conf: Mapping[str, str] | None = None, log_level: str = "WARN"
) -> SparkSession:
    """A ``local[2]`` session bound to 127.0.0.1 whose Python workers run this interpreter
    (so they import this installation of spark_zmq); ``conf`` adds settings."""
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName(app_name)
        .config("spark.driver.host", LOOPBACK)
        .config("spark.driver.bindAddress", LOOPBACK)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session


def job_session(app_name: str, log_level: str = "WARN") -> SparkSession:
    """spark-submit's session when run by spark-submit (it sets the master), else a loopback
    one: the jobs in ``spark_zmq.jobs`` run either way."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return loopback_session(app_name, log_level=log_level)
    from pyspark.sql import SparkSession

    session = SparkSession.builder.appName(app_name).getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    return session
