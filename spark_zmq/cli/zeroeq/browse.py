"""``zeroeq browse``: list what ZeroConf announces, publishers and subscribers with their
vocabularies."""

from __future__ import annotations

import argparse
import json
import threading
import time
from typing import TYPE_CHECKING

from spark_zmq.cli.common import aligned
from spark_zmq.cli.zeroeq.common import note, vocabulary_of
from spark_zmq.protocols.zeroeq import (
    PUBLISHER_SERVICE,
    SUBSCRIBER_SERVICE,
    Record,
    event_id_text,
    in_session,
    make_zeroconf,
)
from spark_zmq.protocols.zeroeq.announce import txt_variants

if TYPE_CHECKING:
    from zeroconf import ServiceInfo, ServiceStateChange, Zeroconf


COLUMNS = ("kind", "instance", "session", "application", "user", "vocabulary", "management")


class NameCollector:
    """Record names heard while browsing. Only names: resolving a record can wait for the
    network, and the browser's thread should keep taking announcements meanwhile."""

    def __init__(self) -> None:
        self.names: dict[str, str] = {}  # record name -> service type
        self._lock = threading.Lock()

    def __call__(
        self, zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange
    ) -> None:
        from zeroconf import ServiceStateChange

        with self._lock:
            if state_change is ServiceStateChange.Removed:
                self.names.pop(name, None)
            else:
                self.names[name] = service_type

    def snapshot(self) -> dict[str, str]:
        with self._lock:
            return dict(self.names)


def browse(interfaces: tuple[str, ...] | None, seconds: float) -> list[Record]:
    """Every publisher and subscriber record heard within ``seconds``."""
    from zeroconf import ServiceBrowser

    collector = NameCollector()
    zeroconf = make_zeroconf(interfaces)
    try:
        browsers = [
            ServiceBrowser(zeroconf, service, handlers=[collector])
            for service in (PUBLISHER_SERVICE, SUBSCRIBER_SERVICE)
        ]
        time.sleep(seconds)  # announcements come when they come: listen for a while
        for browser in browsers:
            browser.cancel()
        records = [
            heard(zeroconf, name, info)
            for name, service in collector.snapshot().items()
            if (info := zeroconf.get_service_info(service, name, timeout=1000)) is not None
        ]
    finally:
        zeroconf.close()
    return records


def heard(zeroconf: Zeroconf, name: str, info: ServiceInfo) -> Record:
    """The record of ``name`` with the keys of every link's record of it that was heard (a
    reader names a management port on loopback in its loopback record only)."""
    record = Record.parse(name, info.properties)
    txt = dict(record.txt)
    for variant in txt_variants(zeroconf, name):
        for key, value in variant.items():
            txt.setdefault(key, value)
    return Record(record.service, record.instance_name, txt)


def describe(record: Record) -> dict:
    """One record as browse shows it; vocabulary named where its server says, else ids."""
    events = sorted(
        vocabulary_of(record).items(), key=lambda item: (item[1] is None, item[1] or "", item[0])
    )
    return {
        "kind": "publisher" if record.service == PUBLISHER_SERVICE else "subscriber",
        "instance": record.instance_name,
        "session": record.session,
        "application": record.txt.get("application"),
        "user": record.txt.get("user"),
        "vocabulary": [
            {"id": wire.hex(), "text": event_id_text(wire), "name": name} for wire, name in events
        ],
        "vocabulary_request": record.vocabulary_request,
        "management": record.txt.get("management"),
        "txt": dict(record.txt),
    }


def table(rows: list[dict]) -> str:
    """The browsed records, one per line under COLUMNS."""
    return aligned(COLUMNS, ([cell_text(row, column) for column in COLUMNS] for row in rows))


def cell_text(row: dict, column: str) -> str:
    """One table cell: '-' for nothing, so every row has as many words as the header."""
    value = row[column]
    if column == "vocabulary":
        value = ",".join(event["name"] or event["text"] for event in value)
    return str(value) if value else "-"


def run_browse(args: argparse.Namespace) -> int:
    """Finding nothing is an answer, not a failure: exit 0, with a note on stderr."""
    records = [
        record
        for record in browse(args.interfaces, args.timeout)
        if in_session(record.session, args.session)
    ]
    records.sort(key=lambda record: (record.service, record.session or "", record.instance_name))
    rows = [describe(record) for record in records]
    if args.json:
        print(json.dumps(rows, indent=2, ensure_ascii=False))
    elif rows:
        print(table(rows))
    if not rows:
        where = f"in session {args.session!r}" if args.session else "at all"
        note(
            "browse", f"no ZeroEQ publisher or subscriber announced {where} within {args.timeout} s"
        )
    return 0
