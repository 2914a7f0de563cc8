"""The jobs in ``spark_zmq/jobs/``, run by spark-submit against demo peers: capture into Parquet
partitioned by date and endpoint, and the monitor's progress lines."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest
import zmq
from pyspark.errors import AnalysisException

from spark_zmq.protocols.ebus import Broker, pack
from support.common import wait_until
from support.jobs import JOB_SECONDS, Lines, spark_submit, stop_job

pytestmark = [pytest.mark.spark, pytest.mark.jvms]


def broadcaster(broker: Broker) -> zmq.Socket:
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 1000)
    pub.connect(f"tcp://127.0.0.1:{broker.pub_port}")
    return pub


def warm_until_read(pub: zmq.Socket, lines: Lines, process: subprocess.Popen) -> None:
    def read() -> bool:
        assert process.poll() is None, lines.errors()
        pub.send_multipart([b"demo/warm", pack("warm")])
        return any(rows for rows, _, _ in lines.progress())

    wait_until(read, timeout=180, interval=0.5, what="the job to read a broadcast")


def test_capture_job_writes_parquet_partitioned_by_date_and_endpoint(spark, tmp_path):
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    pub = broadcaster(broker)
    output = tmp_path / "table"
    job = spark_submit(
        "capture_to_parquet.py",
        "--format",
        "ebus",
        "--option",
        f"subPort={broker.sub_port}",
        "--option",
        "channels=demo/",
        "--option",
        f"spoolPath={tmp_path / 'spool'}",
        "--output",
        str(output),
        "--trigger",
        "1",
        "--seconds",
        str(JOB_SECONDS),
    )
    lines = Lines(job)
    try:
        warm_until_read(pub, lines, job)
        for n in range(100):
            pub.send_multipart([b"demo/data", pack({"n": n})])

        def data_rows():
            try:  # what the job's committed micro-batches wrote (the sink's metadata log)
                table = spark.read.parquet(str(output))
            except AnalysisException:  # no batch written yet: no table, or none to infer from
                return []
            return table.where("channel = 'demo/data'").select("data", "date", "endpoint").collect()

        wait_until(
            lambda: len(data_rows()) >= 100, timeout=180, interval=2, what="100 rows in the table"
        )
        out_code = stop_job(lines)
    finally:
        if job.poll() is None:
            job.kill()
        pub.close()
        broker.close()
    assert out_code == 0, lines.errors()
    assert f"stopped; the table is {output}" in lines.lines
    data = data_rows()
    assert sorted(json.loads(r.data)["n"] for r in data) == list(range(100))
    assert {r.endpoint for r in data} == {f"tcp://127.0.0.1:{broker.sub_port}"}
    dates = [p.name for p in output.iterdir() if p.name.startswith("date=")]
    assert len(dates) >= 1 and all(re.fullmatch(r"date=\d{4}-\d{2}-\d{2}", d) for d in dates)
    assert all(
        child.name.startswith("endpoint=") for d in dates for child in (output / d).iterdir()
    )


def test_monitor_job_prints_a_progress_line_per_batch(tmp_path):
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    pub = broadcaster(broker)
    job = spark_submit(
        "monitor.py",
        "--format",
        "ebus",
        "--option",
        f"subPort={broker.sub_port}",
        "--option",
        "channels=demo/,other/",
        "--option",
        f"spoolPath={tmp_path / 'spool'}",
        "--seconds",
        str(JOB_SECONDS),
    )
    lines = Lines(job)
    try:
        warm_until_read(pub, lines, job)
        for n in range(50):
            pub.send_multipart([b"demo/data", pack(n)])
        wait_until(
            lambda: sum(rows for rows, _, _ in lines.progress()) >= 51,
            timeout=60,
            what="progress lines counting the broadcasts",
        )
        code = stop_job(lines)
    finally:
        if job.poll() is None:
            job.kill()
        pub.close()
        broker.close()
    assert code == 0, lines.errors()
    progress = lines.progress()
    assert {endpoints for _, endpoints, _ in progress if endpoints} == {2}
    assert all(gaps == 0 for _, _, gaps in progress)
    assert any(line.startswith("query monitor_ebus started") for line in lines.lines)
    assert "monitoring ebus, ephemeral (no --checkpoint)" in "\n".join(lines.lines)


def republish_to_goby(
    broker: Broker, tmp_path, *options: str, trigger: float = 1, seconds: float = 60
) -> subprocess.Popen:
    """The republish job from EBUS channel sensors/ to the gobyd at ``tmp_path/g``, on the
    checkpoint ``tmp_path/cp``; ``options`` are more reader options."""
    more = [arg for option in options for arg in ("--from-option", option)]
    return spark_submit(
        "republish.py",
        "--from",
        "ebus",
        "--from-option",
        f"subPort={broker.sub_port}",
        "--from-option",
        "channels=sensors/",
        *more,
        "--to",
        "goby",
        "--to-option",
        f"socketName={tmp_path / 'g'}",
        "--select",
        "'sensors' AS group",
        "--select",
        "'JSON' AS scheme",
        "--select",
        "'nlohmann::json' AS type",
        "--select",
        "data AS text",
        "--checkpoint",
        str(tmp_path / "cp"),
        "--trigger",
        f"{trigger:g}",
        "--seconds",
        f"{seconds:g}",
    )


def gobyd_subscriber(tmp_path) -> zmq.Socket:
    sub = zmq.Context.instance().socket(zmq.SUB)
    sub.setsockopt(zmq.LINGER, 0)
    sub.setsockopt(zmq.SUBSCRIBE, b"/sensors/")
    sub.connect(f"ipc://{tmp_path}/g.xpub")
    return sub


def relay(
    job: subprocess.Popen, lines: Lines, pub: zmq.Socket, sub: zmq.Socket, numbers: range
) -> list:
    """Broadcast warm-ups until one comes out at gobyd, then ``numbers``; the messages gobyd
    published until all of ``numbers`` were among them (or a minute passed without one), with
    any others it published meanwhile."""
    received = []

    def relayed() -> bool:
        assert job.poll() is None, lines.errors()
        pub.send_multipart([b"sensors/warm", pack({"warm": True})])
        if not sub.poll(500):
            return False
        received.append(sub.recv())
        return True

    wait_until(relayed, timeout=180, interval=0, what="a broadcast republished to gobyd")
    for n in numbers:
        pub.send_multipart([b"sensors/t", pack({"n": n})])
    while sub.poll(60_000):
        received.append(sub.recv())
        if set(numbers) <= set(numbered(received)):
            break
    return received


def numbered(received: list) -> list[int]:
    numbers = (json.loads(json_text(m)).get("n") for m in received)
    return [n for n in numbers if n is not None]


def test_republish_job_turns_ebus_broadcasts_into_goby_messages(tmp_path):
    from spark_zmq.protocols.goby import GobyDaemon, split_message

    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    gobyd = GobyDaemon(socket_name=str(tmp_path / "g"))
    pub = broadcaster(broker)
    sub = gobyd_subscriber(tmp_path)
    job = republish_to_goby(broker, tmp_path, f"spoolPath={tmp_path / 'spool'}")
    lines = Lines(job)
    try:
        received = relay(job, lines, pub, sub, range(20))
        code = stop_job(lines)
    finally:
        if job.poll() is None:
            job.kill()
        sub.close(0)
        pub.close()
        gobyd.close()
        broker.close()
    assert code == 0, lines.errors()
    messages = [split_message(m) for m in received]
    assert {(i.group, i.scheme, i.type) for i, _ in messages} == {
        ("sensors", "JSON", "nlohmann::json")
    }
    assert numbered(received) == list(range(20))
    assert any(line.startswith("republishing ebus as goby") for line in lines.lines)


def test_republish_restarted_after_the_temporary_folder_is_gone_sends_each_message_once(
    tmp_path, monkeypatch
):
    """Issue 33: without spoolPath the job's spool was under the temporary folder, and a
    restart after that folder was cleaned lost what the first run had captured and not yet
    sent. Its spool is now beside its checkpoint. The first run has one micro-batch, at its
    start (trigger 600 s), so what it captures waits in the spool when it stops; the
    temporary folder is then deleted, and the second run must send those messages, once."""
    from spark_zmq.protocols.goby import GobyDaemon

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setenv("TMPDIR", str(temporary))  # the jobs' Python processes spool there
    broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
    gobyd = GobyDaemon(socket_name=str(tmp_path / "g"))
    pub = broadcaster(broker)
    sub = gobyd_subscriber(tmp_path)
    received, codes, first_run_sent = [], [], 0
    try:
        job = republish_to_goby(broker, tmp_path, trigger=600, seconds=45)
        lines = Lines(job)
        try:
            while job.poll() is None:  # 20 numbers a second for as long as the first run lives
                pub.send_multipart([b"sensors/t", pack({"n": first_run_sent})])
                first_run_sent += 1
                while sub.poll(50):
                    received.append(sub.recv())
            codes.append((lines.wait(), lines.errors()))
        finally:
            if job.poll() is None:
                job.kill()
        shutil.rmtree(temporary)  # a reboot, a temp cleaner
        temporary.mkdir()
        job = republish_to_goby(broker, tmp_path)
        lines = Lines(job)
        try:
            received += relay(job, lines, pub, sub, range(100_000, 100_010))
            codes.append((stop_job(lines), lines.errors()))
        finally:
            if job.poll() is None:
                job.kill()
    finally:
        sub.close(0)
        pub.close()
        gobyd.close()
        broker.close()
    assert [code for code, _ in codes] == [0, 0], codes
    numbers = numbered(received)
    assert len(numbers) == len(set(numbers)), "a message was sent twice"
    assert [n for n in numbers if n >= 100_000] == list(range(100_000, 100_010))
    first = sorted(n for n in numbers if n < 100_000)
    # what the first run captured: every number from when its capture connected to when it
    # stopped (at least 5 s of them; the process lives some seconds after its query stops)
    assert len(first) >= 100 and first == list(range(first[0], first[-1] + 1)), first
    assert first[-1] >= first_run_sent - 20 * 20, (first[-1], first_run_sent)
    assert (tmp_path / "cp_spool").is_dir()


def json_text(message: bytes) -> bytes:
    """The JSON of a Goby JSON-scheme message (its payload is BSON)."""
    import bson

    from spark_zmq.protocols.goby import split_message

    return json.dumps(bson.decode(split_message(message)[1])).encode()
