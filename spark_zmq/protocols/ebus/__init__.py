"""EBUS: the ``ebus`` format.

``wire``    constants, ports, payload packing (zlib + BSON ``{l: value}``)
``broker``  a broker: the broadcast relay (XSUB/XPUB) and ``routing`` of requests
``format``  what the generic stream reader needs (options, columns, decode)
"""

from .broker import BroadcastRelay, Broker
from .format import EBus
from .wire import BROKER_CHANNEL, PayloadError, pack, unpack

__all__ = ["BROKER_CHANNEL", "BroadcastRelay", "Broker", "EBus", "PayloadError", "pack", "unpack"]
