"""Capture alone, no Spark (``zeroeq_rate.py``'s last sections; ``--skip cpu`` and ``--skip
memory`` leave them out): CPU time per message of the bare SUB loop and of capture with each
core, and capture's memory while it writes about 1 GiB into its spool."""

from __future__ import annotations

import argparse
from dataclasses import replace

from harness.capture import MEMORY_PAYLOAD_BYTES, MemoryResult, run_memory_trial
from harness.publisher import PAYLOAD_BYTES
from harness.report import print_cpu_rows, print_memory
from harness.trials import Bench, planned_count, run_bare_trial


def measure_cpu(args: argparse.Namespace, bench: Bench) -> None:
    """Process CPU time per message of the bare SUB loop and of capture alone with each core
    (no Spark), one after the other with the same publisher: paced at --cpu-rate, then as fast
    as the publisher sends (capture's own ceiling)."""
    for rate in (args.cpu_rate, 0.0):
        pace = f"{rate:,.0f} msg/s" if rate else "unpaced"
        print(
            f"\n== CPU per message, {pace}, {PAYLOAD_BYTES}-byte events, no Spark "
            f"(process CPU time / messages) ==",
            flush=True,
        )
        count = planned_count(rate or 4 * args.cpu_rate, args.duration)
        rows: list[tuple[str, float, int, float, str]] = []
        if rate:
            bare = run_bare_trial(bench, rate)
            note = bare.error or bare.verdict
            rows.append(("bare pyzmq SUB loop", bare.cpu_seconds, bare.received, 0.0, note))
        for core in args.cores:
            result, sent, error = run_memory_trial(
                replace(bench, core=core), count, rate, PAYLOAD_BYTES
            )
            if result is None or sent is None:
                rows.append((f"capture, {core}", 0.0, 0, 0.0, f"failed: {error}"))
                continue
            split = ", ".join(
                f"{name} {seconds / max(1, result.cpu_messages) * 1e6:.2f}"
                for name, seconds in result.cpu_by_thread
            )
            note = f"{result.core} loop; us/msg by thread: {split}"
            rows.append(
                (f"capture, {core}", result.cpu_seconds, result.cpu_messages, result.rate, note)
            )
        print_cpu_rows(rows)


def measure_memory(args: argparse.Namespace, bench: Bench) -> None:
    """Capture alone: unpaced (its throughput; any backlog sits in its receive queue, since it
    uses receive high-water mark 0) and then paced at half that rate (its steady-state memory),
    unless --spool-rate picks one pace."""
    print(
        f"\n== capture alone, ~{args.spool_gb:g} GiB of 1 KiB events into its spool (no Spark) ==",
        flush=True,
    )
    first = memory_trial(bench, args.spool_gb, args.spool_rate or 0.0)
    if args.spool_rate is None and first is not None and first.rate > 0:
        memory_trial(bench, args.spool_gb, round(first.rate / 2, -3) or first.rate / 2)


def memory_trial(bench: Bench, gib: float, pace: float) -> MemoryResult | None:
    count = max(1, round(gib * (1 << 30) / MEMORY_PAYLOAD_BYTES))
    memory, sent, error = run_memory_trial(bench, count, pace)
    label = "publisher as fast as it can" if pace <= 0 else f"publisher paced at {pace:,.0f} msg/s"
    print_memory(label, memory, sent, error)
    return memory
