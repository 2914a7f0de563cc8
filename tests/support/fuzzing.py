"""Property-based tests (hypothesis) of every decoder and parser of the four protocols.

Pure functions only: no Spark, and no socket is opened (where a function talks to a socket, a
stand-in object is handed to it). Three kinds of property:

- **classified**: on arbitrary input a parser returns a value of its contract or raises the
  module's documented error class (IdentifierError, AddressError, HeaderError, PayloadError,
  ValueError, ManagerError, DecodeError); a format's ``decode`` never raises and marks every
  malformed message in ``error``; an ``encode`` never raises and gives each row a message or an
  error text;
- **no hang**: every example must finish within the deadline (and each test within the pytest
  timeout);
- **round trip**: valid input goes through the matching encoder and back unchanged.

Each test's name ends in the number of examples it runs (``..._300_examples``), which its
settings use (``fuzz`` checks that the two agree). Runs are derandomized: the examples depend
only on the test, so a failure reproduces by running the test again.

What the four protocols' property tests share lives here: settings (``fuzz``), the worker
recursion limit, strategies, comparisons."""

from __future__ import annotations

import functools
import json
import math
import sys
from datetime import timedelta

import pyarrow as pa
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

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


def fuzz(examples: int):
    """Hypothesis settings for a test named ``..._<examples>_examples``; the test body runs at
    a worker's recursion limit."""

    def wrap(test):
        assert test.__name__.endswith(f"_{examples}_examples"), test.__name__
        test.hypothesis.inner_test = at_worker_recursion_limit(test.hypothesis.inner_test)
        return settings(
            max_examples=examples,
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
