"""One error hierarchy: every exception class of the package derives from SparkZmqError, and
from the built-in exception that code outside the package expects of its kind."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import spark_zmq
from spark_zmq.errors import (
    OptionError,
    PayloadError,
    PeerError,
    PeerTimeout,
    ProtocolError,
    SparkZmqError,
    SpoolError,
)


def package_exceptions() -> list[type[BaseException]]:
    found = set()
    for module in pkgutil.walk_packages(spark_zmq.__path__, "spark_zmq."):
        if module.name.endswith("__main__"):
            continue
        for _, value in inspect.getmembers(importlib.import_module(module.name), inspect.isclass):
            if issubclass(value, BaseException) and value.__module__.startswith("spark_zmq."):
                found.add(value)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def test_every_exception_of_the_package_is_a_spark_zmq_error():
    classes = package_exceptions()
    assert len(classes) >= 20
    strays = [
        f"{c.__module__}.{c.__qualname__}" for c in classes if not issubclass(c, SparkZmqError)
    ]
    assert strays == []


@pytest.mark.parametrize(
    "kind, builtin",
    [
        (OptionError, ValueError),
        (ProtocolError, ValueError),
        (PayloadError, ValueError),
        (PeerError, RuntimeError),
        (PeerTimeout, TimeoutError),
        (SpoolError, RuntimeError),
    ],
)
def test_each_kind_is_also_the_builtin_exception_callers_expect(kind, builtin):
    assert issubclass(kind, builtin)


def test_one_payload_error_for_every_protocol():
    from spark_zmq.protocols.ebus import wire
    from spark_zmq.protocols.goby import payloads

    assert wire.PayloadError is payloads.PayloadError is PayloadError
    with pytest.raises(PayloadError, match="not zlib-deflated"):
        wire.unpack(b"garbage", 1024)
