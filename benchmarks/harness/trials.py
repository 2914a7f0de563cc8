"""One trial and one search: a publisher at a rate into one receiver, the row the report shows
of it, and the search for the highest rate a receiver takes with no gap."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.children import Child
from harness.publisher import SUBSCRIBE_TIMEOUT, PublisherProcess, PublishPlan, PublishResult
from harness.receivers import ReceiveResult, bare_receiver_main
from spark_zmq.stream_options import RECEIVE_HIGH_WATER_MARK

#: the publisher must reach this share of the requested rate for a trial to count
KEEP_UP = 0.97
#: capture's default receive queue per endpoint, from the option's one definition
CAPTURE_RECEIVE_HWM: int = RECEIVE_HIGH_WATER_MARK.parsed_default()
#: admission per micro-batch: about 70 MB of 100-byte events in the driver per batch
MAX_RECORDS_PER_TRIGGER = 500_000


@dataclass
class Trial:
    """One publisher run at one rate into one receiver, as the report shows it."""

    receiver: str
    rate: float
    planned: int
    sent: int = 0
    publisher_rate: float = 0.0
    publisher_dropped: int = 0
    publisher_late_ms: float = 0.0
    received: int = 0
    duplicates: int = 0
    invalid: int = 0
    latency_ms: tuple[float, float] | None = None  # (p50, p99), connector only
    missing: str = ""  # where the gaps are, e.g. "0-5, 2800-2807"
    error: str = ""
    cpu_seconds: float = 0.0  # the bare receiver's process CPU time

    def record_publisher(self, result: PublishResult) -> None:
        self.sent, self.publisher_rate = result.sent, result.rate
        self.publisher_dropped = result.dropped
        self.publisher_late_ms = result.late_ms

    @property
    def gaps(self) -> int:
        return self.planned - self.received

    @property
    def publisher_kept_up(self) -> bool:
        return self.sent == self.planned and self.publisher_rate >= KEEP_UP * self.rate

    @property
    def success(self) -> bool:
        return (
            not self.error
            and self.publisher_kept_up
            and self.gaps == 0
            and self.duplicates == 0
            and self.invalid == 0
        )

    @property
    def verdict(self) -> str:
        if self.error:
            return "error"
        if self.gaps or self.duplicates or self.invalid:
            return "GAPS" + ("; publisher behind" if not self.publisher_kept_up else "")
        return "ok" if self.publisher_kept_up else "publisher behind"


@dataclass
class SearchOutcome:
    """Trials of one receiver's search, the best gap-free one and the trial that bounded it."""

    receiver: str
    trials: list[Trial] = field(default_factory=list)

    @property
    def best(self) -> Trial | None:
        good = [t for t in self.trials if t.success]
        return max(good, key=lambda t: t.rate) if good else None

    @property
    def bound(self) -> Trial | None:
        """The lowest failed rate above the best one: what stopped the search."""
        floor = self.best.rate if self.best else 0.0
        failed = [t for t in self.trials if not t.success and t.rate > floor]
        return min(failed, key=lambda t: t.rate) if failed else None

    @property
    def limited_by_publisher(self) -> bool:
        """The publisher fell behind on its own. One that dropped at its send high-water mark
        found its queue full: the receiving side did not take (a patient publisher fell
        behind waiting on it)."""
        bound = self.bound
        return (
            bound is not None
            and not bound.error
            and not bound.publisher_kept_up
            and bound.publisher_dropped == 0
        )


def planned_count(rate: float, duration: float) -> int:
    return max(1, round(rate * duration))


@dataclass(frozen=True)
class Bench:
    """What every trial of one run shares."""

    context: Any  # multiprocessing "spawn" context
    workdir: Path  # the run's temporary folder, deleted at the end
    duration: float  # seconds of publishing per trial
    trigger_ms: int  # the connector query's processingTime trigger
    spark: Any = None  # the run's SparkSession, if the connector is measured
    native_publisher: bool = False  # the publisher sends with the compiled core's loop
    publisher_nice: int = 0  # the publisher process's nice value
    #: seconds the publisher waits at a full send queue before it drops (0: drops at once)
    patience: float = 0.0
    publisher_realtime: bool = False  # the publisher runs SCHED_FIFO (``run_in_real_time``)
    core: str | None = "auto"  # the connector's captureCore; None: not set (its default)
    bare_receive_hwm: int = CAPTURE_RECEIVE_HWM  # the bare SUB loop's ZMQ_RCVHWM
    #: the connector query's maxRecordsPerTrigger (0: none)
    max_records_per_trigger: int = MAX_RECORDS_PER_TRIGGER
    #: further options of the connector query (a candidate's settings, e.g. captureNice)
    reader_options: tuple[tuple[str, str], ...] = ()
    #: publisher processes of a connector trial, sharing its rate
    publishers: int = 1
    #: called after a connector trial's query stopped, before its folder is deleted (e.g.:
    #: wait for executors' capture processes to end)
    settle: Callable[[], None] | None = None


def publish_plan(bench: Bench, count: int, rate: float, first: int = 0) -> PublishPlan:
    """The run's publisher (send loop, nice value, patience) sending ``count`` at ``rate``."""
    return PublishPlan(
        count,
        rate,
        first=first,
        native=bench.native_publisher,
        nice=bench.publisher_nice,
        patience=bench.patience,
        realtime=bench.publisher_realtime,
    )


def publish_plans(bench: Bench, rate: float, duration: float) -> list[PublishPlan]:
    """``bench.publishers`` publishers sharing ``rate`` for ``duration``, each its own run of
    sequence numbers: together they send ``planned_count(rate / n, duration) * n``."""
    n = bench.publishers
    each = planned_count(rate / n, duration)
    return [publish_plan(bench, each, rate / n, first=index * each) for index in range(n)]


def run_bare_trial(bench: Bench, rate: float, duration: float | None = None) -> Trial:
    """Publisher and bare SUB receiver, each in its own process."""
    context, duration = bench.context, duration or bench.duration
    trial = Trial("bare", rate, planned_count(rate, duration))
    publisher = receiver = None
    try:
        plan = publish_plan(bench, trial.planned, rate)
        publisher = PublisherProcess(context, plan)
        receiver = Child(
            context,
            bare_receiver_main,
            publisher.port,
            trial.planned,
            SUBSCRIBE_TIMEOUT + 2 * duration + 30,
            bench.bare_receive_hwm,
        )
        trial.record_publisher(publisher.result(SUBSCRIBE_TIMEOUT + 10 * duration + 30))
        got: ReceiveResult = receiver.expect("received", SUBSCRIBE_TIMEOUT + 2 * duration + 60)
        trial.received, trial.duplicates, trial.invalid = got.unique, got.duplicates, got.foreign
        trial.missing, trial.cpu_seconds = got.missing, got.cpu_seconds
    except (RuntimeError, TimeoutError) as exc:
        trial.error = str(exc)
    finally:
        if publisher is not None:
            publisher.finish()
        if receiver is not None:
            receiver.stop()
    return trial


def search(
    receiver: str,
    run: Callable[[float], Trial],
    start: float,
    factor: float,
    max_steps: int,
    on_trial: Callable[[Trial], None],
) -> SearchOutcome:
    """Step the rate by ``factor`` (up while trials succeed, down while they fail) until one
    good and one bad rate bracket the limit, then try their midpoint once."""
    outcome = SearchOutcome(receiver)
    rate = start
    good: float | None = None
    bad: float | None = None
    for _ in range(max_steps):
        trial = run(rate)
        outcome.trials.append(trial)
        on_trial(trial)
        if trial.success:
            good = rate
        else:
            bad = rate if bad is None else min(bad, rate)
        if good is not None and bad is not None:
            break
        rate = rate * factor if trial.success else rate / factor
        if rate < 100:
            break
    if good is not None and bad is not None and bad > good:
        middle = round((good + bad) / 2, -2) or (good + bad) / 2
        if good < middle < bad:
            trial = run(middle)
            outcome.trials.append(trial)
            on_trial(trial)
    return outcome
