"""The generic read path (``spark.rows``, ``spark.decoding``) without Spark, on real spools: a
decoder bug is a malformed row by construction (whatever the decoder raises or returns), at
O(k log n) decode calls; no error text is longer than MAX_ERROR_CHARS, whatever a format or the
spool put there; and what is no message's fault (options, a missing library, an interrupt)
still fails the task."""

from __future__ import annotations

import math
import time

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given
from hypothesis import strategies as st

from spark_zmq.errors import MissingDependency, OptionError
from spark_zmq.protocols.contract import Decoded
from spark_zmq.protocols.ebus import EBus
from spark_zmq.protocols.goby import Goby
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.spark.decoding import (
    MAX_ERROR_CHARS,
    bounded_text,
    decode_isolating,
    decode_runs_isolating,
)
from spark_zmq.spark.rows import SHARED_COLUMNS
from spark_zmq.spool.index import Source
from support.fuzzing import (
    Captured,
    captured,
    check_contract,
    fuzz,
    read_outcome,
    spooled,
)

pytestmark = pytest.mark.timeout(120)

SOURCE = Source("tcp://127.0.0.1:1", {"publisher": "127.0.0.1:1", "application": "rows"})
ZEROEQ_COLUMNS = ZeroEQ.columns.names
#: what makes a message poison for the broken decoders below
POISON = b"poison!"


def is_poison(frames: list[bytes]) -> bool:
    return POISON in frames


class RaisingDecoder(ZeroEQ):
    """ZeroEQ with a decoder bug: decode raises on any run that holds a poison message."""

    def decode(self, frames, source, settings):
        if any(is_poison(message) for message in frames.to_pylist()):
            raise RuntimeError("a decoder bug met a poison message")
        return super().decode(frames, source, settings)


class ShortDecoder(ZeroEQ):
    """ZeroEQ with a decoder bug: its arrays leave poison messages out (too short a run)."""

    def decode(self, frames, source, settings):
        decoded = super().decode(frames, source, settings)
        mask = pa.array([not is_poison(message) for message in frames.to_pylist()])
        return Decoded(
            decoded.payload.filter(mask),
            decoded.error.filter(mask),
            {name: column.filter(mask) for name, column in decoded.columns.items()},
            None if decoded.keep is None else decoded.keep.filter(mask),
        )


class MistypedDecoder(ZeroEQ):
    """ZeroEQ with a decoder bug: ``error`` of the wrong type for a run with a poison message."""

    def decode(self, frames, source, settings):
        decoded = super().decode(frames, source, settings)
        if any(is_poison(message) for message in frames.to_pylist()):
            decoded.error = decoded.error.cast(pa.large_string())
        return decoded


class GapRaisingDecoder(ZeroEQ):
    """ZeroEQ with a decoder bug on gap rows (no frames): decode raises on a run holding one.
    Gap rows keep their text and count as no failure."""

    def decode(self, frames, source, settings):
        if any(not message for message in frames.to_pylist()):
            raise ValueError("a decoder bug met a message without frames")
        return super().decode(frames, source, settings)


zeroeq_like = st.one_of(
    st.tuples(st.binary(min_size=16, max_size=16), st.binary(max_size=8)).map(list),
    st.lists(st.binary(max_size=20), min_size=1, max_size=3),
)
poison_messages = st.one_of(
    st.binary(min_size=16, max_size=16).map(lambda wire: [wire, POISON]),
    st.just([POISON]),
)


@fuzz(100)
@given(
    rows=captured(st.one_of(zeroeq_like, poison_messages), max_rows=16),
    broken=st.sampled_from([RaisingDecoder, ShortDecoder, MistypedDecoder, GapRaisingDecoder]),
)
def test_a_decoder_bug_is_a_malformed_row_by_construction_100_examples(rows, broken):
    with spooled(SOURCE, rows) as part:
        delivered = check_contract(broken(), {}, SOURCE, rows, part, sound=False)
        failures = read_outcome(broken(), {}, part).decoder_failures()
        sound = read_outcome(ZeroEQ(), {}, part).rows
    faults = rows.faults()
    poisoned = [
        offset
        for offset in range(rows.start, rows.end)
        if broken is not GapRaisingDecoder and offset not in faults and is_poison(rows.rows[offset])
    ]
    assert failures == len(poisoned), "one log line counts them all"
    assert sound is not None
    for row, expected in zip(delivered, sound):
        if row["offset"] in faults:  # (a decoder that raised on it left its own columns null)
            assert shared(row) == shared(expected), "gap rows are delivered unchanged"
            continue
        if row["offset"] not in poisoned:
            assert row == expected, "the other messages decode as with a sound decoder"
            continue
        assert row["error"].startswith("zeroeq: decoding failed: ")
        assert row["payload"] == b"".join(rows.rows[row["offset"]])
        assert all(row[name] is None for name in ZEROEQ_COLUMNS)


def shared(row: dict) -> dict:
    """The columns every format shares, of a row."""
    return {name: row[name] for name in SHARED_COLUMNS.names}


class CountingDecoder(RaisingDecoder):
    def __init__(self) -> None:
        self.calls = 0

    def decode(self, frames, source, settings):
        self.calls += 1
        return super().decode(frames, source, settings)


def test_isolating_k_poison_messages_costs_o_k_log_n_decode_calls():
    n, poisoned = 4096, [5, 2000, 4095]
    messages = [[b"\0" * 16, b"%d" % i] for i in range(n)]
    for index in poisoned:
        messages[index] = [b"\0" * 16, POISON]
    decoder = CountingDecoder()
    settings = decoder.reader_settings({})

    decoded, failed = decode_isolating(
        decoder,
        pa.array(messages, pa.list_(pa.binary())),
        SOURCE,
        settings,
        np.zeros(n, bool),
    )

    assert sorted(failed) == poisoned
    assert decoded.error.null_count == n - len(poisoned)
    bound = 1 + 2 * len(poisoned) * math.ceil(math.log2(n))  # 73, against 4096 one by one
    assert decoder.calls <= bound, (decoder.calls, bound)


class RaisingRunsDecoder(RaisingDecoder):
    """RaisingDecoder whose ``decode_runs`` (many sources at once) has the bug too; counts the
    calls of ``decode`` by source."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def decode_runs(self, frames, runs, settings):
        if any(is_poison(message) for message in frames.to_pylist()):
            raise RuntimeError("a decoder bug met a poison message")
        return super().decode_runs(frames, runs, settings)

    def decode(self, frames, source, settings):
        self.calls.append(source.endpoint)
        return super().decode(frames, source, settings)


def test_a_bug_in_decoding_many_sources_at_once_costs_only_the_poisoned_run_a_search():
    """When ``decode_runs`` raises, each run is decoded on its own: the clean run once, the
    poisoned one searched down to its poison message; the other rows decode as with a sound
    decoder."""
    clean = Source("tcp://127.0.0.1:1", {"publisher": "a"})
    poisoned = Source("tcp://127.0.0.1:2", {"publisher": "b"})
    messages = [[b"\0" * 16, b"%d" % i] for i in range(8)]
    messages[6] = [b"\0" * 16, POISON]
    frames = pa.array(messages, pa.list_(pa.binary()))
    runs = [(clean, 4), (poisoned, 4)]
    decoder = RaisingRunsDecoder()
    settings = decoder.reader_settings({})

    decoded, failed = decode_runs_isolating(decoder, frames, runs, settings, np.zeros(8, bool))
    sound = ZeroEQ().decode_runs(frames, runs, settings)

    assert list(failed) == [6]
    assert decoder.calls.count(clean.endpoint) == 1
    expected = sound.payload.to_pylist()
    expected[6] = b"\0" * 16 + POISON
    assert decoded.payload.to_pylist() == expected
    assert [i for i, e in enumerate(decoded.error.to_pylist()) if e] == [6]
    assert decoded.columns["publisher"].to_pylist() == ["a"] * 4 + ["b", "b", None, "b"]


class FailingDecoder(ZeroEQ):
    def __init__(self, error: BaseException) -> None:
        self.error = error

    def decode(self, frames, source, settings):
        raise self.error


@pytest.mark.parametrize(
    "error",
    [
        OptionError("zeroeq: option 'x': the file it names is gone"),
        MissingDependency("no bson here"),
        KeyboardInterrupt(),
    ],
    ids=["option", "library", "interrupt"],
)
def test_what_is_no_messages_fault_still_fails_the_task(error):
    rows = Captured(([b"\0" * 16, b"a"], [b"\0" * 16, b"b"]), (), 0, 2)
    with spooled(SOURCE, rows) as part, pytest.raises(type(error)):
        read_outcome(FailingDecoder(error), {}, part)


class WordyDecoder(ZeroEQ):
    """ZeroEQ whose malformed messages get an error text of 3 MB."""

    def decode(self, frames, source, settings):
        decoded = super().decode(frames, source, settings)
        decoded.error = pa.array(["x" * 3_000_000] * len(frames), pa.string())
        return decoded


def test_no_error_text_is_over_the_bound_whatever_the_format_or_the_spool_wrote():
    gap = "gap: " + "y" * 5000
    rows = Captured(([b"\0" * 16, b"a"], gap, "gap: short"), (), 0, 3)
    with spooled(SOURCE, rows) as part:
        wordy, gaps, short = read_outcome(WordyDecoder(), {}, part).rows
    assert len(wordy["error"]) == MAX_ERROR_CHARS - 60 + len(" [... 2999060 more characters cut]")
    assert wordy["error"].endswith(" [... 2999060 more characters cut]")
    assert len(gaps["error"]) <= MAX_ERROR_CHARS and gaps["error"] == bounded_text(gap)
    assert gaps["error"].startswith("gap: yyy") and gaps["payload"] is None
    assert short["error"] == "gap: short", "a gap text within the bound is delivered unchanged"


#: messages of a peer that sends as much as one message may hold: a million frames, or a
#: frame of 4 MB where a name is expected
HUGE_MESSAGES = {
    "zeroeq": (ZeroEQ(), [b"x"] * 1_000_000, "1000000 frames of 1, 1, 1, 1, 1, 1, 1, 1, ..."),
    "ebus frames": (EBus(), [b"x"] * 1_000_000, "1000000 frames of 1, 1, 1"),
    "ebus channel": (EBus(), [b"c" * (4 << 20), b"not packed"], "(4194304 characters)"),
    "goby frames": (Goby(), [b"x"] * 1_000_000, "1000000 frames of 1, 1, 1"),
    "goby identifier": (Goby(), [b"/" + b"g" * (4 << 20) + b"\0"], "(4194305 characters)"),
}


@pytest.mark.parametrize("case", sorted(HUGE_MESSAGES))
def test_every_format_keeps_the_error_of_a_huge_message_short(case):
    """(EBUS's payload of a broadcast of two frames is its packed frame alone.)"""
    protocol, frames, words = HUGE_MESSAGES[case]
    rows = Captured((frames,), (), 0, 1)
    with spooled(SOURCE, rows) as part:
        began = time.monotonic()
        [row] = read_outcome(protocol, {}, part).rows
        seconds = time.monotonic() - began
    assert words in row["error"]
    assert len(row["error"]) < 500, "short at the source, not cut by the bound"
    assert row["payload"] == (frames[1] if case == "ebus channel" else b"".join(frames))
    assert seconds < 20
