"""EBUS: the ``ebus`` format.

``wire``       constants, ports, timing, payload packing (zlib + BSON ``{l: value}``)
``broker``     a broker: the broadcast relay (XSUB/XPUB) and ``routing`` of requests
``client``     the long-lived client of a broker's frontend (heartbeats, reconnects, requests)
``worker``     a worker serving one service, for demos and tests
``discovery``  ``channels=services``: a channel per service registered at the broker
``requests``   the request sink: rows sent as requests to a service, answers collected
``format``     what the generic stream reader and writer need (options, columns, decode, encode)
"""

from .broker import BroadcastRelay, Broker
from .client import Answer, BrokerError, Client, ask
from .format import EBus
from .wire import BROKER_CHANNEL, PayloadError, pack, unpack
from .worker import Worker

__all__ = ["Answer", "BROKER_CHANNEL", "BroadcastRelay", "Broker", "BrokerError", "Client",
           "EBus", "PayloadError", "Worker", "ask", "pack", "unpack"]
