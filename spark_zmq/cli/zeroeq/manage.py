"""``zeroeq manage``: steer a running reader through its management port."""

from __future__ import annotations

import argparse
import json
import time

import zmq

from spark_zmq.cli.common import CommandError
from spark_zmq.protocols.zeroeq import (
    SUBSCRIBER_SERVICE,
    ManagementError,
    make_zeroconf,
    manage,
)
from spark_zmq.protocols.zeroeq.announce import txt_variants


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
    ``management`` is where its management port listens. A reader announces a record per link
    and names a management port on loopback in its loopback record only, so every record of
    the name heard within ``timeout`` is looked at (``txt_variants``)."""
    if "://" in target:
        return target
    name = f"{target}.{SUBSCRIBER_SERVICE}"
    deadline = time.monotonic() + timeout
    found: list[str] = []
    zeroconf = make_zeroconf(interfaces)
    try:
        info = zeroconf.get_service_info(SUBSCRIBER_SERVICE, name, timeout=int(timeout * 1000))
        while info is not None:
            found = [
                txt["management"] for txt in txt_variants(zeroconf, name) if "management" in txt
            ]
            if found or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        zeroconf.close()
    if info is None:
        raise CommandError(
            f"no subscriber {target!r} answered on ZeroConf within {timeout} s "
            f"(a management port is given as tcp://host:port)"
        )
    if not found:
        raise CommandError(f"subscriber {target!r} announces no management port")
    return found[0]
