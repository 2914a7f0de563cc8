"""What a benchmark counts of a spool's files: the files its writers close after writing, and
the writes to appended-segments files, by kind (inotify, every subfolder watched as it
appears)."""

from __future__ import annotations

import ctypes
import os
import select
import struct
import threading
from collections import Counter

IN_MODIFY, IN_CLOSE_WRITE, IN_MOVED_TO, IN_CREATE, IN_ISDIR = 0x2, 0x8, 0x80, 0x100, 0x40000000
#: the kinds of file counted, by what a written file's name is (its temporary name's stem)
KINDS = (
    "process records",
    "leases",
    "segment files",
    "index writes",
    "driver's documents",
    "other",
)


def kind_of(relative: str) -> str:
    """The kind of a file the spool's writers wrote (a path under the spool)."""
    name = os.path.basename(relative).split(".tmp", 1)[0]
    if relative.startswith("@capture/"):
        return "process records"
    if name == "lease.json":
        return "leases"
    if name.endswith(".arrow"):  # a flush file (one per flush), or a partition's own file
        return "segment files"
    if name in ("index.json", "history.jsonl") or name.startswith("appended."):
        return "index writes"  # an appended-segments line is a write of its own
    if name in ("assignment.json", "commits.json") or relative.startswith("@executors/"):
        return "driver's documents"
    return "other"


def appended_lines(relative: str) -> bool:
    """Whether a path under the spool is an appended-segments file (not its temporary name),
    whose writes count one by one: an exclusive writer keeps it open between its lines."""
    name = os.path.basename(relative)
    return name.startswith("appended.") and ".tmp" not in name


class WrittenFiles:
    """Counts the files closed after writing below a folder, and each write to an
    appended-segments file (inotify, every subfolder watched as it appears), by kind, while
    ``counting``."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.counts: Counter[str] = Counter()
        self.counting = False
        self._libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self._fd = self._libc.inotify_init1(os.O_NONBLOCK)
        self._folders: dict[int, str] = {}
        self._watch_tree(root)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _watch_tree(self, folder: str) -> None:
        mask = IN_MODIFY | IN_CLOSE_WRITE | IN_MOVED_TO | IN_CREATE
        wd = self._libc.inotify_add_watch(self._fd, folder.encode(), mask)
        if wd >= 0:
            self._folders[wd] = folder
        for entry in os.scandir(folder):
            if entry.is_dir(follow_symlinks=False):
                self._watch_tree(entry.path)

    def _run(self) -> None:
        while not self._stop.is_set():
            ready, _, _ = select.select([self._fd], [], [], 0.2)
            if not ready:
                continue
            try:
                data = os.read(self._fd, 1 << 20)
            except BlockingIOError:
                continue
            offset = 0
            while offset < len(data):
                wd, mask, _, length = struct.unpack_from("iIII", data, offset)
                name = data[offset + 16 : offset + 16 + length].rstrip(b"\0").decode()
                offset += 16 + length
                path = os.path.join(self._folders.get(wd, self.root), name)
                if mask & IN_ISDIR and mask & (IN_CREATE | IN_MOVED_TO):
                    try:
                        self._watch_tree(path)
                    except OSError:
                        pass
                elif self.counting and mask & (IN_CLOSE_WRITE | IN_MODIFY):
                    relative = os.path.relpath(path, self.root)
                    if bool(mask & IN_MODIFY) == appended_lines(relative):
                        self.counts[kind_of(relative)] += 1

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        os.close(self._fd)
