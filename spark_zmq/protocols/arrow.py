"""Arrow helpers that formats share: reading input columns for encoding, describing frames.

Not part of the contract (``spark_zmq.protocols.contract``): a format may use them or not.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from spark_zmq.protocols.contract import EncodedBatch

#: frame sizes that ``frame_sizes`` lists before it only counts the rest
SIZES_SHOWN = 8


def frame_sizes(sizes: Sequence[int]) -> str:
    """``3 frames of 16, 1, 1 bytes``: how a malformed message's error describes its frames,
    listing the first SIZES_SHOWN sizes only, so that a message of a million frames does not
    make a text of megabytes."""
    shown = ", ".join(str(size) for size in sizes[:SIZES_SHOWN])
    more = f", ... ({len(sizes) - SIZES_SHOWN} more)" if len(sizes) > SIZES_SHOWN else ""
    return f"{len(sizes)} frames of {shown}{more} bytes"


def joined_frames(frames: pa.ListArray) -> pa.Array:
    """Each message's frames concatenated (``binary``, null for a null message): what the
    ``payload`` of a malformed message holds when its frames cannot be told apart. One copy of
    the message, no more (Arrow's join, not a Python list per message)."""
    return pc.binary_join(frames, pa.scalar(b"", pa.binary()))


def binary_column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A column of input rows as ``binary``: text as its UTF-8 bytes (``string`` viewed as
    ``binary``, no copy; the large types cast), all null when the rows have no such column."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.binary())
    return as_binary(batch.column(index))


def as_binary(array: pa.Array) -> pa.Array:
    """``array`` as ``binary``: text as its UTF-8 bytes (``string`` viewed as ``binary``, no
    copy), binary as it is, anything else (the large types) cast."""
    if pa.types.is_string(array.type):
        return array.view(pa.binary())
    return array if pa.types.is_binary(array.type) else array.cast(pa.binary())


def string_column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A column of input rows as ``string``; all null when the rows have no such column."""
    index = batch.schema.get_field_index(name)
    if index < 0:
        return pa.nulls(batch.num_rows, pa.string())
    column = batch.column(index)
    return column if pa.types.is_string(column.type) else column.cast(pa.string())


def distinct_rows(*columns: pa.Array) -> tuple[np.ndarray, list[tuple]]:
    """The distinct combinations of the columns' values, in the order they first appear
    (Python values, nulls as None), and for each row the index of its combination: so that
    a protocol's per-row rules run once per distinct combination, not once per row."""
    codes, dictionaries = [], []
    for column in columns:
        encoded = pc.dictionary_encode(column, null_encoding="encode")
        codes.append(encoded.indices.to_numpy(zero_copy_only=False).astype(np.int64))
        dictionaries.append(encoded.dictionary.to_pylist())
    combined = codes[0]
    for code, dictionary in zip(codes[1:], dictionaries[1:]):
        # numbered densely again after each column: below the row count, never overflows
        combined = np.unique(combined * len(dictionary) + code, return_inverse=True)[1].ravel()
    _, first, inverse = np.unique(combined, return_index=True, return_inverse=True)
    order = np.argsort(first)  # by first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    values = [
        tuple(dictionary[code[row]] for code, dictionary in zip(codes, dictionaries))
        for row in first[order]
    ]
    return rank[inverse.ravel()], values


def raw_column(batch: pa.RecordBatch, name: str) -> pa.Array:
    """A column of input rows as it is; all null when the rows have no such column."""
    index = batch.schema.get_field_index(name)
    return batch.column(index) if index >= 0 else pa.nulls(batch.num_rows)


def column_values(batch: pa.RecordBatch, name: str) -> list:
    """A column of input rows as Python values; nulls when the rows have no such column."""
    index = batch.schema.get_field_index(name)
    return batch.column(index).to_pylist() if index >= 0 else [None] * batch.num_rows


def message_sizes(encoded: EncodedBatch) -> np.ndarray:
    """Each row's message size in bytes (int64; 0 for a row that is not sent)."""
    total = np.zeros(len(encoded), np.int64)
    sent = np.ones(len(encoded), bool)
    for frame in encoded.frames:
        sent &= frame.is_valid().to_numpy(zero_copy_only=False)
        lengths = pc.binary_length(frame).fill_null(0).to_numpy(zero_copy_only=False)
        total += np.where(sent, lengths, 0)
    return total


def refuse_rows(encoded: EncodedBatch, rows: np.ndarray, reasons: list[str]) -> EncodedBatch:
    """The same batch with ``rows`` (indices) not sent, each for its reason."""
    count = len(encoded)
    refused = np.zeros(count, bool)
    refused[rows] = True
    mask = pa.array(refused)
    texts = np.full(count, None, object)
    texts[rows] = reasons
    errors = pc.if_else(mask, pa.array(texts, pa.string()), encoded.errors)
    first = pc.if_else(mask, pa.nulls(count, pa.binary()), encoded.frames[0])
    topics = pc.if_else(mask, pa.nulls(count, pa.binary()), encoded.topics)
    return EncodedBatch([first, *encoded.frames[1:]], errors, topics, dict(encoded.names))
