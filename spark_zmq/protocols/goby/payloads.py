"""Payloads of the schemes that can be shown as text: CSTR, JSON (BSON on the wire) and
PROTOBUF (given a descriptor set of its types).

Decoding a PROTOBUF payload needs its type's descriptor; users hand over a serialized
``FileDescriptorSet`` (``protoc --include_imports --descriptor_set_out=...``). Its pool is built
once per process and file version, since executors decode many batches with it.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from spark_zmq.errors import PayloadError
from spark_zmq.extras import optional
from spark_zmq.protocols.extjson import from_json, to_json

bson = optional("bson")
descriptor_pb2 = optional("google.protobuf.descriptor_pb2")
descriptor_pool = optional("google.protobuf.descriptor_pool")
json_format = optional("google.protobuf.json_format")
message_factory = optional("google.protobuf.message_factory")


def cstr_text(payload: bytes) -> str:
    """The text of a CSTR payload: the C string without its trailing NUL."""
    body = payload[:-1] if payload.endswith(b"\0") else payload
    try:
        return body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PayloadError(f"CSTR payload is not UTF-8: {exc}") from None


def cstr_payload(text: str) -> bytes:
    return text.encode("utf-8") + b"\0"


def bson_json(payload: bytes) -> str:
    """JSON text of a JSON-scheme payload (BSON; types without a JSON equivalent as MongoDB
    extended JSON, as the EBUS format shows them)."""
    decode = bson.decode  # outside the try: a missing bson is not a malformed payload
    try:
        return to_json(decode(payload))
    except Exception as exc:  # bson raises InvalidBSON and friends
        raise PayloadError(f"JSON payload is not a BSON document: {exc}") from None


def json_bson(text: str) -> bytes:
    """The BSON payload of JSON text, which must be an object (BSON documents are)."""
    try:
        value = from_json(text)
    except ValueError as exc:
        raise PayloadError(f"`text` of a JSON row is not JSON text: {exc}") from None
    if not isinstance(value, dict):
        raise PayloadError("`text` of a JSON row must be a JSON object (BSON documents are)")
    encode = bson.encode
    try:
        return encode(value)
    except Exception as exc:  # bson's InvalidDocument
        raise PayloadError(f"`text` of a JSON row cannot be BSON: {exc}") from None


class DescriptorSet:
    """The message types of a serialized FileDescriptorSet, for PROTOBUF payloads to JSON."""

    def __init__(self, data: bytes, name: str) -> None:
        self.name = name
        parse = descriptor_pb2.FileDescriptorSet.FromString  # a missing protobuf is no bad file
        try:
            files = list(parse(data).file)
        except Exception as exc:
            raise ValueError(f"{name} is not a serialized FileDescriptorSet: {exc}") from None
        self.pool = descriptor_pool.DescriptorPool()
        self._add_in_dependency_order(files)
        #: classes of the types found so far: only hits are kept, so the cache holds at most
        #: the set's own types, whatever type names peers send (a miss is asked of the pool
        #: again, a dictionary lookup there)
        self._classes: dict[str, type] = {}

    def _add_in_dependency_order(self, files: list) -> None:
        pending = files
        while pending:
            failed, last_error = [], None
            for file in pending:
                try:
                    self.pool.Add(file)
                except Exception as exc:  # a dependency not added yet, or a bad file
                    failed.append(file)
                    last_error = exc
            if len(failed) == len(pending):
                names = ", ".join(f.name for f in failed)
                raise ValueError(
                    f"{self.name}: cannot load {names} (a missing import? build it "
                    f"with protoc --include_imports): {last_error}"
                )
            pending = failed

    def message_class(self, type_name: str) -> Any:
        """The class of a message type, None when the set does not hold it."""
        found = self._classes.get(type_name)
        if found is None:
            try:
                descriptor = self.pool.FindMessageTypeByName(type_name)
            except (KeyError, TypeError):  # a name the pool does not hold, or cannot take
                return None
            found = self._classes[type_name] = message_factory.GetMessageClass(descriptor)
        return found

    def to_json(self, type_name: str, payload: bytes) -> str | None:
        """JSON text of a payload of ``type_name``; None when the set does not hold the type."""
        cls = self.message_class(type_name)
        if cls is None:
            return None
        try:
            message = cls.FromString(payload)
        except Exception as exc:
            raise PayloadError(f"PROTOBUF payload does not parse as {type_name}: {exc}") from None
        try:  # well-known types refuse some values that parse: a Timestamp out of range, NaN
            return json_format.MessageToJson(message, preserving_proto_field_name=True, indent=None)
        except Exception as exc:  # ValueError, OverflowError, RecursionError, ...
            raise PayloadError(
                f"PROTOBUF payload of {type_name} has no JSON form: {type(exc).__name__}: {exc}"
            ) from None


_sets: dict[tuple[str, int, int], DescriptorSet] = {}
_sets_lock = threading.Lock()


def descriptor_set(path: str) -> DescriptorSet:
    """This process's DescriptorSet of the file at ``path`` (rebuilt when the file changes)."""
    try:
        status = os.stat(path)
    except OSError as exc:
        raise ValueError(f"cannot read {path}: {exc.strerror}") from None
    key = (os.path.abspath(path), status.st_mtime_ns, status.st_size)
    with _sets_lock:
        found = _sets.get(key)
        if found is None:
            with open(path, "rb") as file:
                found = _sets[key] = DescriptorSet(file.read(), path)
        return found
