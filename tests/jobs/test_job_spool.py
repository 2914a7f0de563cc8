"""Where the jobs keep their spool (docs/jobs.md): ``capture_to_parquet``, and ``monitor`` with
``--checkpoint``, put it beside the checkpoint (``<checkpoint>_spool``), so that a restart from
the checkpoint still finds what was captured but not yet written after the temporary folder is
cleaned; an explicit ``spoolPath`` wins; a monitor without ``--checkpoint`` names no folder.

No Spark: each job's command line goes through the job's own ``parse_args`` and the function
its ``main`` derives the query's options with. tests/jobs/test_jobs.py runs the jobs, and
checks republish's spool beside its checkpoint in a real run."""

from __future__ import annotations

from spark_zmq.jobs import capture_to_parquet, monitor


def capture_locations(*argv: str) -> tuple[str, str, dict[str, str]]:
    return capture_to_parquet.locations(
        capture_to_parquet.parse_args(["--format", "ebus", "--option", "broker=10.0.0.5", *argv])
    )


def monitor_options(*argv: str) -> tuple[dict[str, str], dict[str, str]]:
    return monitor.query_options(
        monitor.parse_args(["--format", "ebus", "--option", "broker=10.0.0.5", *argv])
    )


def test_capture_to_parquet_keeps_its_spool_beside_its_default_checkpoint(tmp_path):
    output, checkpoint, options = capture_locations("--output", str(tmp_path / "table/"))
    assert output == str(tmp_path / "table")
    assert checkpoint == str(tmp_path / "table_checkpoint")
    assert options == {"broker": "10.0.0.5", "spoolPath": str(tmp_path / "table_checkpoint_spool")}


def test_capture_to_parquet_keeps_its_spool_beside_a_given_checkpoint(tmp_path):
    given = str(tmp_path / "cp") + "/"
    _, checkpoint, options = capture_locations("--output", "out", "--checkpoint", given)
    assert checkpoint == given
    assert options["spoolPath"] == str(tmp_path / "cp_spool")


def test_capture_to_parquet_takes_an_explicit_spool_path(tmp_path):
    _, _, options = capture_locations(
        "--output", str(tmp_path / "table"), "--option", f"spoolPath={tmp_path / 'mine'}"
    )
    assert options["spoolPath"] == str(tmp_path / "mine")


def test_a_monitor_with_a_checkpoint_keeps_its_spool_beside_it(tmp_path):
    options, sink = monitor_options("--checkpoint", str(tmp_path / "cp"))
    assert options == {"broker": "10.0.0.5", "spoolPath": str(tmp_path / "cp_spool")}
    assert sink == {"checkpointLocation": str(tmp_path / "cp")}
    options, _ = monitor_options(
        "--checkpoint", str(tmp_path / "cp"), "--option", f"spoolPath={tmp_path / 'mine'}"
    )
    assert options["spoolPath"] == str(tmp_path / "mine")


def test_a_monitor_without_a_checkpoint_leaves_the_spool_to_the_reader():
    """No ``spoolPath``: the reader's default, under the temporary folder (docs/jobs.md)."""
    assert monitor_options() == ({"broker": "10.0.0.5"}, {})
