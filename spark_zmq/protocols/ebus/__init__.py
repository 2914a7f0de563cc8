"""EBUS: the ``ebus`` format.

``wire``    constants, ports, payload packing (zlib + BSON ``{l: value}``)
``broker``  the broker's broadcast relay (XSUB/XPUB)
``format``  what the generic stream reader needs (options, columns, decode)
"""

from .broker import BroadcastRelay
from .format import EBus
from .wire import BROKER_CHANNEL, PayloadError, pack, unpack

__all__ = ["BROKER_CHANNEL", "BroadcastRelay", "EBus", "PayloadError", "pack", "unpack"]
