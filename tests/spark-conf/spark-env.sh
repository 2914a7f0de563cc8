# Sourced by spark-class (load-spark-env.sh) for the tests' standalone masters and workers: the
# same JVM flags as spark-defaults.conf gives the applications' drivers and executors.
SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC ${SPARK_DAEMON_JAVA_OPTS:-}"
export SPARK_DAEMON_JAVA_OPTS
