"""For tests, benchmarks and demos, not the runtime path: a standalone cluster, demo peers,
capture processes seen from outside, logged lines."""
