"""The alive record (``spool.downtime``): since when a partition left open was not captured."""

from __future__ import annotations

from spark_zmq.spool.downtime import Downtime, alive_record, down_since, load_alive
from spark_zmq.spool.leases import Lease, process_id


def lease(holder: str, at: float) -> Lease:
    return Lease(3, holder, "executor", 1, at, sealed=True)


def test_the_alive_record_dates_a_downtime_only_for_the_process_that_wrote_it(tmp_path):
    root = str(tmp_path)
    record = Downtime({"k": 5.0}, alive_record(root))
    record.alive(100.0, force=True)
    record.alive(200.0)  # within ALIVE_SECONDS of the last write: not written
    alive = load_alive(root)
    assert alive is not None
    assert (alive.holder, alive.at, alive.pending) == (process_id(), 100.0, {"k": 5.0})
    assert down_since(lease(process_id(), 40.0), alive) == 100.0
    assert down_since(lease("other/1", 40.0), alive) == 40.0  # another run's record
    assert down_since(None, alive) == 100.0  # claimed, lease never written
    assert down_since(lease(process_id(), 40.0), None) == 40.0
    assert down_since(None, None) is None
    record.recorded("k")
    record.alive(300.0, force=True)
    assert load_alive(root).pending == {}


def test_an_unreadable_alive_record_is_no_record(tmp_path):
    (tmp_path / "alive.json").write_text("{not json")
    assert load_alive(str(tmp_path)) is None
    (tmp_path / "alive.json").write_text('{"at": 1}')
    assert load_alive(str(tmp_path)) is None
