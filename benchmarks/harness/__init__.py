"""What the benchmarks share: the publisher every benchmark sends with, its receivers, the Spark
side of a trial, process measurements and the report's rows.

The scripts beside this package are the scenarios, one per command; they import from here and
never from each other. Modules here import only from this package and from ``spark_zmq``.
"""
