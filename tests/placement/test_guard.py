"""The guard between discovery and capture: endpoints whose key or address is unusable are
refused alone and logged once; at most maxEndpoints are read at once, the rest wait their turn."""

from __future__ import annotations

import logging

import pytest

from spark_zmq.placement.guard import EndpointGuard
from spark_zmq.protocols.contract import Endpoint


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self.events.append(("joined", endpoint.key))

    def endpoint_left(self, key: str) -> None:
        self.events.append(("left", key))


def good(n: int) -> Endpoint:
    return Endpoint(f"p{n}", f"tcp://127.0.0.1:{5000 + n}")


@pytest.mark.parametrize(
    ("key", "address", "why"),
    [
        ("p", "..", "is not a tcp://, ipc:// or inproc:// address"),
        ("p", "tcp://host", "needs host:port"),
        ("p", "tcp://host:70000", "port 70000"),
        ("p", "tcp://-host:1", "host '-host'"),
        ("p", "ipc:///tmp/" + "x" * 200, "a Unix socket path holds at most 107"),
        ("p", "tcp://127.0.0.1:1\nINFO forged", "control characters"),
        ("p", "epgm://eth0;239.1.1.1:5555", "is not a tcp://, ipc:// or inproc:// address"),
        ("", "tcp://127.0.0.1:1", "key is empty"),
        ("a\nforged log line", "tcp://127.0.0.1:1", "control characters"),
        ("k" * 2000, "tcp://127.0.0.1:1", "2000 bytes"),
        ("\ud800", "tcp://127.0.0.1:1", "not valid Unicode"),
    ],
)
def test_an_unusable_endpoint_is_refused_alone_and_logged_once(caplog, key, address, why):
    listener = Recorder()
    guard = EndpointGuard(listener, "fmt", 10)
    with caplog.at_level(logging.WARNING, logger="spark_zmq"):
        for _ in range(3):  # discovery reports it again and again
            guard.endpoint_joined(Endpoint(key, address))
        guard.endpoint_joined(good(1))
    assert listener.events == [("joined", "p1")]
    assert guard.held() == (0, 1), "the metrics' endpoints refused"
    refusals = [r.getMessage() for r in caplog.records if "refused" in r.getMessage()]
    assert len(refusals) == 1 and why in refusals[0], refusals
    assert "\n" not in refusals[0]  # a peer's text cannot forge log lines


def test_an_endpoint_read_that_turns_unusable_leaves():
    listener = Recorder()
    guard = EndpointGuard(listener, "fmt", 10)
    guard.endpoint_joined(good(1))
    guard.endpoint_joined(Endpoint("p1", ".."))
    assert listener.events == [("joined", "p1"), ("left", "p1")]


def test_beyond_max_endpoints_new_ones_wait_their_turn(caplog):
    listener = Recorder()
    guard = EndpointGuard(listener, "fmt", 3)
    with caplog.at_level(logging.WARNING, logger="spark_zmq"):
        for n in range(10):
            guard.endpoint_joined(good(n))
        guard.endpoint_joined(good(1))  # an update of one read: passes
    assert listener.events == [("joined", "p0"), ("joined", "p1"), ("joined", "p2")] + [
        ("joined", "p1")
    ]
    held = [r.getMessage() for r in caplog.records if "maxEndpoints (3)" in r.getMessage()]
    assert len(held) == 1, held  # one line per episode, not one per endpoint
    assert guard.held() == (3, 0), "p3, p4 and p5 wait (the metrics' endpoints waiting)"
    listener.events.clear()
    guard.endpoint_left("p3")  # a waiting one leaves: nothing changes for the listener
    guard.endpoint_left("p1")
    assert listener.events == [("left", "p1"), ("joined", "p4")]  # the first that waited
    guard.endpoint_left("p0")
    guard.endpoint_left("p2")  # p6 on came when 3 were waiting already: not remembered
    assert listener.events[2:] == [("left", "p0"), ("joined", "p5"), ("left", "p2")]


def test_what_the_guard_remembers_of_peers_is_bounded():
    listener = Recorder()
    guard = EndpointGuard(listener, "fmt", 5)
    for n in range(10_000):
        guard.endpoint_joined(good(n % 1000 + 1000 * (n // 1000)))
        guard.endpoint_joined(Endpoint(f"bad{n}", ".."))
    assert len(guard._waiting) <= 5 and len(guard._refused) <= 5
