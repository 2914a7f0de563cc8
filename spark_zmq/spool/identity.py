"""Which spool folder a checkpoint's offsets point into.

Offsets are per-partition sequence numbers of one spool folder: offset 500 of partition K names
nothing in another folder. A query restarted from its checkpoint on another spool (a
cluster-mode driver restarted on a host whose local ``spoolPath`` is empty, a spool folder
deleted or replaced) would take the new folder's offsets for the old ones and skip, with no gap
row, every message below the checkpoint's offsets. So each spool folder has an identity
(``spool.json``: a random id, made once by whoever needs it first), the offsets a query
checkpoints carry it, and a query whose checkpoint names another spool fails, saying so
(whatever ``failOnDataLoss`` says: nothing could count what is lost for a gap row).
"""

from __future__ import annotations

import json
import os
import uuid

from spark_zmq.errors import SparkZmqError, SpoolError
from spark_zmq.spool.index import checked_version, versioned
from spark_zmq.spool.layout import remove_quietly

#: the identity's file at the spool's root
IDENTITY_NAME = "spool.json"


class OtherSpool(SparkZmqError):
    """The checkpoint's offsets were taken in another spool folder than the query's."""


def spool_identity(root: str) -> str:
    """The id of the spool folder ``root``, made if it has none (several processes may ask at
    once: the first link wins, and all read the same id)."""
    path = os.path.join(root, IDENTITY_NAME)
    if not os.path.exists(path):
        mine = uuid.uuid4().hex
        partial = f"{path}.{mine}.tmp"
        try:
            os.makedirs(root, exist_ok=True)  # a spool that nothing has filled yet
            with open(partial, "w", encoding="utf-8") as f:
                json.dump(versioned({"id": mine}), f)
                f.flush()
                os.fsync(f.fileno())  # whole on disk before it is named, even after a crash
            os.link(partial, path)  # never replaces an id made meanwhile
        except FileExistsError:
            pass
        except OSError as exc:
            raise SpoolError(f"cannot write {path} (the spool's identity): {exc}") from None
        finally:
            remove_quietly(partial)
    try:
        with open(path, encoding="utf-8") as f:
            return str(checked_version(json.load(f), path)["id"])
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SpoolError(
            f"{path} is not a spool identity ({exc!r}): the folder {root} was written by "
            f"something else; give the query a spoolPath of its own"
        ) from None


def other_spool_error(root: str, checkpointed: str, current: str) -> OtherSpool:
    """The error of a query at spool ``root`` (id ``current``) whose checkpoint's offsets were
    taken in spool ``checkpointed``."""
    return OtherSpool(
        f"the checkpoint's offsets were taken in spool {checkpointed}, but the spool at {root} "
        f"is {current} (its {IDENTITY_NAME}): a driver restarted on a host whose spoolPath "
        f"holds another (or a new) spool, or a spool folder deleted or replaced. Offsets name "
        f"messages of one spool only, so the query would skip messages of this one with no gap "
        f"row. Give spoolPath the checkpoint's spool (on storage every host that can run the "
        f"driver reaches, as the checkpoint is), or start with a new checkpoint (what the other "
        f"spool held and the query had not read is then lost)"
    )
