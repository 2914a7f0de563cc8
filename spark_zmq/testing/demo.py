"""Demo peers of every format on loopback, publishing temperatures until stopped.

For trying a format without its real system: ``python -m spark_zmq demo --format goby`` starts
the peers and prints the reader options that find them, ready to pass to the jobs
(``--option KEY=VALUE ...``) or to ``readStream.option``. Every peer binds to loopback (or IPC),
except Zyre, which beacons as pyre does (see docs/formats/yamz.md, Networks).

- zeroeq: two publishers in session ``demo``, announced on 127.0.0.1, event ``demo::Temperature``
- ebus:   a broker (ports picked freely), broadcasts on ``demo/temperature``, an ``echo`` service
- goby:   a stand-in gobyd over IPC, JSON messages on group ``demo``
- yamz:   a Zyre node ``demo`` announcing a PUB port ``sensors`` with ``kind=temperature``
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable

import zmq

from spark_zmq.protocols.ebus import Broker, Worker, pack
from spark_zmq.protocols.goby import GobyDaemon, ManagerAddress, identifier, request_router
from spark_zmq.protocols.goby.payloads import json_bson
from spark_zmq.protocols.goby.wire import thread_hash
from spark_zmq.protocols.yamz import ZyreNode
from spark_zmq.protocols.yamz.discovery import HEADER, own_header
from spark_zmq.protocols.yamz.publisher import port_tree
from spark_zmq.protocols.yamz.zyre import DEFAULT_BEACON_PORT
from spark_zmq.protocols.zeroeq import Publisher, make_zeroconf

SESSION = "demo"
EVENT = "demo::Temperature"


def reading(number: int) -> dict:
    """The n-th demo reading: a sequence number and a temperature that goes round."""
    return {"sequence": number, "celsius": round(20 + (number % 10) * 0.5, 1)}


class DemoPeers(ABC):
    """Peers of one format; ``options`` are the reader options that find them."""

    options: dict[str, str]
    _closers: list[Callable[[], None]]

    @abstractmethod
    def send(self, number: int) -> None:
        """Publish reading ``number`` once from every peer."""

    def close(self) -> None:
        for close in reversed(self._closers):
            close()


class ZeroEQDemo(DemoPeers):
    def __init__(self, publishers: int = 2) -> None:
        self._zeroconf = make_zeroconf(("127.0.0.1",))
        self._publishers = [
            Publisher(SESSION, zeroconf=self._zeroconf, application="demo")
            for _ in range(publishers)
        ]
        self._closers = [self._zeroconf.close] + [p.close for p in self._publishers]
        self.options = {"session": SESSION, "discoveryInterfaces": "127.0.0.1"}

    def send(self, number: int) -> None:
        for publisher in self._publishers:
            publisher.publish(EVENT, json.dumps(reading(number)).encode())


class EBusDemo(DemoPeers):
    def __init__(self) -> None:
        self._broker = Broker(frontend_port=0, backend_port=0, pub_port=0, sub_port=0)
        self._worker = Worker(
            f"tcp://127.0.0.1:{self._broker.backend_port}", "echo", lambda data: data
        )
        self._pub: zmq.Socket = zmq.Context.instance().socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.connect(f"tcp://127.0.0.1:{self._broker.pub_port}")
        self._closers = [self._broker.close, self._worker.close, self._pub.close]
        self.options = {
            "subPort": str(self._broker.sub_port),
            "frontendPort": str(self._broker.frontend_port),
            "channels": "demo/",
        }

    def send(self, number: int) -> None:
        self._pub.send_multipart([b"demo/temperature", pack(reading(number))])


class GobyDemo(DemoPeers):
    def __init__(self) -> None:
        folder = tempfile.mkdtemp(prefix="spark_zmq-demo-")
        base = os.path.join(folder, "goby")
        self._daemon = GobyDaemon(socket_name=base)
        router = request_router(ManagerAddress.ipc(socket_name=base), "demo", os.getpid(), 5.0)
        self._pub: zmq.Socket = zmq.Context.instance().socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.connect(router.publish)
        self._identifier = identifier("demo", "JSON", "nlohmann::json", os.getpid(), thread_hash())
        self._closers = [
            lambda: shutil.rmtree(folder, ignore_errors=True),
            self._daemon.close,
            self._pub.close,
        ]
        self.options = {"socketName": base, "subscribe": "/demo/"}

    def send(self, number: int) -> None:
        self._pub.send(self._identifier + json_bson(json.dumps(reading(number))))


class YamzDemo(DemoPeers):
    def __init__(self, beacon_port: int = DEFAULT_BEACON_PORT) -> None:
        self._pub: zmq.Socket = zmq.Context.instance().socket(zmq.PUB)
        self._pub.setsockopt(zmq.LINGER, 0)
        self._pub.bind("tcp://127.0.0.1:*")
        address: str = self._pub.getsockopt_string(zmq.LAST_ENDPOINT)
        header = own_header("demo", port_tree(("sensors",), address, {"kind": "temperature"}))
        self._node = ZyreNode(
            "demo",
            {HEADER: header},
            beacon_port,
            lambda peer: None,
            lambda uuid, name: None,
            lambda error: None,
        ).start()
        self._closers = [self._pub.close, self._node.close]
        self.options = {
            "address": "yamz://demo/sensors?kind=temp.*",
            "beaconPort": str(beacon_port),
        }

    def send(self, number: int) -> None:
        self._pub.send(json.dumps(reading(number)).encode())


DEMOS: dict[str, Callable[[], DemoPeers]] = {
    "zeroeq": ZeroEQDemo,
    "ebus": EBusDemo,
    "goby": GobyDemo,
    "yamz": YamzDemo,
}


def run(
    peers: DemoPeers, rate: float, seconds: float | None, running: Callable[[], bool] = lambda: True
) -> int:
    """Send readings at ``rate`` per second until ``seconds`` pass or ``running()`` is False;
    the number of readings sent."""
    started = time.monotonic()
    number = 0
    while running() and (seconds is None or time.monotonic() - started < seconds):
        peers.send(number)
        number += 1
        time.sleep(max(0.0, started + number / rate - time.monotonic()))
    return number
