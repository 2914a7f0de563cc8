"""Property-based tests (hypothesis) of every decoder and parser of the four protocols, and of
the whole read path.

No Spark, and no socket is opened (where a function talks to a socket, a stand-in object is
handed to it). Four kinds of property:

- **classified**: on arbitrary input a parser returns a value of its contract or raises the
  module's documented error class (IdentifierError, AddressError, HeaderError, PayloadError,
  ValueError, ManagerError, DecodeError); a format's ``decode`` never raises and marks every
  malformed message in ``error``; an ``encode`` never raises and gives each row a message or an
  error text;
- **no hang**: every example must finish within the deadline (and each test within the pytest
  timeout);
- **round trip**: valid input goes through the matching encoder and back unchanged;
- **read path** (``check_read_path``): messages and gap rows written into a real spool as
  capture writes them, then read by ``read_rows`` under every ``mode``, with and without
  ``failOnDataLoss``, keep the delivery contract: every offset delivered (or dropped and
  counted), gap rows unchanged, error texts within their bound, nothing raised but the
  contract's own errors. A decoder bug is a malformed row by construction.

Each test's name ends in the number of examples it runs (``..._300_examples``), which its
settings use (``fuzz`` checks that the two agree). Runs are derandomized: the examples depend
only on the test, so a failure reproduces by running the test again.

What the four protocols' property tests share lives here: settings (``fuzz``), the worker
recursion limit, strategies, comparisons."""

from __future__ import annotations

import functools
import itertools
import json
import logging
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from spark_zmq.capture.buffer import spool_table
from spark_zmq.log import logger
from spark_zmq.options import parse_options
from spark_zmq.protocols.arrow import SIZES_SHOWN
from spark_zmq.spark.decoding import MAX_ERROR_CHARS, bounded_text
from spark_zmq.spark.rows import (
    DataLossError,
    MalformedMessageError,
    SpoolRange,
    output_schema,
    read_rows,
)
from spark_zmq.spool.index import Source
from spark_zmq.spool.writer import Spool
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.stream_settings import RowSettings

#: no example may take longer than this (generous: the machine is small and shared)
DEADLINE = timedelta(seconds=2)


#: CPython's default recursion limit, which Spark's Python workers and discovery threads run with
WORKER_RECURSION_LIMIT = 1000


def at_worker_recursion_limit(inner):
    """Run a test body at CPython's default recursion limit. Hypothesis raises the limit by
    2000 while a test runs; there, deeply nested input would meet other limits than in a worker
    (and the C JSON scanner can overflow the C stack before reaching the raised limit)."""

    @functools.wraps(inner)
    def run(*args, **kwargs):
        raised = sys.getrecursionlimit()
        sys.setrecursionlimit(WORKER_RECURSION_LIMIT)
        try:
            return inner(*args, **kwargs)
        finally:
            sys.setrecursionlimit(raised)

    return run


#: the share of each fuzz test's examples that runs: 1 (all) unless the environment variable
#: says less, as the inner loop may (docs/development.md); the suite and CI run them all
SHARE_VARIABLE = "SPARK_ZMQ_FUZZ_SHARE"


def examples_share() -> float:
    text = os.environ.get(SHARE_VARIABLE, "1")
    try:
        share = float(text)
    except ValueError:
        share = math.nan
    if not 0 < share <= 1:
        raise ValueError(f"{SHARE_VARIABLE}={text!r}: give a share of the examples in (0, 1]")
    return share


def fuzz(examples: int):
    """Hypothesis settings for a test named ``..._<examples>_examples`` (of which the share
    ``SPARK_ZMQ_FUZZ_SHARE`` runs, at least 10); the test body runs at a worker's recursion
    limit."""

    def wrap(test):
        assert test.__name__.endswith(f"_{examples}_examples"), test.__name__
        test.hypothesis.inner_test = at_worker_recursion_limit(test.hypothesis.inner_test)
        return settings(
            max_examples=min(examples, max(10, round(examples * examples_share()))),
            deadline=DEADLINE,
            derandomize=True,
            database=None,
            print_blob=True,
            suppress_health_check=[
                HealthCheck.too_slow,
                HealthCheck.data_too_large,
                HealthCheck.filter_too_much,
                HealthCheck.large_base_example,
            ],
        )(test)

    return wrap


# -- shared strategies ---------------------------------------------------------------------------

json_scalars = (
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)
#: MongoDB extended JSON keys, which from_json gives a meaning to
EXTENDED_KEYS = (
    "$oid",
    "$date",
    "$binary",
    "$base64",
    "$subType",
    "$type",
    "$numberLong",
    "$numberInt",
    "$numberDouble",
    "$numberDecimal",
    "$regex",
    "$options",
    "$regularExpression",
    "$timestamp",
    "$uuid",
    "$code",
    "$scope",
    "$symbol",
    "$minKey",
    "$maxKey",
    "$undefined",
    "$dbPointer",
    "$ref",
    "$id",
)
extended_json = st.dictionaries(st.sampled_from(EXTENDED_KEYS), json_values, min_size=1, max_size=2)


@st.composite
def deeply_nested_json(draw) -> str:
    depth = draw(st.one_of(st.integers(1, 2000), st.sampled_from([499, 500, 990, 1000, 2000])))
    opener, inner, closer = draw(
        st.sampled_from(
            [("[", "", "]"), ('{"a":', "1", "}"), ('{"name":"n","children":[', "", "]}")]
        )
    )
    return opener * depth + inner + closer * depth


#: JSON text as peers might send it: plain, extended, nested deeply, with lone surrogates
#: escaped, or not JSON at all
json_texts = st.one_of(
    json_values.map(json.dumps),
    extended_json.map(json.dumps),
    st.dictionaries(st.text(max_size=4), extended_json, min_size=1, max_size=2).map(json.dumps),
    deeply_nested_json(),
    st.text(st.characters(categories=["Cs"]), min_size=1, max_size=3).map(json.dumps),
    st.integers(min_value=2**63 - 2, max_value=2**70).map(str),
    st.text(max_size=20),
)


def list_array(messages: list[list[bytes]], skip: int = 0) -> pa.ListArray:
    """Captured messages as the spool hands them to decode (sliced past ``skip`` rows, since a
    spool read may hand over a slice)."""
    return pa.array(messages, pa.list_(pa.binary())).slice(skip)


def same(a, b) -> bool:
    """Equality that tells bool from int and lets NaN equal NaN."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, int) and isinstance(b, int):  # bson's Int64 is an int
        return a == b
    return type(a) is type(b) and a == b


# -- shared by Goby and EBUS -------------------------------------------------------------------


@st.composite
def mangled(draw, serialized: bytes) -> bytes:
    """A serialization cut short, with a byte changed, or with bytes appended."""
    how = draw(st.integers(0, 2))
    if how == 0:
        return serialized[: draw(st.integers(0, len(serialized)))]
    if how == 1 and serialized:
        at = draw(st.integers(0, len(serialized) - 1))
        return serialized[:at] + bytes([draw(st.integers(0, 255))]) + serialized[at + 1 :]
    return serialized + draw(st.binary(min_size=1, max_size=8))


@st.composite
def bson_documents(draw, depth=2) -> bytes:
    """BSON documents of elements of every type byte, with values well-formed or not."""
    elements = b""
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(
            st.sampled_from(
                [
                    0x01,
                    0x02,
                    0x03,
                    0x04,
                    0x05,
                    0x07,
                    0x08,
                    0x09,
                    0x0A,
                    0x0B,
                    0x0C,
                    0x0D,
                    0x0E,
                    0x0F,
                    0x10,
                    0x11,
                    0x12,
                    0x13,
                    0x7F,
                    0xFF,
                    0x00,
                    0x20,
                ]
            )
        )
        key = draw(st.binary(max_size=4)).replace(b"\0", b"k") + b"\0"
        if kind == 0x02 or kind in (0x0D, 0x0E):
            text = draw(st.binary(max_size=6))
            length = draw(st.sampled_from([len(text) + 1, len(text), 0, -1, 2**31 - 1]))
            value = length.to_bytes(4, "little", signed=True) + text + b"\0"
        elif kind in (0x03, 0x04) and depth:
            value = draw(bson_documents(depth - 1))
        elif kind == 0x09:
            value = draw(st.integers(-(2**63), 2**63 - 1)).to_bytes(8, "little", signed=True)
        else:
            value = draw(st.binary(max_size=12))
        elements += bytes([kind]) + key + value
    length = len(elements) + 5
    length = draw(st.sampled_from([length, length, length - 1, length + 1]))
    return length.to_bytes(4, "little", signed=True) + elements + b"\0"


#: values that pack/unpack and bson_json/json_bson carry unchanged
bson_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=6).filter(
                lambda k: not k.startswith("$")
            ),
            inner,
            max_size=4,
        )
    ),
    max_leaves=8,
)
bson_keys = st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=6).filter(
    lambda k: not k.startswith("$")
)
bson_objects = st.dictionaries(bson_keys, bson_values, max_size=4)


# -- the whole read path: capture's rows -> a spool -> read_rows under each mode -----------------

#: what a fault row's text is made of: capture's kind, a long one, and any text after "gap:"
fault_texts = st.one_of(
    st.just("gap: 3 messages lost: zmq dropped the connection to tcp://127.0.0.1:1"),
    st.text(max_size=30).map(lambda text: "gap: " + text),
    st.integers(MAX_ERROR_CHARS - 8, 3 * MAX_ERROR_CHARS).map(lambda n: "gap: " + "x" * n),
)
#: frame lists of any shape a zmq message has (one frame at least): a few of any bytes, many
#: (long errors), large ones
any_frames = st.one_of(
    st.lists(st.binary(max_size=24), min_size=1, max_size=4),
    st.integers(SIZES_SHOWN, 3000).map(lambda n: [b"f"] * n),
    st.integers(1, 3).map(lambda n: [b"\0" * 40_000] * n),
)


@dataclass(frozen=True)
class Captured:
    """What an example writes into a spool, as capture writes it: each row a message's frames
    or a gap (its fault text, no frames), cut into segments at ``cuts``; then the offsets
    [start, end) that a read task is given."""

    rows: tuple[list[bytes] | str, ...]
    cuts: tuple[int, ...]
    start: int
    end: int

    def faults(self) -> dict[int, str]:
        return {i: row for i, row in enumerate(self.rows) if isinstance(row, str)}

    def segments(self) -> Iterator[list[list[bytes] | str]]:
        edges = [0, *self.cuts, len(self.rows)]
        for first, end in itertools.pairwise(edges):
            if end > first:
                yield list(self.rows[first:end])


@st.composite
def captured(draw, messages: st.SearchStrategy, max_rows: int = 12) -> Captured:
    """Rows of ``messages`` (frame lists), random frame lists and gap rows, in segments."""
    one = st.one_of(messages, messages, any_frames, fault_texts)
    rows = tuple(draw(st.lists(one, min_size=1, max_size=max_rows), "rows"))
    cuts = tuple(sorted(draw(st.sets(st.integers(1, len(rows)), max_size=2), "cuts")))
    start = draw(st.integers(0, len(rows) - 1), "start")
    end = draw(st.integers(start + 1, len(rows)), "end")
    return Captured(rows, cuts, start, end)


def write_spool(root: str, key: str, source: Source, rows: Captured) -> None:
    """``rows`` written into a new spool at ``root`` as capture writes them (``spool_table``,
    one ``Spool.append`` per segment)."""
    spool = Spool(root, 1 << 30)
    try:
        for segment in rows.segments():
            frames = [[] if isinstance(row, str) else row for row in segment]
            faults = {i: row for i, row in enumerate(segment) if isinstance(row, str)}
            times = [10**18 + i for i in range(len(segment))]
            spool.append(key, source, spool_table(frames, times, faults))
    finally:
        spool.close()


class _Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@dataclass
class ReadOutcome:
    """What ``read_rows`` gave: its rows (or the RowError it raised) and its log records."""

    rows: list[dict] | None
    error: Exception | None
    records: list[logging.LogRecord]

    def dropped(self) -> int:
        """The count of malformed messages its one DROPMALFORMED log line reports (0: none)."""
        found = [r for r in self.records if "dropped %d malformed" in str(r.msg)]
        assert len(found) <= 1, "one line per read task"
        return found[0].args[1] if found else 0

    def decoder_failures(self) -> int:
        """The count of messages its one decoder-failure log line reports (0: none)."""
        found = [r for r in self.records if "the decoder raised on" in str(r.msg)]
        assert len(found) <= 1, "one line per read task"
        return found[0].args[1] if found else 0


def read_outcome(protocol, raw: dict[str, str], part: SpoolRange) -> ReadOutcome:
    """``read_rows`` of ``part`` with reader options ``raw``: its rows, or the RowError
    (MalformedMessageError, DataLossError) it raised; any other exception fails the test."""
    options = parse_options(protocol.name, READER_OPTIONS + protocol.reader_options, raw)
    handler = _Records()
    logger.addHandler(handler)
    try:
        settings = protocol.read_settings(options)
        batches = list(read_rows(protocol, settings, RowSettings.of(options), part))
        schema = output_schema(protocol)
        for batch in batches:
            assert batch.schema == schema
        rows = pa.Table.from_batches(batches, schema).to_pylist()
        return ReadOutcome(rows, None, handler.records)
    except (MalformedMessageError, DataLossError) as exc:
        return ReadOutcome(None, exc, handler.records)
    finally:
        logger.removeHandler(handler)


def check_read_path(
    protocol, raw: dict[str, str], source: Source, rows: Captured, *, sound: bool = True
) -> list[dict]:
    """Write ``rows`` into a spool and read them back under each ``mode``, with and without
    ``failOnDataLoss``; check the delivery contract whatever the messages hold:

    - PERMISSIVE (``raw`` must keep every message: no events filtered out): one row per offset
      of [start, end), in order; gap rows carry their fault text unchanged (cut only if over
      MAX_ERROR_CHARS) and no payload; malformed rows carry a payload; no error text is over
      MAX_ERROR_CHARS; the decoder-failure log line, if any, counts no gap; with ``sound``
      (a real protocol), the decoder raised on no message: it marks malformed ones itself;
    - DROPMALFORMED: the same rows without the malformed ones, which its log line counts;
    - FAILFAST: MalformedMessageError naming the first malformed offset, or the same rows;
    - failOnDataLoss=true: DataLossError naming the first gap's offset (FAILFAST may fail on a
      malformed row first), or the same rows as without it.

    Returns the PERMISSIVE rows, for the caller's own checks."""
    with spooled(source, rows) as part:
        return check_contract(protocol, raw, source, rows, part, sound=sound)


@contextmanager
def spooled(source: Source, rows: Captured) -> Iterator[SpoolRange]:
    """``rows`` in a new spool (partition ``k``) for the time of the block: the range a read
    task of [start, end) is given."""
    root = tempfile.mkdtemp(prefix="fuzz-spool-")
    try:
        write_spool(root, "k", source, rows)
        yield SpoolRange(root, "k", rows.start, rows.end)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def check_contract(
    protocol, raw, source: Source, rows: Captured, part: SpoolRange, *, sound: bool = True
) -> list[dict]:
    """``check_read_path`` on a spool already written."""
    faults = rows.faults()
    permissive = read_outcome(protocol, {**raw, "mode": "PERMISSIVE"}, part)
    assert permissive.rows is not None, permissive.error
    delivered = permissive.rows
    assert [r["offset"] for r in delivered] == list(range(rows.start, rows.end))
    malformed = []
    for row in delivered:
        assert row["partition"] == "k" and row["endpoint"] == source.endpoint
        error = row["error"]
        assert error is None or len(error) <= MAX_ERROR_CHARS
        if row["offset"] in faults:
            assert error == bounded_text(faults[row["offset"]]) and row["payload"] is None
        elif error is not None:
            assert not error.startswith("gap:") and row["payload"] is not None, row
            malformed.append(row)
    assert permissive.decoder_failures() <= len(malformed)
    if sound:
        assert permissive.decoder_failures() == 0, permissive.records

    dropping = read_outcome(protocol, {**raw, "mode": "DROPMALFORMED"}, part)
    assert dropping.rows == [r for r in delivered if r not in malformed]
    assert dropping.dropped() == len(malformed)

    failing = read_outcome(protocol, {**raw, "mode": "FAILFAST"}, part)
    if malformed:
        assert isinstance(failing.error, MalformedMessageError)
        assert f"at offset {malformed[0]['offset']} " in str(failing.error)
    else:
        assert failing.rows == delivered

    gaps = [r for r in delivered if r["offset"] in faults]
    for mode, without in (("PERMISSIVE", delivered), ("DROPMALFORMED", dropping.rows)):
        lossless = read_outcome(protocol, {**raw, "mode": mode, "failOnDataLoss": "true"}, part)
        if gaps:
            assert isinstance(lossless.error, DataLossError)
            assert f"at offset {gaps[0]['offset']} " in str(lossless.error)
        else:
            assert lossless.rows == without
    strict = read_outcome(protocol, {**raw, "mode": "FAILFAST", "failOnDataLoss": "true"}, part)
    if isinstance(strict.error, DataLossError):
        assert gaps and f"at offset {gaps[0]['offset']} " in str(strict.error)
    elif isinstance(strict.error, MalformedMessageError):
        assert malformed and f"at offset {malformed[0]['offset']} " in str(strict.error)
    else:
        assert not gaps and not malformed and strict.rows == delivered
    return delivered
