"""For tests, benchmarks and demos, not the runtime path: a standalone cluster, emulated hosts
(and a cluster across them), demo peers, capture processes seen from outside, logged lines."""
