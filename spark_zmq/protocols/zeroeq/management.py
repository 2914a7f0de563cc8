"""The seed's management port: remote applications tell a running reader to subscribe to, or
unsubscribe from, an event of a publisher, and list its current subscriptions.

A REP socket (loopback unless ``managementUri`` says otherwise) takes requests in ZeroEQ's
request/reply layout, ``[16-byte request type][JSON payload]``:

- ``zeroeq::management::Subscribe`` (the request type is that name's event id), payload
  ``{"publisher": "host:port", "event": E}``: read event E of that publisher;
- ``zeroeq::management::Unsubscribe``, same payload: stop reading it;
- ``zeroeq::management::List``, no payload: the current subscriptions.

``E`` is an event name, a 32-hex wire id or a ``high:low`` id; without ``"event"`` the request
is about every event of the publisher. A publisher named this way is read even when it is not
in the reader's session or not announced at all (it is reached at ``tcp://host:port``).
Replies: type ``zeroeq::management::Reply`` with JSON (``{"ok": true}`` or the list), or
``zeroeq::management::Error`` with ``{"error": "..."}`` for a bad request. Changes are saved in
the spool folder, so they survive a restart of the query from its checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from spark_zmq.errors import PeerError
from spark_zmq.protocols.contract import StateStore
from spark_zmq.protocols.zeroeq.reqrep import ReplyServer, RequestError, request
from spark_zmq.protocols.zeroeq.wire import event_id, parse_address, parse_event
from spark_zmq.security import NO_CURVE, Curve

SUBSCRIBE = event_id("zeroeq::management::Subscribe")
UNSUBSCRIBE = event_id("zeroeq::management::Unsubscribe")
LIST = event_id("zeroeq::management::List")
REPLY = event_id("zeroeq::management::Reply")
ERROR = event_id("zeroeq::management::Error")
ACTIONS = {"subscribe": SUBSCRIBE, "unsubscribe": UNSUBSCRIBE, "list": LIST}
#: stands for "every event of the publisher"
ALL = "*"


class ManagementError(PeerError):
    """A management request that was refused or not answered."""


@dataclass
class Overrides:
    """Per publisher, events added and removed by management requests (hex ids or ALL)."""

    added: dict[str, set[str]] = field(default_factory=dict)
    removed: dict[str, set[str]] = field(default_factory=dict)
    names: dict[str, str] = field(default_factory=dict)  # hex id -> name, when one was given

    def subscribe(self, publisher: str, event: str) -> None:
        self._drop(self.removed, publisher, event)
        self.added.setdefault(publisher, set()).add(event)

    def unsubscribe(self, publisher: str, event: str) -> None:
        self._drop(self.added, publisher, event)
        self.removed.setdefault(publisher, set()).add(event)

    @staticmethod
    def _drop(table: dict[str, set[str]], publisher: str, event: str) -> None:
        events = table.get(publisher, set())
        if event == ALL:
            events.clear()
        events.discard(event)
        if not events:
            table.pop(publisher, None)

    def publishers(self) -> set[str]:
        return set(self.added) | set(self.removed)

    def to_json(self) -> dict:
        return {
            "added": {p: sorted(e) for p, e in self.added.items()},
            "removed": {p: sorted(e) for p, e in self.removed.items()},
            "names": self.names,
        }

    @classmethod
    def from_json(cls, data: dict | None) -> Overrides:
        data = data or {}
        return cls(
            {p: set(e) for p, e in data.get("added", {}).items()},
            {p: set(e) for p, e in data.get("removed", {}).items()},
            dict(data.get("names", {})),
        )


class ManagementPort:
    """Serves management requests for a reader's discovery.

    ``on_change(publisher)`` applies a change to the running query; ``describe()`` gives the
    current subscriptions for the List request. The port binds loopback unless told otherwise;
    with CURVE (a secret key) it serves only clients whose keys are in ``curve.client_keys``,
    and none when that is not set.
    """

    def __init__(
        self,
        bind: str,
        state: StateStore,
        on_change: Callable[[str], None],
        describe: Callable[[], list[dict]],
        curve: Curve = NO_CURVE,
    ) -> None:
        self._state = state
        self._lock = threading.Lock()
        self.overrides = Overrides.from_json(state.load())
        self._on_change = on_change
        self._describe = describe
        self._server = ReplyServer(
            bind,
            {SUBSCRIBE: self._subscribe, UNSUBSCRIBE: self._unsubscribe, LIST: self._list},
            name="zeroeq management port",
            curve=dataclasses.replace(curve, client_keys=curve.client_keys or ()),
        )
        self.address = self._server.address

    def _subscribe(self, payload: bytes) -> tuple[bytes, bytes]:
        return self._change(payload, Overrides.subscribe)

    def _unsubscribe(self, payload: bytes) -> tuple[bytes, bytes]:
        return self._change(payload, Overrides.unsubscribe)

    def _list(self, payload: bytes) -> tuple[bytes, bytes]:
        return REPLY, json.dumps({"subscriptions": self._describe()}).encode()

    def _change(
        self, payload: bytes, change: Callable[[Overrides, str, str], None]
    ) -> tuple[bytes, bytes]:
        try:
            publisher, event, name = parse_request(payload)
        except ValueError as exc:
            return ERROR, json.dumps({"error": str(exc)}).encode()
        with self._lock:
            change(self.overrides, publisher, event)
            if name:
                self.overrides.names[event] = name
            self._state.save(self.overrides.to_json())
        self._on_change(publisher)
        return REPLY, json.dumps({"ok": True, "publisher": publisher, "event": event}).encode()

    def close(self) -> None:
        self._server.close()


def parse_request(payload: bytes) -> tuple[str, str, str | None]:
    """(publisher ``host:port``, hex event id or ALL, event name) of a (un)subscribe request."""
    try:
        body = json.loads(payload or b"null")
    except (ValueError, RecursionError):
        raise ValueError(
            'the payload is not JSON; expected {"publisher": "host:port", "event": "name or id"}'
        ) from None
    if not isinstance(body, dict) or not isinstance(body.get("publisher"), str):
        raise ValueError('expected a JSON object with "publisher": "host:port"')
    host, port = parse_address(body["publisher"])
    event = body.get("event")
    if event is None or event == ALL:
        return f"{host}:{port}", ALL, None
    if not isinstance(event, str) or not event:
        raise ValueError('"event" must be an event name, a 32-hex id or a high:low id')
    wire, name = parse_event(event)
    return f"{host}:{port}", wire.hex(), name


def manage(
    address: str,
    action: str,
    publisher: str | None = None,
    event: str | None = None,
    timeout: float = 5.0,
) -> dict:
    """Send one management request to the reader whose management port is ``address``."""
    body = {} if action == "list" else {"publisher": publisher}
    if event is not None:
        body["event"] = event
    payload = b"" if action == "list" else json.dumps(body).encode()
    try:
        reply_type, reply = request(address, ACTIONS[action], payload, timeout=timeout)
    except RequestError as exc:
        raise ManagementError(f"management port {address}: {exc}") from None
    answer = json.loads(reply or b"{}")
    if reply_type == ERROR:
        raise ManagementError(
            f"management port {address} refused the request: {answer.get('error')}"
        )
    return answer
