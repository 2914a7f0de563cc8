"""``capture=executors``, after Flink's split enumerator: the driver discovers, assigns and plans
(``enumerator.ExecutorCapture``) and watches every holder's lease (``watch.HolderWatch``); claim
tasks (``claim.Claim``, Spark partitions) start on executors the processes that capture one
partition each (``holder``). What they share in the spool: ``spool.contract``.
"""
