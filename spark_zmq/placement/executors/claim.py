"""What the driver hands to capture on executors: the files it shares in the spool, each
holder's settings (``stream_settings.CaptureSettings``), and the claim tasks that start
holders.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from spark_zmq.stream_settings import CaptureSettings

ASSIGNMENT = "assignment"
COMMITS = "commits"


@dataclass(frozen=True)
class Claim(InputPartition):
    """A task's instruction: make sure ``key`` has a live holder, starting one here if its
    highest epoch is still ``expect_epoch`` (0: never claimed)."""

    spool_path: str
    spool_id: str  # the driver's assignment names it: proves the executor sees the spool
    key: str
    expect_epoch: int
    declines_left: int  # how many times the task may leave it to a less loaded executor
    settings: CaptureSettings
