"""``python -m spark_zmq zeroeq ...``: the shell tools, against real sockets and ZeroConf on
loopback (no Spark)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import uuid

import pytest

from spark_zmq.cli import main
from spark_zmq.protocols.zeroeq import SUBSCRIBER_SERVICE, event_id, event_id_text
from spark_zmq.protocols.zeroeq.announce import Announcement, LinkRecord, Responders
from spark_zmq.protocols.zeroeq.management import ManagementPort
from support.common import MemoryState, wait_until

CLI = [sys.executable, "-m", "spark_zmq", "zeroeq"]
ECHO = "cli::test::Echo"


def test_publish_then_subscribe_round_trip():
    subscriber = subprocess.Popen(
        CLI
        + [
            "subscribe",
            "--session",
            "cli-round",
            "--events",
            ECHO,
            "--count",
            "3",
            "--timeout",
            "60",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        published = subprocess.run(
            CLI
            + [
                "publish",
                "--session",
                "cli-round",
                "--event",
                ECHO,
                "--payload",
                "héllo",
                "--count",
                "3",
                "--wait",
                "60",
            ],
            capture_output=True,
            text=True,
            timeout=90,
        )
        out, err = subscriber.communicate(timeout=60)
    finally:
        subscriber.kill()
    assert published.returncode == 0, published.stderr
    assert subscriber.returncode == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    instance = lines[0]["publisher"]
    assert (
        lines
        == [
            {
                "publisher": instance,
                "event_id": event_id(ECHO).hex(),
                "event": ECHO,
                "payload": "héllo",
            }
        ]
        * 3
    )
    assert published.stdout.startswith("published 3 x ")
    assert f"from {instance} in session 'cli-round' to 1 subscriber(s)" in published.stdout


def test_subscribe_to_named_publishers_prints_binary_and_empty_payloads(publishers, capsys):
    publisher = publishers("cli-static")
    wire = event_id("cli::test::Bin")

    def send():
        publisher.wait_for_subscribers(1, timeout=30, event=wire)
        publisher.publish("cli::test::Other", b"not asked for")
        publisher.publish(wire, b"\xff\x00")
        publisher.publish("cli::test::Empty")

    sender = threading.Thread(target=send)
    sender.start()
    status = main(
        [
            "zeroeq",
            "subscribe",
            "--publishers",
            publisher.instance_name,
            "--events",
            f"{event_id_text(wire)},cli::test::Empty",
            "--count",
            "2",
            "--timeout",
            "30",
        ]
    )
    sender.join()
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert status == 0
    assert lines == [
        {
            "publisher": publisher.instance_name,
            "event_id": wire.hex(),
            "event": None,
            "payload_base64": "/wA=",
        },
        {
            "publisher": publisher.instance_name,
            "event_id": event_id("cli::test::Empty").hex(),
            "event": "cli::test::Empty",
            "payload": "",
        },
    ]


def browsed(capsys, *args):
    """browse's JSON rows (in-process, so capsys holds its output)."""
    assert main(["zeroeq", "browse", "--timeout", "1.5", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_browse_shows_a_publisher_with_its_session_and_vocabulary_names(publishers, capsys):
    publisher = publishers("cli-browse", registered={event_id("x::Y"): "x::Y"})

    vocabulary = [
        {"id": event_id("x::Y").hex(), "text": event_id_text(event_id("x::Y")), "name": "x::Y"}
    ]

    def row():  # browse listens for a while: on a loaded machine one round may miss a record
        rows = browsed(capsys, "--session", "cli-browse")
        return next(
            (
                r
                for r in rows
                if r["instance"] == publisher.instance_name and r["vocabulary"] == vocabulary
            ),
            None,
        )

    found = wait_until(row, timeout=60, interval=0, what="the publisher in browse's output")
    assert found["kind"] == "publisher" and found["session"] == "cli-browse"

    def table():
        assert main(["zeroeq", "browse", "--timeout", "1.5", "--session", "cli-browse"]) == 0
        lines = capsys.readouterr().out.splitlines()
        listed = any(
            line.split()[:3] == ["publisher", publisher.instance_name, "cli-browse"]
            and "x::Y" in line
            for line in lines[1:]
        )
        return listed and lines

    lines = wait_until(table, timeout=60, interval=0, what="the publisher in browse's table")
    assert lines[0].split() == [
        "kind",
        "instance",
        "session",
        "application",
        "user",
        "vocabulary",
        "management",
    ]


@pytest.fixture
def reader(zeroconf):
    """A stand-in for a running reader: a management port, announced as a subscriber."""
    ports = []
    port = ManagementPort(
        "tcp://127.0.0.1:*",
        MemoryState(),
        on_change=lambda publisher: None,
        describe=lambda: [ports[0].overrides.to_json()],
    )
    ports.append(port)
    name = str(uuid.uuid4())
    record = LinkRecord(
        name,
        "127.0.0.1",
        int(port.address.rsplit(":", 1)[1]),
        {"session": "cli-manage", "management": port.address},
    )
    announcement = Announcement(
        Responders.borrowing(zeroconf), SUBSCRIBER_SERVICE, lambda link: record
    )
    yield name, port
    announcement.close()
    port.close()


def test_manage_reaches_a_reader_by_address_and_by_subscriber_name(reader, capsys):
    name, port = reader
    assert (
        main(
            [
                "zeroeq",
                "manage",
                port.address,
                "subscribe",
                "--publisher",
                "127.0.0.1:9",
                "--event",
                ECHO,
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out) == {
        "ok": True,
        "publisher": "127.0.0.1:9",
        "event": event_id(ECHO).hex(),
    }
    assert port.overrides.added == {"127.0.0.1:9": {event_id(ECHO).hex()}}
    assert main(["zeroeq", "manage", name, "list", "--timeout", "10"]) == 0
    assert json.loads(capsys.readouterr().out) == {
        "subscriptions": [
            {
                "added": {"127.0.0.1:9": [event_id(ECHO).hex()]},
                "removed": {},
                "names": {event_id(ECHO).hex(): ECHO},
            }
        ]
    }
    rows = wait_until(  # browse listens for a while: on a loaded machine one round may miss it
        lambda: browsed(capsys, "--session", "cli-manage"),
        timeout=30,
        interval=0,
        what="the reader's subscriber record in a browse",
    )
    assert [(r["kind"], r["instance"], r["management"]) for r in rows] == [
        ("subscriber", name, port.address)
    ]


def test_manage_errors_are_one_clear_line(capsys):
    assert main(["zeroeq", "manage", "tcp://127.0.0.1:1", "list", "--timeout", "0.3"]) == 1
    assert capsys.readouterr().err == (
        "python -m spark_zmq zeroeq manage: management port tcp://127.0.0.1:1: no reply from "
        "tcp://127.0.0.1:1 within 0.3 s\n"
    )
    unknown = str(uuid.uuid4())
    assert main(["zeroeq", "manage", unknown, "list", "--timeout", "0.5"]) == 1
    assert f"no subscriber '{unknown}' answered on ZeroConf" in capsys.readouterr().err
    assert main(["zeroeq", "manage", "tcp://127.0.0.1:1", "subscribe"]) == 2
    assert capsys.readouterr().err.endswith("subscribe needs --publisher HOST:PORT\n")


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["subscribe", "--publishers", "127.0.0.1"],
            "argument --publishers: '127.0.0.1' has no port",
        ),
        (["subscribe", "--events", "a,,b"], "argument --events: 'a,,b': an empty item in the list"),
        (
            ["publish", "--event", "x", "--count", "0"],
            "argument --count: '0' is not a whole number",
        ),
        (["browse", "--interfaces", "nosuch0"], "argument --interfaces: 'nosuch0': no interface"),
    ],
)
def test_usage_errors_exit_2_naming_the_option(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main(["zeroeq", *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_subscribe_without_publishers_says_so(capsys):
    assert main(["zeroeq", "subscribe", "--session", "cli-nobody", "--timeout", "1"]) == 1
    assert capsys.readouterr().err == (
        "python -m spark_zmq zeroeq subscribe: no publisher found "
        "in session 'cli-nobody' within 1.0 s (see 'browse')\n"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["ebus", "services", "--frontend-port", "99999"], "'99999' is not a TCP port"),
        (["ebus", "services", "--timeout", "-1"], "'-1' is not a number of seconds (more than 0)"),
        (["goby", "subscribe", "--count", "0"], "'0' is not a whole number of at least 1"),
        (["goby", "daemon", "--tcp-port", "x"], "'x' is not a TCP port (0 = any free port)"),
        (["demo", "--format", "goby", "--rate", "inf"], "'inf' is not a rate per second"),
        (["discover", "--seconds", "nan"], "'nan' is not a number of seconds (more than 0)"),
    ],
)
def test_every_tools_numbers_are_checked_by_the_options_parsers(capsys, args, message):
    with pytest.raises(SystemExit) as exit_:
        main(args)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
