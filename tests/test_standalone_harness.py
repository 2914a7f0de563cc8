"""The test harness's standalone cluster waits for its workers through what a starting master
answers: nothing yet, then an HTML page where its JSON will be (seen once in a CI-like run: the
setup of five tests failed on it), then the JSON."""

from __future__ import annotations

import json

import pytest

from spark_zmq.testing.standalone import wait_for_workers


def test_waiting_for_workers_goes_through_a_master_that_is_starting(tmp_path) -> None:
    answers = [
        OSError("connection refused"),
        json.JSONDecodeError("Expecting value", "<!DOCTYPE html>", 0),
        {"workers": [{"state": "ALIVE"}]},
        {"workers": [{"state": "ALIVE"}, {"state": "ALIVE"}]},
    ]

    def master_state() -> dict:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    wait_for_workers(master_state, 2, 10.0, tmp_path)
    assert answers == []


def test_waiting_for_workers_names_the_logs_when_they_do_not_come(tmp_path) -> None:
    with pytest.raises(
        RuntimeError, match=f"did not get 2 workers within 0.2 s; see the logs in {tmp_path}"
    ):
        wait_for_workers(lambda: {"workers": [{"state": "ALIVE"}]}, 2, 0.2, tmp_path)
