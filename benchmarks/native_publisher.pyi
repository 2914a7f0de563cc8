"""Types of the benchmarks' compiled publisher loop (``native_publisher.pyx``)."""

def send_sequence(
    socket: int,
    topic: bytes,
    body: bytes,
    first: int,
    count: int,
    patience: float = 0.0,
) -> int: ...
