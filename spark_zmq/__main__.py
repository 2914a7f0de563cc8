import sys

from spark_zmq.cli import main

sys.exit(main())
