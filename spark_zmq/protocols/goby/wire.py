"""Goby3 data messages on the wire (``shared/protocols/goby.md``).

A message is one zmq frame: ``/{group}/{scheme}/{type}/{pid}/{thread}/`` + NUL + payload.
Subscriptions are zmq prefixes of that identifier, so a prefix must end with ``/`` for ``Foo``
not to match ``FooBar``.

What goby3 3.x (3.0.0 to 3.1.5a, the newest release) does, and so what we do:

- A scheme goes on the wire as its name if the 3.x table has one (CSTR, PROTOBUF, DCCL,
  CXX_OBJECT, MAVLINK, JSON), else as its decimal number: schemes 3 and 4 are ``3`` and ``4``.
  A 3.x subscriber parses any other text with ``stoi`` and aborts, so we never write the names
  ``CAPTN_PROTO``/``MSGPACK`` of the 2019 pre-releases; we read them (as 3 and 4), and accept
  them from users, who get the numbers on the wire.
- A ``/`` inside a group or type is written unescaped by 3.x, which splits the identifier
  wrongly and which no 3.x peer reads back (byte 0x1a is no escape in any goby3 release). The
  writer refuses such names (``IdentifierError``); the reader takes a message with surplus
  parts from the right (``/a/b/CSTR/CSTR/pid/thread/`` is group ``a/b``) when that leaves a
  valid scheme, else gives the type the surplus. Byte 0x1a is an ordinary character.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass

from spark_zmq.errors import ProtocolError, shown

#: marshalling schemes that goby3 3.x writes by name; any other scheme is its decimal number
SCHEMES: dict[str, int] = {
    "CSTR": 0,
    "PROTOBUF": 1,
    "DCCL": 2,
    "CXX_OBJECT": 5,
    "MAVLINK": 6,
    "JSON": 7,
}
SCHEME_NAMES: dict[int, str] = {number: name for name, number in SCHEMES.items()}
#: names of schemes 3 and 4 in goby3's pre-releases (to 3.0.0_beta1, 2019), read but never
#: written: 3.x writes the numbers, and a 3.x subscriber aborts on these names
LEGACY_SCHEMES: dict[str, int] = {"CAPTN_PROTO": 3, "MSGPACK": 4}
#: groups of gobyd's own hold handshake (Goby's tools hide them unless asked to)
INTERNAL_GROUP_PREFIX = "goby::zeromq::_internal"
#: the type part of a CSTR message
CSTR_TYPE = "CSTR"
#: a pid is an int32 in the Manager's messages
MAX_PID = 2**31 - 1
#: a scheme is a C++ int (and an int32 column)
MAX_SCHEME = 2**31 - 1


class IdentifierError(ProtocolError):
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


def scheme_number(text: str) -> int | None:
    """The number of a scheme written as a 3.x name, a pre-release name or a decimal number
    (of at most 32 bits); None for anything else."""
    if text.isdecimal() and text.isascii() and len(text) <= 10 and int(text) <= MAX_SCHEME:
        return int(text)
    return SCHEMES.get(text, LEGACY_SCHEMES.get(text))


def scheme_text(number: int) -> str:
    """A scheme as goby3 3.x writes it: its name if the 3.x table has one, else the number."""
    return SCHEME_NAMES.get(number, str(number))


def scheme_of(text: str) -> tuple[str, int | None]:
    """(as 3.x writes it, number) of a scheme read from the wire; text that is no scheme is
    kept as it is, with no number."""
    number = scheme_number(text)
    return (text, None) if number is None else (scheme_text(number), number)


def scheme_part(scheme: str | int) -> str:
    """The scheme part of an identifier we write, from a user's name or number."""
    if isinstance(scheme, int):
        if not 0 <= scheme <= MAX_SCHEME:
            raise IdentifierError(f"scheme {scheme} is negative or over {MAX_SCHEME}")
        return scheme_text(scheme)
    number = scheme_number(scheme.strip())
    if number is None:
        raise IdentifierError(
            f"unknown scheme {scheme!r}: give one of {', '.join(SCHEMES)} or a number"
        )
    return scheme_text(number)


def identifier(group: str, scheme: str | int, type_name: str, process: int, thread: str) -> bytes:
    """The identifier a C++ Goby client parses: five parts, a trailing ``/``, then the NUL."""
    for what, name in (("group", group), ("type", type_name)):
        if "/" in name:
            raise IdentifierError(
                f"{what} {name!r} contains '/': goby3 writes it unescaped, which splits the "
                f"identifier, and no 3.x peer reads such a message back; rename the {what}"
            )
    parts = (group, scheme_part(scheme), type_name, str(process), thread)
    if any("\0" in part for part in parts):
        raise IdentifierError(
            "a NUL byte in the group, type or thread: the identifier would end there"
        )
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
        raise IdentifierError(f"identifier {shown(text)} does not start and end with '/'")
    parts = text[1:-1].split("/")
    if len(parts) < 5:
        raise IdentifierError(
            f"identifier {shown(text)} has {len(parts)} parts; expected five "
            f"(/group/scheme/type/pid/thread/)"
        )
    group, scheme_part_text, type_name = _name_parts(parts[:-2])
    pid, thread = parts[-2:]
    if not pid.isdecimal() or not pid.isascii() or len(pid) > 10 or int(pid) > MAX_PID:
        raise IdentifierError(
            f"identifier {shown(text)}: process id {shown(pid)} is not a decimal number (of "
            f"at most 32 bits)"
        )
    scheme, scheme_id = scheme_of(scheme_part_text)
    return Identifier(group, scheme, scheme_id, type_name, int(pid), thread)


def _name_parts(parts: list[str]) -> tuple[str, str, str]:
    """(group, scheme, type) of the parts before pid and thread. With surplus parts (a ``/``
    that 3.x wrote unescaped), the group takes them if the scheme is then a valid one (3.x
    writes group names with ``/`` as they are), else the type does."""
    if len(parts) > 3 and scheme_number(parts[-2]) is not None:
        return "/".join(parts[:-2]), parts[-2], parts[-1]
    return parts[0], parts[1], "/".join(parts[2:])


def subscription_prefix(text: str) -> bytes:
    """The zmq prefix of a user's subscription: ``/`` for everything, else up to five parts
    completed with the leading and trailing ``/`` (so ``Foo`` never matches ``FooBar``); a
    scheme, given by name or number, is written as goby3 3.x writes it (``3``, not
    ``CAPTN_PROTO``)."""
    stripped = text.strip()
    if stripped == "/":
        return b"/"
    body = stripped.removeprefix("/").removesuffix("/")
    parts = body.split("/")
    if any(not part for part in parts):
        raise IdentifierError(f"prefix {text!r} has an empty part")
    if len(parts) > 5:
        raise IdentifierError(
            f"prefix {text!r} has {len(parts)} parts; at most five (/group/scheme/type/pid/thread/)"
        )
    if len(parts) >= 2:
        parts[1] = scheme_part(parts[1])
    return ("/" + "/".join(parts) + "/").encode("utf-8")
