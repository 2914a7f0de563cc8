"""Goby3 for the tests: what a C++ Goby client parses and sends, written from the fact sheet
(a client of gobyd's Manager by hand-built bytes, the hold handshake's identifiers), and payloads
spelled out from the protobuf and BSON specifications."""

from __future__ import annotations

import re
import time

import zmq
from google.protobuf import descriptor_pb2

from spark_zmq.protocols.goby.messages import manager_messages

ManagerRequest = manager_messages().ManagerRequest
ManagerResponse = manager_messages().ManagerResponse

#: what a C++ Goby client parses: /group/scheme/type/decimal pid/hex thread/ NUL
GOBY_IDENTIFIER = re.compile(rb"^/([^/]+)/([^/]+)/([^/]+)/(\d+)/([0-9a-f]+)/\x00")
HOLD_REQUEST = (
    b"/goby::zeromq::_internal_manager_request/PROTOBUF/goby.zeromq.protobuf.ManagerRequest/"
)
HOLD_RESPONSE = (
    b"/goby::zeromq::_internal_manager_response/PROTOBUF/goby.zeromq.protobuf.ManagerResponse/"
)
#: BSON of {"depth": 5} (int32), from the BSON spec
BSON_DEPTH_5 = bytes.fromhex("10000000106465707468000500000000")
#: test.NavStatus{x: 1.5, name: "auv"} in the protobuf encoding
NAV_STATUS = bytes.fromhex("09000000000000f83f1203") + b"auv"


def ask_raw(endpoint: str, frame: bytes, timeout: float = 10.0) -> bytes:
    sock = zmq.Context.instance().socket(zmq.REQ)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    try:
        sock.send(frame)
        assert sock.poll(timeout * 1000), f"no answer from {endpoint}"
        return sock.recv()
    finally:
        sock.close(0)


class RawClient:
    """A Goby client from the fact sheet alone: Manager exchange by hand-built bytes, then a
    PUB on the XSUB and a SUB on the XPUB."""

    def __init__(self, manager_endpoint: str, name: str, pid: int) -> None:
        self.name, self.pid = name, pid
        request = ManagerRequest(request=1, client_name=name, client_pid=pid)
        reply = ManagerResponse.FromString(ask_raw(manager_endpoint, request.SerializeToString()))
        self.pub = zmq.Context.instance().socket(zmq.PUB)
        self.sub = zmq.Context.instance().socket(zmq.SUB)
        for sock in (self.pub, self.sub):
            sock.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.SUBSCRIBE, HOLD_RESPONSE)
        self.pub.connect("ipc://" + reply.publish_socket.socket_name)
        self.sub.connect("ipc://" + reply.subscribe_socket.socket_name)

    def hold_state(self, ready: bool, until: bool | None = None) -> tuple[bytes, bool]:
        """Ask every 100 ms until gobyd answers this client (with ``until``, if given: answers
        to earlier requests may still be on their way): (answer's identifier, hold)."""
        request = ManagerRequest(request=2, client_name=self.name, client_pid=self.pid, ready=ready)
        frame = HOLD_REQUEST + f"{self.pid}/1a2b/".encode() + b"\0" + request.SerializeToString()
        deadline = time.monotonic() + 30
        answer = None
        while time.monotonic() < deadline:
            self.pub.send(frame)
            if self.sub.poll(100):
                head, _, payload = self.sub.recv().partition(b"\0")
                answer = ManagerResponse.FromString(payload)
                if (answer.client_name, answer.client_pid) == (self.name, self.pid) and until in (
                    None,
                    answer.hold,
                ):
                    return head + b"\0", answer.hold
        raise AssertionError(f"gobyd did not answer the hold request as expected: {answer}")

    def close(self) -> None:
        self.pub.close(0)
        self.sub.close(0)


def write_descriptor_set(path) -> str:
    """A FileDescriptorSet of ``test.NavStatus {double x = 1; string name = 2;}``."""
    F = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="test/nav.proto", package="test", syntax="proto2"
    )
    message = proto.message_type.add(name="NavStatus")
    message.field.add(name="x", number=1, label=F.LABEL_OPTIONAL, type=F.TYPE_DOUBLE)
    message.field.add(name="name", number=2, label=F.LABEL_OPTIONAL, type=F.TYPE_STRING)
    path.write_bytes(descriptor_pb2.FileDescriptorSet(file=[proto]).SerializeToString())
    return str(path)
