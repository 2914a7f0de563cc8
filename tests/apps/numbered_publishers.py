"""ZeroEQ publishers that send numbered messages, as a peer on another host for the multi-host
tests (tests/hosts/), run there with ``Host.popen``: they bind every address and announce on each
interface at that interface's address, as the package's writer does with ``bindInterface=*``.

    numbered_publishers.py SESSION COUNT RATE [HOST]

HOST is the address they bind (default ``*``, every address; ``127.0.0.1``: loopback, announced
on ``lo`` only, as a publisher that only its own host may read).

It prints one JSON line per step on stdout: ``{"publishers": [instance names]}`` once announced,
``{"subscribed": true}`` once each publisher has a subscriber (what zmq publishes before that
is dropped), then sends 0, 1, 2, ... on each at RATE messages per second
(``support.sequences.Sender``) until a line (or the end) on stdin, and prints ``{"sent":
{instance name: count}}``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/, for support

from spark_zmq.protocols.zeroeq import Publisher
from support.sequences import Sender

#: how long the publishers wait for a reader (its Spark application's start included)
SUBSCRIBER_TIMEOUT = 400.0


def say(**fields) -> None:
    print(json.dumps(fields), flush=True)


def main(session: str, count: str, rate: str, host: str = "*") -> int:
    publishers = [
        Publisher(session, host=host, interfaces=None, application="numbered")
        for _ in range(int(count))
    ]
    try:
        say(publishers=[p.instance_name for p in publishers])
        for publisher in publishers:
            publisher.wait_for_subscribers(1, timeout=SUBSCRIBER_TIMEOUT)
        say(subscribed=True)
        sender = Sender(publishers, rate=float(rate))
        sys.stdin.readline()
        say(sent=sender.stop())
    finally:
        for publisher in publishers:
            publisher.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
