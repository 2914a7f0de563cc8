"""What ``zeroeq_write_rate.py`` prints: its header, a row per side and round, the medians and
the notes."""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Sequence

from harness.report import print_environment
from write_sides import FIGURES, SEND_HWM, Round
from write_subscriber import PAYLOAD_BYTES


def print_header(args: argparse.Namespace) -> None:
    print_environment(
        "zeroeq_write_rate benchmark: Spark zeroeq writer (each send loop) vs bare pyzmq XPUB"
    )
    print(
        f"  settings  : {args.rows:,} messages of 16 + {PAYLOAD_BYTES} bytes, "
        f"{args.partitions} input partition(s), {args.rounds} round(s) after a "
        f"{args.warmup_rows:,}-row warm-up query per send loop; send loops "
        f"{', '.join(args.send_cores)}; SNDHWM {SEND_HWM:,} + XPUB_NODROP on every sender, "
        f"subscriber RCVHWM 0, its receive loop {args.receiver}"
    )
    print(flush=True)


TABLE_HEADER = f"{'round':<7}{'side':<14}{'msg/s':>10}{'/ bare':>8}  {'once':<6}figures"


def run_row(label: str, side: str, result: Round) -> str:
    run = result.runs[side]
    rate = f"{run.reception.rate:>10,.0f}" if run.reception else f"{'failed':>10}"
    ratio = result.ratio(side)
    once = "-" if run.reception is None else ("yes" if run.reception.exactly_once else "NO")
    return (
        f"{label:<7}{side:<14}{rate}{f'{ratio:.2f}' if ratio is not None else '-':>8}  "
        f"{once:<6}{figures_cell(run.figures)}"
    )


def figures_cell(figures: dict[str, float]) -> str:
    return "; ".join(f"{name} {FIGURES[name].format(value)}" for name, value in figures.items())


def median_row(side: str, rounds: Sequence[Round]) -> str:
    runs = [r.runs[side] for r in rounds]
    rates = [run.reception.rate for run in runs if run.reception]
    ratios = [ratio for r in rounds if (ratio := r.ratio(side)) is not None]
    once = all(run.reception and run.reception.exactly_once for run in runs)
    names = [name for name in FIGURES if any(name in run.figures for run in runs)]
    figures = {
        name: statistics.median([run.figures[name] for run in runs if name in run.figures])
        for name in names
    }
    rate = f"{statistics.median(rates):>10,.0f}" if rates else f"{'-':>10}"
    ratio_cell = f"{statistics.median(ratios):.2f}" if ratios else "-"
    return (
        f"{'median':<7}{side:<14}{rate}{ratio_cell:>8}  {'all' if once else 'NOT':<6}"
        f"{figures_cell(figures)}"
    )


def round_notes(index: int, result: Round, partitions: int) -> list[str]:
    """Errors, losses, and publishers a subscriber found other than expected."""
    notes = []
    for side, run in result.runs.items():
        if run.error:
            notes.append(f"round {index} {side}: {run.error}")
        if run.reception is not None and not run.reception.exactly_once:
            notes.append(f"round {index} {side}: {run.reception.problems()}")
        expected = partitions if side.startswith("spark") else 1
        if run.reception is not None and run.reception.publishers != expected:
            notes.append(
                f"round {index} {side}: the subscriber connected to "
                f"{run.reception.publishers} publishers, expected {expected}"
            )
    return notes


def print_report(rounds: Sequence[Round], partitions: int) -> None:
    print("\n== results (rates at the receiver, first to last message) ==")
    print(TABLE_HEADER)
    sides = list(rounds[0].runs)
    for index, result in enumerate(rounds, 1):
        for side in sides:
            print(run_row(str(index), side, result))
    for side in sides:
        print(median_row(side, rounds))
    print(
        "\nbare: its send loop = the bare publisher's own rate (the shared publisher's Python "
        "loop, building each payload as it sends; the "
        "receiver is the slower side when this is higher).\nspark: wall = start() -> query "
        "terminated; start-up = start() -> first message received (batch planning, Python "
        "worker, publisher + ZeroConf announcement, discovery, subscription), end = last "
        "message -> query terminated (commit, availableNow check).\nalone: CPU = the writer "
        "process's CPU time in write() per message, all threads (zmq's I/O thread too); "
        "encoding = the encoding alone, per message (a pass before write())."
    )
    if any(run.figures.get("end s", 0) < 0 for result in rounds for run in result.runs.values()):
        print(
            "a negative end: the query had finished before the last message arrived; the "
            "tasks had handed everything to zmq, and the rest was still queued (up to the "
            "send high-water mark per subscriber) on its way to the subscriber"
        )
    if partitions > 1:
        print(
            f"note: the Spark writers ran {partitions} publishers (one per partition) into one "
            f"subscriber; the bare side and the writer alone run one publisher"
        )
    notes = [
        note
        for index, result in enumerate(rounds, 1)
        for note in round_notes(index, result, partitions)
    ]
    for note in notes:
        print(f"NOTE: {note}")
