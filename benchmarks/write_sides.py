"""The sides of a ``zeroeq_write_rate.py`` round, each into the one subscriber: the bare
pyzmq publisher (the shared ``harness.publisher``, blocking at its high-water mark as the writer
does), the writer in a Spark query, and the writer alone without Spark."""

from __future__ import annotations

import contextlib
import multiprocessing
import multiprocessing.connection
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.children import Child, report_errors
from harness.publisher import BLOCK, RELEASE_TIMEOUT, PublisherProcess, PublishPlan
from write_subscriber import EVENT, INPUT_SCHEMA, Reception, subscriber_main

from spark_zmq.spark.session import LOOPBACK

#: the writer's default sendHighWaterMark, set explicitly on both sides
SEND_HWM = 100_000
WAIT_FOR_SUBSCRIBERS = 60.0
CHILD_START_TIMEOUT = 60.0

#: rows per Arrow batch that the writer alone gets (Spark's arrow.maxRecordsPerBatch default)
ARROW_BATCH_ROWS = 10_000


# -- the writer without Spark ---------------------------------------------------------------------


def writer_options(session: str, core: str) -> dict[str, str]:
    """The writer's options, the same for a Spark query and the writer alone."""
    return {
        "session": session,
        "waitForSubscribers": str(WAIT_FOR_SUBSCRIBERS),
        "sendHighWaterMark": str(SEND_HWM),
        "discoveryInterfaces": LOOPBACK,
        "sendCore": core,
    }


@dataclass(frozen=True)
class AloneSend:
    """What the writer alone reports: ``time.monotonic()`` around ``write``, the process's CPU
    time in it (all threads: zmq's I/O thread, ZeroConf's), and the time the encoding alone
    took in a pass before (``encode_columns`` for the compiled loop, ``encode`` otherwise)."""

    started: float
    ended: float
    cpu_seconds: float
    encode_seconds: float
    sent: int


def alone_writer_main(
    input_dir: str, session: str, core: str, conn: multiprocessing.connection.Connection
) -> None:
    """The generic writer's ``write`` on the input's rows in Arrow batches, as a Spark task
    calls it; reports ``ready``, then ``sent``, then keeps the publisher until released."""

    def body() -> None:
        import pyarrow.parquet as pq

        from spark_zmq.protocols.zeroeq import ZeroEQ
        from spark_zmq.spark.publishers import close_publishers
        from spark_zmq.spark.writer import ZmqStreamWriter

        protocol = ZeroEQ()
        options = protocol.parse_writer_options(writer_options(session, core))
        settings = protocol.write_settings(options)
        batches = [
            batch
            for path in sorted(Path(input_dir).glob("*.parquet"))
            for batch in pq.read_table(path).to_batches(max_chunksize=ARROW_BATCH_ROWS)
        ]
        encode = protocol.encode_columns if core == "native" else protocol.encode
        began = time.perf_counter()
        for batch in batches:
            encode(batch, settings)
        encode_seconds = time.perf_counter() - began
        writer = ZmqStreamWriter(protocol, options)
        conn.send(("ready", None))
        cpu, started = time.process_time(), time.monotonic()
        counts = writer.write(iter(batches))
        ended, cpu = time.monotonic(), time.process_time() - cpu
        conn.send(("sent", AloneSend(started, ended, cpu, encode_seconds, counts.sent)))
        conn.poll(RELEASE_TIMEOUT)
        close_publishers()

    report_errors(conn, body)


# -- one round ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One side of a round: what its subscriber saw, or why it failed, and its figures besides
    its rate (by name, each name with its unit; see FIGURES)."""

    reception: Reception | None
    error: str = ""
    figures: dict[str, float] = field(default_factory=dict)


#: how each figure is shown
FIGURES = {
    "its send loop msg/s": "{:,.0f}",
    "wall s": "{:.2f}",
    "start-up s": "{:.2f}",
    "stream s": "{:.2f}",
    "end s": "{:.2f}",
    "CPU µs/msg": "{:.2f}",
    "encoding µs/msg": "{:.2f}",
}


@dataclass(frozen=True)
class Round:
    """Every side of one round, by name: ``bare``, ``spark <core>``, ``alone <core>``."""

    runs: dict[str, Run]

    def ratio(self, side: str) -> float | None:
        bare, other = self.runs["bare"].reception, self.runs[side].reception
        if bare is None or other is None or not bare.rate:
            return None
        return other.rate / bare.rate


def receive_timeout(rows: int) -> float:
    """How long a subscriber waits for everything: generous, a failure is not a hang."""
    return WAIT_FOR_SUBSCRIBERS + 60.0 + rows / 2_000


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def run_bare(context: Any, rows: int, native: bool) -> Run:
    """The bare XPUB process -> the subscriber process, connected to its port directly. The
    publisher is the shared one with its Python loop (send_multipart per message), unpaced,
    with the writer's high-water mark, waiting at a full queue as the writer does (BLOCK)."""
    plan = PublishPlan(rows, 0.0, send_hwm=SEND_HWM, patience=BLOCK, event=EVENT)
    publisher = subscriber = None
    try:
        publisher = PublisherProcess(context, plan)
        subscriber = Child(
            context,
            subscriber_main,
            None,
            (f"tcp://{publisher.address}",),
            rows,
            receive_timeout(rows),
            native,
        )
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        sent = publisher.result(receive_timeout(rows))
        reception = subscriber.expect("received", receive_timeout(rows))
        return Run(reception, figures={"its send loop msg/s": sent.rate})
    except (RuntimeError, TimeoutError) as exc:
        return Run(None, first_line(exc))
    finally:
        if publisher is not None:
            publisher.finish()
        if subscriber is not None:
            subscriber.stop()


def run_alone(
    context: Any, input_dir: Path, rows: int, session: str, core: str, native: bool
) -> Run:
    """The writer alone (a process of its own) -> the subscriber process, which finds its
    publisher over ZeroConf."""
    subscriber = Child(context, subscriber_main, session, (), rows, receive_timeout(rows), native)
    writer = None
    try:
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        writer = Child(context, alone_writer_main, str(input_dir), session, core)
        writer.expect("ready", CHILD_START_TIMEOUT)
        sent: AloneSend = writer.expect("sent", receive_timeout(rows))
        reception = subscriber.expect("received", receive_timeout(rows))
        per_message = 1e6 / max(sent.sent, 1)
        figures = {
            "CPU µs/msg": sent.cpu_seconds * per_message,
            "encoding µs/msg": sent.encode_seconds * per_message,
        }
        return Run(reception, figures=figures)
    except (RuntimeError, TimeoutError) as exc:
        return Run(None, first_line(exc))
    finally:
        if writer is not None:
            writer.stop()
        subscriber.stop()


def start_writer(spark: Any, input_dir: Path, checkpoint: Path, session: str, core: str) -> Any:
    return (
        spark.readStream.schema(INPUT_SCHEMA)
        .parquet(str(input_dir))
        .writeStream.format("zeroeq")
        .options(**writer_options(session, core))
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def run_writer(
    spark: Any,
    context: Any,
    input_dir: Path,
    checkpoint: Path,
    rows: int,
    session: str,
    core: str,
    native: bool,
) -> Run:
    """Parquet -> ``format("zeroeq")`` with send loop ``core`` -> the subscriber process, which
    finds the publishers of ``session`` over ZeroConf. The subscriber is browsing before the
    query starts, so its own start-up is not in the query's wall time."""
    subscriber = Child(context, subscriber_main, session, (), rows, receive_timeout(rows), native)
    query = None
    try:
        subscriber.expect("ready", CHILD_START_TIMEOUT)
        started = time.monotonic()
        query = start_writer(spark, input_dir, checkpoint, session, core)
        finished = query.awaitTermination(receive_timeout(rows) + 60.0)
        ended = time.monotonic()
        got: Reception = subscriber.expect("received", receive_timeout(rows))
        figures = {"wall s": ended - started}
        if got.first:
            figures.update(
                {
                    "start-up s": got.first - started,
                    "stream s": got.seconds,
                    "end s": ended - got.last,
                }
            )
        return Run(got, "" if finished else "the query did not finish in time", figures)
    except Exception as exc:  # a failed query is a result of the round, not a crash of the run
        return Run(None, first_line(exc))
    finally:
        if query is not None:
            with contextlib.suppress(Exception):
                query.stop()
        subscriber.stop()
