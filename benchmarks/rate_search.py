"""The searches of ``zeroeq_rate.py``: the highest rate the bare pyzmq SUB loop and the
connector (once per capture core) take with no gap, and the latency at a modest rate.
``--skip bare`` and ``--skip connector`` leave them out."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import replace

from harness.report import (
    TABLE_HEADER,
    print_latency,
    print_progress,
    print_rate_summary,
    trial_row,
)
from harness.spark import run_connector_trial
from harness.trials import Bench, SearchOutcome, Trial, run_bare_trial, search


def measure_bare(args: argparse.Namespace, bench: Bench) -> SearchOutcome:
    print("bare pyzmq SUB loop:", flush=True)
    return search(
        "bare",
        lambda rate: run_bare_trial(bench, rate),
        args.start_rate,
        args.factor,
        args.max_steps,
        print_progress,
    )


def measure_connector(args: argparse.Namespace, bench: Bench) -> SearchOutcome:
    """A warm-up trial (the first query pays for starting Python workers and JIT), then the
    search, with capture's receive loop ``bench.core``."""
    receiver = f"conn-{(bench.core or 'default')[:3]}"
    print(f"connector ({bench.core} capture core) -> foreachBatch:", flush=True)
    warm = run_connector_trial(bench, 5_000, "warm-up", duration=1.0)
    print(f"  {trial_row(warm)}   [warm-up, not counted]", flush=True)
    outcome = search(
        receiver,
        lambda rate: run_connector_trial(bench, rate, receiver),
        args.start_rate,
        args.factor,
        args.max_steps,
        print_progress,
    )
    return outcome


def measure_latency(args: argparse.Namespace, bench: Bench) -> dict[str, list[Trial]]:
    """Latency trials at the modest rate, the cores taking turns (twice each), so that neither
    gets the colder JVM or the quieter minute: by connector receiver name."""
    print(f"latency at {args.latency_rate:,.0f} msg/s, the cores taking turns:", flush=True)
    trials: dict[str, list[Trial]] = {}
    for _ in range(2):
        for core in args.cores:
            trial = run_connector_trial(
                replace(bench, core=core), args.latency_rate, f"lat-{core[:3]}"
            )
            print_progress(trial)
            trials.setdefault(f"conn-{core[:3]}", []).append(trial)
    return trials


def print_rates(
    outcomes: Sequence[SearchOutcome], modest: dict[str, list[Trial]], trigger_ms: int
) -> None:
    print("\n== all trials ==")
    print(TABLE_HEADER)
    later = [trial for trials in modest.values() for trial in trials]
    for trial in [t for outcome in outcomes for t in outcome.trials] + later:
        print(trial_row(trial))
    print(
        "(HWM drop: messages the publisher's send high-water mark dropped, part of the gaps; "
        "pub late: the publisher's longest delay behind its schedule)"
    )
    print_rate_summary(outcomes)
    for outcome in outcomes:
        if outcome.receiver in modest:
            print_latency(outcome, modest[outcome.receiver], trigger_ms)
