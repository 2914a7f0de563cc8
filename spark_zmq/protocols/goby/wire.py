"""Goby3 data messages on the wire (``shared/protocols/goby.md``).

A message is one zmq frame: ``/{group}/{scheme}/{type}/{pid}/{thread}/`` + NUL + payload.
Subscriptions are zmq prefixes of that identifier, so a prefix must end with ``/`` for ``Foo``
not to match ``FooBar``. Newer Goby writes a ``/`` inside a group or type name as byte 0x1a,
which keeps the five parts separable; older Goby wrote it as is.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass

#: marshalling schemes by name (CAPTN_PROTO and MSGPACK existed in older Goby)
SCHEMES: dict[str, int] = {"CSTR": 0, "PROTOBUF": 1, "DCCL": 2, "CAPTN_PROTO": 3, "MSGPACK": 4,
                           "CXX_OBJECT": 5, "MAVLINK": 6, "JSON": 7}
SCHEME_NAMES: dict[int, str] = {number: name for name, number in SCHEMES.items()}
#: what newer Goby writes for a "/" inside a group or type name
ESCAPED_SLASH = "\x1a"
#: the type part of a CSTR message
CSTR_TYPE = "CSTR"
#: a pid is an int32 in the Manager's messages
MAX_PID = 2**31 - 1
#: a scheme is a C++ int (and an int32 column)
MAX_SCHEME = 2**31 - 1


class IdentifierError(ValueError):
    """A message or prefix that does not have the form of a Goby identifier."""


@dataclass(frozen=True)
class Identifier:
    """The five parts of an identifier; ``group`` and ``type`` with 0x1a shown as ``/``."""

    group: str
    scheme: str
    scheme_id: int | None
    type: str
    process: int
    thread: str


def scheme_of(text: str) -> tuple[str, int | None]:
    """(name, number) of a scheme written as a name or a decimal number; a name Goby does not
    define has no number."""
    if text.isdecimal() and len(text) <= 10 and int(text) <= MAX_SCHEME:
        number = int(text)
        return SCHEME_NAMES.get(number, text), number
    return text, SCHEMES.get(text)


def scheme_part(scheme: str | int) -> str:
    """The scheme as Goby writes it: its name if it has one, else its decimal number."""
    if isinstance(scheme, int):
        if not 0 <= scheme <= MAX_SCHEME:
            raise IdentifierError(f"scheme {scheme} is negative or over {MAX_SCHEME}")
        return SCHEME_NAMES.get(scheme, str(scheme))
    name, number = scheme_of(scheme.strip())
    if number is None:
        raise IdentifierError(f"unknown scheme {scheme!r}: give one of {', '.join(SCHEMES)} or "
                              f"a number")
    return name


def _escape(name: str) -> str:
    return name.replace("/", ESCAPED_SLASH)


def _unescape(name: str) -> str:
    return name.replace(ESCAPED_SLASH, "/")


def identifier(group: str, scheme: str | int, type_name: str, process: int,
               thread: str) -> bytes:
    """The identifier a C++ Goby client parses: five parts, a trailing ``/``, then the NUL."""
    parts = (_escape(group), scheme_part(scheme), _escape(type_name), str(process), thread)
    if any("\0" in part for part in parts):
        raise IdentifierError("a NUL byte in the group, type or thread: the identifier would "
                              "end there")
    return ("/" + "/".join(parts) + "/\0").encode("utf-8")


def thread_hash(ident: int | None = None) -> str:
    """Lowercase hex of a hash of a thread's id, as Goby writes the thread part."""
    ident = threading.get_ident() if ident is None else ident
    digest = hashlib.blake2b(ident.to_bytes(8, "little", signed=False), digest_size=8).digest()
    return format(int.from_bytes(digest, "little"), "x")


def this_thread_identifier(group: str, scheme: str | int, type_name: str) -> bytes:
    """The identifier of a message sent by this process's current thread."""
    return identifier(group, scheme, type_name, os.getpid(), thread_hash())


def split_message(message: bytes) -> tuple[Identifier, bytes]:
    """The identifier and payload of one message; IdentifierError says what is wrong."""
    head, nul, payload = message.partition(b"\0")
    if not nul:
        raise IdentifierError("no NUL byte after the identifier")
    return parse_identifier(head), payload


def parse_identifier(head: bytes) -> Identifier:
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        raise IdentifierError("identifier is not UTF-8") from None
    if not (text.startswith("/") and text.endswith("/")):
        raise IdentifierError(f"identifier {text!r} does not start and end with '/'")
    parts = text[1:-1].split("/")
    if len(parts) < 5:
        raise IdentifierError(f"identifier {text!r} has {len(parts)} parts; expected five "
                              f"(/group/scheme/type/pid/thread/)")
    # Older Goby wrote a "/" in a type name as is: the type takes the surplus parts.
    group, scheme_text, *type_parts, pid, thread = parts
    if not pid.isdecimal() or not pid.isascii() or len(pid) > 10 or int(pid) > MAX_PID:
        raise IdentifierError(f"identifier {text!r}: process id {pid!r} is not a decimal "
                              f"number (of at most 32 bits)")
    scheme, scheme_id = scheme_of(scheme_text)
    return Identifier(_unescape(group), scheme, scheme_id, _unescape("/".join(type_parts)),
                      int(pid), thread)


def subscription_prefix(text: str) -> bytes:
    """The zmq prefix of a user's subscription: ``/`` for everything, else up to five parts
    completed with the leading and trailing ``/`` (so ``Foo`` never matches ``FooBar``); a
    scheme given as a number is written as Goby writes it."""
    stripped = text.strip()
    if stripped == "/":
        return b"/"
    body = stripped.removeprefix("/").removesuffix("/")
    parts = body.split("/")
    if any(not part for part in parts):
        raise IdentifierError(f"prefix {text!r} has an empty part")
    if len(parts) > 5:
        raise IdentifierError(f"prefix {text!r} has {len(parts)} parts; at most five "
                              f"(/group/scheme/type/pid/thread/)")
    if len(parts) >= 2:
        parts[1] = scheme_part(parts[1])
    return ("/" + "/".join(parts) + "/").encode("utf-8")
