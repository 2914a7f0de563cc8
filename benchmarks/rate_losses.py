"""Losses per rate, receivers side by side: the scenario of issue 34 (``zeroeq_rate.py``'s first
section; ``--skip losses`` leaves it out).

Every receiver gets the same publisher (drops at once at its send high-water mark unless
``--patient``) at each rate of ``--rates``, ``--repeats`` times, and the receivers take turns
rate by rate (bare, bare beside Spark, connector, ...; then the next repeat; then the next
rate), so that load from other work on the machine hits all of them alike. Receivers:

- ``bare``: the bare pyzmq SUB loop alone (Spark's JVM idles, no query runs);
- ``bare+spark``: the same loop while a Spark query does the connector's work at the same
  rate: a ``rate`` source of 100-byte payloads through a Python worker (``mapInArrow``) into
  the same ``foreachBatch`` sink (``toArrow`` into the driver), same trigger;
- ``conn``: ``format("zeroeq")`` on its defaults into the ``foreachBatch`` sink;
- ``conn-nice-off``: the same with ``captureNice=off`` (capture at Spark's priority);
- ``conn-service``-like placements are measured by ``placement_rate.py``.

A receiver's no-gap rate is the highest rate of the list at and below which none of its trials
lost a message (and the publisher kept its pace).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from harness.report import print_progress, trial_row
from harness.spark import run_connector_trial
from harness.trials import Bench, Trial, run_bare_trial

RATES = "40000,60000,85000,120000"
RECEIVERS: dict[str, str] = {
    "bare": "bare pyzmq SUB loop, alone",
    "bare+spark": "bare pyzmq SUB loop beside a Spark query doing the same work",
    "conn": "connector (captureNice default: -10)",
    "conn-nice-off": "connector, captureNice=off (capture at Spark's priority)",
}
#: longest wait for the load query's first micro-batch before its bare trial starts
LOAD_START_SECONDS = 30.0


def add_loss_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--rates",
        default=RATES,
        help=f"rates of the loss table, msg/s, comma-separated (default {RATES}; quick: the "
        "first two)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=2,
        help="trials per receiver and rate in the loss table (default 2; quick 1)",
    )
    parser.add_argument(
        "--loss-receivers",
        default=",".join(RECEIVERS),
        help=f"receivers of the loss table, in turn order (default {','.join(RECEIVERS)})",
    )


def measure_losses(args: argparse.Namespace, bench: Bench) -> None:
    """The loss table: every receiver at every rate, interleaved, then the no-gap rates."""
    receivers = [name.strip() for name in args.loss_receivers.split(",") if name.strip()]
    unknown = set(receivers) - set(RECEIVERS)
    if unknown:
        raise SystemExit(f"--loss-receivers: unknown {sorted(unknown)}; one of {list(RECEIVERS)}")
    print(
        f"== losses per rate, {args.duration:g} s trials, {args.repeats} per receiver and rate; "
        f"the receivers take turns rate by rate (the machine may be shared: turns spread its "
        f"noise over all receivers alike) ==",
        flush=True,
    )
    warm = run_connector_trial(bench, 5_000, "warm-up", duration=1.0)
    print(f"  {trial_row(warm)}   [warm-up, not counted]", flush=True)
    trials: dict[str, dict[float, list[Trial]]] = {name: {} for name in receivers}
    for rate in args.rates:
        for _ in range(args.repeats):
            for name in receivers:
                trial = run_receiver(name, bench, rate)
                print_progress(trial)
                trials[name].setdefault(rate, []).append(trial)
    print_loss_table(trials, args.rates)


def run_receiver(name: str, bench: Bench, rate: float) -> Trial:
    if name == "bare":
        return run_bare_trial(bench, rate)
    if name == "bare+spark":
        with spark_load(bench, rate) as load:
            trial = run_bare_trial(bench, rate)
            rows = sum(load)
        print(f"    (the Spark query beside it took {rows:,} rows in {len(load)} micro-batches)")
        return replace(trial, receiver=name)
    options = (("captureNice", "off"),) if name == "conn-nice-off" else ()
    return run_connector_trial(replace(bench, reader_options=options), rate, name)


@contextmanager
def spark_load(bench: Bench, rate: float) -> Iterator[list[int]]:
    """A Spark query doing the connector's work at ``rate`` while the block runs: 100-byte
    payloads from a ``rate`` source, through a Python worker, collected into the driver. The
    block starts once a micro-batch has brought rows; it gets the rows of each micro-batch."""
    import pyarrow  # noqa: F401  (toArrow needs it; fail here, not inside the sink)

    pass_through: Callable[[Iterator[Any]], Iterator[Any]] = lambda batches: batches  # noqa: E731
    rows = (
        bench.spark.readStream.format("rate")
        .option("rowsPerSecond", str(int(rate)))
        .option("numPartitions", "1")
        .load()
        .selectExpr("concat(unhex(lpad(hex(value), 16, '0')), unhex(repeat('00', 92))) AS payload")
        .mapInArrow(pass_through, "payload binary")
    )
    batches: list[int] = []
    query = (
        rows.writeStream.foreachBatch(
            lambda frame, _id: batches.append(frame.select("payload").toArrow().num_rows)
        )
        .trigger(processingTime=f"{bench.trigger_ms} milliseconds")
        .start()
    )
    try:
        deadline = time.monotonic() + LOAD_START_SECONDS
        while not sum(batches) and time.monotonic() < deadline:
            time.sleep(0.1)
        batches.clear()  # from now on: the micro-batches during the block
        yield batches
    finally:
        query.stop()


def no_gap_rate(by_rate: dict[float, list[Trial]], rates: list[float]) -> float:
    """The highest rate at and below which every trial succeeded (0: not even the first)."""
    best = 0.0
    for rate in sorted(rates):
        if not all(trial.success for trial in by_rate.get(rate, [])):
            break
        best = rate
    return best


def cell(trials: list[Trial]) -> str:
    """Messages lost by each trial at one rate, e.g. ``0/160``; ``err`` for a failed trial,
    ``*`` after a trial whose publisher did not keep its pace."""
    shown = []
    for trial in trials:
        if trial.error:
            shown.append("err")
        else:
            shown.append(f"{trial.gaps:,}" + ("" if trial.publisher_kept_up else "*"))
    return "/".join(shown)


def print_loss_table(trials: dict[str, dict[float, list[Trial]]], rates: list[float]) -> None:
    width = max(12, *(len(cell(t)) + 2 for by in trials.values() for t in by.values()))
    print("\n== messages lost per rate (one figure per trial, in turn order) ==")
    print(f"{'receiver':<14}" + "".join(f"{rate:>{width},.0f}" for rate in rates) + "  no-gap")
    best = {name: no_gap_rate(by_rate, rates) for name, by_rate in trials.items()}
    for name, by_rate in trials.items():
        row = "".join(f"{cell(by_rate.get(rate, [])):>{width}}" for rate in rates)
        shown = f"{best[name]:,.0f}" if best[name] else f"< {min(rates):,.0f}"
        print(f"{name:<14}{row}  {shown}")
    print("(* the publisher fell below 97% of the rate in that trial; err: the trial failed)")
    for name, label in RECEIVERS.items():
        if name in trials:
            print(f"  {name:<14}: {label}")
    reference = best.get("bare", 0.0)
    if not reference:
        return
    print("no-gap rate over the bare loop's alone, measured in this run:")
    for name, rate in best.items():
        if name != "bare":
            top = " (at least; no higher rate tried)" if rate == max(rates) else ""
            print(f"  {name:<14}: {rate / reference:.2f}{top}")
