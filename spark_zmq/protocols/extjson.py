"""BSON values as JSON text and back (MongoDB's relaxed extended JSON for binary, dates, ids):
what EBUS payloads and Goby's BSON scheme show in the ``json`` column and take from it."""

from __future__ import annotations

import json
from typing import Any

from spark_zmq.errors import PayloadError
from spark_zmq.extras import optional

json_util = optional("bson.json_util")


def to_json(value: Any) -> str:
    """JSON text of an unpacked value (BSON types such as binary or dates as extended JSON);
    PayloadError for a value nested too deeply to be shown, or that has no JSON form."""
    dumps = json_util.dumps  # outside the try: a missing bson is not a malformed payload
    try:
        return dumps(value, json_options=json_util.RELAXED_JSON_OPTIONS)
    except RecursionError:
        raise PayloadError("the value is nested too deeply to be shown as JSON") from None
    except Exception as exc:  # a value a peer's bytes made that json_util cannot show
        raise PayloadError(f"the value has no JSON form: {type(exc).__name__}: {exc}") from None


def from_json(text: str) -> Any:
    """The value of JSON text (extended JSON included); ValueError when there is none."""
    convert, options = json_util.object_hook, json_util.DEFAULT_JSON_OPTIONS  # a missing bson
    # is not a bad text: outside the try

    def bson_object(obj: dict[str, Any]) -> Any:
        # json_util makes a new, random ObjectId of {"$oid": null}: the same text would be a
        # different value at each parse (and on the wire at each send)
        if "$oid" in obj and not isinstance(obj["$oid"], str):
            shown = json.dumps(obj["$oid"])[:40]
            raise ValueError(f'"$oid" must be a string of 24 hex digits, not {shown}')
        return convert(obj, options)

    try:
        return json.loads(text, object_hook=bson_object)
    except ValueError:
        raise
    except Exception as exc:  # json_util's TypeError, KeyError, InvalidId; RecursionError
        raise ValueError(f"{type(exc).__name__}: {exc}") from None
