"""``python -m spark_zmq zeroeq publish|subscribe|browse|manage``: ZeroEQ from a shell, without
Spark: send an event, print what publishers send (one JSON line per event), list what ZeroConf
announces, and steer a running reader through its management port. Discovery stays on loopback
unless ``--interfaces`` says otherwise, as the connector's own default does.
"""

from __future__ import annotations

import argparse
import base64
import json
import queue
import sys
import threading
import time
from typing import TYPE_CHECKING

import pyarrow as pa
import zmq

from spark_zmq.cli.common import CommandError, aligned
from spark_zmq.cli.discover import MemoryState
from spark_zmq.options import OptionError, Options, comma_list, parse_options
from spark_zmq.protocols.base import Endpoint
from spark_zmq.protocols.zeroeq import (
    PUBLISHER_SERVICE,
    SUBSCRIBER_SERVICE,
    ManagementError,
    Publisher,
    Record,
    ZeroEQ,
    default_session,
    event_id_text,
    in_session,
    make_zeroconf,
    manage,
    parse_address,
    parse_event,
    request_vocabulary,
    resolve_interfaces,
)
from spark_zmq.protocols.zeroeq.reqrep import RequestError
from spark_zmq.stream_options import READER_OPTIONS
from spark_zmq.units import milliseconds

if TYPE_CHECKING:
    from zeroconf import ServiceStateChange, Zeroconf


# -- zeroeq: shared ----------------------------------------------------------------------------

PROG = "python -m spark_zmq zeroeq"
#: the TXT ``Application`` of the CLI's publisher, so browse tells it from a Spark writer
APPLICATION = "spark_zmq-cli"
#: seconds to wait for a vocabulary reply: a peer that does not answer costs only its names
VOCABULARY_TIMEOUT = 1.0
#: seconds to wait for one ZeroConf record's details once its name is known
RECORD_TIMEOUT = 3.0


def note(action: str, message: str) -> None:
    """Progress and errors go to stderr, so stdout carries only results (JSON, tables)."""
    print(f"{PROG} {action}: {message}", file=sys.stderr, flush=True)


def run_zeroeq(args: argparse.Namespace) -> int:
    """Run one zeroeq action; failures become one stderr line and an exit status, and Ctrl-C a
    quiet stop, since these are interactive tools."""
    try:
        return args.run(args)
    except CommandError as exc:
        note(args.action, str(exc))
        return exc.status
    except KeyboardInterrupt:
        return 130


def event_label(wire: bytes, name: str | None) -> str:
    """How messages name an event: its name when known, always its wire id."""
    return f"{name!r} ({wire.hex()})" if name else wire.hex()


def vocabulary_of(record: Record) -> dict[bytes, str | None]:
    """A peer's events: the ids of its TXT record, named by its vocabulary server when that
    answers (the TXT value holds only ids, and only as many as fit in 255 bytes)."""
    events: dict[bytes, str | None] = dict.fromkeys(record.vocabulary)
    if record.vocabulary_request:
        try:
            events.update(request_vocabulary(record.vocabulary_request, VOCABULARY_TIMEOUT))
        except (RequestError, ValueError):
            pass
    return events


# -- zeroeq: argument types (a bad value is a usage error naming the option) --------------------


def interfaces_arg(value: str) -> tuple[str, ...] | None:
    """``all`` (None: every interface) or IPv4 addresses / interface names, checked now so a
    typo is a usage error rather than a failure deep inside ZeroConf."""
    if value.strip().lower() == "all":
        return None
    try:
        names = comma_list(value)
        resolve_interfaces(names)
    except ValueError as exc:
        message = str(exc).removeprefix("discoveryInterfaces: ")
        raise argparse.ArgumentTypeError(f"{value!r}: {message}") from None
    return names


def event_arg(value: str) -> tuple[bytes, str | None]:
    """An event as the reader's ``events`` option takes it: a name, 32 hex or ``high:low``."""
    if not value.strip():
        raise argparse.ArgumentTypeError("an event name or id cannot be empty")
    return parse_event(value.strip())


def events_arg(value: str) -> dict[bytes, str | None]:
    """Comma-separated events -> {wire id: name or None}."""
    try:
        items = comma_list(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: an empty item in the list") from None
    return dict(parse_event(item) for item in items)


def publisher_arg(value: str) -> str:
    """``host:port`` or ``tcp://host:port`` -> ``host:port``, the form management requests and
    publisher instance names use."""
    try:
        host, port = parse_address(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return f"{host}:{port}"


def publishers_arg(value: str) -> list[str]:
    """Comma-separated publishers, each as ``publisher_arg``."""
    try:
        items = comma_list(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r}: an empty item in the list") from None
    return [publisher_arg(item) for item in items]


def positive_int(value: str) -> int:
    if not value.isdigit() or int(value) < 1:
        raise argparse.ArgumentTypeError(f"{value!r} is not a whole number of at least 1")
    return int(value)


def port_arg(value: str) -> int:
    if not value.isdigit() or int(value) > 65535:
        raise argparse.ArgumentTypeError(f"{value!r} is not a TCP port (0 = any free port)")
    return int(value)


def seconds_arg(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} is not a number of seconds (0 or more)")
    return seconds


# -- zeroeq: the parser --------------------------------------------------------------------------


def add_zeroeq_parser(commands: argparse._SubParsersAction) -> None:
    zeroeq = commands.add_parser(
        "zeroeq",
        help="publish, subscribe, browse, manage (ZeroEQ)",
        description="ZeroEQ from a shell, without Spark.",
    )
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--interfaces",
        type=interfaces_arg,
        default=("127.0.0.1",),
        metavar="ADDRESSES",
        help="ZeroConf on these IPv4 addresses or interface names, "
        "comma-separated, or 'all' (default: 127.0.0.1)",
    )
    actions = zeroeq.add_subparsers(dest="action", required=True, metavar="ACTION")
    for add in (add_publish, add_subscribe, add_browse, add_manage):
        add(actions, common)


def add_publish(actions: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = actions.add_parser(
        "publish", parents=[common], help="announce a publisher and send one event COUNT times"
    )
    parser.add_argument(
        "--session",
        help="session to announce in (default: "
        "ZEROEQ_PUB_SESSION, else ZEROEQ_SESSION, else the user name)",
    )
    parser.add_argument(
        "--event",
        required=True,
        type=event_arg,
        metavar="EVENT",
        help="event name, 32-hex wire id or high:low id",
    )
    payload = parser.add_mutually_exclusive_group()
    payload.add_argument(
        "--payload",
        metavar="TEXT",
        help="payload as UTF-8 text (default: none, a one-frame message)",
    )
    payload.add_argument(
        "--payload-file", metavar="FILE", help="payload: the bytes of FILE ('-' for stdin)"
    )
    parser.add_argument("--count", type=positive_int, default=1, help="times to send (1)")
    parser.add_argument(
        "--wait",
        type=seconds_arg,
        default=5.0,
        metavar="SECONDS",
        help="wait this long for a subscriber to the event before sending (5)",
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind and announce; "
        "'*' binds every address and announces the host name (127.0.0.1)",
    )
    parser.add_argument("--port", type=port_arg, default=0, help="TCP port (default: any free)")
    parser.set_defaults(run=run_publish)


def add_subscribe(actions: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = actions.add_parser(
        "subscribe", parents=[common], help="print received events, one JSON line each"
    )
    parser.add_argument(
        "--session",
        help="read the publishers of this session, '' for every "
        "session (default as for publish); not used with --publishers",
    )
    parser.add_argument(
        "--events",
        type=events_arg,
        default={},
        metavar="E1,E2",
        help="events to receive: names or ids (default: every event)",
    )
    parser.add_argument(
        "--publishers",
        type=publishers_arg,
        metavar="HOST:PORT,...",
        help="connect to these publishers instead of discovering them",
    )
    parser.add_argument("--count", type=positive_int, help="stop after this many events")
    parser.add_argument(
        "--timeout",
        type=seconds_arg,
        metavar="SECONDS",
        help="stop after this many seconds (default: no limit)",
    )
    parser.set_defaults(run=run_subscribe)


def add_browse(actions: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = actions.add_parser(
        "browse",
        parents=[common],
        help="list announced publishers and subscribers with their vocabularies",
    )
    parser.add_argument(
        "--session",
        default="",
        help="only records of this session (and those announcing none); default: every session",
    )
    parser.add_argument(
        "--timeout",
        type=seconds_arg,
        default=2.0,
        metavar="SECONDS",
        help="listen for announcements this long (2)",
    )
    parser.add_argument("--json", action="store_true", help="print a JSON list, not a table")
    parser.set_defaults(run=run_browse)


def add_manage(actions: argparse._SubParsersAction, common: argparse.ArgumentParser) -> None:
    parser = actions.add_parser(
        "manage",
        parents=[common],
        help="tell a running reader to (un)subscribe, or list its subscriptions",
    )
    parser.add_argument(
        "target",
        metavar="ADDRESS_OR_SUBSCRIBER",
        help="the reader's "
        "management port (tcp://host:port) or its subscriber instance name "
        "(the UUID browse shows)",
    )
    parser.add_argument("request", choices=("subscribe", "unsubscribe", "list"))
    parser.add_argument(
        "--publisher",
        type=publisher_arg,
        metavar="HOST:PORT",
        help="the publisher to (un)subscribe; needed by those requests",
    )
    parser.add_argument(
        "--event",
        type=event_text_arg,
        metavar="EVENT",
        help="name, 32-hex or high:low id (default: every event of the publisher)",
    )
    parser.add_argument(
        "--timeout",
        type=seconds_arg,
        default=5.0,
        metavar="SECONDS",
        help="wait this long for the subscriber's record and the reply (5)",
    )
    parser.set_defaults(run=run_manage)


def event_text_arg(value: str) -> str:
    """An event passed on as text: the reader parses it, and reports its own errors."""
    event_arg(value)
    return value.strip()


# -- zeroeq publish ------------------------------------------------------------------------------


def run_publish(args: argparse.Namespace) -> int:
    """Announce a publisher, send, and leave only once the messages are out: the publisher has
    its own zmq context, and terminating it waits (up to the socket's linger) for delivery."""
    wire, name = args.event
    payload = read_payload(args.payload, args.payload_file)
    context = zmq.Context()
    try:
        publisher = Publisher(
            args.session,
            host=args.host,
            port=args.port,
            application=APPLICATION,
            interfaces=args.interfaces,
            registered={wire: name},
            context=context,
        )
    except OSError as exc:
        context.destroy(linger=0)
        raise CommandError(str(exc)) from None
    try:
        subscribers = send(publisher, wire, name, payload, args.count, args.wait)
    finally:
        publisher.close()
        context.term()
    print(
        f"published {args.count} x {event_label(wire, name)}, {len(payload)} bytes, from "
        f"{publisher.instance_name} in session {publisher.session!r} to {subscribers} "
        f"subscriber(s)"
    )
    return 0


def read_payload(text: str | None, path: str | None) -> bytes:
    """Text for the common case, a file (or stdin) for binary payloads."""
    if text is not None:
        return text.encode("utf-8")
    if path is None:
        return b""
    if path == "-":
        return sys.stdin.buffer.read()
    try:
        with open(path, "rb") as file:
            return file.read()
    except OSError as exc:
        raise CommandError(f"--payload-file {path}: {exc.strerror}", 2) from None


def send(
    publisher: Publisher, wire: bytes, name: str | None, payload: bytes, count: int, wait: float
) -> int:
    """Send after a subscriber shows up, since zmq drops what is published before a
    subscription arrives; with none, send anyway (the user may be testing just that).
    Returns how many subscribers the event had."""
    try:
        publisher.wait_for_subscribers(1, timeout=wait, event=wire)
    except TimeoutError:
        note(
            "publish",
            f"no subscriber to {event_label(wire, name)} within {wait} s; publishing anyway",
        )
    for _ in range(count):
        publisher.publish(wire, payload)
    return publisher.count_subscribers(wire)


# -- zeroeq subscribe ----------------------------------------------------------------------------


class Subscription:
    """The reader's own discovery and decoding, with one SUB socket per endpoint (a SUB socket
    does not tell which of its peers sent a message, and each line names its publisher).

    Discovery reports endpoints on its own threads; sockets stay on the caller's, so endpoints
    pass through a queue. An endpoint that leaves stays connected: closing its socket could drop
    messages not read yet, and zmq reconnects by itself if it comes back."""

    def __init__(self, options: Options) -> None:
        self.protocol = ZeroEQ()
        self.options = options
        self._joined: queue.Queue[Endpoint] = queue.Queue()
        self.endpoints: dict[str, Endpoint] = {}
        self.sockets: dict[str, zmq.Socket] = {}
        self.poller = zmq.Poller()
        self.discovery = self.protocol.discovery(options, MemoryState())

    # the EndpointListener of discovery (its threads)
    def endpoint_joined(self, endpoint: Endpoint) -> None:
        self._joined.put(endpoint)

    def endpoint_left(self, key: str) -> None:
        pass

    def connect_joined(self) -> None:
        """Connect the endpoints reported since the last call (on the caller's thread)."""
        while not self._joined.empty():
            endpoint = self._joined.get()
            self.endpoints[endpoint.key] = endpoint  # its latest names decode its events
            if endpoint.key in self.sockets:
                continue
            sock: zmq.Socket = zmq.Context.instance().socket(zmq.SUB)
            sock.setsockopt(zmq.RCVHWM, 0)
            sock.setsockopt(zmq.LINGER, 0)
            for prefix in endpoint.subscriptions:
                sock.setsockopt(zmq.SUBSCRIBE, prefix)
            sock.connect(endpoint.address)
            self.sockets[endpoint.key] = sock
            self.poller.register(sock, zmq.POLLIN)
            note("subscribe", f"connected to publisher {endpoint.key}")

    def receive(self, timeout: float) -> list[tuple[str, list[bytes]]]:
        """At most one message of each publisher that has one, waiting up to ``timeout`` s."""
        if not self.sockets:
            time.sleep(timeout)
            return []
        ready = dict(self.poller.poll(milliseconds(timeout)))
        return [(key, sock.recv_multipart()) for key, sock in self.sockets.items() if sock in ready]

    def decode(self, key: str, frames: list[bytes]) -> dict | None:
        """A message as its JSON line's fields, decoded as a query decodes it; None for one
        that is not printed: malformed (noted), or Meerkat and the like, which only the
        subscription's own bookkeeping asked for."""
        endpoint = self.endpoints[key]
        messages = pa.array([frames], pa.list_(pa.binary()))
        decoded = self.protocol.decode(messages, endpoint.source, self.options)
        if decoded.keep is not None and not decoded.keep[0].as_py():
            return None
        error = decoded.error[0].as_py()
        if error is not None:
            note("subscribe", f"publisher {key}: skipped a malformed message: {error}")
            return None
        payload = decoded.payload[0].as_py() or b""
        line = {
            "publisher": key,
            "event_id": decoded.columns["event_id"][0].as_py(),
            "event": decoded.columns["event"][0].as_py(),
        }
        try:
            line["payload"] = payload.decode("utf-8")
        except UnicodeDecodeError:
            line["payload_base64"] = base64.b64encode(payload).decode("ascii")
        return line

    def close(self) -> None:
        self.discovery.close()
        for sock in self.sockets.values():
            sock.close(0)


def subscription_options(args: argparse.Namespace, session: str) -> Options:
    """The reader options that say what ``subscribe``'s arguments say."""
    raw = {"session": session, "managementUri": "none"}
    raw["discoveryInterfaces"] = ",".join(args.interfaces) if args.interfaces else "all"
    if args.events:
        raw["events"] = ",".join(name or wire.hex() for wire, name in args.events.items())
    if args.publishers:
        raw["publishers"] = ",".join(args.publishers)
    try:
        return parse_options("zeroeq", READER_OPTIONS + ZeroEQ.reader_options, raw)
    except OptionError as exc:
        raise CommandError(str(exc), 2) from None


def run_subscribe(args: argparse.Namespace) -> int:
    """Print events until done; finding no publisher, or fewer events than asked for, is a
    failure (exit 1) so scripts can tell an empty wire from a working one."""
    session = default_session() if args.session is None else args.session
    subscription = Subscription(subscription_options(args, session))
    try:
        subscription.discovery.start(subscription)
        received = print_events(subscription, args.count, args.timeout)
    finally:
        subscription.close()
    if not subscription.sockets:
        raise CommandError(
            f"no publisher found in session {session!r} within {args.timeout} s (see 'browse')"
        )
    if args.count is not None and received < args.count:
        raise CommandError(f"received {received} of {args.count} events within {args.timeout} s")
    return 0


def print_events(subscription: Subscription, count: int | None, timeout: float | None) -> int:
    """Print events as they come, until ``count`` of them or ``timeout`` s; how many."""
    deadline = None if timeout is None else time.monotonic() + timeout
    received = 0
    while count is None or received < count:
        wait = 0.1 if deadline is None else min(0.1, deadline - time.monotonic())
        if wait <= 0:
            break
        subscription.connect_joined()
        for instance, frames in subscription.receive(wait):
            line = subscription.decode(instance, frames)
            if line is not None and (count is None or received < count):
                print(json.dumps(line, ensure_ascii=False), flush=True)
                received += 1
    return received


# -- zeroeq browse -------------------------------------------------------------------------------

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
        infos = [
            (name, zeroconf.get_service_info(service, name, timeout=1000))
            for name, service in collector.snapshot().items()
        ]
    finally:
        zeroconf.close()
    return [Record.parse(name, info.properties) for name, info in infos if info is not None]


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


# -- zeroeq manage -------------------------------------------------------------------------------


def run_manage(args: argparse.Namespace) -> int:
    """Check the request here, where a missing option is a usage error, rather than let the
    reader refuse it."""
    if args.request == "list" and (args.publisher or args.event):
        raise CommandError("list takes no --publisher or --event", 2)
    if args.request != "list" and args.publisher is None:
        raise CommandError(f"{args.request} needs --publisher HOST:PORT", 2)
    address = management_address(args.target, args.interfaces, args.timeout)
    try:
        reply = manage(address, args.request, args.publisher, args.event, timeout=args.timeout)
    except ManagementError as exc:
        raise CommandError(str(exc)) from None
    except zmq.ZMQError as exc:
        raise CommandError(f"{address!r} is not a zmq endpoint: {exc}", 2) from None
    print(json.dumps(reply, ensure_ascii=False))
    return 0


def management_address(target: str, interfaces: tuple[str, ...] | None, timeout: float) -> str:
    """A zmq endpoint as it is; anything else names a reader's subscriber record, whose TXT
    ``management`` is where its management port listens."""
    if "://" in target:
        return target
    zeroconf = make_zeroconf(interfaces)
    try:
        info = zeroconf.get_service_info(
            SUBSCRIBER_SERVICE, f"{target}.{SUBSCRIBER_SERVICE}", timeout=int(timeout * 1000)
        )
    finally:
        zeroconf.close()
    if info is None:
        raise CommandError(
            f"no subscriber {target!r} answered on ZeroConf within {timeout} s "
            f"(a management port is given as tcp://host:port)"
        )
    address = Record.parse(info.name, info.properties).txt.get("management")
    if not address:
        raise CommandError(f"subscriber {target!r} announces no management port")
    return address
