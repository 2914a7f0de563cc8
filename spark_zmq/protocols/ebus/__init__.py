"""EBUS: the ``ebus`` format.

``options``    the format's own options and its frozen reader and writer settings
``wire``       constants, ports, timing, payload packing (zlib + BSON ``{l: value}``)
``broker``     a broker: the broadcast relay (XSUB/XPUB) and ``routing`` of requests
``client``     the long-lived client of a broker's frontend (heartbeats, reconnects, requests)
``worker``     a worker serving one service, for demos and tests
``discovery``  ``channels=services``: a channel per service registered at the broker
``publisher``  a writer's publisher: broadcasts through the broker, or rows sent as requests to
               a service (answers collected)
``format``     what the generic stream reader and writer need (options, columns, decode, encode)
"""

from spark_zmq.protocols.ebus.broker import BroadcastRelay, Broker
from spark_zmq.protocols.ebus.client import BrokerError, Client, ask
from spark_zmq.protocols.ebus.format import EBus
from spark_zmq.protocols.ebus.outstanding import Answer
from spark_zmq.protocols.ebus.wire import BROKER_CHANNEL, PayloadError, pack, unpack
from spark_zmq.protocols.ebus.worker import Worker

__all__ = [
    "BROKER_CHANNEL",
    "Answer",
    "BroadcastRelay",
    "Broker",
    "BrokerError",
    "Client",
    "EBus",
    "PayloadError",
    "Worker",
    "ask",
    "pack",
    "unpack",
]
