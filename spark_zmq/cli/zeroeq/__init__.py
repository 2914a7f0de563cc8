"""``python -m spark_zmq zeroeq publish|subscribe|browse|manage``: ZeroEQ from a shell, without
Spark: send an event, print what publishers send (one JSON line per event), list what ZeroConf
announces, and steer a running reader through its management port. Discovery stays on loopback
unless ``--interfaces`` says otherwise, as the connector's own default does."""

from __future__ import annotations

import argparse

from spark_zmq.cli.common import any_port_arg, count_arg, seconds_arg
from spark_zmq.cli.zeroeq.args import (
    event_arg,
    events_arg,
    interfaces_arg,
    publisher_arg,
    publishers_arg,
)
from spark_zmq.cli.zeroeq.browse import run_browse
from spark_zmq.cli.zeroeq.common import run_zeroeq
from spark_zmq.cli.zeroeq.manage import run_manage
from spark_zmq.cli.zeroeq.publish import run_publish
from spark_zmq.cli.zeroeq.subscribe import run_subscribe

__all__ = ["add_zeroeq_parser", "run_zeroeq"]


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
    parser.add_argument("--count", type=count_arg, default=1, help="times to send (1)")
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
    parser.add_argument("--port", type=any_port_arg, default=0, help="TCP port (default: any free)")
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
    parser.add_argument("--count", type=count_arg, help="stop after this many events")
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
