"""Durability: what capture received, kept per partition until Spark commits it (see layout)."""
