"""The metrics' own parts, without a capture: counters that only go up over a bounded set of
series (in every per-endpoint family), the cause each kind of gap row is counted under (from
the texts the modules that write gap rows make), and option ``metrics``. A capture service's
metrics scraped for real: tests/cli/test_capture_service.py."""

from __future__ import annotations

import time

import pytest
from prometheus_client import CollectorRegistry

from spark_zmq.capture.drops import DropEpisode
from spark_zmq.capture.refusals import ReceiveFailures, Refusals
from spark_zmq.capture.stats import CaptureCounts, FlushTimes
from spark_zmq.monitoring.metrics import (
    CAUSES,
    MAX_ENDPOINT_SERIES,
    OTHER_ENDPOINTS,
    CaptureCollector,
    CaptureView,
    EndpointLabels,
    Totals,
)
from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.spark.reader import ZmqStreamReader
from spark_zmq.spool.downtime import restart_gap_text
from spark_zmq.spool.segments import gap_cause
from spark_zmq.stream_options import METRICS, READER_OPTIONS


def test_totals_only_go_up_when_an_endpoints_count_starts_again():
    totals = Totals()
    assert totals.update({"a": 5, "b": 2}) == {"a": 5, "b": 2}
    assert totals.update({"a": 7}) == {"a": 7, "b": 2}, "an endpoint that left keeps its total"
    # a reconnected: its count starts again; b came back: a new connection, counting from 0
    assert totals.update({"a": 1, "b": 3}) == {"a": 8, "b": 5}


def test_endpoints_beyond_the_bound_share_one_series():
    totals = Totals(EndpointLabels(max_series=2))
    assert totals.update({"a": 1, "b": 2, "c": 3, "d": 4}) == {"a": 1, "b": 2, OTHER_ENDPOINTS: 7}
    assert totals.update({"e": 10}) == {"a": 1, "b": 2, OTHER_ENDPOINTS: 17}


def test_endpoints_beyond_the_bound_are_forgotten_once_gone_and_their_counts_kept():
    """Weeks of endpoints coming and going under new keys: what is remembered is bounded by
    the endpoints read now and the named series, whatever came before."""
    labels = EndpointLabels(max_series=2)
    totals = Totals(labels)
    totals.update({"a": 1, "b": 1})
    for n in range(1000):  # one endpoint at a time beyond the bound, each gone by the next
        assert totals.update({"a": 1, "b": 1, f"gone-{n}": 2}) == {
            "a": 1,
            "b": 1,
            OTHER_ENDPOINTS: 2 * (n + 1),
        }
    assert len(totals._last) == 3 and len(labels._others) == 1
    assert totals.update({}) == {"a": 1, "b": 1, OTHER_ENDPOINTS: 2000}
    assert labels("new") == OTHER_ENDPOINTS and labels("a") == "a", "named series keep theirs"


def test_each_kind_of_gap_row_is_counted_under_its_cause():
    now = time.time_ns()
    drops = DropEpisode("zeroeq", "k")
    drops.drop(3, now, "the spool reached maxSpoolBytes")
    full = drops.gap_text(now)
    drops = DropEpisode("zeroeq", "k")
    drops.drop(3, now, "the spool could not be written (No space left on device)")
    refused = Refusals("zeroeq", "tcp://h:1", "k", 10, 5)
    texts = {
        full: "spool_full",
        drops.gap_text(now): "spool_error",
        refused.gap_text((2, 20, 1, now, now)): "over_bounds",
        refused.gap_text((1, 20, 1, now, now)): "over_bounds",
        ReceiveFailures("zeroeq", "tcp://h:1", "k").failed(11): "receive_failed",
        restart_gap_text("k", "T1", "T2"): "capture_not_running",
        "gap: the connection to tcp://h:1 was dropped at T and re-established; ...": (
            "connection_dropped"
        ),
        "gap: partition k had no holder between T1 and T2 (its holder ...": "no_holder",
        "gap: 4 messages at offsets [2, 6) are lost: spool segment /s is damaged": (
            "damaged_segment"
        ),
        "gap: something new": "other",
    }
    assert {text: gap_cause(text) for text in texts} == texts
    assert set(texts.values()) == set(CAUSES)


@pytest.mark.parametrize(
    "given, parsed",
    [
        ("off", None),
        ("9464", ("127.0.0.1", 9464)),
        ("0", ("127.0.0.1", 0)),
        ("0.0.0.0:9464", ("0.0.0.0", 9464)),
        ("[::1]:0", ("::1", 0)),
    ],
)
def test_option_metrics_takes_off_a_port_or_an_address_with_a_port(given, parsed):
    options = parse_options("zeroeq", READER_OPTIONS, {"metrics": given})
    assert options.get(METRICS) == parsed


@pytest.mark.parametrize("given", ["", "host", "127.0.0.1:99999", ":9464", "yes"])
def test_a_wrong_metrics_option_says_what_is_accepted(given):
    with pytest.raises(OptionError, match="off, PORT"):
        parse_options("zeroeq", READER_OPTIONS, {"metrics": given})


def test_option_metrics_is_for_a_querys_own_capture(tmp_path):
    protocol = ZeroEQ()
    given = {"spoolPath": str(tmp_path), "capture": "service", "metrics": "9464"}
    options = parse_options("zeroeq", READER_OPTIONS + protocol.reader_options, given)
    with pytest.raises(OptionError, match=r"a capture service serves its own \(spark-zmq capture"):
        ZmqStreamReader(protocol, options)


def test_hundreds_of_endpoints_make_a_bounded_number_of_series_in_every_family():
    """300 endpoints: each per-endpoint family has MAX_ENDPOINT_SERIES series and one
    ``_other`` (the sum of the others' counts; the oldest of their last messages' ages)."""
    now = time.time_ns()
    keys = [f"k{n:03}" for n in range(300)]
    counts = CaptureCounts(
        received={key: 2 for key in keys},
        written_bytes={key: 10 for key in keys},
        last_message_at={key: now - n * 10**9 for n, key in enumerate(keys)},
        live=300,
        connecting=0,
        refused=0,
        discovery_events={"joined": 300, "changed": 0, "left": 0},
        flushes=FlushTimes().histogram(),
        cpu_seconds=None,
    )
    view = CaptureView(counts, {}, 0, 0, 0, {})
    registry = CollectorRegistry()
    registry.register(CaptureCollector("zeroeq", lambda: view))
    by_family: dict[str, dict[str, float]] = {}
    for family in registry.collect():
        for sample in family.samples:
            if "endpoint" in sample.labels:
                by_family.setdefault(sample.name, {})[sample.labels["endpoint"]] = sample.value
    for name in (
        "spark_zmq_messages_received_total",
        "spark_zmq_received_bytes_total",
        "spark_zmq_last_message_age_seconds",
    ):
        assert len(by_family[name]) == MAX_ENDPOINT_SERIES + 1, name
    assert by_family["spark_zmq_messages_received_total"][OTHER_ENDPOINTS] == 400
    assert by_family["spark_zmq_received_bytes_total"][OTHER_ENDPOINTS] == 2000
    assert 299 <= by_family["spark_zmq_last_message_age_seconds"][OTHER_ENDPOINTS] < 310
    assert by_family["spark_zmq_last_message_age_seconds"]["k000"] < 10
