"""Options of the generic stream reader, shared by every format (its settings are read in
``spark_zmq.spark.settings``). Each is defined once (see ``spark_zmq.options``)."""

from __future__ import annotations

from typing import Any

from spark_zmq.options import (
    Option,
    boolean,
    byte_size,
    choice,
    duration,
    non_negative_int,
    positive_float,
    positive_int,
)
from spark_zmq.stream_options.curve import CURVE_OPTIONS
from spark_zmq.stream_options.values import (
    capture_nice,
    ending_offsets,
    metrics_address,
    milliseconds_or_auto,
    pem_file,
    reader_name,
    retention_duration,
    spool_folder,
    spool_server,
    starting_offsets,
)

MODES = ("PERMISSIVE", "DROPMALFORMED", "FAILFAST")

MODE = Option(
    "mode",
    choice(*MODES),
    "one of " + ", ".join(MODES),
    "PERMISSIVE",
    "What to do with a malformed message: keep it as a row with `error` set and the raw "
    "bytes in `payload`, drop it (counted and logged), or fail the query. Gap rows "
    "(lost messages, `error` starting with `gap:`) are not malformed: see "
    "`failOnDataLoss`.",
)

FAIL_ON_DATA_LOSS = Option(
    "failOnDataLoss",
    boolean,
    "true or false",
    "false",
    "What to do when messages were lost before they reached the spool (a dropped "
    "connection, the spool's bound, a partition without a holder, a damaged segment): "
    "deliver a gap row (`error` starting with `gap:`, null `payload`, counted in the "
    "progress line), or fail the query naming the partition, offset and cause. False by "
    "default because a push source cannot ask a peer to send again: failing would stop "
    "capture too and lose more.",
)

MAX_RECORDS_PER_TRIGGER = Option(
    "maxRecordsPerTrigger",
    positive_int,
    "a positive integer",
    None,
    "Admission control: at most this many messages per micro-batch over all partitions.",
)

MIN_RECORDS_PER_TRIGGER = Option(
    "minRecordsPerTrigger",
    positive_int,
    "a positive integer",
    None,
    "Admission control: a micro-batch waits until this many messages are available, but "
    "not longer than `maxTriggerDelay` after the previous one, so a slow stream makes "
    "fewer, larger files. Ignored by `Trigger.AvailableNow`.",
)

MAX_TRIGGER_DELAY = Option(
    "maxTriggerDelay",
    duration,
    "a duration such as 30s, 15m or 500ms (a bare number: seconds)",
    "15m",
    "With `minRecordsPerTrigger`: the longest wait for a micro-batch that has fewer "
    "messages than that.",
)

STARTING_OFFSETS = Option(
    "startingOffsets",
    starting_offsets,
    'earliest, latest, or JSON {"<partition>": offset} (-2: earliest, -1: latest)',
    None,
    "Where a read starts in a spool that already holds messages. A new stream (no "
    "checkpoint), default `latest`: after them (what is captured from now on), or at the "
    "first one still held (`earliest`: the history `spoolRetention` kept, committed or "
    "not, as Kafka's earliest; the default with `capture=service`, where it is all that "
    "the capture service holds); a restart from a checkpoint goes on where it stopped "
    "either way. A batch read, default `earliest`. In JSON, a partition not named starts "
    "at earliest.",
)

ENDING_OFFSETS = Option(
    "endingOffsets",
    ending_offsets,
    'latest, or JSON {"<partition>": offset} (-1: latest)',
    None,
    "Batch reads only: where the read ends (exclusive). Default `latest`: everything the "
    "spool holds when the read is planned. In JSON, a partition not named ends at latest.",
)

MIN_PARTITIONS = Option(
    "minPartitions",
    positive_int,
    "a positive integer (read tasks)",
    None,
    "The fewest read tasks a micro-batch (or a batch read) is split into, as Kafka's "
    "`minPartitions`. Default: one task per partition with new messages. When there are "
    "fewer such partitions than this, each partition's offset range is cut into "
    "contiguous pieces in proportion to its size, so one busy endpoint is decoded and "
    "written by several tasks at once (a sink such as Parquet that one task per "
    "endpoint cannot keep up with). The rows are the same, gap rows included once; each "
    "task costs Spark a few milliseconds, so set it to about the number of cores the "
    "query's tasks get.",
)
MAX_PARTITIONS = Option(
    "maxPartitions",
    positive_int,
    "a positive integer (read tasks)",
    None,
    "The most read tasks a micro-batch (or a batch read) is planned as when many partitions "
    "have new messages: their offset ranges are grouped into this many tasks of about equal "
    "work (whole ranges; offsets, gap rows and admission control stay per partition), so "
    "that hundreds of endpoints cost a micro-batch what their rows cost, not a task each. "
    "Default: the number of cores of the driver's host (a query in local mode gets one task "
    "per core); on a cluster, set it to the cores the query's tasks get. `minPartitions` "
    "still splits ranges when there are fewer than it asks for, and wins over this one.",
)
SPOOL_PATH = Option(
    "spoolPath",
    spool_folder,
    "a folder path on a POSIX file system (local disk or NFS; a file: URI is its path)",
    None,
    "Where captured messages are kept until Spark commits them, and after that for "
    "`spoolRetention` (batch reads of it replay them). Default: a folder under "
    "the local temporary directory derived from the format and options, so a restart with "
    "the same options finds it; its path is logged.",
)

SPOOL_SERVER = Option(
    "spoolServer",
    spool_server,
    "auto, off, HOST or HOST:PORT (an address of the host that captures)",
    "auto",
    "With `capture=driver`, and for a capture service: where the process that captures "
    "serves the spool to read tasks on hosts that do not see its folder (Arrow Flight "
    "over gRPC; each call must carry a token made for the capture's run, which only its "
    "tasks get). Tasks that see the folder (local mode, the same host, `spoolPath` on "
    "shared storage) read its files directly. `auto`: the address Spark gives a driver "
    "that was not told one (`SPARK_LOCAL_IP`, else the host name's address, else a "
    "non-loopback interface's), on a free port; set it to the address executors reach "
    "this host at if that is another (`spark.driver.host`). `off`: no server; read tasks "
    "must then see the folder. Not used with `capture=executors`, whose spool is on "
    "shared storage.",
)

SPOOL_SERVER_CERTIFICATE = Option(
    "spoolServerCertificate",
    pem_file,
    "a PEM file: the certificate (chain) of the spool server",
    None,
    "With `spoolServerKey`: the spool server speaks TLS (gRPC over TLS) with this "
    "certificate, which must name the address the server announces (`spoolServer`; a "
    "subjectAltName IP or DNS entry); read tasks accept this certificate and no other, so "
    "the rows that cross the network are encrypted and the server authenticated. Without "
    "them the server speaks plain gRPC (its token still keeps others out).",
)

SPOOL_SERVER_KEY = Option(
    "spoolServerKey",
    pem_file,
    "a PEM file: the private key of spoolServerCertificate",
    None,
    "The private key of `spoolServerCertificate`; read on the host that serves the spool "
    "only, never handed to tasks.",
)

MAX_BYTES_PER_BATCH = Option(
    "maxBytesPerBatch",
    byte_size,
    "a size such as 64m or 1048576",
    "64m",
    "Largest Arrow batch a read task hands to Spark (as well as at most 65536 rows): "
    "it bounds the read-side Python worker's memory and keeps each batch well inside the "
    "JVM's direct memory (which is the heap size unless set), however large the "
    "messages. A single larger message goes alone in its batch.",
)

MAX_SPOOL_BYTES = Option(
    "maxSpoolBytes",
    byte_size,
    "a size such as 4g, 512m or 1048576",
    "4g",
    "Bound of the spool on disk. At the bound new messages are dropped, counted, logged "
    "and reported as a row with `error` set (a gap): those of the partitions that hold "
    "more than their share of the bound (the bound divided among the partitions), so "
    "that one flooding peer does not cost its neighbours their messages. Before any "
    "message is dropped, committed messages kept by `spoolRetention` are deleted, oldest "
    "first: history never costs capture a message. With `capture=executors`, each capture "
    "process (one per executor) keeps its partitions within the bound.",
)

SPOOL_RETENTION = Option(
    "spoolRetention",
    retention_duration,
    "a duration such as 7d, 12h or 30m (a bare number: seconds), 0, or forever",
    "7d",
    "How long messages are kept in the spool after Spark committed them, counted from when "
    "they were written, so that batch reads (`spark.read`) and new streams with "
    "`startingOffsets=earliest` can replay them (debugging, backfills). Default 7 days, "
    "as Kafka's `retention.ms`; `0` deletes them at commit. Only committed messages are "
    "ever deleted; retention runs in the process that writes the partition (at each "
    "commit and on capture's flush tick).",
)

SPOOL_RETENTION_BYTES = Option(
    "spoolRetentionBytes",
    byte_size,
    "a size such as 1g, 512m or 1048576",
    None,
    "Most bytes of committed messages the spool keeps (with `capture=executors`, each "
    "capture process keeps this much of its partitions); older ones are deleted first. Not set "
    "by default: `maxSpoolBytes` already bounds them, since committed messages are deleted "
    "first whenever a write needs room.",
)

MAX_MESSAGE_BYTES = Option(
    "maxMessageBytes",
    byte_size,
    "a size such as 64m or 1048576",
    "64m",
    "Largest message accepted, all its frames together. A larger message is dropped "
    "whole (nothing of it is stored, the next one is read as usual) and reported as a gap "
    "row that counts consecutive such messages (see `failOnDataLoss`), logged once and "
    "then at most once a minute per endpoint. A single frame over it is caught earlier by "
    "zmq (ZMQ_MAXMSGSIZE), which drops the connection; capture reconnects and reports "
    "the drop as a gap row.",
)

MAX_MESSAGE_PARTS = Option(
    "maxMessageParts",
    positive_int,
    "a positive integer (frames)",
    "1000",
    "Most frames in one message accepted. A message with more is dropped whole and "
    "reported like one over `maxMessageBytes`: it bounds what capture spends on a message "
    "of many small or empty frames, which `maxMessageBytes` alone does not.",
)

MAX_ENDPOINTS = Option(
    "maxEndpoints",
    positive_int,
    "a positive integer",
    "1000",
    "Most endpoints (partitions) a query reads at once. Discovery takes what peers "
    "announce, unauthenticated: beyond this bound a new endpoint waits (logged, with "
    "counts) until one that is read leaves, so that no peer can make capture open "
    "sockets, spool folders or capture processes without end.",
)

RECEIVE_HIGH_WATER_MARK = Option(
    "receiveHighWaterMark",
    non_negative_int,
    "a non-negative integer (messages)",
    "10000",
    "Messages zmq queues per endpoint before capture takes them (ZMQ_RCVHWM): enough for "
    "capture's pauses (a spool write). A peer that sends faster than capture takes is "
    "pushed back beyond it (TCP flow control) and drops or waits at its own send queue; "
    "the episode is logged once. Memory per endpoint is about this many times the "
    "message size, plus capture's 32 MiB buffer: lower it for large messages. 0: no "
    "bound (a backlog grows in memory).",
)

FLUSH_INTERVAL_MS = Option(
    "flushIntervalMs",
    milliseconds_or_auto,
    "auto or a positive integer (milliseconds)",
    "auto",
    "How often capture writes what it received to the spool (it also writes at every "
    "micro-batch, every 65536 messages and every 32 MiB). `auto`: every 100 ms, and with "
    "more than 50 endpoints 2 ms more for each, up to 1,000 ms (each flush writes a segment "
    "for every endpoint with messages: with 300 quiet publishers, flushes every 100 ms took "
    "capture 0.12 ms of CPU a message, every 500 ms 0.05). What capture received and has not "
    "written is lost if its process is killed (a gap row says when).",
)

ON_SPOOL_WRITE_ERROR = Option(
    "onSpoolWriteError",
    choice("fail", "drop"),
    "fail or drop",
    "fail",
    "When the spool's storage refuses a write (full disk, read-only, I/O error): fail "
    "the query naming the spool and the cause, or drop new messages while it lasts, "
    "counted, logged and reported as a row with `error` set (a gap). Either way the "
    "spool keeps everything written before.",
)

CAPTURE = Option(
    "capture",
    choice("driver", "executors", "service"),
    "driver, executors or service",
    "driver",
    "Where the zmq sockets live: in the driver-side reader process (one machine), or in "
    "one capture process per executor, started by tasks, which share the partitions out "
    "and take over those of an executor or host that is lost (an endpoint that only the "
    "driver's host reaches is captured on that host), or in a capture service that runs "
    "without a query "
    "(`spark-zmq capture --spool PATH`, see the jobs page): the query then starts no "
    "discovery and no capture, reads the spool the service fills (`spoolPath` must name "
    "it) and hands the service what Spark committed, so a scheduled "
    "`Trigger.AvailableNow` job loses nothing between its runs; its `startingOffsets` "
    "default is `earliest` (everything the service holds, within `spoolRetention`). "
    "With `executors`, `spoolPath` must name storage that every node reaches.",
)

CAPTURE_CORE = Option(
    "captureCore",
    choice("auto", "native", "python"),
    "auto, native or python",
    None,
    "Which receive loop capture runs: `native`, the compiled core (C, without Python's "
    "lock, one Arrow buffer per flush), or `python`, the pure-Python loop; `auto` takes "
    "the compiled core when it loads and otherwise logs once that it runs the Python "
    "loop. Not set: the environment variable `SPARK_ZMQ_CAPTURE_CORE` of the capture "
    "process, else `auto`.",
)

CAPTURE_NICE = Option(
    "captureNice",
    capture_nice,
    "a nice value from -20 to 19, or off",
    "-10",
    "Scheduling priority of capture's receive thread and its zmq I/O thread (Linux nice "
    "value; Spark's tasks run at 0): with a lower value they get a core as soon as "
    "messages arrive, however busy Spark keeps the host, so publishers that drop at a "
    "full send queue lose nothing while a micro-batch runs. Raising priority needs "
    "CAP_SYS_NICE (root) or RLIMIT_NICE; without it capture logs one warning and runs as "
    "it is. `off`: leave the priority alone.",
)
LEASE_TIMEOUT = Option(
    "leaseTimeout",
    positive_float,
    "a positive number of seconds",
    "10",
    "`capture=executors`: the partitions of a capture process whose heartbeat has not "
    "moved for this long (its executor or host lost, frozen or cut off) are taken over by "
    "the capture processes alive, each timing it by its own clock, whatever Spark waits on.",
)

CAPTURE_IDLE_TIMEOUT = Option(
    "captureIdleTimeout",
    positive_float,
    "a positive number of seconds",
    "60",
    "`capture=executors`: a capture process ends when the query has not renewed its "
    "assignment for this long (the query stopped or lost its driver).",
)

SPOOL_READER = Option(
    "spoolReader",
    reader_name,
    "a name (any text of 1 to 200 characters)",
    "default",
    "`capture=service`: the name this query reads the capture service's spool under, as a "
    "Kafka consumer group. Each query reading one spool needs a name of its own (a query "
    "fails to start, within 10 s, under a name that a running query reads under): the "
    "spool keeps what any name has not committed, and each stream goes on from where its "
    "own name committed. Batch reads need no name: they commit nothing.",
)

SPOOL_READER_TIMEOUT = Option(
    "spoolReaderTimeout",
    retention_duration,
    "a duration such as 7d, 12h or 30m (a bare number: seconds), or forever",
    "7d",
    "For `spark-zmq capture`: a reader name (`spoolReader`) whose query has neither "
    "planned nor committed for this long stops holding data (logged once), so that a "
    "query that never comes back does not keep the spool from letting go. If it comes "
    "back, it gets a gap row for what was deleted meanwhile.",
)

METRICS = Option(
    "metrics",
    metrics_address,
    "off, PORT (on loopback) or HOST:PORT (0: any free port, logged)",
    "off",
    "Where the processes that capture for this query serve Prometheus metrics "
    "(`/metrics`) and health probes (`/healthz`, `/readyz`) while it runs: with "
    "`capture=driver` the driver-side reader process, on this address and port; with "
    "`capture=executors` each capture process, on this address (loopback where its host "
    "has no such address) and a free port, which its record in the spool names "
    "(`spark-zmq metrics-targets`). A capture service takes `--metrics-port` and "
    "`--metrics-address` instead.",
)

READER_OPTIONS: tuple[Option[Any], ...] = (
    MODE,
    FAIL_ON_DATA_LOSS,
    MAX_RECORDS_PER_TRIGGER,
    MIN_RECORDS_PER_TRIGGER,
    MAX_TRIGGER_DELAY,
    STARTING_OFFSETS,
    ENDING_OFFSETS,
    MIN_PARTITIONS,
    MAX_PARTITIONS,
    SPOOL_PATH,
    SPOOL_SERVER,
    SPOOL_SERVER_CERTIFICATE,
    SPOOL_SERVER_KEY,
    MAX_BYTES_PER_BATCH,
    MAX_SPOOL_BYTES,
    SPOOL_RETENTION,
    SPOOL_RETENTION_BYTES,
    MAX_MESSAGE_BYTES,
    MAX_MESSAGE_PARTS,
    MAX_ENDPOINTS,
    RECEIVE_HIGH_WATER_MARK,
    FLUSH_INTERVAL_MS,
    ON_SPOOL_WRITE_ERROR,
    CAPTURE,
    CAPTURE_CORE,
    CAPTURE_NICE,
    LEASE_TIMEOUT,
    CAPTURE_IDLE_TIMEOUT,
    SPOOL_READER,
    SPOOL_READER_TIMEOUT,
    METRICS,
    *CURVE_OPTIONS,
)
