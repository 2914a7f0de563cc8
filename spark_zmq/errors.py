"""The package's errors: one base, ``SparkZmqError``, and a class per kind of fault.

Each class also derives from the built-in exception that code outside the package would expect
(``ValueError`` for bad input, ``RuntimeError`` for a failure, ``TimeoutError`` for a wait that
ran out), so ``except ValueError`` around an option keeps working. Messages name the thing at
fault and say what to do; the classes let a caller tell the kinds apart without reading them.
"""

from __future__ import annotations

#: characters of a peer's text (a name, an identifier) that an error message shows
SHOWN_CHARS = 200


def shown(text: str) -> str:
    """A peer's text as an error message or a log line shows it: quoted (control characters
    escaped: a peer cannot forge log lines), and cut after SHOWN_CHARS characters with its
    length (a peer makes a name as long as a message may be), so that the message's own words
    after it are not lost to a bound on its length."""
    if len(text) <= SHOWN_CHARS:
        return repr(text)
    return f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"


def brief(text: str) -> str:
    """``text`` (an exception's, say) cut after SHOWN_CHARS characters, for a log line or an
    error message, with its length."""
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text)} characters)"


class SparkZmqError(Exception):
    """Every error spark_zmq raises on purpose."""


class OptionError(SparkZmqError, ValueError):
    """An option that is missing, unknown or has a value its definition refuses."""


class ProtocolError(SparkZmqError, ValueError):
    """Bytes or names that a protocol's rules refuse: a malformed frame, header or address."""


class PayloadError(ProtocolError):
    """A payload that its scheme cannot decode (EBUS's zlib(BSON), Goby's PROTOBUF or BSON)."""


class PeerError(SparkZmqError, RuntimeError):
    """A peer (a broker, gobyd, a management port, a Zyre node) refused, failed or is gone."""


class PeerTimeout(PeerError, TimeoutError):
    """A peer did not answer, or did not take what we sent, in time."""


class SpoolError(SparkZmqError, RuntimeError):
    """The spool folder is unusable (locked by another query, missing a range, corrupt)."""


class CaptureError(SparkZmqError, RuntimeError):
    """Capture failed: its process on an executor, or its loop on the driver."""


class CaptureTimeout(CaptureError, TimeoutError):
    """Capture did not do in time what the reader waits for (write what it received)."""


class RowError(SparkZmqError, RuntimeError):
    """A row that ``mode=FAILFAST`` does not let pass: malformed when read, unsendable when
    written, or a request whose outcome fails the batch."""


class MissingDependency(SparkZmqError, ImportError):
    """A library that an extra brings (a format's, or pyspark) is missing or unsupported."""
