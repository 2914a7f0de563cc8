"""End to end: real publishers, real ZeroConf discovery, a real Spark streaming query."""

from __future__ import annotations

import pytest

from conftest import wait_until

pytestmark = pytest.mark.spark


def start_query(spark, tmp_path, name, **options):
    reader = spark.readStream.format("zeroeq")
    options.setdefault("discoveryInterfaces", "127.0.0.1")
    options.setdefault("spoolPath", str(tmp_path / f"spool-{name}"))
    for key, value in options.items():
        reader = reader.option(key, value)
    return (reader.load().writeStream.format("memory").queryName(name)
            .option("checkpointLocation", str(tmp_path / f"checkpoint-{name}"))
            .trigger(processingTime="500 milliseconds").start())


def rows_of(spark, name):
    return spark.sql(f"select * from {name}").collect()


def test_three_publishers_two_sessions(spark, tmp_path, publishers):
    alice1, alice2, bob = publishers("alice"), publishers("alice"), publishers("bob")
    query = start_query(spark, tmp_path, "sessions", session="alice")
    try:
        alice1.wait_for_subscribers()
        alice2.wait_for_subscribers()
        sent = set()
        for i in range(50):
            for publisher in (alice1, alice2, bob):
                payload = f"{publisher.instance_name}/{i}".encode()
                publisher.publish("zeroeq::test::Echo", payload)
                if publisher is not bob:
                    sent.add(payload)
        rows = wait_until(lambda: (r := rows_of(spark, "sessions")) and len(r) >= 100 and r,
                          what="100 rows")
        query.processAllAvailable()
        rows = rows_of(spark, "sessions")
    finally:
        query.stop()
    payloads = [bytes(r.payload) for r in rows]
    assert sorted(payloads) == sorted(sent)
    assert bob.subscribers == 0
    row = rows[0]
    assert row.session == "alice" and row.error is None
    assert row.event_id == "dddb197182000e88e3986e01f92e2e28"
    assert row.publisher in (alice1.instance_name, alice2.instance_name)
    assert row.partition == row.publisher and row.endpoint == f"tcp://{row.publisher}"
