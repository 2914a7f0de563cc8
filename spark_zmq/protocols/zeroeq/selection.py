"""What the reader reads of one publisher: a pure function of what is known of it, the query's
options and the management port's overrides.

A publisher is read *automatically* when it is given in ``publishers`` (static) or is in the
query's session (and, with ``compatibleOnly``, its vocabulary shares an event with ``events``);
management requests add events or publishers on top and take events or whole publishers away.
The result is an ``Endpoint``: zmq subscriptions plus metadata (``events``, ``excluded``,
``names``) that decoding uses, or None when nothing of the publisher is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from spark_zmq.protocols.contract import Endpoint
from spark_zmq.protocols.zeroeq.announce import PublisherRecord
from spark_zmq.protocols.zeroeq.management import ALL, Overrides
from spark_zmq.protocols.zeroeq.wire import MEERKAT, event_id, event_id_text, in_session, zmq_host

#: the TXT keys of a publisher's record that its rows carry as metadata
RECORD_METADATA = ("session", "application", "user", "instance")


@dataclass(frozen=True)
class Known:
    """What is known of one publisher: its record (if announced) and its vocabulary."""

    record: PublisherRecord | None
    vocabulary: dict[bytes, str | None]
    static: bool = False


@dataclass(frozen=True)
class Selection:
    """The query's side of the choice: its session, its events (empty: every event) and
    whether a publisher must share one of them (``compatibleOnly``)."""

    session: str
    events: dict[bytes, str | None]
    compatible_only: bool

    def automatic(self, known: Known | None) -> bool:
        """Read without a management request."""
        if known is None:
            return False
        if known.static:
            return True
        record = known.record
        if record is None or not in_session(record.session, self.session):
            return False
        return not self.compatible_only or bool(set(known.vocabulary) & set(self.events))

    def why_not_read(self, known: Known) -> str:
        """Why a publisher with a record is not read, for its one log line."""
        assert known.record is not None
        if not in_session(known.record.session, self.session):
            return f"it is in session {known.record.session!r}, not {self.session!r}"
        if self.compatible_only and not set(known.vocabulary) & set(self.events):
            return "its vocabulary shares no event with option events (compatibleOnly)"
        return "a management request unsubscribed it"

    def origin(self, known: Known | None) -> str:
        """How a read publisher came to be read: static, session or management."""
        if known is not None and known.static:
            return "static"
        return "session" if self.automatic(known) else "management"

    def endpoint(
        self, key: str, known: Known | None, overrides: Overrides | None
    ) -> Endpoint | None:
        """What to read of publisher ``key``, or None for nothing."""
        # copies: the management port's thread changes these sets
        added = set(overrides.added.get(key, ())) if overrides else set()
        removed = set(overrides.removed.get(key, ())) if overrides else set()
        automatic = self.automatic(known)
        if ALL in removed or not (automatic or added):
            return None
        every = (automatic and not self.events) or ALL in added
        base = {wire.hex() for wire in self.events} if automatic else set()
        wanted = set() if every else (base | added) - removed
        if not every and not wanted:
            return None
        metadata = {"publisher": key}
        address = _address(key, known, metadata)
        names = self._names(known, overrides)
        if names:
            metadata["names"] = json.dumps(names, sort_keys=True)
        subscriptions: tuple[bytes, ...]
        if every:
            subscriptions = (b"",)
            if removed:
                metadata["excluded"] = ";".join(sorted(removed))
        else:
            subscriptions = tuple(bytes.fromhex(h) for h in sorted(wanted))
            metadata["events"] = ";".join(sorted(wanted))
        # 0.9 publishers notice subscribers by their Meerkat subscription
        return Endpoint(key, address, metadata, subscriptions + (event_id(MEERKAT),))

    def _names(self, known: Known | None, overrides: Overrides | None) -> dict[str, str]:
        """Event names by hex id: the publisher's vocabulary, then the query's, then
        management's (a later one wins)."""
        names = {
            wire.hex(): name for wire, name in (known.vocabulary if known else {}).items() if name
        }
        names.update({wire.hex(): name for wire, name in self.events.items() if name})
        if overrides:
            names.update(dict(overrides.names))
        return names


def _address(key: str, known: Known | None, metadata: dict[str, str]) -> str:
    """The publisher's zmq address; the record's metadata goes into ``metadata``."""
    if known is not None and known.record is not None:
        for txt_key in RECORD_METADATA:
            if txt_key in known.record.txt:
                metadata[txt_key] = known.record.txt[txt_key]
        return known.record.address
    host, _, port = key.rpartition(":")
    return f"tcp://{zmq_host(host.strip('[]'))}:{port}"


def describe(key: str, endpoint: Endpoint, origin: str) -> dict[str, Any]:
    """One publisher's entry in the management port's List reply."""
    names = json.loads(endpoint.metadata.get("names", "{}"))
    events = endpoint.metadata.get("events")
    return {
        "publisher": key,
        "address": endpoint.address,
        "session": endpoint.metadata.get("session"),
        "application": endpoint.metadata.get("application"),
        "origin": origin,
        "events": "all"
        if events is None
        else [
            {"id": h, "text": event_id_text(bytes.fromhex(h)), "name": names.get(h)}
            for h in events.split(";")
        ],
        "excluded": [h for h in endpoint.metadata.get("excluded", "").split(";") if h],
    }
