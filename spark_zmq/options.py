"""Every option is defined once here: name, parser (type and validation), default and doc.

Validation errors, the README's option tables and ``python -m spark_zmq options`` all come from
these definitions, so an option cannot be documented one way and parsed another.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from spark_zmq import security
from spark_zmq.errors import OptionError

Parser = Callable[[str], Any]


@dataclass(frozen=True)
class Option:
    """One user-facing option.

    ``parse`` turns the string Spark hands us into a typed value and raises ``ValueError`` when
    it cannot; ``accepts`` is the human description of valid values used in error messages.
    ``default`` is written as a user would write the option (it goes through ``parse`` too);
    ``None`` means "not set" (the code using the option decides what that means, as documented
    in ``doc``).
    """

    name: str
    parse: Parser
    accepts: str
    default: str | None
    doc: str


# ---------------------------------------------------------------------------------------------
# Parsers. Each raises ValueError; parse_options turns that into an OptionError naming the option.


def text(value: str) -> str:
    return value


def positive_int(value: str) -> int:
    number = int(value.strip())
    if number <= 0:
        raise ValueError("not positive")
    return number


def non_negative_int(value: str) -> int:
    number = int(value.strip())
    if number < 0:
        raise ValueError("negative")
    return number


def port(value: str) -> int:
    number = positive_int(value)
    if number > 65535:
        raise ValueError("not a port")
    return number


def positive_float(value: str) -> float:
    number = float(value.strip())
    if not number > 0:
        raise ValueError("not positive")
    return number


def non_negative_float(value: str) -> float:
    number = float(value.strip())
    if not number >= 0:
        raise ValueError("negative")
    return number


def boolean(value: str) -> bool:
    lowered = value.strip().lower()
    if lowered in ("true", "1", "yes"):
        return True
    if lowered in ("false", "0", "no"):
        return False
    raise ValueError(value)


_SIZE_UNITS = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kb": 1 << 10,
    "m": 1 << 20,
    "mb": 1 << 20,
    "g": 1 << 30,
    "gb": 1 << 30,
    "t": 1 << 40,
    "tb": 1 << 40,
}


def byte_size(value: str) -> int:
    """``1048576``, ``512k``, ``64m``, ``4g`` (binary units, like Spark's size options)."""
    match = re.fullmatch(r"\s*(\d+)\s*([a-zA-Z]*)\s*", value)
    if not match or match.group(2).lower() not in _SIZE_UNITS:
        raise ValueError(value)
    size = int(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
    if size <= 0:
        raise ValueError(value)
    return size


def comma_list(value: str) -> tuple[str, ...]:
    """Comma-separated items, blanks around items ignored; empty items are an error."""
    items = tuple(item.strip() for item in value.split(","))
    if any(not item for item in items):
        raise ValueError("empty item")
    return items


def choice(*values: str) -> Parser:
    """Case-insensitive choice; returns the canonical spelling."""
    canonical = {v.lower(): v for v in values}

    def parse(value: str) -> str:
        return canonical[value.strip().lower()]

    return parse


# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Options(Mapping[str, Any]):
    """Parsed options of one query: canonical name -> typed value (defaults filled in)."""

    format_name: str
    by_name: Mapping[str, Any]
    given: frozenset[str]

    def __getitem__(self, name: str) -> Any:
        return self.by_name[name]

    def __iter__(self):
        return iter(self.by_name)

    def __len__(self) -> int:
        return len(self.by_name)

    def is_set(self, name: str) -> bool:
        """True when the user gave the option (even if equal to the default)."""
        return name in self.given


#: options that Spark itself handles and passes on to a stream writer as well
SPARK_OWN_OPTIONS = frozenset({"checkpointlocation", "path", "queryname"})


def parse_options(format_name: str, specs: Sequence[Option], raw: Mapping[str, str]) -> Options:
    """Validate ``raw`` (Spark's case-insensitive option map) against ``specs``.

    Raises OptionError for an unknown name (with a suggestion) or a value the option's parser
    rejects (naming the accepted values). Spark's own options are passed over.
    """
    by_lower = {spec.name.lower(): spec for spec in specs}
    values = {
        spec.name: None if spec.default is None else spec.parse(spec.default) for spec in specs
    }
    given: set[str] = set()
    for key, value in raw.items():
        spec = by_lower.get(key.lower())
        if spec is None and key.lower() in SPARK_OWN_OPTIONS:
            continue
        if spec is None:
            raise OptionError(_unknown_option_message(format_name, key, specs))
        try:
            values[spec.name] = spec.parse(str(value))
        except (ValueError, KeyError, TypeError) as exc:
            # a protocol's own error class (AddressError, ...) says what is wrong; a bare
            # ValueError from int() or float() would only repeat the value
            detail = "" if type(exc) in (ValueError, KeyError, TypeError) else f" ({exc})"
            raise OptionError(
                f"{format_name}: option '{spec.name}' must be {spec.accepts}; got {value!r}{detail}"
            ) from exc
        given.add(spec.name)
    return Options(format_name, values, frozenset(given))


def _unknown_option_message(format_name: str, key: str, specs: Iterable[Option]) -> str:
    names = sorted(spec.name for spec in specs)
    close = difflib.get_close_matches(key.lower(), [n.lower() for n in names], n=1)
    hint = ""
    if close:
        hint = f" Did you mean '{next(n for n in names if n.lower() == close[0])}'?"
    return f"{format_name}: unknown option '{key}'.{hint} Accepted options: {', '.join(names)}"


def option_table(specs: Sequence[Option]) -> str:
    """Markdown table of options, for docs and ``python -m spark_zmq options``."""
    lines = ["| option | accepts | default | meaning |", "|---|---|---|---|"]
    for spec in specs:
        default = "(not set)" if spec.default is None else f"`{spec.default}`"
        lines.append(f"| `{spec.name}` | {spec.accepts} | {default} | {spec.doc} |")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# CURVE security, for readers and writers of every format (spark_zmq.security applies them).

KEY = "a 40-character Z85 key or a zmq.auth key file"

CURVE_OPTIONS: tuple[Option, ...] = (
    Option(
        "curveServerKey",
        security.public_key,
        KEY,
        None,
        "CURVE: the public key of the server this side connects to (publisher, broker, "
        "gobyd); the connection is then encrypted and the server authenticated.",
    ),
    Option(
        "curvePublicKey",
        security.public_key,
        KEY,
        None,
        "CURVE: this side's public key (derived from `curveSecretKey` when not given).",
    ),
    Option(
        "curveSecretKey",
        security.secret_key,
        KEY,
        None,
        "CURVE: this side's secret key. A side that binds (a writer's socket, a reader's "
        "management port) becomes a CURVE server; a client without one uses a fresh key "
        "pair.",
    ),
    Option(
        "curveClientKeys",
        security.public_keys,
        "comma-separated keys or key files, or a folder of .key files",
        None,
        "CURVE: the client public keys a CURVE server of this side accepts. Default: any "
        "client that completes the handshake (the management port then refuses all).",
    ),
)


# ---------------------------------------------------------------------------------------------
# Options of the generic stream reader, shared by every format.

MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

READER_OPTIONS: tuple[Option, ...] = (
    Option(
        "mode",
        choice(*MODES),
        "one of " + ", ".join(MODES),
        "PERMISSIVE",
        "What to do with a malformed message: keep it as a row with `error` set and the raw "
        "bytes in `payload`, drop it (counted and logged), or fail the query.",
    ),
    Option(
        "maxRecordsPerTrigger",
        positive_int,
        "a positive integer",
        None,
        "Admission control: at most this many messages per micro-batch over all partitions.",
    ),
    Option(
        "startingOffsets",
        choice("earliest", "latest"),
        "earliest or latest",
        "latest",
        "Where a new query (no checkpoint) starts in a spool that already holds messages: "
        "after them (what is captured from now on), or at the first one still held (what an "
        "earlier query with the same spool left uncommitted). A restart from a checkpoint "
        "goes on where it stopped either way.",
    ),
    Option(
        "spoolPath",
        text,
        "a folder path",
        None,
        "Where captured messages are kept until Spark commits them. Default: a folder under "
        "the local temporary directory derived from the format and options, so a restart with "
        "the same options finds it; its path is logged.",
    ),
    Option(
        "maxBytesPerBatch",
        byte_size,
        "a size such as 64m or 1048576",
        "64m",
        "Largest Arrow batch a read task hands to Spark (as well as at most 65536 rows): "
        "it bounds the read-side Python worker's memory and keeps each batch well inside the "
        "JVM's direct memory (which is the heap size unless set), however large the "
        "messages. A single larger message goes alone in its batch.",
    ),
    Option(
        "maxSpoolBytes",
        byte_size,
        "a size such as 4g, 512m or 1048576",
        "4g",
        "Bound of the spool on disk. At the bound new messages are dropped, counted, logged "
        "and reported as a row with `error` set (a gap): those of the partitions that hold "
        "more than their share of the bound (the bound divided among the partitions), so "
        "that one flooding peer does not cost its neighbours their messages.",
    ),
    Option(
        "maxMessageBytes",
        byte_size,
        "a size such as 64m or 1048576",
        "64m",
        "Largest message accepted, enforced by the zmq socket (ZMQ_MAXMSGSIZE): zmq drops the "
        "connection on a larger one; capture reconnects and reports the drop as a row with "
        "`error` set (a gap), handled per `mode`.",
    ),
    Option(
        "receiveHighWaterMark",
        non_negative_int,
        "a non-negative integer (messages)",
        "10000",
        "Messages zmq queues per endpoint before capture takes them (ZMQ_RCVHWM): enough for "
        "capture's pauses (a spool write). A peer that sends faster than capture takes is "
        "pushed back beyond it (TCP flow control) and drops or waits at its own send queue; "
        "the episode is logged once. Memory per endpoint is about this many times the "
        "message size, plus capture's 32 MiB buffer: lower it for large messages. 0: no "
        "bound (a backlog grows in memory).",
    ),
    Option(
        "flushIntervalMs",
        positive_int,
        "a positive integer (milliseconds)",
        "100",
        "How often capture writes what it received to the spool (it also writes at every "
        "micro-batch, every 65536 messages and every 32 MiB).",
    ),
    Option(
        "onSpoolWriteError",
        choice("fail", "drop"),
        "fail or drop",
        "fail",
        "When the spool's storage refuses a write (full disk, read-only, I/O error): fail "
        "the query naming the spool and the cause, or drop new messages while it lasts, "
        "counted, logged and reported as a row with `error` set (a gap). Either way the "
        "spool keeps everything written before.",
    ),
    Option(
        "capture",
        choice("driver", "executors"),
        "driver or executors",
        "driver",
        "Where the zmq sockets live: in the driver-side reader process (one machine), or in "
        "one capture process per partition on the executors, started by tasks and handed "
        "over when an executor is lost. With `executors`, `spoolPath` must name storage "
        "that every node reaches.",
    ),
    Option(
        "leaseTimeout",
        positive_float,
        "a positive number of seconds",
        "10",
        "`capture=executors`: a partition whose capture process has not renewed its lease "
        "for this long is taken over by a new one (an executor lost).",
    ),
    Option(
        "captureIdleTimeout",
        positive_float,
        "a positive number of seconds",
        "60",
        "`capture=executors`: a capture process ends when the query has not renewed its "
        "assignment for this long (the query stopped or lost its driver).",
    ),
    *CURVE_OPTIONS,
)


# ---------------------------------------------------------------------------------------------
# Options of the generic stream writer, shared by every format.

WRITER_OPTIONS: tuple[Option, ...] = (
    Option(
        "mode",
        choice(*MODES),
        "one of " + ", ".join(MODES),
        "PERMISSIVE",
        "What to do with a row that cannot be sent (no event, a wrong id, a message over "
        "`maxMessageBytes`, ...): skip it with a warning naming the first such row of the "
        "task, skip it counting only, or fail the batch naming the row. For requests "
        "(`ebus` with `service`): a refused request fails the batch under FAILFAST only; an "
        "unanswered (expired) one fails it unless DROPMALFORMED, which counts it and records "
        "it in `replyPath`.",
    ),
    Option(
        "maxMessageBytes",
        byte_size,
        "a size such as 64m or 1048576",
        "64m",
        "Largest message sent; a larger row is handled per `mode`.",
    ),
    Option(
        "waitForSubscribers",
        non_negative_float,
        "a number of seconds",
        "0",
        "Time given to subscribers to connect to a new publisher: before it sends an "
        "event, a publisher waits until `minSubscribers` subscriptions match it (seen "
        "through XPUB), but only until this many seconds after its first send; then it "
        "sends anyway, with a warning. The bound is per publisher (one per executor Python "
        "worker), so however many events, tasks and batches it sends, it waits no longer "
        "than this in all.",
    ),
    Option(
        "minSubscribers",
        positive_int,
        "a positive integer",
        "1",
        "How many matching subscriptions `waitForSubscribers` waits for.",
    ),
    Option(
        "sendHighWaterMark",
        positive_int,
        "a positive number of messages",
        "100000",
        "Messages queued per peer (subscriber, or broker); when a queue is full a send waits "
        "(XPUB_NODROP: back-pressure, not loss).",
    ),
    Option(
        "sendTimeout",
        non_negative_float,
        "a number of seconds",
        "60",
        "How long a send may wait on back-pressure before the task fails.",
    ),
    *CURVE_OPTIONS,
)


# ---------------------------------------------------------------------------------------------
# Options of writers whose rows are requests that get answers (EBUS `service`); a format that
# has such a writer adds these to its writer options.

REQUEST_WRITER_OPTIONS: tuple[Option, ...] = (
    Option(
        "maxInFlight",
        positive_int,
        "a positive integer",
        "100",
        "Requests a task keeps waiting for an answer at once; further rows wait for answers.",
    ),
    Option(
        "replyPath",
        text,
        "a folder path",
        None,
        "Where the answers are written: one Parquet file per task, "
        "`<replyPath>/batchId=<n>/part-<partition>.parquet`, with columns `requestId`, "
        "`status` and `data` (JSON text). A retried task replaces its file. Default: not "
        "written.",
    ),
)
