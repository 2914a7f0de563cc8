"""The publishers of a Python worker process, shared by its writer tasks, and the window in which
each waits for subscribers.

Each worker keeps one publisher per format and option set for its whole life, so announcements
and subscriber connections survive from one micro-batch to the next; they are closed when the
process exits.
"""

from __future__ import annotations

import atexit
import threading
import time
from typing import TypeVar

import numpy as np

from spark_zmq.log import logger
from spark_zmq.protocols.arrow import distinct_rows
from spark_zmq.protocols.contract import EncodedBatch, Requester, SinkProtocol, SinkPublisher

#: the format's writer settings
W = TypeVar("W")

_publishers: dict[tuple[str, str], SinkPublisher | Requester] = {}
_publishers_lock = threading.Lock()
#: id of a shared publisher -> end of its window for subscribers (see wait_for_subscribers)
_wait_deadlines: dict[int, float] = {}


def shared_publisher(protocol: SinkProtocol[W], settings: W) -> SinkPublisher | Requester:
    """This process's publisher for the format and its writer settings (what shapes the
    publisher: the format's options, its socket's and CURVE's), opened on first use."""
    key = (protocol.name, repr(settings))
    with _publishers_lock:
        publisher = _publishers.get(key)
        if publisher is None:
            publisher = _publishers[key] = protocol.open_publisher(settings, application_name())
            logger.info("%s writer: publisher %s opened in process", protocol.name, publisher.name)
            if len(_publishers) == 1:
                atexit.register(close_publishers)
        return publisher


def application_name() -> str | None:
    """The Spark application's name, as a writer task sees it (a local property of its job);
    None outside a Spark task."""
    try:
        from pyspark import TaskContext

        context = TaskContext.get()
        return context.getLocalProperty("spark.app.name") if context is not None else None
    except Exception:  # outside Spark
        return None


def subscriber_wait_deadline(publisher: SinkPublisher, wait: float) -> float:
    """When ``publisher``'s window for subscribers to connect ends (``time.monotonic()``):
    ``wait`` seconds after the first call for it."""
    with _publishers_lock:
        return _wait_deadlines.setdefault(id(publisher), time.monotonic() + wait)


def close_publishers() -> None:
    with _publishers_lock:
        for publisher in _publishers.values():
            publisher.close()
        _publishers.clear()
        _wait_deadlines.clear()


def first_sends(encoded: EncodedBatch, checked: set[bytes]) -> list[tuple[int, bytes]]:
    """Where the batch first sends each topic that the task has not sent before (row, topic),
    in row order: ``waitForSubscribers`` waits there, as the Python path waits before the
    topic's first message. Adds them to ``checked``."""
    rows, topics = distinct_rows(encoded.topics)
    firsts = np.unique(rows, return_index=True)[1]
    new = [
        (int(first), topic)
        for first, (topic,) in zip(firsts, topics)
        if topic is not None and topic not in checked
    ]
    checked.update(topic for _, topic in new)
    return new


def wait_for_subscribers(publisher: SinkPublisher, topic: bytes, wanted: int, wait: float) -> bool:
    """Wait until ``wanted`` subscriptions match ``topic``, but only within the publisher's
    window: ``wait`` seconds (``waitForSubscribers``) from its first wait. Subscribers get that
    long to connect after a publisher appears; however many events, tasks and batches follow, a
    publisher waits no longer than that in all. False when the window ended short of them.

    The rows are sent anyway then: a publisher cannot tell a subscriber that is late from one
    that never comes, and the subscribers that are there must not lose the batch. The caller
    warns, and the driver's line for the batch names the topic."""
    deadline = subscriber_wait_deadline(publisher, wait)
    while publisher.subscribers(topic) < wanted:
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True
