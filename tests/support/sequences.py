"""Numbered ZeroEQ messages and what a Parquet sink made of them: for the tests that run the
capture job on a cluster and check that every message landed exactly once."""

from __future__ import annotations

import itertools
import threading
from pathlib import Path

from support.common import wait_until

ECHO = "zeroeq::test::Echo"


class Sender:
    """Publishes 0, 1, 2, ... on every publisher at ``rate`` messages per second each."""

    def __init__(self, publishers, rate: float) -> None:
        self.publishers = publishers
        self.rate = rate
        self.sent = {p.instance_name: 0 for p in publishers}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(1.0 / self.rate):
            for publisher in self.publishers:
                publisher.publish(ECHO, b"%d" % self.sent[publisher.instance_name])
                self.sent[publisher.instance_name] += 1

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        return self.sent


def sink_rows(spark, path: Path) -> list:
    try:
        return spark.read.parquet(str(path)).select("partition", "payload", "error").collect()
    except Exception:  # nothing committed yet
        return []


def sequences(rows) -> dict[str, list[int]]:
    found: dict[str, list[int]] = {}
    for row in rows:
        if row.error is None:
            found.setdefault(row.partition, []).append(int(row.payload))
    return found


def wait_for_all_sent(spark, sink: Path, sent: dict[str, int], timeout: float = 120) -> list:
    def done():
        rows = sink_rows(spark, sink)
        last = {k: max(v) for k, v in sequences(rows).items()}
        return rows if all(last.get(k) == n - 1 for k, n in sent.items()) else None

    return wait_until(done, timeout=timeout, interval=1.0, what="every sent message in the sink")


def check_exactly_once(rows, sent: dict[str, int], moved: set[str]) -> None:
    """No sequence number twice; a hole only where the partition moved (one, with a gap row)."""
    seqs = sequences(rows)
    gaps = {row.partition for row in rows if row.error and "had no holder between" in row.error}
    for key, n in sent.items():
        got = sorted(seqs[key])
        assert len(got) == len(set(got)), f"duplicates in {key}"
        holes = [(a, b) for a, b in itertools.pairwise(got) if b != a + 1]
        if key in moved:
            assert len(holes) <= 1, f"{key}: holes {holes}"
            assert key in gaps, f"{key} moved without a gap row"
        else:
            assert holes == [], f"{key} lost messages but never moved: {holes}"
        assert got[-1] == n - 1
