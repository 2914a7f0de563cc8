"""Types of a writer's compiled send loop (``send.pyx``)."""

def send_rows(
    socket: int, columns: list[tuple[int, int, int, int]], start: int, stop: int
) -> tuple[int, int]: ...
