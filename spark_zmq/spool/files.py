"""The files a ``Spool`` writes in the epoch folders of the partitions it holds: segments
(links to flush files, ``segments``), index.json, the appended-segments file, the history
file and lease.json, each whole or not at all (a line of the appended-segments file counts
once its newline is written).

A write that fails because the epoch folder was sealed (a newer holder claimed the partition)
is LeaseLost, and the partition is no longer held (``on_lost``); any other failure is a
SpoolWriteError naming the file, the partition and the cause.
"""

from __future__ import annotations

import errno
import os
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence

from spark_zmq.errors import SpoolError
from spark_zmq.spool.epochs import remove_unused_epochs
from spark_zmq.spool.index import PartitionIndex, Segment
from spark_zmq.spool.layout import (
    HISTORY_NAME,
    INDEX_NAME,
    LeaseLost,
    SpoolWriteError,
    appended_name,
    epoch_name,
    epochs,
    os_cause,
    partition_dir,
    remove_quietly,
    segment_paths,
    write_atomically,
)
from spark_zmq.spool.segments import Part, write_flush_file

#: what ``os.link`` fails with where the storage has no hard links (or no more for the file):
#: each partition's part is then written to a file of its own
NO_LINKS = frozenset({errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV, errno.EMLINK})
#: lines an appended-segments file takes before a commit writes index.json whole instead. An
#: index written anew costs a file created and renamed (0.1 to 0.5 ms on the test machine's
#: ext4, more than its partition's 512 line appends together); a reader that loads an index
#: whole parses up to this many lines (0.31 ms at 512, 0.10 at 128), but the planners read
#: only the lines added since, and read tasks take the segments from the plan
LINES_BEFORE_SAVE = 512
#: dead lines (segments deleted since) a history file may hold beyond its live ones before it is
#: written anew
HISTORY_SLACK = 1024
#: appended-segments files an exclusive writer on local storage keeps open at most (``KeptOpen``)
KEPT_OPEN = 2048
#: file systems whose writes another process sees as soon as ``write`` returns, kept open or not.
#: On a network file system (NFS) another host sees them once the file is closed (close-to-open
#: consistency), so there every line is written by an open, a write and a close
LOCAL_FILE_SYSTEMS = frozenset(
    {"ext2", "ext3", "ext4", "xfs", "btrfs", "tmpfs", "f2fs", "zfs", "bcachefs", "overlay"}
)


class KeptOpen:
    """The appended-segments files of the partitions an exclusive writer appends to, each kept
    open (O_APPEND) between its lines: an open and a close per partition and flush were about
    a seventh of the capture thread's time with 1,000 endpoints, most of it the kernel walking
    the file's path (``perf``, many_publishers.py).

    Only for a writer that no one fences (``exclusive``: the folder's LOCK keeps any other
    off): a holder's open fails once a claimer sealed its epoch folder, and that failure is
    its fencing. At most KEPT_OPEN files, the least recently written closed first."""

    def __init__(self) -> None:
        #: partition -> (the path of its open file, the descriptor), least recent first
        self._open: OrderedDict[str, tuple[str, int]] = OrderedDict()

    def descriptor(self, key: str, path: str) -> int:
        """An open descriptor of ``path``, ``key``'s appended-segments file (the one kept
        open if it is that file; the one kept before closed if it is another)."""
        kept = self._open.get(key)
        if kept is not None and kept[0] == path:
            self._open.move_to_end(key)
            return kept[1]
        self.close(key)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND)
        self._open[key] = (path, fd)
        while len(self._open) > KEPT_OPEN:
            self.close(next(iter(self._open)))
        return fd

    def close(self, key: str) -> None:
        kept = self._open.pop(key, None)
        if kept is not None:
            os.close(kept[1])

    def close_all(self) -> None:
        for key in list(self._open):
            self.close(key)


def local_storage(path: str) -> bool:
    """Whether ``path`` is on a file system of LOCAL_FILE_SYSTEMS (``/proc/self/mountinfo``);
    False where that cannot be told."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as f:
            mounts = f.read()
    except OSError:
        return False
    return file_system_type(os.path.realpath(path), mounts) in LOCAL_FILE_SYSTEMS


def file_system_type(path: str, mountinfo: str) -> str:
    """The type of the file system that holds the absolute, resolved ``path``, by the mounts
    of ``mountinfo`` (``/proc/self/mountinfo``'s text: the innermost mount whose point holds
    it); "" if none does."""
    best, kind = "", ""
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = _unescape_mount_point(parts[4])
        inside = path == point or path.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, rest.split()[0]
    return kind


def _unescape_mount_point(text: str) -> str:
    """A mount point as mountinfo writes it: space, tab, newline and backslash as octal."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        text = text.replace(code, char)
    return text


class EpochFiles:
    """Writes in the epoch folder of each partition held (``epochs``: key -> epoch, the Spool's).

    Invariants: the history file holds every committed segment that index.json does not list
    (it is written first), so that an index names nothing the history lacks; the
    appended-segments file an index names exists before that index is written, holds only whole
    lines that go on from it, and is deleted only once a newer index names another.
    """

    def __init__(
        self,
        root: str,
        held: Mapping[str, int],
        on_lost: Callable[[str], object],
        keep_open: bool = False,
    ) -> None:
        """``keep_open``: keep the appended-segments files open between lines (``KeptOpen``:
        an exclusive writer on local storage)."""
        self.root = root
        self.held = held
        self.on_lost = on_lost
        self._kept = KeptOpen() if keep_open else None
        #: per held partition, what its epoch's history file holds: (the end of the last
        #: segment in it, its lines); none yet: written whole at the next save
        self.history: dict[str, tuple[int, int]] = {}
        #: per held partition, the number of the appended-segments file its index.json names
        #: (``layout.appended_name``); none: the next append writes index.json whole
        self.appended: dict[str, int] = {}
        self._numbers = 0  # the last file number given, in any partition
        #: per held partition, the lines in the appended-segments file its index.json names
        self.lines: dict[str, int] = {}
        #: per held partition, its epoch folder (the epoch it was made for, the path)
        self._folders: dict[str, tuple[int, str]] = {}
        #: per held partition, the line of a commit not written yet (``commit``)
        self.commits: dict[str, str] = {}

    def path(self, key: str, name: str) -> str:
        epoch = self.held[key]
        folder = self._folders.get(key)
        if folder is None or folder[0] != epoch:  # a key's folder name costs a quote
            folder = self._folders[key] = (
                epoch,
                os.path.join(partition_dir(self.root, key), epoch_name(epoch)),
            )
        return f"{folder[1]}{os.sep}{name}"  # (os.path.join costs more, twice a flush each)

    def segment(
        self, key: str, segment: Segment, flush_file: str, part: Callable[[], Part]
    ) -> None:
        """Name the flush file ``flush_file`` as ``segment``'s file (its part ``segment.part``)
        in ``key``'s epoch folder: a hard link, or, on storage that has none, a file of the
        part alone (``part()``: it becomes part 0, and sets the segment's size). Nothing for a
        segment that names its flush file by number (``flushes``)."""
        if segment.flush:
            return
        path = self.path(key, segment.file_name)
        try:
            try:
                _link(flush_file, path)
            except OSError as exc:
                if exc.errno not in NO_LINKS:
                    raise
                segment.part = 0
                alone = part()
                rows = [(alone.source, alone.table.num_rows)]
                segment.nbytes = write_flush_file(path, alone.table, rows)[0]
        except OSError as exc:
            raise self.failed(key, path, exc) from None

    def forget(self, key: str) -> None:
        """``key``'s epoch folder changed (a claim) or is no longer held: what was known of its
        history and appended-segments files no longer applies."""
        self.history.pop(key, None)
        self.appended.pop(key, None)
        self._folders.pop(key, None)
        self.lines.pop(key, None)
        self.commits.pop(key, None)
        self._close_kept(key)

    def _close_kept(self, key: str) -> None:
        """Close ``key``'s appended-segments file if it is kept open."""
        if self._kept is not None:
            self._kept.close(key)

    def close(self) -> None:
        """Close the files kept open."""
        if self._kept is not None:
            self._kept.close_all()

    def save(self, index: PartitionIndex) -> None:
        """Publish ``index``: its committed segments in the history file first, then
        index.json, which lists the others (so the history holds whatever an index names) and
        names a new, empty appended-segments file for the segments that ``append`` adds."""
        key = index.key
        self._save_history(index)
        self.commits.pop(key, None)  # index.json says what was committed
        old = self.appended.pop(key, None)
        self._numbers += 1
        index.appended = appended_name(self._numbers)
        fresh = self.path(key, index.appended)  # (a failed write may forget the partition)
        self.write(key, index.appended, b"")
        try:
            self.write(key, INDEX_NAME, index.to_json().encode("utf-8"))
        except SpoolError:
            remove_quietly(fresh)
            raise
        self.appended[key] = self._numbers
        self.lines[key] = 0
        if old is not None:
            self._close_kept(key)
            remove_quietly(self.path(key, appended_name(old)))

    def append(self, index: PartitionIndex, segment: Segment) -> None:
        """Publish ``segment``, just added to ``index`` at its end: a line in the
        appended-segments file its index.json names (index.json whole if there is none)."""
        if not self._append_line(index.key, index.appended_line(segment)):
            self.save(index)

    def commit(self, index: PartitionIndex, now: bool = True) -> None:
        """Publish ``index.committed``, just raised: a line in the appended-segments file, as
        long as it holds fewer than LINES_BEFORE_SAVE lines (a commit costs one small write per
        partition, not a new index and history); index.json whole otherwise, which starts a new,
        empty file (so that a read, which reads the file whole, stays cheap).

        Not ``now``: the line waits for the partition's next line, a segment's, and goes in the
        same write (commits come for every partition each micro-batch, and a write costs what
        the segment's does), or for ``write_commits``; a later commit replaces it."""
        key = index.key
        if self.lines.get(key, LINES_BEFORE_SAVE) >= LINES_BEFORE_SAVE or key not in self.appended:
            self.save(index)
        elif now:
            self.commits.pop(key, None)
            self._append_line(key, index.commit_line())
        else:
            self.commits[key] = index.commit_line()

    def write_commits(self, keys: Iterable[str] | None = None) -> dict[str, SpoolError]:
        """Write the commit lines still waiting (``commit``; of ``keys`` only, if given), a
        write each; the partitions whose write failed, with why: LeaseLost (no longer held),
        SpoolWriteError (its next write is index.json whole, which holds the commit)."""
        failures: dict[str, SpoolError] = {}
        for key in [k for k in (self.commits if keys is None else keys) if k in self.commits]:
            try:
                self._append_line(key, "")
            except SpoolError as exc:
                failures[key] = exc
        return failures

    def _append_line(self, key: str, text: str) -> bool:
        """Append ``text`` to the appended-segments file of partition ``key``, after its commit
        line still waiting, if any; False if its index.json names none yet. One ``write`` of the
        lines, newline last: a line cut short is never read, and after a failed write the next
        one writes index.json whole."""
        number = self.appended.get(key)
        if number is None:
            return False
        path = self.path(key, appended_name(number))
        text = self.commits.pop(key, "") + text
        line = text.encode("utf-8")
        try:
            if self._kept is None:
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                try:
                    _write_whole(fd, line)
                finally:
                    os.close(fd)
            else:
                _write_whole(self._kept.descriptor(key, path), line)
        except OSError as exc:
            self.appended.pop(key, None)
            self._close_kept(key)
            raise self.failed(key, path, exc) from None
        self.lines[key] = self.lines.get(key, 0) + text.count("\n")
        return True

    def _save_history(self, index: PartitionIndex) -> None:
        """Add the newly committed segments to the epoch's history file: appended, so a commit
        costs what it committed, not what retention keeps; written whole in a new epoch, and
        once it holds more than HISTORY_SLACK (and as many as its live lines) of segments that
        retention deleted."""
        key = index.key
        committed = index.committed_count()
        written = self.history.get(key)
        if written is None and not committed:
            return
        if written is None or written[1] - committed > max(HISTORY_SLACK, committed):
            data, lines, mode = index.history_lines(0, committed), committed, "wb"
        else:
            begin = index.count_before(written[0])
            data, lines, mode = index.history_lines(begin, committed), written[1], "ab"
            lines += committed - begin
            if not data:
                return
        path = self.path(key, HISTORY_NAME)
        self.history.pop(key, None)  # written whole next time if this write fails
        try:
            if mode == "wb":
                write_atomically(path, data.encode())
            else:
                with open(path, "ab") as f:
                    f.write(data.encode())
        except OSError as exc:
            raise self.failed(key, path, exc) from None
        self.history[key] = (index.segments[committed - 1].end if committed else 0, lines)

    def write(self, key: str, name: str, data: bytes) -> None:
        path = self.path(key, name)
        try:
            write_atomically(path, data)
        except OSError as exc:
            raise self.failed(key, path, exc) from None

    def failed(self, key: str, path: str, exc: OSError) -> SpoolError:
        """The error for a write that failed (see ``_write_error``); a partition taken over
        is no longer held."""
        error = _write_error(self.root, key, path, exc, self.held.get(key, 0))
        if isinstance(error, LeaseLost):
            self.on_lost(key)
        return error

    def delete(self, key: str, gone: list[Segment], kept: Sequence[Segment]) -> None:
        """Delete the files of segments ``gone`` (each in whichever epoch folder it is; gone
        already: nothing to do), then the epoch folders that neither ``kept`` nor the epoch
        held use. A numbered flush file that a segment names is not the segment's alone: the
        exclusive writer deletes it with the last (``flushes``)."""
        for segment in gone:
            if segment.flush:
                continue
            for path in segment_paths(self.root, key, segment):
                try:
                    os.remove(path)
                    break
                except FileNotFoundError:
                    continue
        epoch = self.held[key]
        used = {s.epoch for s in kept} | {epoch}
        remove_unused_epochs(partition_dir(self.root, key), used, epoch)


def _write_whole(fd: int, data: bytes) -> None:
    """One ``write`` of ``data``; a short one is a full storage (the next write starts over)."""
    if os.write(fd, data) != len(data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _link(target: str, path: str) -> None:
    """``path`` names the file ``target``; a file left there by an append that was not
    published (a failed write, a crash) is replaced: nothing reads it."""
    try:
        os.link(target, path)
    except FileExistsError:
        os.remove(path)
        os.link(target, path)


def _write_error(root: str, key: str, path: str, exc: OSError, mine: int) -> SpoolError:
    """LeaseLost if the epoch folder was sealed (someone claimed the partition after epoch
    ``mine``), else a SpoolWriteError naming the file, the partition and the cause."""
    newer = any(e > mine for e, _ in epochs(partition_dir(root, key)))
    if isinstance(exc, FileNotFoundError) and newer:
        return LeaseLost(
            f"partition {key!r}: epoch {mine} was taken over by a newer "
            f"holder; this process may no longer write to it",
            key,
        )
    return SpoolWriteError(f"cannot write {path} (spool {root}, partition {key}): {os_cause(exc)}")
