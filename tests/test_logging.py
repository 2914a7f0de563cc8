"""A library's logging: spark_zmq configures nothing in an application's process; its records
reach the application's own configuration. Programs and Spark's worker processes get a stderr
handler."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from support.common import ROOT

APPLICATION = textwrap.dedent("""
    import logging, sys, time
    import spark_zmq.spark.datasource, spark_zmq.cli  # everything a user imports
    from spark_zmq.log import logger
    assert [type(h).__name__ for h in logger.handlers] == ["NullHandler"], logger.handlers
    assert logger.propagate and logger.level == logging.NOTSET
    logging.basicConfig(stream=sys.stdout, level=logging.INFO, format="APP %(name)s %(message)s")

    from spark_zmq.capture.loop import Capture
    from spark_zmq.protocols.contract import Endpoint, StaticDiscovery
    from spark_zmq.protocols.zeroeq import MEERKAT, Publisher, event_id
    from spark_zmq.spool.writer import Spool
    publisher = Publisher("", announce=False)
    spool = Spool(sys.argv[1], 1 << 20)
    capture = Capture(spool, max_message_bytes=1 << 20, flush_interval=0.05)
    capture.start()
    subscriptions = (b"", event_id(MEERKAT))
    endpoint = Endpoint(publisher.instance_name, publisher.address, {}, subscriptions)
    StaticDiscovery([endpoint]).start(capture)
    publisher.wait_for_subscribers(timeout=10)
    capture.close(); spool.close(); publisher.close()
""")


def test_records_go_to_the_applications_logging_configuration(tmp_path):
    run = subprocess.run(
        [sys.executable, "-c", APPLICATION, str(tmp_path / "spool")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "APP spark_zmq capture: endpoint joined: 127.0.0.1:" in run.stdout
    assert "spark_zmq" not in run.stderr, "nothing of ours went to a handler of our own"


def test_a_program_shows_our_records_on_stderr_at_the_level_asked(tmp_path):
    program = (
        "from spark_zmq.log import configure_logging, logger\n"
        "configure_logging()\n"
        "logger.info('hidden at WARNING')\n"
        "logger.warning('shown')\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"SPARK_ZMQ_LOG_LEVEL": "WARNING", "PATH": "/usr/bin:/bin"},
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stderr.count("spark_zmq WARNING shown") == 1 and "hidden" not in run.stderr
