"""The Prometheus metrics of a process that captures (``CaptureCollector``).

A scrape reads a ``CaptureView`` of the process (its capture's counts, its spool's partitions)
and turns it into metric families; nothing is kept per message. Series stay bounded: one per
endpoint for the first ``MAX_ENDPOINT_SERIES`` endpoints seen, the others summed into
``endpoint="_other"``; gap rows by one of a fixed set of causes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from spark_zmq.capture.loop import Capture
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

    #: messages received per partition that capture reads now, since its endpoint joined
    received: Mapping[str, int]
    #: every partition the spool holds
    partitions: Mapping[str, PartitionState]
    #: bytes of the spool's segments
    spool_bytes: int
    #: gap rows this process wrote, by cause (``segments.gap_cause``)
    gap_rows: Mapping[str, int]
    #: messages each reader name that holds data has not committed (a capture service)
    reader_lag: Mapping[str, int] = field(default_factory=dict)


def view_of(capture: Capture, spool: Spool) -> CaptureView:
    """What a scrape reads of ``capture`` and the spool it writes: without a flush or a wait
    for one."""
    return CaptureView(capture.received(), spool.snapshot(), spool.nbytes, dict(spool.gap_rows))


class Totals:
    """Counters that only go up, from counts that start again at 0 (an endpoint that left and
    came back), each under a label of a bounded set (``MAX_ENDPOINT_SERIES``)."""

    def __init__(self, max_series: int = MAX_ENDPOINT_SERIES) -> None:
        self.max_series = max_series
        self._last: dict[str, int] = {}
        self._before: dict[str, int] = {}  # what earlier counts of a key reached
        self._labels: dict[str, str] = {}

    def update(self, counts: Mapping[str, int]) -> dict[str, int]:
        """Take the current ``counts``; the total of each label."""
        for key, count in counts.items():
            last = self._last.get(key, 0)
            if count < last:  # counting started again
                self._before[key] = self._before.get(key, 0) + last
            self._last[key] = count
            if key not in self._labels:
                own = len(self._labels) < self.max_series
                self._labels[key] = key if own else OTHER_ENDPOINTS
        totals: dict[str, int] = {}
        for key, label in self._labels.items():
            total = self._before.get(key, 0) + self._last.get(key, 0)
            totals[label] = totals.get(label, 0) + total
        return totals


class CaptureCollector(Collector):
    """The metrics of one capture of format ``format_name``, read from ``view`` at each
    scrape (register it with a ``prometheus_client.CollectorRegistry``)."""

    def __init__(self, format_name: str, view: Callable[[], CaptureView]) -> None:
        self.format_name = format_name
        self._view = view
        self._received = Totals()

    def collect(self) -> Iterator[Metric]:
        view = self._view()
        name = [self.format_name]
        received = CounterMetricFamily(
            "spark_zmq_messages_received",
            "Messages capture took from an endpoint's socket (those refused for their size "
            "too), per endpoint (partition key); beyond "
            f"{MAX_ENDPOINT_SERIES} endpoints the others are summed as endpoint={OTHER_ENDPOINTS}",
            labels=["format", "endpoint"],
        )
        for endpoint, total in sorted(self._received.update(view.received).items()):
            received.add_metric([*name, endpoint], total)
        yield received
        gaps = CounterMetricFamily(
            "spark_zmq_gap_rows",
            "Gap rows capture wrote (messages lost before the spool), by cause",
            labels=["format", "cause"],
        )
        for cause in CAUSES:
            gaps.add_metric([*name, cause], view.gap_rows.get(cause, 0))
        yield gaps
        endpoints = GaugeMetricFamily(
            "spark_zmq_endpoints",
            "Partitions in the spool: live (their endpoint is read) or retired (it left)",
            labels=["format", "state"],
        )
        retired = sum(1 for state in view.partitions.values() if state.retired)
        endpoints.add_metric([*name, "live"], len(view.partitions) - retired)
        endpoints.add_metric([*name, "retired"], retired)
        yield endpoints
        yield _gauge(
            "spark_zmq_spool_bytes", "Bytes of the spool's segments on disk", name, view.spool_bytes
        )
        uncommitted = sum(s.end - s.first_uncommitted for s in view.partitions.values())
        yield _gauge(
            "spark_zmq_spool_uncommitted_messages",
            "Messages (and gap rows) the spool holds that are not committed",
            name,
            uncommitted,
        )
        lag = GaugeMetricFamily(
            "spark_zmq_reader_lag_messages",
            "Messages the spool holds that a reader name (option spoolReader) has not committed",
            labels=["format", "reader"],
        )
        for reader, behind in sorted(view.reader_lag.items()):
            lag.add_metric([*name, reader], behind)
        yield lag


def _gauge(metric: str, documentation: str, name: list[str], value: float) -> GaugeMetricFamily:
    gauge = GaugeMetricFamily(metric, documentation, labels=["format"])
    gauge.add_metric(name, value)
    return gauge
