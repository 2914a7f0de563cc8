"""One module per ZeroMQ-based system: its wire facts, discovery, columns and decoding."""
