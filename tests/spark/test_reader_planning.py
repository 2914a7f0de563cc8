"""The stream reader's planning without Spark: the offsets it hands Spark for what a placement
reports, driven through the calls Spark makes (``initialOffset``, ``latestOffset``,
``partitions``, ``commit``, ``prepareForTriggerAvailableNow``, ``reportLatestOffset``).

The placement is a fake whose spool state the test sets (as Flink tests its split enumerator
with a mock context): latest offsets, partitions that are new or retired, claim rounds, the
AvailableNow clamp and admission control are checked here in milliseconds; the Spark tests keep
what only a query shows (that Spark plans no micro-batch for an unchanged offset, that
AvailableNow ends, that a retired partition's rows arrive once)."""

from __future__ import annotations

import time

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from spark_zmq.spark import reader as reader_module
from spark_zmq.spark.datasource import ZeroEQDataSource
from spark_zmq.spark.offsets import StreamOffset
from spark_zmq.spark.rows import ReadTask
from spark_zmq.spool.index import PartitionState

#: a retired partition's data of an earlier run, and the live one's
OLD, LIVE = "10.9.9.9:1", "127.0.0.1:5000"


class FakeClaim:
    """What a claims round plans (the reader passes claims on as they are)."""

    def __init__(self, key: str, claims_round: int) -> None:
        self.key, self.claims_round = key, claims_round


class FakePlacement:
    """A placement whose spool state, start ends and claims the test sets; records commits."""

    default_starting_offsets = "latest"

    def __init__(self) -> None:
        self.state: dict[str, PartitionState] = {}
        self.ends_at_start: dict[str, int] = {}
        self.committed: list[dict[str, int]] = []
        #: keys that need a holder now: the next claims round plans a claim for each
        self.unheld: list[str] = []
        self.started = self.closed = False
        self.snapshots = 0  # how many times the reader read the spool's state

    def start(self) -> None:
        self.started = True

    def snapshot(self) -> dict[str, PartitionState]:
        self.snapshots += 1
        return dict(self.state)

    def waive_downtime(self) -> set[str]:
        return set()  # no earlier run's gap row: see test_restart_gaps

    def next_claims_round(self, last_round: int | None) -> int | None:
        return (last_round or 0) + 1 if self.unheld else last_round

    def claims_of_round(self, claims_round: int) -> list[FakeClaim]:
        return [FakeClaim(key, claims_round) for key in self.unheld]

    def served(self) -> None:
        return None  # read tasks read the spool's files

    def listing(self, key: str, start: int, end: int) -> tuple:
        """A stand-in listing that names the range it was asked for."""
        return ("listed", key, start, end)

    def commit(self, end: dict[str, int]) -> None:
        self.committed.append(dict(end))

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def placement(monkeypatch) -> FakePlacement:
    fake = FakePlacement()
    monkeypatch.setattr(reader_module, "make_placement", lambda *args: fake)
    monkeypatch.setattr(reader_module, "_stop_on_sigterm", lambda: None)
    return fake


def stream_reader(tmp_path, **options: str):
    """The zeroeq stream reader as Spark gets it from the data source, on ``tmp_path``."""
    given = {"publishers": LIVE, "spoolPath": str(tmp_path / "spool"), **options}
    source = ZeroEQDataSource(given)
    return source.streamReader(source.schema())


def ends(offset: dict) -> dict[str, int]:
    return StreamOffset.from_json(offset).ends


def planned(reader, start: dict, end: dict) -> dict[str, list[tuple[int, int]]]:
    """The ranges the tasks of a micro-batch from ``start`` to ``end`` read, per partition,
    merged (a large range may be split over several tasks)."""
    found: dict[str, list[tuple[int, int]]] = {}
    pieces = sorted(
        (part.key, part.start, part.end)
        for task in reader.partitions(start, end)
        if isinstance(task, ReadTask)
        for part in task.ranges
    )
    for key, begin, stop in pieces:
        spans = found.setdefault(key, [])
        if spans and spans[-1][1] == begin:
            spans[-1] = (spans[-1][0], stop)
        else:
            spans.append((begin, stop))
    return found


def test_latest_reads_what_this_run_captured_before_the_first_call_and_earliest_all(
    tmp_path, placement
):
    placement.state = {LIVE: PartitionState(start=2, end=10, retired=False)}
    placement.ends_at_start = {LIVE: 6}  # an earlier run left 2..6; this run captured 6..10
    latest = stream_reader(tmp_path).initialOffset()
    earliest = stream_reader(tmp_path, startingOffsets="earliest").initialOffset()
    named = stream_reader(tmp_path, startingOffsets=f'{{"{LIVE}": 4}}').initialOffset()
    assert placement.started
    assert (ends(latest), ends(earliest), ends(named)) == ({LIVE: 6}, {LIVE: 2}, {LIVE: 4})


def test_a_new_partition_starts_at_its_first_uncommitted_offset(tmp_path, placement):
    reader = stream_reader(tmp_path)
    placement.state = {LIVE: PartitionState(0, 5, False)}
    placement.ends_at_start = {LIVE: 5}
    start = reader.initialOffset()
    # a partition that appeared since, whose first 3 an earlier query committed
    placement.state[OLD] = PartitionState(start=1, end=8, retired=False, committed=3)
    placement.state[LIVE] = PartitionState(0, 9, False)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ends(end) == {LIVE: 9, OLD: 8}
    assert planned(reader, start, end) == {LIVE: [(5, 9)], OLD: [(3, 8)]}


def test_an_unchanged_spool_gives_back_the_same_offset(tmp_path, placement):
    """The same offset is how the reader tells Spark that there is no micro-batch to plan."""
    reader = stream_reader(tmp_path)
    placement.state = {LIVE: PartitionState(0, 5, False)}
    placement.ends_at_start = {LIVE: 5}
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadAllAvailable()) == start
    placement.state[LIVE] = PartitionState(0, 6, False)
    assert ends(reader.latestOffset(start, ReadAllAvailable())) == {LIVE: 6}


def test_a_retired_partition_is_read_to_its_end_then_leaves_the_offsets(tmp_path, placement):
    reader = stream_reader(tmp_path, startingOffsets="earliest")
    placement.state = {
        OLD: PartitionState(start=0, end=3, retired=True),
        LIVE: PartitionState(0, 1, False),
    }
    start = reader.initialOffset()
    assert ends(start) == {OLD: 0, LIVE: 0}
    # it still holds data: it stays until a batch has read it, and the progress shows it
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ends(end) == {OLD: 3, LIVE: 1} and placement.committed == []
    assert planned(reader, start, end) == {OLD: [(0, 3)], LIVE: [(0, 1)]}
    assert set(ends(reader.reportLatestOffset())) == {OLD, LIVE}
    # read to its end: it leaves the next offset at once, its end committed to the placement
    placement.state[LIVE] = PartitionState(0, 2, False)
    after = reader.latestOffset(end, ReadAllAvailable())
    assert ends(after) == {LIVE: 2}
    assert placement.committed == [{OLD: 3}]
    assert set(ends(reader.reportLatestOffset())) == {LIVE}, "no endpoint in the progress"


def test_the_latest_offset_reported_is_what_the_triggers_latest_offset_found(tmp_path, placement):
    """Spark asks ``reportLatestOffset`` right after ``latestOffset`` in each trigger: the
    reader answers from what that call read (all that is available, not what admission control
    let in) rather than reading every partition's index a second time."""
    reader = stream_reader(tmp_path, maxRecordsPerTrigger="4")
    placement.state = {LIVE: PartitionState(0, 0, False)}
    start = reader.initialOffset()
    assert ends(reader.reportLatestOffset()) == {LIVE: 0}, "before any trigger: read anew"
    placement.state[LIVE] = PartitionState(0, 10, False)
    before = placement.snapshots
    assert ends(reader.latestOffset(start, reader.getDefaultReadLimit())) == {LIVE: 4}
    assert ends(reader.reportLatestOffset()) == {LIVE: 10}
    assert placement.snapshots == before + 1


def test_a_retired_partition_skipped_by_latest_leaves_without_being_read(tmp_path, placement):
    reader = stream_reader(tmp_path)  # startingOffsets=latest (the placement's default)
    placement.state = {
        OLD: PartitionState(0, 3, retired=True),
        LIVE: PartitionState(0, 0, False),
    }
    placement.ends_at_start = {OLD: 3, LIVE: 0}
    start = reader.initialOffset()
    assert ends(start) == {OLD: 3, LIVE: 0}
    placement.state[LIVE] = PartitionState(0, 1, False)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ends(end) == {LIVE: 1} and placement.committed == [{OLD: 3}]
    assert planned(reader, start, end) == {LIVE: [(0, 1)]}


def test_a_claims_round_forces_a_micro_batch_that_carries_its_claims(tmp_path, placement):
    reader = stream_reader(tmp_path)
    placement.state = {LIVE: PartitionState(0, 4, False)}
    placement.ends_at_start = {LIVE: 4}
    start = reader.initialOffset()
    placement.unheld = [LIVE, OLD]  # nothing new captured, but two partitions need a holder
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end != start and StreamOffset.from_json(end).claims_round == 1
    tasks = reader.partitions(start, end)
    claims = [t for t in tasks if isinstance(t, FakeClaim)]
    assert sorted((c.key, c.claims_round) for c in claims) == [(OLD, 1), (LIVE, 1)]
    assert not [t for t in tasks if isinstance(t, ReadTask)]
    # the round is planned once: a batch within the same round runs no claim again
    placement.unheld = []
    placement.state[LIVE] = PartitionState(0, 6, False)
    later = reader.latestOffset(end, ReadAllAvailable())
    assert StreamOffset.from_json(later).claims_round == 1
    assert not [t for t in reader.partitions(end, later) if isinstance(t, FakeClaim)]
    assert planned(reader, end, later) == {LIVE: [(4, 6)]}


def test_available_now_reads_what_was_there_when_it_began_and_no_claims(tmp_path, placement):
    reader = stream_reader(tmp_path)
    placement.state = {LIVE: PartitionState(0, 2, False)}
    placement.ends_at_start = {LIVE: 2}
    start = reader.initialOffset()
    placement.state[LIVE] = PartitionState(0, 10, False)
    reader.prepareForTriggerAvailableNow()
    # captured meanwhile: more of the partition, a new partition; and claims are wanted
    placement.state[LIVE] = PartitionState(0, 15, False)
    placement.state[OLD] = PartitionState(0, 4, False)
    placement.unheld = [OLD]
    end = reader.latestOffset(start, ReadAllAvailable())
    assert ends(end) == {LIVE: 10, OLD: 0}
    assert StreamOffset.from_json(end).claims_round is None
    assert planned(reader, start, end) == {LIVE: [(2, 10)]}
    assert reader.latestOffset(end, ReadAllAvailable()) == end, "then it has nothing more"


def test_max_records_per_trigger_shares_the_budget_over_the_backlogs(tmp_path, placement):
    reader = stream_reader(tmp_path, maxRecordsPerTrigger="10")
    placement.state = {LIVE: PartitionState(0, 0, False), OLD: PartitionState(0, 0, False)}
    start = reader.initialOffset()
    placement.state = {LIVE: PartitionState(0, 30, False), OLD: PartitionState(0, 10, False)}
    limit = reader.getDefaultReadLimit()
    assert isinstance(limit, ReadMaxRows) and limit.max_rows == 10
    first = ends(reader.latestOffset(start, limit))
    assert sum(first.values()) == 10 and first[LIVE] > first[OLD] > 0, first  # about 30:10
    second = ends(reader.latestOffset(StreamOffset(first).to_json(), limit))
    assert sum(second.values()) - sum(first.values()) == 10
    assert isinstance(stream_reader(tmp_path).getDefaultReadLimit(), ReadAllAvailable)


def test_min_records_per_trigger_waits_but_not_past_max_trigger_delay(tmp_path, placement):
    reader = stream_reader(tmp_path, minRecordsPerTrigger="5", maxTriggerDelay="2s")
    placement.state = {LIVE: PartitionState(0, 0, False)}
    start = reader.initialOffset()
    reader.latestOffset(start, ReadAllAvailable())  # the first trigger: nothing waiting
    placement.state[LIVE] = PartitionState(0, 3, False)
    assert reader.latestOffset(start, ReadAllAvailable()) == start, "3 < 5: it waits"
    placement.state[LIVE] = PartitionState(0, 5, False)
    five = reader.latestOffset(start, ReadAllAvailable())
    assert ends(five) == {LIVE: 5}, "5 waiting: a micro-batch"
    placement.state[LIVE] = PartitionState(0, 6, False)
    assert reader.latestOffset(five, ReadAllAvailable()) == five
    time.sleep(2.05)
    assert ends(reader.latestOffset(five, ReadAllAvailable())) == {LIVE: 6}, "the delay passed"
    # under AvailableNow it waits for nothing
    placement.state[LIVE] = PartitionState(0, 7, False)
    reader.prepareForTriggerAvailableNow()
    assert ends(reader.latestOffset(five, ReadAllAvailable())) == {LIVE: 7}


def test_commit_and_stop_reach_the_placement(tmp_path, placement):
    reader = stream_reader(tmp_path)
    placement.state = {LIVE: PartitionState(0, 3, False)}
    reader.commit(StreamOffset({LIVE: 3}).to_json())  # before the first offset: no placement
    assert placement.committed == [] and not placement.started
    start = reader.initialOffset()
    reader.commit(StreamOffset({LIVE: 3}, 2).to_json())
    assert placement.committed == [{LIVE: 3}] and ends(start) == {LIVE: 0}
    reader.stop()
    assert placement.closed


def test_many_partitions_are_read_by_max_partitions_tasks_each_range_once(tmp_path, placement):
    """Issue 46: 300 endpoints with new messages are 4 read tasks (maxPartitions=4), not 300,
    each range whole in exactly one of them and the tasks about equal in work; a busy one
    stays whole unless minPartitions asks for more tasks than there are ranges."""
    keys = [f"127.0.0.1:{6000 + n}" for n in range(300)]
    reader = stream_reader(tmp_path, maxPartitions="4")
    placement.state = {key: PartitionState(0, 0, False) for key in keys}
    start = reader.initialOffset()
    placement.state = {key: PartitionState(0, 10 + n % 7, False) for n, key in enumerate(keys)}
    end = reader.latestOffset(start, ReadAllAvailable())
    tasks = reader.partitions(start, end)
    assert len(tasks) == 4 and all(isinstance(t, ReadTask) for t in tasks)
    read = sorted((p.key, p.start, p.end) for t in tasks for p in t.ranges)
    assert read == sorted((key, 0, 10 + n % 7) for n, key in enumerate(keys))
    rows = [sum(p.end - p.start for p in t.ranges) for t in tasks]
    assert max(rows) - min(rows) <= 16, rows  # at most one range's rows apart
    assert reader.partitions(start, end) == tasks  # the same offsets plan the same tasks
    # each range carries the placement's listing of it: its task loads no index
    assert all(p.listing == ("listed", p.key, p.start, p.end) for t in tasks for p in t.ranges)
    few = stream_reader(tmp_path, maxPartitions="4", minPartitions="8")
    assert len(few.partitions(start, end)) == 8  # minPartitions wins over maxPartitions
