"""A Spark application for the restart tests (tests/placement/test_executor_capture.py, and
tests/placement/test_restart_gaps.py, which kills it), run by spark-submit.

It runs a zeroeq capture query into a Parquet table, stops it and starts it again from the same
checkpoint within the application (its executors, and so their capture processes, live on), as a
notebook user does: query ``n`` runs until the file ``stop-<n>`` appears in the control folder.
After the last run the application ends, and its executors with it.

    restarting_query.py CONTROL SPOOL TABLE SESSION RUNS [READER_OPTION=VALUE ...]
"""

from __future__ import annotations

import os
import sys
import time

from spark_zmq.spark.session import job_session


def main(control: str, spool: str, table: str, session: str, runs: str, *extra: str) -> int:
    spark = job_session("restarting query")
    options = {
        "session": session,
        "discoveryInterfaces": "127.0.0.1",
        "capture": "executors",
        "spoolPath": spool,
        **dict(pair.split("=", 1) for pair in extra),
    }
    for run in range(int(runs)):
        query = (
            spark.readStream.format("zeroeq")
            .options(**options)
            .load()
            .writeStream.format("parquet")
            .option("path", table)
            .option("checkpointLocation", table + "_checkpoint")
            .trigger(processingTime="1 second")
            .start()
        )
        print(f"started {run}", flush=True)
        while not os.path.exists(os.path.join(control, f"stop-{run}")):
            if query.exception() is not None:
                print(f"failed: {query.exception()}", flush=True)
                return 1
            time.sleep(0.2)
        query.stop()
        print(f"stopped {run}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    from spark_zmq.log import configure_logging

    configure_logging()
    sys.exit(main(*sys.argv[1:]))
