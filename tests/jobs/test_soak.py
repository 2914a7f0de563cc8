"""The short soak run (about a minute): faults of every kind, a driver SIGKILL among them, then
nothing duplicated, nothing lost after capture, and every lost message either marked by a gap row
or lost while a peer was down. The full run is ``python benchmarks/soak.py`` (10 minutes).

CI runs one placement, ``--capture service`` (about 100 s; the executors placement takes about
160 s): a ``spark-zmq capture`` service restarted by SIGTERM and by SIGKILL while its query
reads, besides the faults every placement gets. ``--capture executors`` (the default) and
``--capture driver`` are run by hand (docs/guarantees.md, The soak run)."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from support.common import ROOT


@pytest.mark.spark  # benchmarks/soak.py runs its queries under spark-submit
@pytest.mark.jvms
def test_short_soak_duplicates_nothing_and_marks_every_loss_of_capture(tmp_path):
    result_path = tmp_path / "soak.json"
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "soak.py"),
            "--short",
            "--capture",
            "service",
            "--result",
            str(result_path),
        ],
        capture_output=True,
        text=True,
        timeout=900,
    )
    out = run.stdout
    assert run.returncode == 0, out + run.stderr[-3000:]
    result = json.loads(result_path.read_text())
    figures = result["figures"]
    assert figures["duplicated"] == 0 and figures["lost after capture"] == 0, out
    assert figures["lost, unmarked"] == 0, out
    # Enough flowed for the run to mean something. Not more: on a loaded machine a query restart
    # has left the partition without a holder for 36 s of the minute (a gap row says so), and
    # what is published meanwhile is lost, as expected of pub/sub.
    assert figures["delivered"] > 0.1 * figures["sent"], out
    faults = result["faults"]
    kinds = ("publisher", "broker", "query", "driver-kill", "capture-service")
    assert all(faults[kind] >= 1 for kind in kinds), faults
    assert faults["capture-service"] >= 2, faults  # stopped by SIGTERM, then by SIGKILL


def test_the_soak_counts_a_loss_that_no_gap_row_covers_as_unmarked(monkeypatch):
    """The soak's accounting, on a stream made up here: a publisher at 100 msg/s from t = 1000
    s whose messages 0-9 were sent before capture connected, 10-19 are at offsets 0-9, 20-39
    never arrived (a holder stopped between 1000.2 and 1000.4 s: a gap row at offset 10 says
    so), 40-49 are at offsets 11-20, and 50-79 never arrived with no gap row after offset 20:
    they are unmarked, although an older gap row (offset 5) names times that cover some."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    soak = importlib.import_module("soak_accounting")
    partition = "soak/1@127.0.0.1:5003"

    def at(sequence: int, offset: int):
        return soak.Delivered(sequence, partition, offset, 1000 + sequence / 100)

    delivered = {0: [at(s, s - 10) for s in range(10, 20)] + [at(s, s - 29) for s in range(40, 50)]}
    gaps = {
        partition: [
            soak.gap_row(
                5,
                "gap: the connection to tcp://127.0.0.1:5003 was dropped at "
                "1970-01-01T00:16:40.650Z and re-established; what was published meanwhile "
                "is lost. Cause: the connection was lost",
                1000.8,
            ),
            soak.gap_row(
                10,
                "gap: partition soak/1@127.0.0.1:5003 had no holder between "
                "1970-01-01T00:16:40.200Z and 1970-01-01T00:16:40.400Z (its holder h on "
                "executor e stopped); what was published meanwhile is lost",
                1000.4,
            ),
        ]
    }
    monkeypatch.setattr(soak, "MARK_SLACK", 0.0)
    found = soak.holes(delivered, {0: 80})
    kinds = soak.classify(found, {0: soak.Schedule([(0, 1000.0)], 100.0)}, gaps, [])
    assert kinds == {"marked": 20, "before first capture": 10, "peer down": 0, "unmarked": 30}


def test_the_soak_dates_a_capture_restart_gap_row_by_the_times_it_names(monkeypatch):
    """A restart of capture on the driver or of a capture service writes the gap row of
    ``spool.downtime``; the soak's matching rule must read its span from the text capture writes
    (from T1 to T2, not to when the row was written), so that a hole inside the downtime is
    marked and one after it is not."""
    from spark_zmq.spool.downtime import restart_gap_text
    from spark_zmq.units import utc_text

    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    soak = importlib.import_module("soak_accounting")
    partition = "soak/0@127.0.0.1:5003"
    since, until = 2000.25, 2003.5
    text = restart_gap_text(partition, utc_text(int(since * 1e9)), utc_text(int(until * 1e9)))
    gap = soak.gap_row(7, text, received_at=2010.0)
    assert (gap.since, gap.until, gap.timed) == (since, until, True)

    def at(sequence: int, offset: int):
        return soak.Delivered(sequence, partition, offset, 2000 + sequence / 100)

    # 0-19 at offsets 0-19; 20-349 (due 2000.20 to 2003.49 s) never arrived, the gap row sits
    # at offset 20 and marks 25-349; 350-359 at offsets 21-30; 360-999 (due from 2003.6 s)
    # never arrived, and no gap row sits after offset 30: unmarked
    delivered = {0: [at(s, s) for s in range(20)] + [at(s, s - 329) for s in range(350, 360)]}
    gap = soak.gap_row(20, text, received_at=2003.5)
    monkeypatch.setattr(soak, "MARK_SLACK", 0.0)
    kinds = soak.classify(
        soak.holes(delivered, {0: 1000}),
        {0: soak.Schedule([(0, 2000.0)], 100.0)},
        {partition: [gap]},
        [],
    )
    assert kinds == {"marked": 325, "before first capture": 0, "peer down": 0, "unmarked": 645}
