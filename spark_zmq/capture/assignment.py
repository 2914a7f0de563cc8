"""What the driver hands to capture on executors: the files it shares in the spool, each
holder's settings, and the claim tasks that start holders.
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql.datasource import InputPartition

from spark_zmq.capture.priority import DEFAULT_CAPTURE_NICE
from spark_zmq.capture.refusals import DEFAULT_MAX_MESSAGE_PARTS
from spark_zmq.options import Options
from spark_zmq.security import Curve
from spark_zmq.spool.layout import Retention

ASSIGNMENT = "assignment"
COMMITS = "commits"


@dataclass(frozen=True)
class CaptureSettings:
    """What capture needs besides its partitions, from the query's options: capture on the
    driver, and each holder process on an executor (which gets it on its stdin)."""

    format_name: str
    max_spool_bytes: int
    max_message_bytes: int
    flush_interval: float
    lease_timeout: float
    idle_timeout: float
    drop_on_write_error: bool
    receive_hwm: int
    #: CURVE client keys (Z85 text), handed to the holder on its stdin, never on its command line
    curve: tuple[str | None, str | None, str | None] = (None, None, None)
    #: the receive loop (``cores``): "auto", "native", "python", or None for the environment's
    core: str | None = None
    #: frames in one message at most (``maxMessageParts``; ``max_message_bytes`` bounds its bytes)
    max_message_parts: int = DEFAULT_MAX_MESSAGE_PARTS
    #: how long committed segments are kept (``spoolRetention``; None: no bound by age)
    retention_seconds: float | None = None
    #: most bytes of committed segments kept (``spoolRetentionBytes``; None: not bounded)
    retention_bytes: int | None = None
    #: nice value of capture's thread and its zmq I/O thread (``captureNice``; None: as is)
    nice: int | None = DEFAULT_CAPTURE_NICE

    @classmethod
    def of(cls, options: Options) -> CaptureSettings:
        curve = Curve.of(options)
        server, public, secret = (
            k.decode() if k else None
            for k in (curve.server_key, curve.public_key, curve.secret_key)
        )
        keys = (server, public, secret)
        return cls(
            options.format_name,
            options["maxSpoolBytes"],
            options["maxMessageBytes"],
            options["flushIntervalMs"] / 1000.0,
            options["leaseTimeout"],
            options["captureIdleTimeout"],
            options["onSpoolWriteError"] == "drop",
            options["receiveHighWaterMark"],
            keys,
            options["captureCore"],
            options["maxMessageParts"],
            options["spoolRetention"],
            options["spoolRetentionBytes"],
            options["captureNice"],
        )

    @property
    def retention(self) -> Retention:
        return Retention(self.retention_seconds, self.retention_bytes)

    def curve_keys(self) -> Curve:
        server, public, secret = (k.encode() if k else None for k in self.curve)
        return Curve(server, public, secret)


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
