"""mDNS as a ZeroEQ peer writes it, on top of python-zeroconf (imported only by whoever
announces or browses, so that decoding on executors does not pay for it).

- **An instance name is one DNS label, dots included** (``127.0.0.1:45847``), as the shipped
  C++ library announces it through avahi. python-zeroconf (0.154) writes every name split at
  each dot: a different, invalid instance (``127``, ``0``, ``0``, ``1:45847``) that avahi
  rejects (``Failed to split service name``), so a C++ subscriber never found our publishers.
  ``ZeroEQZeroconf`` rewrites those labels in the packets it sends.
- **We withdraw only our records**: see ``own_host_name``.
- **A responder speaks to its own link only.** A ZeroEQZeroconf made for one link (``link``,
  as ``announce.Responders`` makes them) holds records whose addresses are that link's, and
  sends its multicast through that link's socket only. It hears every link, though: its listen
  socket is bound to ``0.0.0.0:5353`` beside the other responders of the host (SO_REUSEPORT),
  and Linux hands such a socket the multicast of every link that any socket joined the group
  on. (``IP_MULTICAST_ALL=0`` would narrow that to its own link, but Linux 6.18 then delivers
  each datagram to one socket of the port only, not always the right one: measured, with
  two responders.) So a question asked for a unicast reply (QU, as python-zeroconf's browsers
  ask first) by a host of another link reaches the loopback responder too, which would answer
  it with loopback's record, 127.0.0.1 in it, on whatever link routes to the asker. A unicast
  reply therefore goes only to a host of the responder's own link (RFC 6762 section 11's
  check of the source address, applied to what we send).
"""

from __future__ import annotations

import secrets
import socket
import threading
from typing import TYPE_CHECKING, Any

from zeroconf import Zeroconf
from zeroconf.const import _MDNS_PORT

from spark_zmq.log import logger

if TYPE_CHECKING:
    from spark_zmq.protocols.zeroeq.links import Link

#: longest DNS label (RFC 1035): an instance name must fit in one
MAX_LABEL_BYTES = 63


def split_labels(name: str) -> bytes:
    """``name`` as python-zeroconf writes it: one length-prefixed label per dot-separated part."""
    return b"".join(
        bytes([len(part)]) + part for part in (piece.encode("utf-8") for piece in name.split("."))
    )


def one_label(name: str) -> bytes:
    """``name`` written as the single label a DNS-SD instance name is (RFC 6763 4.3)."""
    encoded = name.encode("utf-8")
    if len(encoded) > MAX_LABEL_BYTES:
        raise ValueError(
            f"instance name {name!r} is {len(encoded)} bytes; a DNS label holds "
            f"at most {MAX_LABEL_BYTES}"
        )
    return bytes([len(encoded)]) + encoded


#: instance names written as one label at most (peers choose them: the set has a bound)
MAX_ONE_LABEL_NAMES = 4096


class ZeroEQZeroconf(Zeroconf):
    """A Zeroconf that writes the instance names it is told about as one DNS label each.

    Invariant: every packet it sends is byte for byte what python-zeroconf built, except that
    each occurrence of a kept name's split labels is replaced by the one label of the same
    length (a name with ``k`` dots takes ``len + 1`` bytes either way), so offsets and
    compression pointers stay valid. Names read from the network need nothing: python-zeroconf
    joins a label holding dots back into the same string. One made for a ``link`` sends no
    unicast packet to a host outside that link's networks (the module docstring says why)."""

    def __init__(self, *args: Any, link: Link | None = None, **kwargs: Any) -> None:
        self._one_labels: dict[bytes, bytes] = {}
        self._one_labels_lock = threading.Lock()
        #: the one link this instance sends on, when it is a per-link responder (see the
        #: module docstring); None for one that browses several links
        self.link = link
        super().__init__(*args, **kwargs)

    def keep_one_label(self, instance_name: str) -> None:
        """Write ``instance_name`` as one label from now on (no-op without a dot). Names come
        from peers' records: at most MAX_ONE_LABEL_NAMES are kept, the least recently asked
        about going first (discovery calls this again before each question it asks)."""
        if "." in instance_name:
            labels = split_labels(instance_name)
            with self._one_labels_lock:  # lookups run on several threads (``lookups``)
                self._one_labels.pop(labels, None)  # the newest last: the oldest goes first
                self._one_labels[labels] = one_label(instance_name)
                while len(self._one_labels) > MAX_ONE_LABEL_NAMES:
                    del self._one_labels[next(iter(self._one_labels))]

    def async_send(
        self,
        out: Any,
        addr: str | None = None,
        port: int = _MDNS_PORT,
        v6_flow_scope: Any = (),
        transport: Any = None,
    ) -> None:
        if addr is not None and self.link is not None and not self.link.reaches(addr):
            logger.debug("zeroeq: no unicast mDNS reply to %s, which is not on %s", addr, self.link)
            return
        if self._one_labels:
            with self._one_labels_lock:
                relabel = dict(self._one_labels)
            out = _Relabelled(out, relabel)
        super().async_send(out, addr, port, v6_flow_scope, transport)


class _Relabelled:
    """An outgoing DNS message whose packets carry the kept instance names as one label."""

    def __init__(self, out: Any, one_labels: dict[bytes, bytes]) -> None:
        self._out = out
        self._one_labels = one_labels

    def packets(self) -> list[bytes]:
        packets = []
        for packet in self._out.packets():
            for split, joined in self._one_labels.items():
                packet = packet.replace(split, joined)
            packets.append(packet)
        return packets

    def __repr__(self) -> str:
        return repr(self._out)


def own_host_name(port: int) -> str:
    """A host name for an announcement's SRV target that no other responder owns.

    The host's own ``<hostname>.local.`` belongs to its mDNS responder (avahi): announcing
    its address record ourselves would make our goodbyes withdraw a record that is not ours
    (avahi logs ``Received goodbye record for one of our records`` and refreshes it). The port
    and 4 random hex digits keep two announcements of one host apart."""
    short = socket.gethostname().split(".")[0] or "host"
    return f"{short}-{port}-{secrets.token_hex(2)}.local."
