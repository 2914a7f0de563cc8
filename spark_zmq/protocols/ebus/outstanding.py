"""What an EBUS client waits for: its requests until answered or expired (resent meanwhile), and
its SERVICES / WORKERS questions. The client's thread alone uses these; callers hold futures.
"""

from __future__ import annotations

from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Answer:
    """What became of one request."""

    request_id: str
    #: REPLY (a worker's result), REJECT (the worker said no) or EXPIRED (no answer within
    #: stalesMs: the broker's REJECT without data, an EXPIRED message, or this client's own
    #: expiry, whichever came first)
    status: str
    #: the data frame as received (packed, or ``null``); None when none came
    data: bytes | None
    #: how many times the request was sent (resends and reconnects included)
    sends: int


@dataclass
class PendingRequest:
    """A request sent (or to be sent) and not answered yet."""

    service: bytes
    request_id: bytes
    data: bytes
    stales_ms: int
    expires: float
    #: who waits for the answer (more than one when the same id is asked again meanwhile)
    futures: list[Future]
    sends: int = 0
    resends_left: int = 0
    next_send: float = 0.0


class Outstanding:
    """The requests and questions of one client that have no answer yet."""

    def __init__(self) -> None:
        self.requests: dict[bytes, PendingRequest] = {}
        self.questions: dict[bytes, tuple[bytes, Future]] = {}

    def add(self, request: PendingRequest, resends: int) -> bool:
        """Track a new request; False when one with its id waits already (a retried task: it
        gets the same answer, and nothing is sent again)."""
        waiting = self.requests.get(request.request_id)
        if waiting is not None:
            waiting.futures.extend(request.futures)
            return False
        request.resends_left = resends
        self.requests[request.request_id] = request
        return True

    def next_due(self) -> float:
        """When a request must be resent or expires next."""
        return min(
            (min(r.next_send, r.expires) for r in self.requests.values()), default=float("inf")
        )

    def answered(self, kind: bytes, args: list[bytes]) -> None:
        """A REPLY, REJECT or EXPIRED for ``args[0]``; one that is not ours is discarded."""
        request = self.requests.pop(args[0], None)
        if request is None:
            return  # not ours, or answered already
        data = args[1] if len(args) > 1 else None
        status = "EXPIRED" if kind == b"REJECT" and data is None else kind.decode()
        _settle(
            request.futures,
            Answer(request.request_id.decode("utf-8", "replace"), status, data, request.sends),
        )

    def question_answered(self, kind: bytes, request_id: bytes, frame: bytes) -> None:
        """Settle the question with this id; an answer without one (the reference broker's to
        its own client's questions) settles the oldest question of its type."""
        if request_id not in self.questions:
            request_id = next(
                (key for key, (question, _) in self.questions.items() if question == kind), b""
            )
        question = self.questions.pop(request_id, None)
        if question is not None:
            _settle([question[1]], frame)

    def expire(self, now: float) -> list[PendingRequest]:
        """Requests past their expiry, settled as EXPIRED and forgotten (the client cancels
        them at the broker)."""
        expired = [r for r in self.requests.values() if now >= r.expires]
        for request in expired:
            del self.requests[request.request_id]
            answer = Answer(
                request.request_id.decode("utf-8", "replace"), "EXPIRED", None, request.sends
            )
            _settle(request.futures, answer)
        return expired

    def fail_all(self, error: Exception) -> None:
        """The client closes: every caller still waiting gets ``error``."""
        waiting = [f for r in self.requests.values() for f in r.futures]
        waiting += [future for _, future in self.questions.values()]
        for future in waiting:
            if not future.done():
                future.set_exception(error)
        self.requests.clear()
        self.questions.clear()


def _settle(futures: list[Future], value: Any) -> None:
    for future in futures:
        try:
            future.set_result(value)
        except InvalidStateError:  # the caller cancelled it meanwhile
            pass
