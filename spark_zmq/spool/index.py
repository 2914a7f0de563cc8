"""What a spool's index.json, appended-segments file and history file hold for one partition:
its segments and offsets (``PartitionIndex``, ``Segment``), where messages came from
(``Source``), and how long committed segments are kept (``Retention``). Files and folders are
``layout``'s.
"""

from __future__ import annotations

import bisect
import json
import operator
from array import array
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple, overload

from spark_zmq.errors import SpoolError

#: the layout of the JSON files of a spool (index.json, lease.json, the driver's documents) that
#: this release writes and reads; a file without one predates versions (the same layout)
FORMAT_VERSION = 1
#: index.json's own layout: 2 names a file of segments appended since (``appended``), which a
#: release that reads only version 1 would not see; 3 (0.3) lists segments that are parts of
#: flush files (``Segment.part``), which a release that reads only versions 1 and 2 would read as
#: the whole file, and its appended file has commit lines too; 4 lists segments whose flush file
#: is not linked in the epoch folder but named by number in the spool's flush folder
#: (``Segment.flush``), which a release that reads up to version 3 would not find; this release
#: reads all four
INDEX_FORMAT_VERSION = 4
VERSION_KEY = "format_version"


@dataclass(frozen=True)
class Source:
    """Where a segment's messages came from: the zmq endpoint and the discovery metadata."""

    endpoint: str
    metadata: Mapping[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"endpoint": self.endpoint, "metadata": dict(self.metadata)}

    @classmethod
    def from_dict(cls, obj: Mapping) -> Source:
        return cls(obj["endpoint"], obj["metadata"])

    def to_json(self) -> str:
        """The source as JSON, made once: a flush file names the source of each of its parts,
        and capture writes one every flush for each of its endpoints."""
        return self._json

    @cached_property
    def _json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_json(cls, data: bytes | str) -> Source:
        return cls.from_dict(json.loads(data))


@dataclass(frozen=True)
class Retention:
    """How long committed segments are kept (options ``spoolRetention``,
    ``spoolRetentionBytes``): ``seconds`` after they were written (None: no bound by age), and
    at most ``nbytes`` of them in the spool (None: no bound of their own; the spool's bound
    ``maxSpoolBytes`` still deletes them first whenever a write needs room)."""

    seconds: float | None = None
    nbytes: int | None = None


class PartitionState(NamedTuple):
    start: int  # first offset still retained (committed or not)
    end: int  # next offset to be written
    retired: bool  # the endpoint left
    committed: int = 0  # Spark committed every offset below this one (start <= committed <= end)

    @property
    def first_uncommitted(self) -> int:
        """Where a stream that has read everything committed goes on (``start`` at least)."""
        return max(self.start, self.committed)


@dataclass
class Segment:
    first: int
    count: int
    nbytes: int
    epoch: int = 0  # the epoch whose folder holds the file
    #: when it was written (wall-clock seconds), for retention by age; 0: not known (written by
    #: an earlier release, see ``PartitionIndex.from_json``)
    at: float = 0.0
    #: which part of its flush file holds its rows (``segments``); None: the file holds this
    #: segment alone (written before 0.3)
    part: int | None = None
    #: the number of its flush file in the spool's flush folder (``layout.flush_path``), which
    #: an exclusive writer keeps for as long as a segment names it (``flushes``); 0: its file
    #: is in the epoch folder (a link to the flush file, or a file of its own)
    flush: int = 0

    def fields(self) -> list:
        """The segment as an index, history or appended-segments line lists it."""
        listed: list = [self.first, self.count, self.nbytes, self.epoch, self.at]
        if self.flush:
            return [*listed, self.part or 0, self.flush]
        return listed if self.part is None else [*listed, self.part]

    @property
    def end(self) -> int:
        return self.first + self.count

    @property
    def file_name(self) -> str:
        return f"{self.first:020d}.arrow"


#: what a segment listed without them has for its epoch, age, part and flush file
#: (``Segments.extend``)
_MISSING_FIELDS = (0, 0.0, -1, 0)


class Segments(Sequence[Segment]):
    """A partition's segments in offset order, kept as columns of machine numbers and made
    ``Segment`` objects only when one is asked for: a writer retains every segment of the
    partitions it holds until retention deletes it, and with hundreds of endpoints, each a
    segment every flush, those are millions (a segment takes 56 bytes here, about 250 as an
    object). The commit's searches run in C on the columns.

    Invariants: ``end(i) == first(i + 1)`` is not required (a loaded index may start after
    ``start``), but firsts and ends both rise; ``nbytes`` is the sum of the segments' sizes.
    A segment given out is a copy: changing it changes nothing here (``set_unknown_ages``).
    """

    __slots__ = ("_ats", "_ends", "_epochs", "_firsts", "_flushes", "_parts", "_sizes", "nbytes")

    def __init__(self, segments: Iterable[Segment] = ()) -> None:
        self._firsts = array("q")
        self._ends = array("q")
        self._sizes = array("q")
        self._epochs = array("q")
        self._ats = array("d")
        self._parts = array("q")  # -1: None (a file of its own)
        self._flushes = array("q")
        self.nbytes = 0  # the sum of the segments' sizes
        for segment in segments:
            self.append(segment)

    @classmethod
    def from_fields(cls, listed: Sequence[Sequence]) -> Segments:
        """The segments of an index's or history's lines (``extend``)."""
        made = cls()
        made.extend(listed)
        return made

    def extend(self, listed: Sequence[Sequence]) -> None:
        """Add segments, each as ``Segment.fields`` gives it (first, count, nbytes, then
        perhaps epoch, age, part and flush file), column by column; ValueError or TypeError,
        and nothing added, if one is not 3 to 7 numbers."""
        if not listed:
            return
        lengths = set(map(len, listed))
        if not lengths <= {3, 4, 5, 6, 7}:
            raise ValueError("a segment is listed with fewer than 3 or more than 7 fields")
        rows = listed if lengths == {7} else [(*f, *_MISSING_FIELDS[len(f) - 3 :]) for f in listed]
        firsts, counts, sizes, epochs, ats, parts, flushes = zip(*rows, strict=True)
        columns = (
            array("q", firsts),
            array("q", map(operator.add, firsts, counts)),
            array("q", sizes),
            array("q", epochs),
            array("d", ats),
            array("q", parts),
            array("q", flushes),
        )
        for column, added in zip(self._columns(), columns, strict=True):
            column.extend(added)
        self.nbytes += sum(columns[2])

    def __len__(self) -> int:
        return len(self._firsts)

    @overload
    def __getitem__(self, at: int) -> Segment: ...

    @overload
    def __getitem__(self, at: slice) -> list[Segment]: ...

    def __getitem__(self, at: int | slice) -> Segment | list[Segment]:
        if isinstance(at, slice):
            return [self._made(i) for i in range(*at.indices(len(self)))]
        if at < 0:
            at += len(self)
        if not 0 <= at < len(self):
            raise IndexError("segment index out of range")
        return self._made(at)

    def _made(self, i: int) -> Segment:
        first, part = self._firsts[i], self._parts[i]
        return Segment(
            first,
            self._ends[i] - first,
            self._sizes[i],
            self._epochs[i],
            self._ats[i],
            None if part < 0 else part,
            self._flushes[i],
        )

    def __iter__(self) -> Iterator[Segment]:
        return (self._made(i) for i in range(len(self)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Segments | list):
            return len(self) == len(other) and all(a == b for a, b in zip(self, other))
        return NotImplemented

    def __hash__(self) -> int:
        raise TypeError("Segments change in place, as a list does: they have no hash")

    def __repr__(self) -> str:
        return f"Segments({list(self)!r})"

    def append(self, segment: Segment) -> None:
        """Add ``segment`` at the end (it starts at or after the last one's end)."""
        self._firsts.append(segment.first)
        self._ends.append(segment.first + segment.count)
        self._sizes.append(segment.nbytes)
        self._epochs.append(segment.epoch)
        self._ats.append(segment.at)
        self._parts.append(-1 if segment.part is None else segment.part)
        self._flushes.append(segment.flush)
        self.nbytes += segment.nbytes

    def pop(self) -> Segment:
        """Take the last segment away (an append that could not be published)."""
        last = self[-1]
        for column in self._columns():
            column.pop()
        self.nbytes -= last.nbytes
        return last

    def take_first(self, count: int) -> list[Segment]:
        """Take the first ``count`` segments away (retention deleted them); them."""
        gone = self[:count]
        for column in self._columns():
            del column[:count]
        self.nbytes -= sum(segment.nbytes for segment in gone)
        return gone

    def _columns(self) -> tuple[array, ...]:
        return (
            self._firsts,
            self._ends,
            self._sizes,
            self._epochs,
            self._ats,
            self._parts,
            self._flushes,
        )

    def flush_numbers(self, begin: int = 0, stop: int | None = None) -> array:
        """The flush file numbers (``Segment.flush``) of segments ``begin`` to ``stop``."""
        return self._flushes[begin:stop]

    def count_ending_by(self, offset: int) -> int:
        """How many segments, from the first, end at or before ``offset``."""
        return bisect.bisect_right(self._ends, offset)

    def count_starting_before(self, offset: int) -> int:
        """How many segments, from the first, start before ``offset``."""
        return bisect.bisect_left(self._firsts, offset)

    def nbytes_of(self, begin: int, stop: int) -> int:
        """The sizes of segments ``begin`` to ``stop`` together."""
        return sum(self._sizes[begin:stop])

    def oldest_at(self, begin: int, stop: int) -> float:
        """When the oldest of segments ``begin`` to ``stop`` (some) was written."""
        return min(self._ats[begin:stop])

    def set_unknown_ages(self, now: float) -> None:
        """Segments whose age is not known (0: written by an earlier release) count from
        ``now``, for retention by age."""
        ats = self._ats
        for i in range(len(ats)):
            if not ats[i]:
                ats[i] = now


#: segments a planner lists for one range at most (``PartitionIndex.listing``): beyond, the read
#: task loads the index itself (a backlog's range, read once)
MAX_LISTED = 64


class Listing(NamedTuple):
    """What a planner saw of one partition for a range [start, end), so that the read task
    need not load the partition's index (about 0.3 ms, more with a long appended-segments
    file, for each of hundreds of partitions a batch): the first offset retained, and the
    segments that hold the range, each as ``Segment.fields``. Segments never change once
    published; one that retention deleted since is read as deleted (``reader.read_range``)."""

    start: int
    segments: tuple[tuple, ...]

    def segment_list(self) -> list[Segment]:
        return [Segment(*fields) for fields in self.segments]


@dataclass
class PartitionIndex:
    """What index.json holds for one partition.

    Invariants: ``start <= committed <= end``; ``segments`` cover [start, end) in order, and
    those that end at or before ``committed`` (a prefix) are the committed ones, the only ones
    retention deletes.
    """

    key: str
    start: int = 0  # first offset still retained (committed or not)
    end: int = 0  # next offset to be written
    #: a list of ``Segment`` given here becomes ``Segments``
    segments: Segments = field(default_factory=Segments)
    dropped: int = 0  # messages dropped at the spool bound, ever
    retired: bool = False  # the endpoint left; no more appends expected
    committed: int = 0  # Spark committed every offset below this one
    #: the file, beside index.json, that lists the segments appended after this index was
    #: written, a line each (``appended_line``); "" in an index of format version 1
    appended: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.segments, Segments):
            self.segments = Segments(self.segments)

    def to_json(self) -> str:
        """index.json: every segment not wholly committed, and the file that lists those
        appended later; the committed ones are in the history file (``history_lines``). So
        the index, written at commits and not at appends, stays small however much retention
        keeps. ``start`` is the first offset the index lists (as an earlier release reads it),
        ``retained_from`` the first one kept."""
        listed = self.segments[self.committed_count() :]
        return json.dumps(
            versioned(
                {
                    "key": self.key,
                    "start": listed[0].first if listed else self.end,
                    "retained_from": self.start,
                    "end": self.end,
                    "dropped": self.dropped,
                    "retired": self.retired,
                    "committed": self.committed,
                    "segments": [s.fields() for s in listed],
                    "appended": self.appended,
                },
                INDEX_FORMAT_VERSION,
            )
        )

    @classmethod
    def from_json(
        cls, text: str, where: str = "index.json", history: str | None = None
    ) -> PartitionIndex:
        """An index as written by this release or an earlier one: without ``committed`` (an
        earlier release deleted what was committed at once: everything it kept is uncommitted)
        and, before version 3, the segments' ages in ``written_at`` or nowhere (not known: 0).

        ``history`` (the history file's text) adds the committed segments the index does not
        list; without it, ``segments`` may start after ``start``. Segments the history lacks
        (a history cut short) count as deleted: ``start`` moves up to what is listed."""
        obj = checked_version(json.loads(text), where, INDEX_FORMAT_VERSION)
        listed = obj["segments"]
        times = obj.get("written_at") or []
        if len(times) == len(listed):
            listed = [_with_age(fields, at) for fields, at in zip(listed, times, strict=True)]
        start = obj.get("retained_from", obj["start"])
        if history is not None:
            start, older = _committed_before(history, start, obj["start"])
            listed = older + listed
        segments = Segments.from_fields(listed)
        return cls(
            obj["key"],
            start,
            obj["end"],
            segments,
            obj["dropped"],
            obj["retired"],
            obj.get("committed", obj["start"]),
            obj.get("appended", ""),
        )

    def appended_line(self, segment: Segment) -> str:
        """The line that publishes ``segment``, just appended (it ends at ``end``), with the
        count of dropped messages as it now is."""
        s = segment  # (formatted here, not by json.dumps: one per endpoint each flush)
        if s.flush:
            part = f", {int(s.part or 0)}, {int(s.flush)}"
        else:
            part = "" if s.part is None else f", {int(s.part)}"
        return (
            f"[{int(s.first)}, {int(s.count)}, {int(s.nbytes)}, {int(s.epoch)}, "
            f"{float(s.at)!r}, {int(self.dropped)}{part}]\n"
        )

    def commit_line(self) -> str:
        """The line that publishes ``committed``, just raised (format version 3)."""
        return f'{{"committed": {int(self.committed)}}}\n'  # (not json.dumps: one a partition)

    def add_appended(self, text: str) -> bool:
        """Add what an appended-segments file's ``text`` publishes, a line each: segments, each
        going on from ``end``, and commits (``commit_line``). A line cut short (no newline: a
        write that failed or a crash), or one that does not go on from ``end``, ends them: the
        writer appends nothing after it. False if a whole line ended them so (nothing after it
        counts, in this text or appended later)."""
        added: list[list] = []  # (added to the segments at once, column by column)
        try:
            return self._add_lines(text, added)
        finally:
            self.segments.extend(added)

    def _add_lines(self, text: str, added: list[list]) -> bool:
        """``add_appended``, the segments put in ``added``."""
        for published in _parsed_lines(text.split("\n")[:-1]):
            if published is UNPARSED:
                return False
            try:
                if isinstance(published, dict):
                    committed = int(published["committed"])
                    if not self.committed <= committed <= self.end:
                        return False
                    self.committed = committed
                    continue
                first, count, nbytes, epoch, at, dropped, *where = published
            except (ValueError, TypeError, KeyError):
                return False
            if first != self.end or len(where) > 2 or not _numbers(published):
                return False
            added.append([first, count, nbytes, epoch, at, *where])
            self.end, self.dropped = first + count, dropped
        return True

    def history_lines(self, begin: int, stop: int) -> str:
        """History file lines of segments ``begin`` to ``stop`` (committed ones)."""
        return "".join(json.dumps(s.fields()) + "\n" for s in self.segments[begin:stop])

    @property
    def nbytes(self) -> int:
        return self.segments.nbytes

    def committed_count(self) -> int:
        """How many segments, from the first, are committed (end at or before ``committed``)."""
        return self.segments.count_ending_by(self.committed)

    def count_before(self, offset: int) -> int:
        """How many segments, from the first, end at or before ``offset``."""
        return self.segments.count_ending_by(offset)

    def state(self) -> PartitionState:
        return PartitionState(self.start, self.end, self.retired, self.committed)

    def listing(self, start: int, end: int, limit: int = MAX_LISTED) -> Listing | None:
        """The ``Listing`` of [start, end); None if the index does not list all of the range
        that is retained (a range past its end, or into committed segments it was loaded
        without), or it takes more than ``limit`` segments."""
        if end > self.end:
            return None
        begin = self.count_before(start)
        stop = self.segments.count_starting_before(end)
        if stop - begin > limit:
            return None
        listed = self.segments[begin:stop]
        retained_from = max(start, self.start)
        if retained_from < end and (not listed or listed[0].first > retained_from):
            return None
        return Listing(self.start, tuple(tuple(s.fields()) for s in listed))


#: what ``_parsed_lines`` gives for a line that does not parse, its last
UNPARSED = object()


def _parsed_lines(lines: list[str]) -> Iterator[Any]:
    """Each of ``lines`` parsed as JSON, up to the first that does not parse (UNPARSED for
    it). All at once, as one JSON array, when every line is one value (a read task loads
    hundreds of indexes, each of up to ``files.LINES_BEFORE_SAVE`` lines: a parse per line
    costs several times more); one by one otherwise."""
    if not lines:
        return
    try:
        values = json.loads(f"[{','.join(lines)}]")
    except ValueError:
        values = None
    if isinstance(values, list) and len(values) == len(lines):
        yield from values
        return
    for line in lines:
        try:
            yield json.loads(line)
        except ValueError:
            yield UNPARSED
            return


def versioned(doc: dict, version: int = FORMAT_VERSION) -> dict:
    """``doc`` with its format version, as every JSON file of a spool carries it."""
    return {VERSION_KEY: version, **doc}


def checked_version(doc: object, where: str, newest: int = FORMAT_VERSION) -> dict:
    """``doc`` read from ``where``, without its version; SpoolError if it is not a JSON object
    (a file damaged or written by something else), or if another release wrote it in a layout
    this one does not read (this one reads versions 1 to ``newest``)."""
    if not isinstance(doc, dict):
        raise SpoolError(
            f"{where} holds a JSON {type(doc).__name__} where spark_zmq writes an object: it "
            f"was damaged or written by something else. Restore it, or give the query a new "
            f"spoolPath (and checkpoint)"
        )
    version = doc.pop(VERSION_KEY, FORMAT_VERSION)
    if version not in range(1, newest + 1):
        reads = "version 1" if newest == 1 else f"versions 1 to {newest}"
        raise SpoolError(
            f"{where} has spool format version {version!r}; this release of "
            f"spark_zmq reads {reads}. Run the release that wrote "
            f"it, or give the query a new spoolPath (and checkpoint)"
        )
    return doc


def _numbers(values: list) -> bool:
    """Whether a parsed line's ``values`` are all numbers, as a segment's line holds (a damaged
    line's are not: it ends the lines, as one cut short does)."""
    return all(type(value) in (int, float) for value in values)


def _with_age(fields: list, at: float) -> list:
    """A segment's fields (first, count, nbytes and perhaps epoch) as an index of format
    version 1 or 2 lists them, with its age from the index's ``written_at``."""
    return [*fields[:4], *[0] * (4 - len(fields[:4])), float(at)]


def _committed_before(text: str, start: int, listed: int) -> tuple[int, list[list]]:
    """The history's segments that cover [start, listed) without a hole, each as
    ``Segment.fields``, and where they start (``start`` unless lines are missing: what they
    named counts as deleted). Lines that do not parse (a line cut short by a crash) and
    segments outside the range are passed over."""
    by_end: dict[int, Segment] = {}
    for line in text.splitlines():
        try:
            segment = Segment(*json.loads(line))
        except (ValueError, TypeError):
            continue
        if segment.first >= start and segment.end <= listed:
            by_end[segment.end] = segment
    chain: list[Segment] = []
    at = listed
    while at > start and at in by_end:
        chain.append(by_end[at])
        at = chain[-1].first
    chain.reverse()
    return at, [segment.fields() for segment in chain]
