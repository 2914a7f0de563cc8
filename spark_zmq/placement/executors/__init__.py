"""``capture=executors``, after Flink's split enumerator: the driver discovers, assigns and plans
(``enumerator.ExecutorCapture``) and starts capture processes where none runs (``starts``): by
claim tasks (``claim.Claim``, Spark partitions) on executors, by itself on its own host
(``launch``). One capture process per executor (``holder``) captures many partitions; the
processes time each other's heartbeats (``watch``), share free partitions out (``spread``) and
take over those of a process that stopped beating, without Spark. An endpoint only the
driver's host reaches is captured on that host (``reach``). What they share in the spool:
``spool.contract`` and ``spool.processes``.
"""
