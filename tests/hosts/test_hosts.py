"""The multi-host fixture (``spark_zmq.testing.hosts``) behaves like separate hosts: private
``/tmp``, one shared folder, names that resolve everywhere, TCP and mDNS across the bridge and
nowhere else, a link that can be cut, a power loss that leaves nothing running and sends
nothing; and a Spark cluster across the hosts runs the package's capture job end to end."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest

from spark_zmq.spool.reader import read_range, read_snapshot
from spark_zmq.testing.hosts import Host, HostCluster, Network
from support.common import ROOT, wait_until
from support.docs import printed_pattern, walkthrough
from support.holders import held_partitions
from support.jobs import Lines, job_file
from support.sequences import (
    ECHO,
    check_every_hole_has_a_gap_row,
    check_exactly_once,
    gap_ends,
    sequences,
    wait_for_all_sent,
)

PYTHON = sys.executable
NUMBERED_PUBLISHERS = ROOT / "tests" / "apps" / "numbered_publishers.py"

#: writes argv[2] to the file argv[1] in the temporary folder, prints the file's path
WRITE_TEMPORARY = (
    "import pathlib, sys, tempfile\n"
    "path = pathlib.Path(tempfile.gettempdir(), sys.argv[1])\n"
    "path.write_text(sys.argv[2])\n"
    "print(path)\n"
)
#: prints "<host name> <the contents of each argv file, or -, on one line each>"
READ_FILES = (
    "import pathlib, socket, sys\n"
    "print(socket.gethostname())\n"
    "for name in sys.argv[1:]:\n"
    "    path = pathlib.Path(name)\n"
    "    print(path.read_text() if path.exists() else '-')\n"
)
#: listens on every address at port argv[1]; answers each connection with "<its host name>
#: <the client's address>", or, with argv[2] == "hold", keeps the first connection open
SERVE = (
    "import socket, sys, time\n"
    "server = socket.create_server(('0.0.0.0', int(sys.argv[1])))\n"
    "print('listening', flush=True)\n"
    "while True:\n"
    "    connection, (client, _) = server.accept()\n"
    "    if sys.argv[2:] == ['hold']:\n"
    "        time.sleep(3600)\n"
    "    connection.sendall(f'{socket.gethostname()} {client}'.encode())\n"
    "    connection.close()\n"
)
#: connects to argv[1]:argv[2] within argv[3] s; prints "connected <the server's answer>",
#: "unreachable" (no answer: a timeout, or no ARP reply) or "refused"
CONNECT = (
    "import errno, socket, sys\n"
    "try:\n"
    "    with socket.create_connection((sys.argv[1], int(sys.argv[2])), float(sys.argv[3])) as s:\n"
    "        print('connected', s.recv(200).decode())\n"
    "except ConnectionRefusedError:\n"
    "    print('refused')\n"
    "except TimeoutError:\n"
    "    print('unreachable')\n"
    "except OSError as exc:\n"
    "    print('unreachable' if exc.errno == errno.EHOSTUNREACH else repr(exc))\n"
)
#: connects to argv[1]:argv[2], prints "connected", then waits argv[3] s for the server:
#: prints "silent" if nothing came, "closed" on a FIN, "reset" on a RST
WATCH = (
    "import socket, sys\n"
    "s = socket.create_connection((sys.argv[1], int(sys.argv[2])), 5)\n"
    "print('connected', flush=True)\n"
    "s.settimeout(float(sys.argv[3]))\n"
    "try:\n"
    "    print('closed' if s.recv(1) == b'' else 'data')\n"
    "except TimeoutError:\n"
    "    print('silent')\n"
    "except ConnectionResetError:\n"
    "    print('reset')\n"
)
PORT = 5555


def python_on(host: Host, script: str, *args: str, timeout: float = 60) -> str:
    """Runs a Python ``script`` on ``host``; its stdout."""
    done = host.run([PYTHON, "-c", script, *args], capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stderr
    return done.stdout


def serve(host: Host, *mode: str) -> subprocess.Popen:
    """``SERVE`` on ``host``, once it listens."""
    server = host.popen([PYTHON, "-c", SERVE, str(PORT), *mode], stdout=subprocess.PIPE, text=True)
    assert server.stdout is not None
    assert server.stdout.readline() == "listening\n"
    return server


def connect(client: Host, server: str, timeout: float = 2.0) -> str:
    return python_on(client, CONNECT, server, str(PORT), str(timeout)).strip()


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.kill()
    process.wait()


def test_each_host_has_a_private_tmp_and_every_host_sees_the_shared_folder(network, tmp_path):
    driver, worker = network["driver"], network["worker1"]
    marker = f"marker-{uuid.uuid4().hex}"
    private = python_on(driver, WRITE_TEMPORARY, marker, "driver's").strip()
    shared = network.shared / marker
    driver.run(["sh", "-c", f"echo -n driver > {shared}"], check=True)
    assert private == f"/tmp/{marker}"  # tempfile's default, on the host's own tmpfs
    assert python_on(driver, READ_FILES, private, str(shared)).split("\n")[:3] == [
        "driver",
        "driver's",
        "driver",
    ]
    # another host, and this process, do not see the driver's /tmp; everyone sees shared/
    assert python_on(worker, READ_FILES, private, str(shared)).split("\n")[:3] == [
        "worker1",
        "-",
        "driver",
    ]
    assert not Path(private).exists() and shared.read_text() == "driver"
    # the test's own tmp_path (under /tmp, outside the network's folder) is not on the hosts
    (tmp_path / "mine").write_text("test")
    assert python_on(worker, READ_FILES, str(tmp_path / "mine")).split("\n")[:2] == [
        "worker1",
        "-",
    ]


def test_hosts_have_their_names_and_reach_each_other_by_name_over_tcp(network):
    for name, host in network.hosts.items():
        assert python_on(host, "import socket; print(socket.gethostname())").strip() == name
    server = serve(network["master"])
    try:
        for client in (network["worker1"], network["peers"], network["master"]):
            answer = connect(client, "master")
            # the server sees the client's own address: it came over the bridge, not loopback
            assert answer == f"connected master {client.address}", answer
    finally:
        stop(server)


def test_this_process_sees_only_loopback(network):
    """The hosts' veths are made in their namespaces and the bridge's, never in the test's;
    and the test's namespace does not reach theirs."""
    assert [name for _, name in socket.if_nameindex()] == ["lo"]
    with pytest.raises(OSError):
        socket.create_connection((network["master"].address, PORT), timeout=1)


def test_a_zeroeq_publisher_on_peers_is_found_by_mdns_from_driver(network):
    """The package's CLI on two hosts: the subscriber on ``driver`` knows only the session;
    it finds the publisher of ``peers`` by mDNS across the bridge and connects to it by its
    host name."""
    session = f"hosts-{uuid.uuid4().hex[:8]}"
    publisher = network["peers"].popen(
        [PYTHON, "-m", "spark_zmq", "zeroeq", "publish", "--session", session]
        + ["--event", ECHO, "--payload", "across", "--host", "*", "--interfaces", "all"]
        + ["--wait", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        subscribed = network["driver"].run(
            [PYTHON, "-m", "spark_zmq", "zeroeq", "subscribe", "--session", session]
            + ["--interfaces", "all", "--count", "1", "--timeout", "60"],
            capture_output=True,
            text=True,
            timeout=90,
        )
        published, errors = publisher.communicate(timeout=90)
    finally:
        stop(publisher)
    assert subscribed.returncode == 0, subscribed.stderr
    [line] = [json.loads(text) for text in subscribed.stdout.splitlines()]
    peers = network["peers"].address  # a publisher bound to every interface: each link's own
    assert line["publisher"].startswith(f"{peers}:") and line["payload"] == "across", line
    assert f"from {line['publisher']} in session" in published, published + errors
    assert "to 1 subscriber(s)" in published, published + errors


def test_a_cut_link_makes_a_host_unreachable_until_it_is_restored(network):
    peers, driver = network["peers"], network["driver"]
    server = serve(peers)
    try:
        assert connect(driver, "peers") == f"connected peers {driver.address}"
        peers.cut_link()
        try:
            assert connect(driver, "peers") == "unreachable"
            assert connect(peers, "driver") == "unreachable"
            assert server.poll() is None  # the host itself runs on
        finally:
            peers.restore_link()
        assert wait_until(
            lambda: connect(driver, "peers").startswith("connected"), timeout=30, what="peers"
        )
    finally:
        stop(server)


def watch_power_loss(network: Network, victim: Host, lose_power: Callable[[], None]) -> str:
    """What a client on ``peers``, connected to a server on ``victim``, sees in the 5 s after
    ``lose_power``, in which ``victim`` is unreachable and then has its link back: "silent"
    (nothing, as when a host lost power and started again), "closed" or "reset"."""
    server = serve(victim, "hold")
    watcher = network["peers"].popen(
        [PYTHON, "-c", WATCH, victim.name, str(PORT), "5"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert watcher.stdout is not None and watcher.stdout.readline() == "connected\n"
        lose_power()
        assert connect(network["driver"], victim.name, timeout=1) == "unreachable"
        victim.restore_link()
        seen, _ = watcher.communicate(timeout=30)
    finally:
        stop(watcher)
        stop(server)
    return seen.strip()


def test_power_off_kills_every_process_of_the_host_and_nothing_else(network):
    """Every process of the host goes (one Popen knows, one it started in a session of its
    own, one that detached), with the link cut first: a peer's connection hears nothing, even
    once the link is back (the host's kernel forgot the connection, as a restarted host has).
    The other hosts' processes run on. The control: a host whose processes are killed with
    its link cut, but whose kernel keeps its sockets, closes the peer's connection once its
    link is back (its FIN is sent again)."""
    victim, control = network.add_hosts("victim", "control")
    bystander = network["peers"].popen(["sleep", "600"])
    sleeper = victim.popen(["sh", "-c", "setsid sleep 600 & exec sleep 600"])
    try:
        wait_until(lambda: len(victim.processes()) == 2, what="the victim's two sleeps")
        before = set(victim.processes())
        assert sleeper.pid in before
        assert watch_power_loss(network, victim, victim.power_off) == "silent"
        assert victim.processes() == []
        assert not any(os.path.exists(f"/proc/{pid}/ns/net") for pid in before)
        assert connect(network["driver"], "victim") == "refused"  # up again, running nothing
        assert bystander.poll() is None and bystander.pid in network["peers"].processes()
        for name in ("master", "worker1", "worker2", "driver", "peers", "control"):
            assert python_on(network[name], "print('up')") == "up\n"

        def unplug_and_kill() -> None:
            control.cut_link()
            control.kill_processes()

        assert watch_power_loss(network, control, unplug_and_kill) in ("closed", "reset")
    finally:
        stop(bystander)
        stop(sleeper)


class NumberedPublishers:
    """``tests/apps/numbered_publishers.py`` on ``host``: ``count`` publishers of ``session``
    bound to ``bind``, each sending ``rate`` numbered messages a second once they all have a
    subscriber, until ``stop``."""

    def __init__(self, host: Host, session: str, count: int, rate: float, bind: str = "*") -> None:
        command = [PYTHON, str(NUMBERED_PUBLISHERS), session, str(count), str(rate), bind]
        self.output = Lines(
            host.popen(
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        found = wait_until(lambda: self.output.lines[:1], what="the publishers' names")
        self.names: list[str] = json.loads(found[0])["publishers"]

    def wait_subscribed(self, job: subprocess.Popen, job_lines: Lines) -> None:
        """Until every publisher has a subscriber (they send from then on); fails at once if
        the job or the publishers end first."""
        process = self.output.process
        wait_until(
            lambda: (
                len(self.output.lines) > 1 or process.poll() is not None or job.poll() is not None
            ),
            timeout=400,
            what="a subscriber on every publisher",
        )
        assert job.poll() is None, job_lines.errors()
        assert json.loads(self.output.lines[1]) == {"subscribed": True}, self.output.errors()

    def stop(self) -> dict[str, int]:
        """Stop sending: how many messages each sent."""
        stdin = self.output.process.stdin
        assert stdin is not None
        stdin.write("stop\n")
        stdin.flush()
        self.output.wait(30)
        return json.loads(self.output.lines[2])["sent"]

    def close(self) -> None:
        stop(self.output.process)


def submit_capture_job(cluster: HostCluster, session: str, out: Path, *options: str) -> Lines:
    """The capture job submitted from ``driver``: ZeroEQ session ``session`` with ``options``
    (``key=value``) into a table and checkpoint under ``out`` (in the shared folder)."""
    return Lines(
        cluster.submit(
            job_file("capture_to_parquet"),
            *("--format", "zeroeq", "--option", f"session={session}"),
            *(argument for option in options for argument in ("--option", option)),
            *("--output", str(out / "table"), "--checkpoint", str(out / "checkpoint")),
            *("--trigger", "1"),
            log_level="WARNING",
        )
    )


def end_job(job: Lines) -> None:
    """Stop a job as a user does (SIGTERM); SIGKILL its process group if it has not ended
    within 60 s (a driver whose executor's host is gone may wait on it)."""
    if job.process.poll() is None:
        os.killpg(job.process.pid, signal.SIGTERM)
    try:
        job.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(job.process.pid, signal.SIGKILL)
        job.wait(30)
        print(f"the job did not end within 60 s of SIGTERM; killed:\n{job.errors()[-2000:]}")


class CaptureRun(NamedTuple):
    """What ``run_capture_job`` saw: the publishers' names, what each sent, the table's
    rows, the job's lines, when every message was read and the executors by worker host."""

    names: list[str]
    sent: dict[str, int]
    rows: list
    lines: Lines
    read_after: float
    executors: dict[str, int]


def run_capture_job(
    network: Network, cluster: HostCluster, spark, session: str, out: Path, *options: str
) -> CaptureRun:
    """Three numbered publishers on ``peers`` (session ``session``, 200 msg/s each), read for
    10 s by the capture job submitted from ``driver`` with ``options`` (``key=value``) into
    a table and checkpoint under ``out`` (in the shared folder); every message read once."""
    publishers_count, rate, seconds = 3, 200, 10
    publishers = NumberedPublishers(network["peers"], session, publishers_count, rate)
    started = time.monotonic()
    job = submit_capture_job(cluster, session, out, *options)
    try:
        publishers.wait_subscribed(job.process, job)
        executors = check_executors_on_workers(cluster, network)
        time.sleep(seconds)
        sent = publishers.stop()
        rows = wait_for_all_sent(spark, out / "table", sent, timeout=180)
        read = time.monotonic() - started
    finally:
        end_job(job)
        publishers.close()
    print(f"every message read {read:.1f} s after spark-submit; sent {sent}; executors {executors}")
    names, peers = publishers.names, network["peers"].address
    assert sorted(sent) == sorted(names) and all(n.startswith(f"{peers}:") for n in names)
    check_exactly_once(rows, sent, moved=set())
    assert {key: sorted(seqs) for key, seqs in sequences(rows).items()} == {
        key: list(range(count)) for key, count in sent.items()
    }, job.errors()
    assert sum(sent.values()) >= publishers_count * rate * seconds // 2
    assert not [row for row in rows if row.error is not None]
    return CaptureRun(names, sent, rows, job, read, executors)


#: prints each spool folder matching the glob argv[1] and where it is served (its served.json's
#: location, or -), one line each
SPOOLS = (
    "import glob, json, os, sys\n"
    "for folder in sorted(glob.glob(sys.argv[1])):\n"
    "    served = os.path.join(folder, 'served.json')\n"
    "    where = json.load(open(served))['location'] if os.path.exists(served) else '-'\n"
    "    print(folder, where)\n"
)


def spools_on(host: Host, pattern: str) -> dict[str, str]:
    """Spool folders matching ``pattern`` on ``host`` -> where each is served (``-``: not)."""
    found = python_on(host, SPOOLS, pattern).split()
    return dict(zip(found[::2], found[1::2]))


@pytest.mark.cluster
def test_a_capture_service_on_the_driver_host_serves_executors_on_other_hosts(
    network, host_cluster, spark
):
    """Issue 45: a capture service on ``driver`` fills a spool under that host's own /tmp and
    serves it on the host's address; the capture job with capture=service submitted from
    ``driver`` reads it on executors of ``worker1`` and ``worker2``, exactly once."""
    driver, spool = network["driver"], "/tmp/service-spool"
    service = Lines(
        driver.popen(
            [PYTHON, "-m", "spark_zmq", "capture", "--format", "zeroeq"]
            + ["--option", "session=hosts-service", "--spool", spool],
            env=host_cluster.env,  # as the cluster's hosts have it: no SPARK_LOCAL_IP
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
    )
    try:
        started = wait_until(
            lambda: (
                [line for line in service.lines if "fills spool" in line]
                or service.process.poll() is not None
            ),
            timeout=60,
            what="the capture service's start line",
        )
        assert started is not True, service.errors()
        assert f"serves it at grpc+tcp://{driver.address}:" in started[0], started
        assert spools_on(driver, spool)[spool].startswith(f"grpc+tcp://{driver.address}:")
        run = run_capture_job(
            network,
            host_cluster,
            spark,
            "hosts-service",
            network.shared / "service",
            "capture=service",
            f"spoolPath={spool}",
        )
    finally:
        if service.process.poll() is None:
            service.process.send_signal(signal.SIGTERM)
        service.wait(60)
    assert run.executors.keys() == {"worker1", "worker2"}
    assert service.process.returncode == 0, service.errors()
    assert spools_on(driver, spool) == {spool: "-"}, "served.json goes with the server"
    for worker in ("worker1", "worker2"):
        assert spools_on(network[worker], spool) == {}, f"{worker} sees the spool"


def check_executors_on_workers(cluster: HostCluster, network: Network) -> dict[str, int]:
    """The application's executors run on the worker hosts, one each, and were told to reach
    their driver by its host's name (Spark chose it: nothing pinned an address)."""
    found = wait_until(
        lambda: (
            all(cluster.executor_pids(w) for w in cluster.workers)
            and {w.name: cluster.executor_pids(w) for w in cluster.workers}
        ),
        timeout=120,
        what="an executor on each worker host",
    )
    for worker in cluster.workers:
        [pid] = found[worker.name]
        assert pid in worker.processes()
        command = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        driver_url = command[command.index(b"--driver-url") + 1].decode()
        assert driver_url.startswith(f"spark://CoarseGrainedScheduler@{network['driver'].name}:")
    return {name: pids[0] for name, pids in found.items()}


@pytest.mark.cluster
def test_the_deploying_pages_walkthrough_runs_as_written_on_five_hosts(
    network, host_cluster, tmp_path
):
    """docs/deploying.md's walkthrough, each step run as written on its host (``/shared`` is
    the network's shared folder): its last step prints what the page says. While the job runs,
    the host ``peers`` sees the job's subscriber record at the driver's address only, and the
    driver's spool is served on the driver's address (the page's table)."""
    guide = walkthrough(ROOT / "docs" / "deploying.md")
    venv = str(Path(PYTHON).parent)
    env = dict(host_cluster.env, PATH=f"{venv}{os.pathsep}{host_cluster.env['PATH']}")
    printed = ""
    for n, (name, code) in enumerate(guide.steps):
        host, folder = network[name], network.folder / f"walkthrough-{n}"
        folder.mkdir()
        with open(folder / "out", "w") as out, open(folder / "err", "w") as err:
            step = host.popen(
                ["bash", "-e", "-c", code.replace("/shared", str(network.shared))],
                env=env,
                cwd=folder,
                stdout=out,
                stderr=err,
                start_new_session=True,
            )
        if "spark-submit" in code:
            check_what_the_jobs_hosts_see(network, step)
        try:
            code_ = step.wait(400)
        finally:
            if step.poll() is None:
                os.killpg(step.pid, signal.SIGKILL)
        errors = "\n".join(
            f"{path}:\n{path.read_text()[-3000:]}"
            for path in sorted(folder.glob("*"))
            if path.is_file()
        )
        assert code_ == 0, f"step {n} on {name} exited {code_}:\n{errors}"
        printed = (folder / "out").read_text()
    assert printed_pattern(guide.printed).search(printed), printed


def check_what_the_jobs_hosts_see(network: Network, job: subprocess.Popen) -> None:
    """While the walkthrough's job runs: ``peers`` hears the job's subscriber record of session
    ``lab`` with the driver's address and no loopback one, and the driver host serves the spool
    on its own address."""
    driver, peers = network["driver"], network["peers"]

    def subscriber() -> dict | None:
        if job.poll() is not None:
            raise AssertionError(f"the job ended ({job.returncode}) before its record was heard")
        browse = ["zeroeq", "browse", "--interfaces", "all", "--session", "lab", "--json"]
        done = peers.run(
            [PYTHON, "-m", "spark_zmq", *browse], capture_output=True, text=True, timeout=60
        )
        heard = json.loads(done.stdout or "[]")
        found = [record for record in heard if record["kind"] == "subscriber"]
        return found[0] if found else None

    record = wait_until(subscriber, timeout=300, interval=2.0, what="the job's subscriber record")
    assert record["vocabulary_request"].startswith(f"tcp://{driver.address}:"), record
    assert "127.0.0.1" not in json.dumps(record), record
    served = wait_until(
        lambda: spools_on(driver, "/tmp/lab-spool").get("/tmp/lab-spool"),
        timeout=60,
        what="the spool's served.json",
    )
    assert served.startswith(f"grpc+tcp://{driver.address}:"), served


class SpoolRow(NamedTuple):
    """A message or gap row as a spool holds it, shaped as the table's rows."""

    partition: str
    offset: int
    payload: bytes | None
    error: str | None


def spool_rows(spool: Path) -> list[SpoolRow]:
    """Every row the spool holds (a ZeroEQ message's payload is its second frame)."""
    rows = []
    for key, state in read_snapshot(str(spool)).items():
        for first, _, table in read_range(str(spool), key, state.start, state.end):
            frames, faults = table.column("frames").to_pylist(), table.column("fault").to_pylist()
            for n, (message, fault) in enumerate(zip(frames, faults, strict=True)):
                payload = message[1] if fault is None and len(message) > 1 else None
                rows.append(SpoolRow(key, first + n, payload, fault))
    return rows


@pytest.mark.cluster
def test_capture_on_executors_takes_a_worker_hosts_partitions_over_within_the_lease(
    network, host_cluster
):
    """Issue 45, with capture=executors and Spark's default network timeouts: three publishers
    on ``peers`` and one on the driver's host bound to loopback (only the driver's host reaches
    it), the spool in the shared folder. The loopback one is captured on the driver's host, the
    others by one capture process per worker. Then a worker host loses power (its link first,
    then every process on it): the other worker's capture process captures its partitions
    again within leaseTimeout + 10 s, whatever Spark is waiting on; in the spool every hole has
    a gap row and no message is there twice. Last in this file: the worker stays down."""
    session, lease_timeout, out = "hosts-executors", 10.0, network.shared / "executors"
    spool = out / "spool"
    remote = NumberedPublishers(network["peers"], session, 3, rate=50)
    local = NumberedPublishers(network["driver"], session, 1, rate=50, bind="127.0.0.1")
    keys = remote.names + local.names
    job = submit_capture_job(host_cluster, session, out, "capture=executors", f"spoolPath={spool}")
    try:
        for publishers in (remote, local):
            publishers.wait_subscribed(job.process, job)
        held = wait_until(
            lambda: len(h := held_partitions(spool, keys)) == len(keys) and h,
            timeout=120,
            what="a capture process holding each partition",
        )
        hosts = {key: executor.split("/")[0] for key, (_, executor, _) in held.items()}
        assert hosts[local.names[0]] == "driver", hosts
        processes = {
            hosts[key]: {pid for k, (_, _, pid) in held.items() if hosts[k] == hosts[key]}
            for key in keys
        }
        assert all(len(pids) == 1 for pids in processes.values()), f"one per host: {processes}"
        workers = {hosts[key] for key in remote.names}
        assert workers <= {"worker1", "worker2"}, hosts
        victim = network["worker1" if "worker1" in workers else "worker2"]
        survivor = ({"worker1", "worker2"} - {victim.name}).pop()
        moved = {key for key in remote.names if hosts[key] == victim.name}
        time.sleep(3)
        off_at = time.time()
        victim.power_off()
        wait_until(
            lambda: (
                {
                    executor.split("/")[0]
                    for key, (_, executor, _) in held_partitions(spool, moved).items()
                }
                == {survivor}
            ),
            timeout=lease_timeout + 60,
            interval=0.2,
            what=f"{victim.name}'s partitions to be held on {survivor}",
        )
        time.sleep(3)
        sent = {**remote.stop(), **local.stop()}
        rows = wait_until(
            lambda: (
                all(
                    max(sequences(r := spool_rows(spool)).get(k, [-1])) == n - 1
                    for k, n in sent.items()
                )
                and r
            ),
            timeout=60,
            what="every sent message in the spool",
        )
    finally:
        end_job(job)
        remote.close()
        local.close()
    holes = check_every_hole_has_a_gap_row(rows, sent)
    resumed = max(gap_ends(rows, moved).values()) - off_at
    print(
        f"{sorted(moved)} moved from {victim.name} to {survivor}; capture of them resumed "
        f"{resumed:.1f} s after the power loss (leaseTimeout {lease_timeout:g}); holes {holes}"
    )
    assert {key: n for key, n in holes.items() if key not in moved and n} == {}, holes
    assert all(holes[key] == 1 for key in moved), holes
    assert resumed < lease_timeout + 10, resumed
