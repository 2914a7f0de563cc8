"""A writer's publisher: broadcasts through the broker, or (writer option ``service``) requests.

Broadcasts go to the broker's pub port through ``xpub.XPubSender`` (back-pressure rather than
drops). With ``service``, each row is a REQ to that service (``ServiceRequester``).

The requests go through one long-lived ``Client`` per Python worker and option set, so the
client's heartbeats, resends with the same request id and reconnects serve every task. Each
answer becomes an ``Outcome`` the generic writer judges under ``mode``: REPLY is answered,
REJECT (a worker's refusal) refused, EXPIRED (the broker's REJECT without data, or the
client's own expiry after ``stalesMs``) unanswered.
"""

from __future__ import annotations

from concurrent.futures import Future

from spark_zmq.protocols.contract import (
    ANSWERED,
    REFUSED,
    UNANSWERED,
    Outcome,
    Requester,
    SinkPublisher,
)
from spark_zmq.protocols.ebus.client import Client
from spark_zmq.protocols.ebus.options import WriteSettings
from spark_zmq.protocols.ebus.outstanding import Answer
from spark_zmq.protocols.ebus.wire import answer_json
from spark_zmq.protocols.xpub import XPubSender
from spark_zmq.security import NO_CURVE, Curve

_KINDS = {"REPLY": ANSWERED, "REJECT": REFUSED, "EXPIRED": UNANSWERED}


def open_publisher(settings: WriteSettings) -> SinkPublisher | Requester:
    """A requester to ``service`` when the settings name one, else a broadcast publisher."""
    if settings.service is not None:
        return ServiceRequester(
            settings.frontend_address,
            settings.service,
            settings.stales_ms,
            settings.curve,
            max_bytes=settings.max_message_bytes,
        )
    return XPubSender(
        settings.pub_address,
        send_hwm=settings.send_high_water_mark,
        send_timeout=settings.send_timeout,
        curve=settings.curve,
    )


class ServiceRequester(Requester):
    """Sends packed rows to ``service`` through the broker frontend at ``frontend``."""

    def __init__(
        self,
        frontend: str,
        service: str,
        stales_ms: int,
        curve: Curve = NO_CURVE,
        *,
        max_bytes: int,
    ) -> None:
        self.name = f"service {service!r} at {frontend}"
        self.max_bytes = max_bytes  # the writer's maxMessageBytes: what an answer may inflate to
        self.frontend = frontend
        self.service = service
        self.stales_ms = stales_ms
        self.client = Client(frontend, curve=curve)

    def request(self, frames: list[bytes], request_id: str) -> Future:
        outcome: Future = Future()
        answer = self.client.request(
            self.service, frames[0], request_id=request_id, stales_ms=self.stales_ms
        )
        answer.add_done_callback(lambda done: self._resolve(done, outcome))
        return outcome

    def _resolve(self, done: Future, outcome: Future) -> None:
        error = done.exception()
        if error is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(self.outcome_of(done.result()))

    def outcome_of(self, answer: Answer) -> Outcome:
        data = None if answer.data is None else answer_json(answer.data, self.max_bytes)
        about = f"request {answer.request_id} to service {self.service!r} at {self.frontend}"
        if answer.status == "REJECT":
            detail = f"{about} was refused by its worker (REJECT)"
        elif answer.status == "EXPIRED":
            detail = (
                f"{about} got no answer within stalesMs={self.stales_ms} (sent "
                f"{answer.sends} times; a service with no worker holds requests until "
                f"one registers or they expire)"
            )
        else:
            detail = f"{about} was answered"
            if data is None and answer.data not in (None, b"null"):
                detail += " with data that is neither packed nor JSON"
        return Outcome(answer.request_id, answer.status, _KINDS[answer.status], data, detail)

    def close(self) -> None:
        self.client.close()
