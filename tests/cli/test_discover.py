"""``python -m spark_zmq discover``: the endpoints a stream would read, found by the formats'
own discovery, for live peers of each format (no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys

import zmq
from pyre import Pyre

from spark_zmq.protocols.goby import GobyDaemon

DISCOVER = [sys.executable, "-m", "spark_zmq", "discover", "--seconds", "3"]


def discover(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(DISCOVER + list(args), capture_output=True, text=True, timeout=120)


def json_rows(result: subprocess.CompletedProcess) -> list[dict]:
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_discover_lists_what_each_format_would_read(publishers, tmp_path):
    publisher = publishers("discovery-test")
    gobyd = GobyDaemon(socket_name=str(tmp_path / "g"))
    pub = zmq.Context.instance().socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.bind("tcp://127.0.0.1:*")
    address = pub.getsockopt_string(zmq.LAST_ENDPOINT)
    node = Pyre("daq1", ctx=zmq.Context.instance())
    node.set_header(
        "YAMZ",
        json.dumps(
            {
                "name": "daq1",
                "children": [
                    {
                        "name": "tps",
                        "params": {"apa": "42"},
                        "port": {"address": address, "type": "PUB"},
                    }
                ],
            }
        ),
    )
    node.set_port(b"5685")
    node.start()
    try:
        zeroeq = json_rows(
            discover("--format", "zeroeq", "--json", "--option", "session=discovery-test")
        )
        goby = json_rows(
            discover(
                "--format",
                "goby",
                "--json",
                "--option",
                f"socketName={tmp_path / 'g'}",
                "--option",
                "subscribe=/nav/,/log/",
            )
        )
        yamz = json_rows(discover("--format", "yamz", "--json", "--option", "beaconPort=5685"))
        shown = discover(
            "--format",
            "yamz",
            "--option",
            "beaconPort=5685",
            "--option",
            "address=yamz://daq1/tps?apa=4[12]",
        )
    finally:
        node.stop()
        pub.close(0)
        gobyd.close()
    assert [(r["format"], r["partition"]) for r in zeroeq] == [("zeroeq", publisher.instance_name)]
    assert zeroeq[0]["endpoint"] == f"tcp://{publisher.instance_name}"
    assert [r["partition"] for r in goby] == [
        f"/log/@{tmp_path}/g.manager",
        f"/nav/@{tmp_path}/g.manager",
    ]
    assert {r["endpoint"] for r in goby} == {f"ipc://{tmp_path}/g.xpub"}
    assert [(r["partition"], r["metadata"]["node"], r["metadata"]["path"]) for r in yamz] == [
        (address, "daq1", "tps")
    ]
    assert shown.returncode == 0, shown.stderr
    header, row = shown.stdout.splitlines()
    assert header.split() == ["format", "partition", "endpoint", "metadata"]
    assert row.split()[:3] == ["yamz", address, address] and "node=daq1" in row


def test_discover_names_what_it_could_not_reach(tmp_path):
    missing = discover(
        "--format",
        "goby",
        "--option",
        f"socketName={tmp_path / 'none'}",
        "--option",
        "managerTimeout=1",
    )
    assert missing.returncode == 1
    assert (
        f"goby: gobyd's Manager at ipc://{tmp_path}/none.manager did not answer" in missing.stderr
    )
    wrong = discover("--format", "ebus", "--option", "subPort=x")
    assert wrong.returncode == 2 and "option 'subPort' must be a port number" in wrong.stderr
    orphan = discover("--option", "session=x")
    assert orphan.returncode == 2 and "--option needs --format" in orphan.stderr
