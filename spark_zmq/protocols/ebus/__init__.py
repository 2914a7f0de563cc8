"""EBUS: the ``ebus`` format.

``wire``    constants, ports, payload packing (zlib + BSON ``{l: value}``)
``broker``  a broker: the broadcast relay (XSUB/XPUB) and ``routing`` of requests
``client``  one-shot SERVICES/WORKERS questions, and a worker
``format``  what the generic stream reader and writer need (options, columns, decode, encode)
"""

from .broker import BroadcastRelay, Broker
from .client import BrokerError, Worker, ask
from .format import EBus
from .wire import BROKER_CHANNEL, PayloadError, pack, unpack

__all__ = ["BROKER_CHANNEL", "BroadcastRelay", "Broker", "BrokerError", "EBus", "PayloadError",
           "Worker", "ask", "pack", "unpack"]
