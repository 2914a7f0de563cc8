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

from spark_zmq.testing.hosts import Host, HostCluster, Network
from support.common import ROOT, wait_until
from support.docs import printed_pattern, walkthrough
from support.jobs import Lines, job_file
from support.sequences import ECHO, check_exactly_once, sequences, wait_for_all_sent

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
    publishers = Lines(
        network["peers"].popen(
            [PYTHON, str(NUMBERED_PUBLISHERS), session, str(publishers_count), str(rate)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    )
    names = json.loads(wait_until(lambda: publishers.lines[:1], what="the publishers' names")[0])[
        "publishers"
    ]
    started = time.monotonic()
    job = cluster.submit(
        job_file("capture_to_parquet"),
        *("--format", "zeroeq", "--option", f"session={session}"),
        *(argument for option in options for argument in ("--option", option)),
        *("--output", str(out / "table"), "--checkpoint", str(out / "checkpoint")),
        *("--trigger", "1"),
        log_level="WARNING",
    )
    lines = Lines(job)
    assert publishers.process.stdin is not None
    try:
        wait_until(
            lambda: (
                len(publishers.lines) > 1
                or publishers.process.poll() is not None
                or job.poll() is not None
            ),
            timeout=400,
            what="a subscriber on every publisher",
        )
        assert job.poll() is None, lines.errors()
        assert json.loads(publishers.lines[1]) == {"subscribed": True}, publishers.errors()
        executors = check_executors_on_workers(cluster, network)
        time.sleep(seconds)
        publishers.process.stdin.write("stop\n")
        publishers.process.stdin.flush()
        publishers.wait(30)
        sent = json.loads(publishers.lines[2])["sent"]
        rows = wait_for_all_sent(spark, out / "table", sent, timeout=180)
        read = time.monotonic() - started
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGTERM)
        job.wait(60)
        stop(publishers.process)
    print(f"every message read {read:.1f} s after spark-submit; sent {sent}; executors {executors}")
    peers = network["peers"].address
    assert sorted(sent) == sorted(names) and all(n.startswith(f"{peers}:") for n in names)
    check_exactly_once(rows, sent, moved=set())
    assert {key: sorted(seqs) for key, seqs in sequences(rows).items()} == {
        key: list(range(count)) for key, count in sent.items()
    }, lines.errors()
    assert sum(sent.values()) >= publishers_count * rate * seconds // 2
    assert not [row for row in rows if row.error is not None]
    return CaptureRun(names, sent, rows, lines, read, executors)


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
