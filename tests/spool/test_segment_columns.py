"""A partition's retained segments are kept as columns (``index.Segments``), not as objects: they
behave as the list of ``Segment`` they hold (what readers, retention and the index files see),
their searches agree with a search of that list, and they take a fraction of its memory."""

from __future__ import annotations

import bisect
import json
import tracemalloc

import pytest

from spark_zmq.spool.index import PartitionIndex, Segment, Segments


def made(count: int, start: int = 0) -> list[Segment]:
    """``count`` segments from ``start`` on, of varied sizes, parts and ages; every third a
    file of its own (part None), as an earlier release wrote them."""
    segments, first = [], start
    for n in range(count):
        part = None if n % 3 == 0 else n % 7
        segments.append(Segment(first, 1 + n % 4, 100 + n, 1 + n // 50, 1000.0 + n, part))
        first += 1 + n % 4
    return segments


def test_segments_hold_what_they_were_given_and_give_copies() -> None:
    given = made(40)
    kept = Segments(given)
    assert len(kept) == 40 and list(kept) == given and kept == given
    assert kept[0] == given[0] and kept[-1] == given[-1] and kept[5:9] == given[5:9]
    assert kept[::7] == given[::7] and kept[50:] == []
    with pytest.raises(IndexError):
        kept[40]
    with pytest.raises(IndexError):
        kept[-41]
    assert kept.nbytes == sum(s.nbytes for s in given)
    copy = kept[3]
    copy.nbytes, copy.at = 1, 0.0
    assert kept[3] == given[3]  # a segment given out changes nothing kept
    with pytest.raises(TypeError):
        hash(kept)


def test_appends_pops_and_deletions_keep_the_sizes_sum() -> None:
    given = made(30)
    kept = Segments()
    for segment in given:
        kept.append(segment)
    assert kept.pop() == given[-1] and kept.nbytes == sum(s.nbytes for s in given[:-1])
    assert kept.take_first(10) == given[:10]
    assert kept == given[10:29] and kept.nbytes == sum(s.nbytes for s in given[10:29])
    assert kept.nbytes_of(2, 5) == sum(s.nbytes for s in given[12:15])
    assert kept.oldest_at(0, 3) == given[10].at
    assert kept.take_first(100) == given[10:29] and len(kept) == 0 and kept.nbytes == 0


def test_searches_agree_with_a_search_of_the_list() -> None:
    given = made(200, start=17)
    kept = Segments(given)
    for offset in range(0, given[-1].end + 3):
        assert kept.count_ending_by(offset) == bisect.bisect_right(
            given, offset, key=lambda s: s.end
        )
        assert kept.count_starting_before(offset) == bisect.bisect_left(
            given, offset, key=lambda s: s.first
        )


def test_an_index_lists_and_reloads_its_segments_through_the_columns() -> None:
    """index.json's lines of 5 fields (a segment file of its own) and of 6 (a part) read back
    as written; ages not known (0) count from when a writer loads them."""
    given = made(25)
    index = PartitionIndex("k", start=0, end=given[-1].end, segments=given, committed=0)
    again = PartitionIndex.from_json(index.to_json())
    assert again.segments == given and again.nbytes == index.nbytes
    assert Segments.from_fields([s.fields() for s in given]) == given
    old = Segments.from_fields([[0, 2, 10, 1], [2, 1, 5, 1, 0.0]])
    assert [s.at for s in old] == [0.0, 0.0]
    old.set_unknown_ages(99.0)
    assert [s.at for s in old] == [99.0, 99.0]


@pytest.mark.parametrize("listed", [[[0, 1]], [[0, 1, 2, 3, 4, 5, 6, 7]], [["a", 1, 2]], [7]])
def test_a_damaged_segment_line_is_refused(listed: list) -> None:
    """A line of too few or too many fields, or not numbers: an error, as ``Segment(*fields)``
    gave one, not a segment made up."""
    with pytest.raises((ValueError, TypeError)):
        Segments.from_fields(listed)
    text = json.dumps({"key": "k", "start": 0, "end": 1, "dropped": 0, "retired": False,
                       "segments": listed})  # fmt: skip
    with pytest.raises((ValueError, TypeError)):
        PartitionIndex.from_json(text)


def test_a_retained_segment_takes_a_quarter_of_the_memory_of_a_segment_object() -> None:
    """A writer retains every segment until retention deletes it: with 1,000 endpoints that
    are millions, and as objects (about 250 bytes each) they cost more memory than their
    messages take on disk."""
    given = made(20_000)
    tracemalloc.start()
    try:
        kept = Segments()
        for segment in given:
            kept.append(segment)
        as_columns = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert len(kept) == 20_000
    assert as_columns / 20_000 < 64, f"{as_columns / 20_000:.0f} bytes a segment"  # 7 x 8


def test_an_appended_line_of_other_than_numbers_ends_the_lines() -> None:
    """A line that parses but does not hold numbers (damage) ends what the file publishes, as
    a line cut short does; the lines before it count."""
    index = PartitionIndex("k")
    text = '[0, 2, 10, 1, 5.0, 0, 0, 7]\n[2, 1, "x", 1, 5.0, 0]\n[3, 1, 10, 1, 5.0, 0]\n'
    assert index.add_appended(text) is False
    assert index.end == 2 and index.segments == [Segment(0, 2, 10, 1, 5.0, 0, 7)]
