"""ZeroEQ: the ``zeroeq`` format.

``options``     the format's own options and its frozen reader and writer settings
``wire``        event ids, URIs, sessions (the fact sheet's wire facts)
``publisher``   a publisher as the shipped 0.9 library's, plus the seed's vocabulary
``discovery``   which publishers, and which events of them, a reader reads
``format``      what the generic stream reader and writer need (options, decode, encode)

Extra parts (ZeroEQ's ZeroConf layer and the seed's request/reply services):

``announce``    ZeroConf records of publishers and subscribers, one per interface
``links``       which address each interface's record names (under ``announce``)
``mdns``        mDNS as a ZeroEQ peer writes it (under ``announce``)
``selection``   what the reader reads of one publisher, given the options and management
``subscriber``  what a reader announces of itself over ZeroConf, and its vocabulary server
``reqrep``      request/reply server and client (vocabulary and management port use it)
``vocabulary``  the seed's Vocabulary: registered events, served and announced
``management``  the seed's management port
"""

from spark_zmq.protocols.zeroeq.announce import (
    PublisherRecord,
    Record,
    make_zeroconf,
    resolve_interfaces,
)
from spark_zmq.protocols.zeroeq.format import ZeroEQ
from spark_zmq.protocols.zeroeq.management import ManagementError, manage
from spark_zmq.protocols.zeroeq.publisher import Publisher, SendTimeout
from spark_zmq.protocols.zeroeq.vocabulary import Vocabulary, request_vocabulary
from spark_zmq.protocols.zeroeq.wire import (
    EVENT_ID_BYTES,
    MEERKAT,
    PUBLISHER_SERVICE,
    SUBSCRIBER_SERVICE,
    default_session,
    event_id,
    event_id_text,
    in_session,
    parse_address,
    parse_event,
)

__all__ = [
    "EVENT_ID_BYTES",
    "MEERKAT",
    "PUBLISHER_SERVICE",
    "SUBSCRIBER_SERVICE",
    "ManagementError",
    "Publisher",
    "PublisherRecord",
    "Record",
    "SendTimeout",
    "Vocabulary",
    "ZeroEQ",
    "default_session",
    "event_id",
    "event_id_text",
    "in_session",
    "make_zeroconf",
    "manage",
    "parse_address",
    "parse_event",
    "request_vocabulary",
    "resolve_interfaces",
]
