"""Serving a spool to read tasks on hosts that do not see its folder (``spool.serving``, Arrow
Flight) and the one choice a read task makes between the files and the server
(``spool.remote.open_range``)."""

from __future__ import annotations

import dataclasses
import os
import socket
import stat
import subprocess

import pyarrow as pa
import pytest

from spark_zmq.capture.buffer import spool_table
from spark_zmq.spool import reader as spool_reader
from spark_zmq.spool.identity import spool_identity
from spark_zmq.spool.index import Retention, Source
from spark_zmq.spool.reader import read_range
from spark_zmq.spool.remote import (
    SERVED_NAME,
    ServedSpool,
    ServerSettings,
    SpoolNotShared,
    SpoolServerError,
    load_served,
    open_range,
    read_served_range,
)
from spark_zmq.spool.serving import SpoolServer
from spark_zmq.spool.writer import Spool

ONE = Source("tcp://10.0.0.1:1", {"publisher": "one"})
TWO = Source("tcp://10.0.0.2:2", {"publisher": "two"})


def messages(first: int, count: int, faults: dict[int, str] | None = None) -> pa.Table:
    """Messages m<first>.. of two frames each; a row at an index of ``faults`` is a gap row
    (no frames), as capture writes one."""
    faults = faults or {}
    frames = [
        [] if i - first in faults else [b"m%d" % i, b"part"] for i in range(first, first + count)
    ]
    return spool_table(frames, list(range(first, first + count)), faults)


def slices(found) -> list[tuple[int, Source, list, list]]:
    """(first, source, frames, faults) of each slice, tables compared by content."""
    return [
        (first, source, table.column("frames").to_pylist(), table.column("fault").to_pylist())
        for first, source, table in found
    ]


def rows(found) -> list[tuple[int, Source, list, str | None]]:
    """One entry per row (offset, source, frames, fault): the same rows in any slicing."""
    out = []
    for first, source, frames, faults in slices(found):
        out += [(first + i, source, f, fault) for i, (f, fault) in enumerate(zip(frames, faults))]
    return out


@pytest.fixture
def served_spool(tmp_path):
    """A spool with two partitions (one with a gap row, a committed and deleted range, and
    more than one record batch), served on loopback."""
    root = str(tmp_path / "spool")
    spool = Spool(root, 1 << 30, retention=Retention(seconds=0))
    spool.append("a", ONE, messages(0, 3))
    spool.append("a", ONE, messages(3, 10_000, {5: "gap: 1 message lost (test)"}))
    spool.append("b", TWO, messages(0, 4))
    spool.truncate("a", 3)  # committed and deleted: offsets 0-2 read as one gap row
    server = SpoolServer(root, spool_identity(root), ServerSettings("127.0.0.1"), spool.listing)
    server.start()
    yield root, server
    server.close()
    spool.close()


def test_a_served_range_gives_the_rows_of_the_files(served_spool):
    root, server = served_spool
    for key, start, end in (("a", 0, 10_003), ("a", 4, 9), ("a", 4100, 8300), ("b", 1, 4)):
        remote = rows(read_served_range(server.served, key, start, end))
        assert remote == rows(read_range(root, key, start, end)), (key, start, end)
        assert len(remote) == end - start or start == 0  # (offsets 0-2 are one gap row)
    deleted = rows(read_served_range(server.served, "a", 0, 4))
    assert deleted[0][3].startswith("gap: 3 messages at offsets [0, 3) of partition a were")
    assert deleted[1] == (3, ONE, [b"m3", b"part"], None)
    gap = rows(read_served_range(server.served, "a", 8, 9))
    assert gap == [(8, ONE, [], "gap: 1 message lost (test)")]
    # the same range twice: the same rows (a retried task reads what the first attempt read)
    twice = [rows(read_served_range(server.served, "a", 10, 5000)) for _ in range(2)]
    assert twice[0] == twice[1] and len(twice[0]) == 4990


def test_a_server_in_the_capturing_process_reads_ranges_without_loading_an_index(
    served_spool, monkeypatch
):
    """The server takes each range's segments from the spool its process writes
    (``Spool.listing``): a call loads no index (a load fails here) and gives the same rows."""
    root, server = served_spool
    loaded = {r: rows(read_range(root, *r)) for r in (("a", 0, 10_003), ("b", 1, 4))}
    monkeypatch.setattr(spool_reader, "load_index", None)
    for (key, start, end), expected in loaded.items():
        assert rows(read_served_range(server.served, key, start, end)) == expected


def test_only_the_token_of_the_servers_run_and_its_own_spool_are_let_in(served_spool):
    server = served_spool[1]
    served = server.served
    assert served.token not in repr(served), "partitions are printed in Spark's logs"
    stranger = ServedSpool(served.location, "not-the-token", served.spool_id)
    with pytest.raises(SpoolServerError, match="the server refused the task's token"):
        list(read_served_range(stranger, "b", 0, 4))
    elsewhere = ServedSpool(served.location, served.token, "another-spool")
    with pytest.raises(SpoolServerError, match="was planned against another spool"):
        list(read_served_range(elsewhere, "b", 0, 4))
    with pytest.raises(SpoolServerError, match=r"cannot serve offsets \[0, 9\) of partition 'b'"):
        list(read_served_range(served, "b", 0, 9))  # never held: the spool's own error, whole


def test_served_json_says_where_only_to_the_owner_and_goes_with_the_server(tmp_path):
    root = str(tmp_path)
    Spool(root, 1 << 30).close()
    server = SpoolServer(root, spool_identity(root), ServerSettings("127.0.0.1"))
    server.start()
    mode = stat.S_IMODE(os.stat(os.path.join(root, SERVED_NAME)).st_mode)
    assert mode == 0o600, oct(mode)
    assert load_served(root) == server.served
    assert server.served.location == f"grpc+tcp://127.0.0.1:{server.port}"
    server.close()
    assert load_served(root) is None
    with pytest.raises(SpoolServerError, match=r"does not answer .*option spoolServer"):
        list(read_served_range(server.served, "k", 0, 1))


def test_a_read_task_takes_the_files_it_sees_else_the_server_else_says_what_is_missing(
    served_spool, tmp_path
):
    root, server = served_spool
    spool_id = server.served.spool_id
    moved = str(tmp_path / "elsewhere")  # this host does not see the spool at that path
    expected = rows(read_range(root, "b", 0, 4))
    assert rows(open_range(root, "b", 0, 4, spool_id, None)) == expected  # its files
    assert rows(open_range(moved, "b", 0, 4, spool_id, server.served)) == expected
    server.close()  # the files are read where they are seen: the server is not asked
    assert rows(open_range(root, "b", 0, 4, spool_id, server.served)) == expected
    with pytest.raises(SpoolNotShared, match=r"does not see spool .* and nothing serves it"):
        open_range(moved, "b", 0, 4, spool_id, None)
    other = str(tmp_path / "other")
    Spool(other, 1 << 30).close()
    spool_identity(other)  # a folder at the task's path that holds another spool
    with pytest.raises(SpoolNotShared, match="leave option spoolServer at auto"):
        open_range(other, "b", 0, 4, spool_id, None)


def test_a_server_cannot_bind_an_address_of_another_host(tmp_path):
    root = str(tmp_path)
    with pytest.raises(Exception, match=r"cannot serve spool .* on 192\.0\.2\.1:0 .*spoolServer"):
        SpoolServer(root, spool_identity(root), ServerSettings("192.0.2.1"))


def self_signed(folder, name: str, address: str) -> tuple[str, str]:
    """A certificate for ``address`` (its subjectAltName) and its key, made by openssl."""
    certificate, key = folder / f"{name}.pem", folder / f"{name}.key"
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
            "-days",
            "1",
            "-subj",
            f"/CN={name}",
            "-addext",
            f"subjectAltName=IP:{address}",
            "-keyout",
            str(key),
            "-out",
            str(certificate),
        ],
        check=True,
        capture_output=True,
    )
    return str(certificate), str(key)


def test_with_a_certificate_the_server_speaks_tls_and_tasks_trust_that_certificate_only(
    tmp_path,
):
    root = str(tmp_path / "spool")
    spool = Spool(root, 1 << 30)
    spool.append("k", ONE, messages(0, 50))
    certificate, key = self_signed(tmp_path, "driver", "127.0.0.1")
    settings = ServerSettings("127.0.0.1", 0, certificate, key)
    server = SpoolServer(root, spool_identity(root), settings)
    server.start()
    try:
        served = server.served
        assert served.location.startswith("grpc+tls://127.0.0.1:")
        assert served.certificate == open(certificate).read()
        assert load_served(root) == served
        assert rows(read_served_range(served, "k", 0, 50)) == rows(read_range(root, "k", 0, 50))
        stranger, _ = self_signed(tmp_path, "stranger", "127.0.0.1")
        impostor = dataclasses.replace(served, certificate=open(stranger).read())
        with pytest.raises(SpoolServerError, match="cannot read offsets"):
            list(read_served_range(impostor, "k", 0, 50))  # not the certificate it trusts
        plain = dataclasses.replace(
            served, location=served.location.replace("grpc+tls", "grpc+tcp"), certificate=None
        )
        with pytest.raises(SpoolServerError, match="cannot read offsets"):
            list(read_served_range(plain, "k", 0, 50))  # no plain gRPC beside TLS
    finally:
        server.close()
        spool.close()


def test_tls_needs_both_the_certificate_and_its_key(tmp_path):
    from spark_zmq.options import OptionError
    from spark_zmq.protocols.zeroeq import ZeroEQ
    from spark_zmq.stream_settings import SourceSettings

    certificate, key = self_signed(tmp_path, "driver", "127.0.0.1")
    protocol = ZeroEQ()
    both = SourceSettings.of(
        protocol.parse_reader_options(
            {"spoolServerCertificate": certificate, "spoolServerKey": key}
        )
    )
    assert both.spool_server == ServerSettings(None, 0, certificate, key)
    with pytest.raises(OptionError, match="spoolServerKey is missing"):
        SourceSettings.of(protocol.parse_reader_options({"spoolServerCertificate": certificate}))
    with pytest.raises(OptionError, match="spoolServerCertificate"):
        protocol.parse_reader_options({"spoolServerCertificate": str(tmp_path / "none.pem")})
    off = SourceSettings.of(protocol.parse_reader_options({"spoolServer": "off"}))
    assert off.spool_server is None


def test_the_default_address_is_the_one_spark_gives_a_driver(monkeypatch):
    """SPARK_LOCAL_IP, else the host name's address, else (that being loopback) the first IPv4
    address of the last interface that has one besides loopback and link-local ones."""
    import ifaddr

    from spark_zmq.spool.remote import default_host

    def adapter(name: str, *ips: str) -> ifaddr.Adapter:
        return ifaddr.Adapter(name, name, [ifaddr.IP(ip, 24, name) for ip in ips])

    adapters = [
        adapter("lo", "127.0.0.1"),
        adapter("eth0", "169.254.1.1", "10.0.0.5"),
        adapter("eth1", "192.168.7.2", "192.168.7.3"),
        adapter("eth2", "169.254.9.9"),
    ]
    monkeypatch.setattr(ifaddr, "get_adapters", lambda: adapters)
    monkeypatch.delenv("SPARK_LOCAL_IP", raising=False)
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "10.1.2.3")
    assert default_host() == "10.1.2.3"
    monkeypatch.setattr(socket, "gethostbyname", lambda name: "127.0.1.1")
    assert default_host() == "192.168.7.2"
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.9.9.9")
    assert default_host() == "10.9.9.9"
