"""Where the driver starts capture processes (``capture=executors``): through rounds of claim
tasks on the executors, and itself on its own host.

- **Claim rounds.** Spark gives a Python source no say over where a task runs, nor a list of
  executors, so a round plans several claim tasks (``claims_wanted``), and each starts a capture
  process on the executor it lands on unless one runs there (``claim``). A round is wanted when
  an endpoint has no holder and no capture process of an executor is alive (the query starts,
  or every executor was lost), or when an executor that ran a task (``@executors/``) has no
  capture process (a new executor; asked for ``MAX_ROUNDS_PER_EXECUTOR`` times at most, since
  Spark may never give it a task of the round). Rounds are ``CLAIM_RETRY`` apart at least.
  Takeovers never wait for a round: the live capture processes claim by themselves.
- **On the driver's host.** An endpoint that only the driver's host reaches (``reach``) is
  captured by a capture process on that host: an executor's, where an executor runs there (local
  mode, a worker beside the driver), else one the driver starts itself (``keep_own``) once the
  executors' capture processes are up and none of them is on this host. It needs no claim task,
  and ends with the driver's JVM.
"""

from __future__ import annotations

import threading
import time

from spark_zmq.errors import CaptureError
from spark_zmq.log import logger
from spark_zmq.placement.executors.launch import launch
from spark_zmq.placement.executors.reach import host_local
from spark_zmq.placement.executors.watch import Holding
from spark_zmq.protocols.contract import Endpoint
from spark_zmq.spool.contract import live_executors
from spark_zmq.spool.processes import DRIVER, EXECUTOR, ProcessRecord, serving
from spark_zmq.stream_settings import CaptureSettings

#: seconds between two rounds of claim tasks, and between two starts of the driver's process
CLAIM_RETRY = 3.0
#: most claim tasks in a round (enough to reach every executor of a cluster that has not
#: started its capture processes yet; a task on an executor that has one returns at once)
MAX_CLAIM_TASKS = 16
#: rounds that ask for a capture process on an executor that has none, before it is left alone
MAX_ROUNDS_PER_EXECUTOR = 3
#: seconds an executor that ran a task counts as alive (``@executors/``)
EXECUTOR_WINDOW = 30.0


class CaptureStarts:
    """The driver's decisions to start capture processes (see the module doc). ``host`` and
    ``executor``: the driver's host identity and JVM."""

    def __init__(
        self, name: str, spool_path: str, settings: CaptureSettings, host: str, executor: str
    ) -> None:
        self.name = name
        self.spool_path = spool_path
        self.settings = settings
        self.host = host
        self.executor = executor
        #: why the driver's own capture process did not start (the query fails with it)
        self.failure: CaptureError | None = None
        self._round_at = float("-inf")
        self._asked: dict[str, int] = {}  # executor -> rounds that asked for its process
        self._own_started_at = float("-inf")
        self._launching: threading.Thread | None = None  # starting the driver's own
        self._told: set[str] = set()  # host-local endpoints logged

    def claims_wanted(
        self,
        endpoints: dict[str, Endpoint],
        live: list[ProcessRecord],
        holders: dict[str, Holding],
        retry_now: bool = False,
    ) -> int:
        """How many claim tasks the next round needs (0: no round now). ``retry_now``: for a
        round planned by an earlier run, whatever the time since the last round."""
        now = time.monotonic()
        if not retry_now and now - self._round_at < CLAIM_RETRY:
            return 0
        unheld = set(endpoints) - set(holders)
        if unheld and not any(record.role == EXECUTOR for record in live):
            known = live_executors(self.spool_path, EXECUTOR_WINDOW)
            wanted = max(len(unheld), len(known) + 1, 2)
        else:
            without = self._executors_without_capture(live)
            wanted = len(without) + 1 if without else 0
        if wanted:
            self._round_at = now
        return min(MAX_CLAIM_TASKS, wanted)

    def _executors_without_capture(self, live: list[ProcessRecord]) -> list[str]:
        """Executors that ran a task lately and run no capture process, each counted as asked
        for once more (up to MAX_ROUNDS_PER_EXECUTOR)."""
        served = {record.executor for record in live}
        for executor in served:
            self._asked.pop(executor, None)
        registered = live_executors(self.spool_path, EXECUTOR_WINDOW) - served
        wanting = sorted(e for e in registered if self._asked.get(e, 0) < MAX_ROUNDS_PER_EXECUTOR)
        for executor in wanting:
            self._asked[executor] = self._asked.get(executor, 0) + 1
        return wanting

    def keep_own(
        self,
        endpoints: dict[str, Endpoint],
        live: list[ProcessRecord],
        holders: dict[str, Holding],
    ) -> None:
        """Start the driver's own capture process if an endpoint only this host reaches needs
        it (module doc); a failure to start is kept in ``failure``."""
        local = sorted(key for key, endpoint in endpoints.items() if host_local(endpoint.address))
        self._tell(endpoints, local)
        if all(key in holders for key in local):
            return
        if any(record.host == self.host for record in live):
            return  # a capture process on this host claims them
        if not any(record.role == EXECUTOR for record in live):
            return  # the executors' come first: one may run on this host
        now = time.monotonic()
        if now - self._own_started_at < CLAIM_RETRY:
            return
        lease_timeout = self.settings.lease_timeout
        if serving(self.spool_path, self.executor, DRIVER, lease_timeout):
            return
        if self._launching is not None and self._launching.is_alive():
            return
        self._own_started_at = now
        logger.info(
            "%s: starting a capture process on the driver's host for the endpoints only it reaches",
            self.name,
        )
        # in a thread of its own: the caller renews the assignment, which must not wait for it
        self._launching = threading.Thread(target=self._launch_own, daemon=True)
        self._launching.start()

    def _launch_own(self) -> None:
        try:
            launch(self.spool_path, self.settings, DRIVER, self.executor)
        except CaptureError as exc:
            self.failure = exc

    def _tell(self, endpoints: dict[str, Endpoint], local: list[str]) -> None:
        """One line per endpoint only the driver's host reaches, when it is first assigned."""
        for key in local:
            if key not in self._told:
                self._told.add(key)
                logger.info(
                    "%s: endpoint %s is reachable from the driver's host only: a capture "
                    "process on that host (%s) captures it",
                    self.name,
                    endpoints[key].describe(),
                    self.host,
                )
        self._told &= set(local)
