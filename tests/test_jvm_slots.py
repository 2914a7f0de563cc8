"""The suite's own bound on tests that start JVMs of their own (``support.jvm_slots``): a worker
waits while every slot is held, and gets one as soon as a holder lets go, or dies."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

from support.jvm_slots import JvmSlots


def test_a_third_taker_of_two_slots_waits_until_one_is_released(tmp_path):
    first, second, third = (JvmSlots(tmp_path, slots=2) for _ in range(3))
    assert first.acquire() < 1 and second.acquire() < 1
    waited: list[float] = []
    taker = threading.Thread(target=lambda: waited.append(third.acquire()))
    taker.start()
    time.sleep(1.5)
    assert waited == []  # both slots are held
    second.release()
    taker.join(10)
    assert waited and waited[0] >= 1.5
    first.release()
    third.release()


def test_the_slot_of_a_process_that_died_is_free_again(tmp_path):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib, time; from support.jvm_slots import JvmSlots; "
            f"slots = JvmSlots(pathlib.Path({str(tmp_path)!r}), slots=1); slots.acquire(); "
            "print('held', flush=True); time.sleep(60)",
        ],
        cwd=str(Path(__file__).parent),
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        waiting = JvmSlots(tmp_path, slots=1)
        waited: list[float] = []
        taker = threading.Thread(target=lambda: waited.append(waiting.acquire()), daemon=True)
        taker.start()
        time.sleep(1)
        assert waited == []
        holder.kill()
        taker.join(10)
        assert waited, "the dead holder's slot was not freed"
        waiting.release()
    finally:
        holder.kill()
        holder.wait()
