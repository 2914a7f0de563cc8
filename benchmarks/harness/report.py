"""What the rate benchmarks print: the run's header, a trial's row, the search's summary, and
the latency, CPU and memory sections."""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import zmq

from harness.capture import MemoryResult
from harness.publisher import PAYLOAD_BYTES, SEND_HWM, SEND_PATIENCE, PublishResult
from harness.trials import CAPTURE_RECEIVE_HWM, KEEP_UP, SearchOutcome, Trial
from spark_zmq.spark.session import LOOPBACK

#: the issue's target for the connector's no-gap rate over the bare SUB loop's
RATIO_TARGET = 1.5


def commit() -> str:
    """The checkout's commit, ``-dirty`` when it has changes: which code a report is of."""
    return subprocess.run(
        ["git", "-C", str(Path(__file__).parent), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()


def java_version() -> str:
    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False)
    text = java.stderr or java.stdout
    return text.splitlines()[0] if text else "unknown"


def print_environment(title: str) -> None:
    """The header's first lines, the same in every benchmark: command, commit, machine and
    versions, and the private network."""
    import pyarrow
    import pyspark

    print(title)
    print(f"  command   : {shlex.join([sys.executable, *sys.argv])}")
    print(f"  when      : {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {commit()}")
    print(
        f"  machine   : nproc={len(os.sched_getaffinity(0))} ({platform.machine()}, "
        f"{platform.platform()})"
    )
    print(f"  python    : {platform.python_version()} ({sys.executable})")
    print(f"  zmq       : pyzmq {zmq.pyzmq_version()}, libzmq {zmq.zmq_version()}")
    print(
        f"  spark     : pyspark {pyspark.__version__}, pyarrow {pyarrow.__version__}, "
        f"numpy {np.__version__}, {java_version()}"
    )
    print(
        f"  network   : private namespace (interfaces: "
        f"{', '.join(n for _, n in socket.if_nameindex())}), {LOOPBACK} only"
    )


def print_header(args: argparse.Namespace, title: str = "zeroeq_rate benchmark") -> None:
    print_environment(title)
    print(
        f"  settings  : trial {args.duration:g} s, trigger {args.trigger_ms} ms, "
        f"start {args.start_rate:,.0f} msg/s, "
        f"x{args.factor:g} per step (max {args.max_steps}), payload {PAYLOAD_BYTES} B, "
        f"SNDHWM {SEND_HWM}, publisher must reach {KEEP_UP:.0%} of the rate"
    )
    if hasattr(args, "bare_rcvhwm"):
        cap = args.max_records_per_trigger
        mode = (
            f"PATIENT: waits up to {SEND_PATIENCE * 1000:g} ms at a full send queue"
            if getattr(args, "patient", False)
            else "drops at once at its send HWM, as the real publishers do"
        )
        print(f"  publisher : {mode}")
        print(
            f"  receivers : bare SUB loop RCVHWM {args.bare_rcvhwm:,}; connector "
            f"receiveHighWaterMark {CAPTURE_RECEIVE_HWM:,} (default), maxRecordsPerTrigger "
            f"{f'{cap:,}' if cap > 0 else 'none'}"
        )
    from spark_zmq.native import status as native_status

    print(
        f"  capture   : cores {', '.join(getattr(args, 'cores', ['auto']))}; compiled core "
        f"{native_status()}; publisher {getattr(args, 'publisher', 'python')} send loop, "
        f"{describe_publisher_priority(getattr(args, 'publisher_nice', 0))}"
    )
    print(flush=True)


def describe_publisher_priority(nice: int | None) -> str:
    return "SCHED_FIFO 1 (real time)" if nice is None else f"nice {nice}"


TABLE_HEADER = (
    f"{'receiver':<13} {'rate/s':>9} {'sent':>9} {'received':>9} {'gaps':>8} "
    f"{'dups':>5} {'bad':>4} {'pub rate/s':>10} {'HWM drop':>8} {'p50 ms':>8} "
    f"{'p99 ms':>8} {'pub late':>8}  result"
)


def trial_row(trial: Trial) -> str:
    p50, p99 = (f"{v:8.1f}" for v in trial.latency_ms) if trial.latency_ms else ("       -",) * 2
    note = f" ({trial.error[:90]})" if trial.error else ""
    note += f"  missing: {trial.missing}" if trial.missing else ""
    return (
        f"{trial.receiver:<13} {trial.rate:>9,.0f} {trial.sent:>9,} {trial.received:>9,} "
        f"{trial.gaps:>8,} {trial.duplicates:>5} {trial.invalid:>4} "
        f"{trial.publisher_rate:>10,.0f} {trial.publisher_dropped:>8,} {p50} {p99} "
        f"{trial.publisher_late_ms:>6.1f}ms  "
        f"{trial.verdict}{note}"
    )


def print_progress(trial: Trial) -> None:
    print("  " + trial_row(trial), flush=True)


def describe_limit(outcome: SearchOutcome) -> str:
    bound = outcome.bound
    if bound is None:
        return "no failing rate found within the step budget (raise --max-steps)"
    if bound.error:
        return f"trial at {bound.rate:,.0f} msg/s failed: {bound.error[:120]}"
    if not bound.publisher_kept_up and bound.gaps == 0:
        return (
            f"the publisher: asked for {bound.rate:,.0f} msg/s it sent "
            f"{bound.publisher_rate:,.0f} msg/s (< {KEEP_UP:.0%}); the receiver lost nothing"
        )
    if not bound.publisher_kept_up and bound.publisher_dropped:
        return (
            f"the receiving side: at {bound.rate:,.0f} msg/s the publisher's send queue was "
            f"full and it dropped {bound.publisher_dropped:,} "
            f"messages ({bound.gaps:,} lost in all); waiting on it, the publisher sent "
            f"{bound.publisher_rate:,.0f} msg/s"
        )
    if not bound.publisher_kept_up:
        return (
            f"the publisher fell behind ({bound.publisher_rate:,.0f} of {bound.rate:,.0f} "
            f"msg/s) and {bound.gaps:,} messages were lost"
        )
    return (
        f"gaps: at {bound.rate:,.0f} msg/s {bound.gaps:,} of {bound.planned:,} messages were "
        f"lost ({bound.publisher_dropped:,} of them at the publisher's send HWM), "
        f"{bound.duplicates} duplicated"
    )


def print_rate_summary(outcomes: Sequence[SearchOutcome]) -> None:
    """Max no-gap rate of each receiver, what bounded it, and the ratio when both ran."""
    print("\n== rate ==")
    for outcome in outcomes:
        best = outcome.best
        shown = f"{best.rate:,.0f} msg/s" if best else "none (even the lowest rate failed)"
        print(f"max no-gap rate, {outcome.receiver:<9}: {shown}")
        print(f"  bounded by {describe_limit(outcome)}")
        counted = [t for t in outcome.trials if not t.error]
        lost = sum(t.gaps for t in counted)
        if lost:
            at_hwm = sum(t.publisher_dropped for t in counted)
            print(
                f"  over all its trials {lost:,} messages were lost: {at_hwm:,} dropped by the "
                f"publisher's send HWM, {lost - at_hwm:,} after leaving the publisher"
            )
    by_name = {outcome.receiver: outcome for outcome in outcomes}
    bare = by_name.get("bare")
    connectors = [o for o in outcomes if o.receiver != "bare"]
    if bare is None or not connectors:
        return
    for connector in connectors:
        label = f"ratio {connector.receiver} / bare"
        if bare.best and connector.best:
            ratio = connector.best.rate / bare.best.rate
            met = "met" if ratio >= RATIO_TARGET else "NOT met"
            print(f"{label:<28}: {ratio:.2f} (target >= {RATIO_TARGET}: {met})")
        else:
            print(f"{label:<28}: n/a")
    if bare.limited_by_publisher:
        print(
            "NOTE: even the bare SUB loop was limited by the publisher, not by receiving: the "
            "ratios compare the connector with what the publisher can send on this machine, "
            "not with a receive-side ceiling."
        )
    for connector in connectors:
        if connector.limited_by_publisher:
            print(
                f"NOTE: the {connector.receiver} search ended because the publisher fell behind "
                f"(it shares the cores with Spark, capture and the sink), not because of a gap."
            )


def print_latency(connector: SearchOutcome, modest: list[Trial], trigger_ms: int) -> None:
    print(
        f"\n== latency ({connector.receiver}), publish -> row in foreachBatch (taken after "
        f"toArrow) =="
    )
    labelled = [("at the max no-gap rate", connector.best)]
    labelled += [(f"at a modest rate, #{n + 1}", trial) for n, trial in enumerate(modest)]
    for label, trial in labelled:
        if trial is None or trial.latency_ms is None:
            print(f"{label:<24}: n/a")
            continue
        p50, p99 = trial.latency_ms
        print(
            f"{label:<24}: {trial.rate:>9,.0f} msg/s  p50 {p50:8.1f} ms  p99 {p99:8.1f} ms"
            f"{'' if trial.success else '  (that trial had gaps or errors)'}"
        )
    print(
        f"  (processingTime trigger of {trigger_ms} ms: a row waits ~{trigger_ms // 2} ms for a "
        f"trigger on average)"
    )


def print_memory(
    label: str, result: MemoryResult | None, sent: PublishResult | None, error: str
) -> None:
    print(f"-- {label}")
    if result is None or sent is None:
        print(f"   failed: {error}")
        return
    quarters = ", ".join(f"{q / 1024:,.0f}" for q in result.rss_at_quarters_kib)
    print(f"   publisher        : {sent.sent:,} messages at {sent.rate:,.0f} msg/s (SNDHWM 0)")
    print(
        f"   captured         : {result.messages:,} messages, {result.rows_held:,} rows held; "
        f"{result.rate:,.0f} msg/s (first message -> all in the spool)"
    )
    print(
        f"   spool bytes held : {result.spool_bytes:,} ({result.spool_bytes / (1 << 30):.2f} GiB)"
    )
    print(
        f"   baseline RSS     : {result.baseline_rss_kib / 1024:,.1f} MiB "
        f"(after imports, before capture started)"
    )
    print(f"   peak RSS         : {result.peak_rss_kib / 1024:,.1f} MiB (ru_maxrss)")
    print(f"   RSS as 25/50/75/100% had arrived: {quarters} MiB")
    print(
        f"   CPU              : {result.cpu_seconds:.2f} s, "
        f"{result.cpu_us_per_message:.2f} us/message ({result.core} receive loop; from the "
        f"first message on)"
    )


def print_cpu_rows(rows: list[tuple[str, float, int, float, str]]) -> None:
    """One line per receiver: CPU seconds, messages, us per message, and its ratio to the first
    line's us per message."""
    print(
        f"{'receiver':<22} {'CPU s':>7} {'messages':>10} {'us/msg':>7} {'ratio':>6} {'msg/s':>10}"
    )
    first = None
    for label, cpu, messages, rate, note in rows:
        per = cpu / messages * 1e6 if messages else float("nan")
        first = first or per
        shown_rate = f"{rate:>10,.0f}" if rate else f"{'-':>10}"
        print(
            f"{label:<22} {cpu:>7.2f} {messages:>10,} {per:>7.2f} {per / first:>6.2f} "
            f"{shown_rate}  {note}"
        )
    print(
        "(capture: CPU time and messages from its first message to all in the spool, start-up "
        "left out; msg/s: its rate in that time)"
    )
