"""Jobs for spark-submit, shipped with the package so that no checkout is needed.

- ``zeroeq_to_parquet``: the main job: ZeroEQ events (with demo publishers by default) into
  a Parquet table;
- ``capture_to_parquet``: any format into a Parquet table partitioned by date and endpoint;
- ``monitor``: one progress line per micro-batch, nothing written;
- ``republish``: one format into another, columns mapped by SQL;
- ``doctor``: checks an application's set-up for the formats, driver and executors.

Run one with ``python -m spark_zmq.jobs.NAME`` (a local session), or give spark-submit its file:
``spark-submit "$(spark-zmq job NAME)" ...`` (``spark-zmq job NAME`` prints the path).
"""
