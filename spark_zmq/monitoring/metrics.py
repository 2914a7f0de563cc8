"""The Prometheus metrics of a process that captures (``CaptureCollector``).

A scrape reads a ``CaptureView`` of the process (its capture's counts, its spool's partitions)
and turns it into metric families; nothing is kept per message. Series stay bounded: one per
endpoint for the first ``MAX_ENDPOINT_SERIES`` endpoints seen, the others summed into
``endpoint="_other"``; gap rows by one of a fixed set of causes.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from spark_zmq.capture.loop import Capture
from spark_zmq.capture.stats import FLUSH_BUCKETS, CaptureCounts, Histogram
from spark_zmq.spool.index import PartitionState
from spark_zmq.spool.segments import GAP_CAUSES
from spark_zmq.spool.writer import Spool

#: endpoints with series of their own; the others are summed into OTHER_ENDPOINTS
MAX_ENDPOINT_SERIES = 100
#: the label of the endpoints beyond MAX_ENDPOINT_SERIES
OTHER_ENDPOINTS = "_other"
#: every cause a gap row is counted under (a series each, from 0)
CAUSES = tuple(dict.fromkeys(cause for _, cause in GAP_CAUSES)) + ("other",)


@dataclass(frozen=True)
class CaptureView:
    """What one scrape reads of a process that captures."""

    #: what its capture counted
    capture: CaptureCounts
    #: every partition the spool holds
    partitions: Mapping[str, PartitionState]
    #: the spool's segments: their bytes and how many (a file each)
    spool_bytes: int
    spool_segments: int
    #: bytes of the segments this process wrote since it started
    spool_written_bytes: int
    #: gap rows this process wrote, by cause (``segments.gap_cause``)
    gap_rows: Mapping[str, int]
    #: endpoints discovery reported that wait at maxEndpoints, and those refused before
    #: capture (``placement.guard``; 0 where assignment does this elsewhere)
    waiting: int = 0
    refused_by_guard: int = 0
    #: messages each reader name that holds data has not committed (a capture service)
    reader_lag: Mapping[str, int] = field(default_factory=dict)


def view_of(capture: Capture, spool: Spool, held: tuple[int, int] = (0, 0)) -> CaptureView:
    """What a scrape reads of ``capture`` and the spool it writes, without a flush or a wait
    for one; ``held``: the endpoints the guard in front of it holds (waiting, refused)."""
    waiting, refused = held
    return CaptureView(
        capture.counts(),
        spool.snapshot(),
        spool.nbytes,
        spool.segment_count(),
        spool.written_bytes,
        dict(spool.gap_rows),
        waiting,
        refused,
    )


class EndpointLabels:
    """The label of each endpoint (partition key): its own for the first ``max_series`` seen,
    for as long as the process runs (a series never changes its endpoint), and
    ``OTHER_ENDPOINTS`` for the others, which are remembered only while they are read
    (``forget``): weeks of endpoints that come and go under new keys cost nothing once gone."""

    def __init__(self, max_series: int = MAX_ENDPOINT_SERIES) -> None:
        self.max_series = max_series
        self._named: set[str] = set()
        self._others: set[str] = set()

    def __call__(self, key: str) -> str:
        if key in self._named:
            return key
        if key not in self._others and len(self._named) < self.max_series:
            self._named.add(key)
            return key
        self._others.add(key)
        return OTHER_ENDPOINTS

    def forget(self, key: str) -> None:
        """``key``'s endpoint is read no more: if it shares ``OTHER_ENDPOINTS``, forget it (it
        is labelled so again if it comes back: the named ones never make room)."""
        self._others.discard(key)


class Totals:
    """Counters that only go up, from the counts of the connections read now, each under a
    label of a bounded set (``MAX_ENDPOINT_SERIES``). An endpoint missing from the counts was
    left: its total stays in its label's, and its key is forgotten (a connection made when it
    comes back counts from 0). A count lower than the last is a new count, too."""

    def __init__(self, labels: EndpointLabels | None = None) -> None:
        self.labels = labels or EndpointLabels()
        self._last: dict[str, int] = {}
        self._before: dict[str, int] = {}  # what earlier counts of a key reached
        self._left: dict[str, int] = {}  # per label, what the counts of keys that left reached

    def update(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Take the current ``counts`` (every connection read now); the total of each label."""
        for key in [key for key in self._last if key not in counts]:
            label = self.labels(key)
            self._left[label] = self._left.get(label, 0) + self._total(key)
            del self._last[key]
            self._before.pop(key, None)
            self.labels.forget(key)
        for key, count in counts.items():
            last = self._last.get(key, 0)
            if count < last:  # counting started again
                self._before[key] = self._before.get(key, 0) + last
            self._last[key] = count
        totals = dict(self._left)
        for key in self._last:
            label = self.labels(key)
            totals[label] = totals.get(label, 0) + self._total(key)
        return totals

    def _total(self, key: str) -> int:
        return self._before.get(key, 0) + self._last[key]


class CaptureCollector(Collector):
    """The metrics of one capture of format ``format_name``, read from ``view`` at each
    scrape (register it with a ``prometheus_client.CollectorRegistry``)."""

    def __init__(self, format_name: str, view: Callable[[], CaptureView]) -> None:
        self.format_name = format_name
        self._view = view
        self._labels = EndpointLabels()
        self._received = Totals(self._labels)
        self._bytes = Totals(self._labels)

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        counts = view.capture
        name = [self.format_name]
        yield self._per_endpoint(
            "spark_zmq_messages_received",
            "Messages capture took from an endpoint's socket (those refused for their size "
            "too), per endpoint (partition key)",
            self._received.update(counts.received),
        )
        yield self._per_endpoint(
            "spark_zmq_received_bytes",
            "Bytes of the frames of the messages capture wrote to the spool, per endpoint",
            self._bytes.update(counts.written_bytes),
        )
        yield self._last_message_age(counts.last_message_at)
        gaps = CounterMetricFamily(
            "spark_zmq_gap_rows",
            "Gap rows capture wrote (messages lost before the spool), by cause",
            labels=["format", "cause"],
        )
        for cause in CAUSES:
            gaps.add_metric([*name, cause], view.gap_rows.get(cause, 0))
        yield gaps
        yield self._endpoints(view)
        events = CounterMetricFamily(
            "spark_zmq_discovery_events",
            "What discovery reported of the endpoints capture reads: joined (new, or back "
            "before it was let go), changed (metadata or subscriptions), left",
            labels=["format", "event"],
        )
        for event, count in counts.discovery_events.items():
            events.add_metric([*name, event], count)
        yield events
        yield from self._spool(view)
        yield _histogram(
            "spark_zmq_flush_duration_seconds",
            "Time of a flush: every endpoint's buffer written to the spool in one file",
            name,
            counts.flushes,
        )
        if counts.cpu_seconds is not None:
            yield _counter(
                "spark_zmq_capture_cpu_seconds",
                "CPU time of the capture thread and of its zmq context's I/O threads",
                name,
                counts.cpu_seconds,
            )
        lag = GaugeMetricFamily(
            "spark_zmq_reader_lag_messages",
            "Messages the spool holds that a reader name (option spoolReader) has not committed",
            labels=["format", "reader"],
        )
        for reader, behind in sorted(view.reader_lag.items()):
            lag.add_metric([*name, reader], behind)
        yield lag

    def _per_endpoint(self, metric: str, documentation: str, totals: dict[str, int]) -> Metric:
        family = CounterMetricFamily(
            metric,
            f"{documentation}; beyond {MAX_ENDPOINT_SERIES} endpoints the others are summed as "
            f"endpoint={OTHER_ENDPOINTS}",
            labels=["format", "endpoint"],
        )
        for endpoint, total in sorted(totals.items()):
            family.add_metric([self.format_name, endpoint], total)
        return family

    def _last_message_age(self, last_message_at: Mapping[str, int]) -> Metric:
        """Seconds since each endpoint read now last had a message written (the oldest of
        those beyond the bound under ``OTHER_ENDPOINTS``: a silent one shows there too)."""
        family = GaugeMetricFamily(
            "spark_zmq_last_message_age_seconds",
            "Seconds since the newest message of an endpoint read now was received (endpoints "
            f"that sent nothing yet have none; beyond {MAX_ENDPOINT_SERIES} endpoints, the "
            f"oldest of the others as endpoint={OTHER_ENDPOINTS})",
            labels=["format", "endpoint"],
        )
        now = time.time_ns()
        ages: dict[str, float] = {}
        for key, at in last_message_at.items():
            label = self._labels(key)
            ages[label] = max(ages.get(label, 0.0), max(0, now - at) / 1e9)
        for label, age in sorted(ages.items()):
            family.add_metric([self.format_name, label], age)
        return family

    def _endpoints(self, view: CaptureView) -> Metric:
        family = GaugeMetricFamily(
            "spark_zmq_endpoints",
            "Endpoints by state: live (read, connected), connecting (read, not connected now), "
            "waiting (held back at maxEndpoints), refused (unusable or not openable), retired "
            "(left; their partitions kept until read)",
            labels=["format", "state"],
        )
        counts = view.capture
        retired = sum(1 for state in view.partitions.values() if state.retired)
        states = {
            "live": counts.live,
            "connecting": counts.connecting,
            "waiting": view.waiting,
            "refused": counts.refused + view.refused_by_guard,
            "retired": retired,
        }
        for state, count in states.items():
            family.add_metric([self.format_name, state], count)
        return family

    def _spool(self, view: CaptureView) -> Iterator[Metric]:
        name = [self.format_name]
        yield _gauge(
            "spark_zmq_spool_bytes",
            "Bytes of the segments the spool retains",
            name,
            view.spool_bytes,
        )
        yield _gauge(
            "spark_zmq_spool_segments",
            "Segments the spool retains (a file each)",
            name,
            view.spool_segments,
        )
        yield _counter(
            "spark_zmq_spool_written_bytes",
            "Bytes of the segments this process wrote to the spool",
            name,
            view.spool_written_bytes,
        )
        uncommitted = sum(s.end - s.first_uncommitted for s in view.partitions.values())
        yield _gauge(
            "spark_zmq_spool_uncommitted_messages",
            "Messages (and gap rows) the spool holds that are not committed",
            name,
            uncommitted,
        )


def _gauge(metric: str, documentation: str, name: list[str], value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(metric, documentation, labels=["format"])
    gauge.add_metric(name, value)
    return gauge


def _counter(metric: str, documentation: str, name: list[str], value: float) -> Metric:
    counter = CounterMetricFamily(metric, documentation, labels=["format"])
    counter.add_metric(name, value)
    return counter


def _histogram(
    metric: str, documentation: str, name: list[str], histogram: Histogram
) -> HistogramMetricFamily:
    family = HistogramMetricFamily(metric, documentation, labels=["format"])
    bounds = [f"{bound:g}" for bound in FLUSH_BUCKETS] + ["+Inf"]
    family.add_metric(name, list(zip(bounds, histogram.buckets, strict=True)), histogram.total)
    return family
