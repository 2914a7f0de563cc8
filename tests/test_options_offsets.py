"""Option validation messages and admission control."""

from __future__ import annotations

import pytest

from spark_zmq.options import OptionError, parse_options
from spark_zmq.protocols.zeroeq import ZeroEQ
from spark_zmq.protocols.zeroeq.options import SESSION
from spark_zmq.spark.offsets import admit, ranges
from spark_zmq.stream_options import (
    MAX_MESSAGE_BYTES,
    MAX_RECORDS_PER_TRIGGER,
    MODE,
    READER_OPTIONS,
    SPOOL_PATH,
    SPOOL_RETENTION,
)

SPECS = READER_OPTIONS + ZeroEQ.reader_options


def test_defaults_and_case_insensitive_names():
    options = parse_options("zeroeq", SPECS, {"maxrecordspertrigger": "10", "MODE": "failfast"})
    assert options.get(MAX_RECORDS_PER_TRIGGER) == 10 and options.get(MODE) == "FAILFAST"
    assert options.get(MAX_MESSAGE_BYTES) == 64 << 20
    assert options.is_set(MODE) and not options.is_set(SESSION)


def test_retention_options_reach_capture_as_a_retention():
    """spoolRetention takes days and ``forever``; the defaults keep committed data 7 days with no
    byte bound of its own (maxSpoolBytes deletes it first when room is needed)."""
    from spark_zmq.spool.index import Retention
    from spark_zmq.stream_settings import CaptureSettings

    assert CaptureSettings.of(parse_options("zeroeq", SPECS, {})).retention == Retention(
        7 * 86400.0, None
    )
    given = {"spoolRetention": "1.5d", "spoolRetentionBytes": "512m"}
    settings = CaptureSettings.of(parse_options("zeroeq", SPECS, given))
    assert settings.retention == Retention(1.5 * 86400, 512 << 20)
    forever = parse_options("zeroeq", SPECS, {"spoolRetention": "Forever"})
    assert forever.get(SPOOL_RETENTION) is None
    zero = parse_options("zeroeq", SPECS, {"spoolRetention": "0"})
    assert zero.get(SPOOL_RETENTION) == 0.0
    with pytest.raises(OptionError, match="'spoolRetention' must be a duration such as 7d"):
        parse_options("zeroeq", SPECS, {"spoolRetention": "a week"})


def test_a_spool_path_on_an_object_store_is_refused_naming_the_reason():
    """An object store's URI would otherwise become a local relative folder (s3a:/b/x)."""
    for uri in ("s3a://bucket/spool", "abfss://c@a.dfs.core.windows.net/s", "dbfs:/spool"):
        with pytest.raises(OptionError, match="'spoolPath' must be a folder path on a POSIX"):
            parse_options("zeroeq", SPECS, {"spoolPath": uri})
    with pytest.raises(OptionError, match=r"s3a:// is not a POSIX file system.*NFS mount"):
        parse_options("zeroeq", SPECS, {"spoolPath": "s3a://bucket/spool"})
    with pytest.raises(OptionError, match=r"/dbfs/\.\.\. is a local path"):
        parse_options("zeroeq", SPECS, {"spoolPath": "dbfs:/spool"})
    assert parse_options("zeroeq", SPECS, {"spoolPath": "file:///data/spool"}).get(SPOOL_PATH) == (
        "/data/spool"
    )
    assert parse_options("zeroeq", SPECS, {"spoolPath": "/data/a:b"}).get(SPOOL_PATH) == "/data/a:b"


@pytest.mark.parametrize(
    "raw, words",
    [
        ({"sesion": "a"}, ["unknown option 'sesion'", "Did you mean 'session'"]),
        ({"mode": "LENIENT"}, ["'mode'", "PERMISSIVE, DROPMALFORMED, FAILFAST", "'LENIENT'"]),
        ({"maxRecordsPerTrigger": "0"}, ["'maxRecordsPerTrigger'", "positive integer"]),
        ({"maxMessageBytes": "lots"}, ["'maxMessageBytes'", "64m"]),
        ({"publishers": "127.0.0.1"}, ["'publishers'", "host:port"]),
        ({"events": "a,,b"}, ["'events'"]),
        ({"startingOffsets": "middle"}, ["'startingOffsets'", "earliest, latest, or JSON"]),
    ],
)
def test_bad_options_name_the_option_and_accepted_values(raw, words):
    with pytest.raises(OptionError) as info:
        parse_options("zeroeq", SPECS, raw)
    for word in words:
        assert word in str(info.value)


def test_admit_shares_the_budget_in_proportion_and_exactly():
    start = {"a": 0, "b": 10}
    available = {"a": 60, "b": 50, "c": 7}
    end = admit(start, available, {"c": 0}, 30)
    taken = {k: end[k] - start.get(k, 0) for k in end}
    assert sum(taken.values()) == 30
    assert taken == {"a": 17, "b": 11, "c": 2}
    assert admit(start, available, {"c": 0}, None) == available
    assert admit(start, available, {"c": 0}, 1000) == available


def test_ranges_start_new_partitions_at_their_first_offset():
    assert ranges({"a": 5}, {"a": 9, "b": 4}, {"b": 2}) == [("a", 5, 9), ("b", 2, 4)]
    assert ranges({"a": 5}, {"a": 5}, {}) == []


def test_offsets_carry_their_layout_version_and_the_claims_round():
    from spark_zmq.spark.offsets import OffsetVersionError, StreamOffset

    offset = StreamOffset({"a:1": 5, "b:2": 0}, claims_round=3, spool="f00d")
    doc = offset.to_json()
    assert doc == {
        "a:1": 5,
        "b:2": 0,
        "spark_zmq.version": 1,
        "spark_zmq.claims": 3,
        "spark_zmq.spool": "f00d",
    }
    assert StreamOffset.from_json(doc) == offset
    # a checkpoint written before versions: the same layout
    assert StreamOffset.from_json({"a:1": 5}) == StreamOffset({"a:1": 5})
    with pytest.raises(
        OffsetVersionError,
        match=r"layout version 2; this release reads version "
        r"1.*start the query with a new checkpoint",
    ):
        StreamOffset.from_json({"a:1": 5, "spark_zmq.version": 2})


def test_a_spool_folder_has_one_identity_whoever_asks_first(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from spark_zmq.errors import SpoolError
    from spark_zmq.spool.identity import IDENTITY_NAME, spool_identity

    with ThreadPoolExecutor(8) as pool:
        ids = set(pool.map(spool_identity, [str(tmp_path)] * 32))
    assert len(ids) == 1 and len(ids.pop()) == 32
    assert sorted(p.name for p in tmp_path.iterdir()) == [IDENTITY_NAME]  # no partial file left
    other = tmp_path / "other"
    other.mkdir()
    assert spool_identity(str(other)) != spool_identity(str(tmp_path))
    (other / IDENTITY_NAME).write_text('{"format_version": 1}')
    with pytest.raises(SpoolError, match=r"spool.json is not a spool identity .*spoolPath of"):
        spool_identity(str(other))
    (other / IDENTITY_NAME).write_text("[]")
    with pytest.raises(SpoolError, match=r"spool.json holds a JSON list .*new spoolPath"):
        spool_identity(str(other))
