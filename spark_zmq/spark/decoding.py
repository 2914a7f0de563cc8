"""Decoding a run of captured messages so that no message can fail a read task.

A protocol's ``decode`` marks the malformed messages it knows of. A message it does not know
of (a decoder bug, a library that raises on one peer's bytes) would make ``decode`` raise, the
task fail, and every retry and every restart from the checkpoint replay the same offset: the
query could never pass it. So ``decode_isolating`` catches what ``decode`` raises (or a
``Decoded`` of the wrong shape), decodes the two halves of the run again, recursively, down to
the single messages that still fail alone, and makes each of them a malformed row whose error
names the decoder and the exception. For k such messages in a run of n, that costs
O(k log n) calls of ``decode``; a run without one costs one call, as before.

Not caught: OptionError and ImportError (MissingDependency), which say that the options or
the Python environment are wrong, for every message alike (failing the task tells the user
to fix them; blaming the messages would drop them all under DROPMALFORMED); and the
BaseExceptions that are not Exceptions (KeyboardInterrupt, SystemExit, GeneratorExit), which
stop the worker. MemoryError is caught: one message that exhausts memory when decoded alone
(after its run was split down to it, each part a fresh try) would otherwise fail the query
forever, and its row names MemoryError, so a user can tell it from a malformed payload.

Every ``error`` text a row carries is at most MAX_ERROR_CHARS long (``bounded_errors``),
whatever a protocol or the spool put there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_zmq.errors import OptionError, SparkZmqError
from spark_zmq.protocols.arrow import joined_frames
from spark_zmq.protocols.contract import Decoded, StreamProtocol, concatenated
from spark_zmq.spool.index import Source

#: the format's reader settings
S = TypeVar("S")

#: the most characters a row's ``error`` carries; a longer text is cut, saying how much
MAX_ERROR_CHARS = 1000
#: room kept at the end of a cut text for the note that says how much was cut
_CUT_NOTE_ROOM = 60


class DecoderContractError(SparkZmqError, TypeError):
    """``decode`` returned something other than one entry of the right type per message."""


@dataclass
class DecodeFailures:
    """Messages of one read task that made the decoder raise: how many, and the first (its
    offset and error), for the task's one log line."""

    count: int = 0
    first: tuple[int, str] | None = None

    def add(self, offset: int, text: str) -> None:
        self.count += 1
        if self.first is None:
            self.first = (offset, text)


def bounded_text(text: str) -> str:
    """``text`` if it has at most MAX_ERROR_CHARS characters, else its start and a note of how
    many characters were cut (MAX_ERROR_CHARS in all)."""
    if len(text) <= MAX_ERROR_CHARS:
        return text
    kept = MAX_ERROR_CHARS - _CUT_NOTE_ROOM
    return f"{text[:kept]} [... {len(text) - kept} more characters cut]"


def bounded_errors(error: pa.Array) -> pa.Array:
    """The ``error`` column with every text over MAX_ERROR_CHARS cut (``bounded_text``); the
    column itself when none is (the usual case: one vectorized length check)."""
    too_long = pc.fill_null(pc.greater(pc.utf8_length(error), MAX_ERROR_CHARS), False)
    if not pc.any(too_long).as_py():
        return error
    cut = [bounded_text(text) for text in error.filter(too_long).to_pylist()]
    return pc.replace_with_mask(error, too_long, pa.array(cut, pa.string()))


def decode_isolating(
    protocol: StreamProtocol[S],
    frames: pa.ListArray,
    source: Source,
    settings: S,
    gaps: np.ndarray,
) -> tuple[Decoded, dict[int, str]]:
    """``protocol.decode`` of ``frames``, with each message that makes it raise on its own a
    malformed row: (the decoding, the error text of each such message by its index in
    ``frames``). ``gaps`` (a bool per message) marks the gap rows, which have no frames and
    keep the spool's text: they are never counted as failures."""
    failed: dict[int, str] = {}
    decoded = _isolate(protocol, frames, 0, source, settings, gaps, failed)
    return decoded, failed


def decode_runs_isolating(
    protocol: StreamProtocol[S],
    frames: pa.ListArray,
    runs: Sequence[tuple[Source, int]],
    settings: S,
    gaps: np.ndarray,
) -> tuple[Decoded, dict[int, str]]:
    """``decode_isolating`` of messages of several sources (``runs``, as ``decode_runs`` takes
    them): one call of ``decode_runs`` when it returns a decoding of the right shape, else
    each run isolated on its own, so that one source's bad message costs that source's run a
    search, not the others' rows."""
    if len(runs) == 1:
        return decode_isolating(protocol, frames, runs[0][0], settings, gaps)
    try:
        return _checked(protocol, protocol.decode_runs(frames, runs, settings), len(frames)), {}
    except (OptionError, ImportError):
        raise
    except Exception:  # not BaseException: see the module docstring
        pass
    parts, failed, at = [], {}, 0
    for source, count in runs:
        part, part_failed = decode_isolating(
            protocol, frames.slice(at, count), source, settings, gaps[at : at + count]
        )
        parts.append(part)
        failed.update({at + index: text for index, text in part_failed.items()})
        at += count
    return concatenated(protocol.columns.names, parts), failed


def _isolate(
    protocol: StreamProtocol[S],
    frames: pa.ListArray,
    start: int,
    source: Source,
    settings: S,
    gaps: np.ndarray,
    failed: dict[int, str],
) -> Decoded:
    """The decoding of ``frames`` (messages ``start``... of the slice), halving the run while
    ``decode`` raises. The halves are decoded after the exception is let go of: its traceback
    holds what the failed call held (the run's messages as Python objects, perhaps)."""
    try:
        return _checked(protocol, protocol.decode(frames, source, settings), len(frames))
    except (OptionError, ImportError):
        raise
    except Exception as exc:  # not BaseException: see the module docstring
        failure = _described(exc)
    if len(frames) > 1:
        half = len(frames) // 2
        first = _isolate(protocol, frames.slice(0, half), start, source, settings, gaps, failed)
        rest = _isolate(protocol, frames.slice(half), start + half, source, settings, gaps, failed)
        return concatenated(protocol.columns.names, [first, rest])
    text = bounded_text(f"{protocol.name}: decoding failed: {failure}")
    return _failed(protocol, frames, start, gaps, text, failed)


def _described(exc: Exception) -> str:
    """``Type: text`` of an exception, the type alone if its text cannot be had."""
    try:
        return bounded_text(f"{type(exc).__name__}: {exc}")
    except Exception:  # a __str__ that raises
        return type(exc).__name__


def _failed(
    protocol: StreamProtocol[Any],
    frames: pa.ListArray,
    start: int,
    gaps: np.ndarray,
    text: str,
    failed: dict[int, str],
) -> Decoded:
    """A run of at most one message that the decoder could not decode: its frames
    concatenated as ``payload`` (as every format's malformed rows carry a message whose frames
    it cannot tell apart), ``text`` as its error, the protocol's columns null. A gap row's
    error stays null here: the spool's text takes its place."""
    errors: list[str | None] = []
    for index in range(start, start + len(frames)):
        errors.append(None if gaps[index] else text)
        if not gaps[index]:
            failed[index] = text
    n = len(frames)
    return Decoded(
        joined_frames(frames),
        pa.array(errors, pa.string()),
        {column.name: pa.nulls(n, column.type) for column in protocol.columns},
    )


def _checked(protocol: StreamProtocol[Any], decoded: object, n: int) -> Decoded:
    """``decoded`` if it is a Decoded with one entry of the right type per message in each
    array; else DecoderContractError, which is isolated as any exception of ``decode``."""
    if not isinstance(decoded, Decoded):
        raise DecoderContractError(f"decode returned a {type(decoded).__name__}, not a Decoded")
    _expect("payload", decoded.payload, pa.binary(), n)
    _expect("error", decoded.error, pa.string(), n)
    if set(decoded.columns) != set(protocol.columns.names):
        raise DecoderContractError(
            f"decode returned columns {sorted(decoded.columns)}, not "
            f"{sorted(protocol.columns.names)}"
        )
    for column in protocol.columns:
        _expect(f"column {column.name!r}", decoded.columns[column.name], column.type, n)
    if decoded.keep is not None:
        _expect("keep", decoded.keep, pa.bool_(), n)
    return decoded


def _expect(what: str, array: object, kind: pa.DataType, n: int) -> None:
    if not isinstance(array, pa.Array):
        raise DecoderContractError(
            f"decode returned {what} as a {type(array).__name__}, not an Arrow array"
        )
    if array.type != kind or len(array) != n:
        raise DecoderContractError(
            f"decode returned {what} of {len(array)} entries of {array.type} for {n} "
            f"messages (expected {kind})"
        )
