"""Property-based tests (hypothesis) of the yamz decoders and parsers (the kinds of
property and the settings: ``support.fuzzing``)."""

from __future__ import annotations

import json
import re
from urllib.parse import quote

import pyarrow as pa
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from spark_zmq.protocols.yamz import Yamz
from spark_zmq.protocols.yamz.wire import (
    AddressError,
    Category,
    HeaderError,
    Port,
    for_bind,
    for_connect,
    matches,
    parse,
    ports_of,
)
from spark_zmq.spool.index import Source
from support.fuzzing import captured, check_read_path, fuzz, json_texts, json_values, list_array

pytestmark = pytest.mark.timeout(120)


# ================================================================================================
# yamz
# ================================================================================================

SCHEME_TEXTS = ("tcp", "ipc", "inproc", "yamz", "udp", "", "TCP")
BAD_PATTERNS = (
    "(",
    "a{4294967296}",
    "(" * 2000 + ")" * 2000,
    "[",
    "\\N{foo}",
    "(?<=a+)b",
    "((a)",
    "a**",
)
ODD_PORTS = ("٣", "²", "0", "65536", "080", "00080", "1" * 5000, "1" * 20, "+1", " 1", "*")
url_text = st.text(st.characters(codec="utf-8", exclude_characters="?&="), max_size=12)


@st.composite
def yamz_texts(draw) -> str:
    """Address-like texts: a scheme, a location with hosts, ports, wildcards and paths, and a
    query of items that may lack '=', repeat keys or hold regular expressions of any kind."""
    how = draw(st.integers(0, 7))
    if how == 0:
        return draw(st.text(max_size=30))
    if how == 1:  # an abstract address with any pattern
        node, path = draw(st.sampled_from(["*", "n"])), draw(st.sampled_from(["p", "a/*/c"]))
        pattern = draw(
            st.one_of(
                url_text,
                st.sampled_from(BAD_PATTERNS),
                st.builds("{}{{{}}}".format, st.just("a"), st.integers(0, 2**64).map(str)),
            )
        )
        return f"yamz://{node}/{path}?k={pattern}"
    if how == 2:  # a tcp address with any port
        host = draw(st.sampled_from(["h", "127.0.0.1", "*"]))
        return f"tcp://{host}:{draw(st.one_of(url_text, st.sampled_from(ODD_PORTS)))}"
    scheme = draw(st.sampled_from(SCHEME_TEXTS))
    location = draw(
        st.one_of(
            url_text,
            st.builds(
                "{}:{}".format,
                url_text,
                st.one_of(st.integers(-5, 70000).map(str), st.sampled_from(ODD_PORTS)),
            ),
            st.lists(url_text, min_size=1, max_size=4).map("/".join),
        )
    )
    items = draw(
        st.lists(
            st.one_of(
                st.builds("{}={}".format, url_text, url_text),
                st.builds(
                    "{}={}".format,
                    url_text,
                    st.sampled_from(("4[12]", "a+", "%41", "x|y", ".*") + BAD_PATTERNS),
                ),
                url_text,
            ),
            max_size=3,
        )
    )
    query = ("?" + "&".join(items)) if items or draw(st.booleans()) else ""
    return f"{scheme}://{location}{query}"


@fuzz(300)
# found: patterns that re.compile refuses with other errors than re.error; ports that are
# digits to Python but not to zmq, or too long for int()
@example(text="yamz://n/p?k=a{4294967296}")
@example(text="yamz://n/p?k=" + "(" * 2000 + ")" * 2000)
@example(text="tcp://h:٣")
@example(text="tcp://h:" + "1" * 5000)
@given(text=yamz_texts())
def test_yamz_addresses_are_classified_or_refused_300_examples(text):
    for function in (parse, for_bind, for_connect):
        try:
            address = function(text)
        except AddressError:
            continue
        assert isinstance(address.category, Category)
        scheme, _, rest = text.partition("://")
        location = rest.partition("?")[0]
        assert address.location == f"{scheme}://{location}"
        assert (address.category is Category.ABSTRACT) == (scheme == "yamz")
        if address.category is not Category.ABSTRACT:
            assert scheme in ("tcp", "ipc", "inproc") and location
            assert (address.category is Category.EPHEMERAL) == ("*" in location)
        if scheme == "tcp":
            port = location.rpartition(":")[2]
            assert port == "*" or (port.isascii() and port.isdigit() and 0 < int(port) < 65536)
        keys = [key for key, _ in address.query]
        assert len(keys) == len(set(keys))
        if address.category is Category.ABSTRACT:
            assert address.node and address.path and all(address.path)
            assert [key for key, _ in address.patterns] == keys
        assert function is not for_bind or address.category is not Category.ABSTRACT
        assert function is not for_connect or address.category is not Category.EPHEMERAL


bind_locations = st.one_of(
    st.builds(
        "tcp://{}:{}".format,
        st.sampled_from(["*", "127.0.0.1", "host", "[::1]"]),
        st.one_of(st.just("*"), st.integers(1, 65535).map(str)),
    ),
    st.builds(
        "ipc://{}".format,
        st.text(st.characters(codec="utf-8", exclude_characters="?"), min_size=1, max_size=12),
    ),
    st.builds(
        "inproc://{}".format,
        st.text(st.characters(codec="utf-8", exclude_characters="?"), min_size=1, max_size=12),
    ),
)


@fuzz(300)
@given(
    location=bind_locations,
    attributes=st.dictionaries(st.text(min_size=1, max_size=8), st.text(max_size=8), max_size=5),
)
def test_yamz_bind_query_round_trips_as_attributes_300_examples(location, attributes):
    query = "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in attributes.items())
    text = f"{location}?{query}" if query else location
    address = for_bind(text)
    assert address.location == location
    assert address.attributes == attributes
    assert address.category is (Category.EPHEMERAL if "*" in location else Category.CONCRETE)
    with pytest.raises(AddressError):
        for_bind("yamz://node/path" + (f"?{query}" if query else ""))


# -- YAMZ headers: the seed's tree ---------------------------------------------------------------

vertex_names = st.text(min_size=1, max_size=6)
port_types = st.sampled_from(["PUB", "XPUB", "PUSH", "pub", "Sub", "router"])
tree_params = st.dictionaries(st.text(max_size=4), st.text(max_size=6), max_size=3)
tree_ports = st.fixed_dictionaries(
    {"address": st.text(min_size=1, max_size=12), "type": port_types}
)


def vertices(children):
    return st.fixed_dictionaries(
        {"name": vertex_names},
        optional={
            "port": tree_ports,
            "params": tree_params,
            "children": st.lists(children, max_size=3, unique_by=lambda v: v["name"]),
        },
    )


trees = st.recursive(
    st.fixed_dictionaries(
        {"name": vertex_names}, optional={"port": tree_ports, "params": tree_params}
    ),
    vertices,
    max_leaves=10,
)


def tree_expectation(node, vertex, path=(), inherited=None):
    """The ports of a generated tree, by the fact sheet's rules (nearest parameter wins)."""
    params = dict(inherited or {})
    params.update({key: (value,) for key, value in vertex.get("params", {}).items()})
    found = []
    if "port" in vertex:
        found.append(
            Port(node, path, (vertex["port"]["address"],), vertex["port"]["type"].upper(), params)
        )
    for child in vertex.get("children", []):
        found += tree_expectation(node, child, path + (child["name"],), params)
    return found


@fuzz(300)
@given(node=st.text(max_size=8), tree=trees)
def test_yamz_tree_header_gives_its_ports_with_inherited_params_300_examples(node, tree):
    assert ports_of(node, json.dumps(tree)) == tree_expectation(node, tree)


# -- YAMZ headers: the flat layout of the public yamz code ---------------------------------------

idparms = st.lists(
    st.fixed_dictionaries(
        {"key": st.sampled_from(["a", "b", "det", "apa"]), "val": st.text(max_size=4)}
    ),
    max_size=4,
)
flat_ports = st.fixed_dictionaries(
    {
        "portid": st.text(min_size=1, max_size=5) | st.integers(0, 99),
        "addresses": st.lists(st.text(min_size=1, max_size=12), min_size=1, max_size=3),
        "ztype": port_types,
    },
    optional={"idparms": idparms},
)
flat_clients = st.fixed_dictionaries(
    {
        "clientid": st.text(min_size=1, max_size=5) | st.integers(0, 99),
        "ports": st.lists(flat_ports, max_size=3),
    },
    optional={"idparms": idparms},
)
flat_headers = st.fixed_dictionaries(
    {"clients": st.lists(flat_clients, max_size=3)}, optional={"idparms": idparms}
)


def level(items) -> dict[str, tuple[str, ...]]:
    """One level's parameters: every value of a key, in order."""
    values: dict[str, tuple[str, ...]] = {}
    for item in items or []:
        values[item["key"]] = values.get(item["key"], ()) + (item["val"],)
    return values


@fuzz(300)
@given(node=st.text(max_size=8), header=flat_headers)
def test_yamz_flat_header_gives_its_ports_with_inherited_params_300_examples(node, header):
    expected = []
    for client in header["clients"]:
        for port in client["ports"]:
            params = level(header.get("idparms"))
            params.update(level(client.get("idparms")))  # the nearest level that names a key
            params.update(level(port.get("idparms")))
            expected.append(
                Port(
                    node,
                    (str(client["clientid"]), str(port["portid"])),
                    tuple(port["addresses"]),
                    port["ztype"].upper(),
                    params,
                )
            )
    assert ports_of(node, json.dumps(header, sort_keys=True)) == expected


# -- YAMZ headers: anything a peer might send ----------------------------------------------------


def loose(valid):
    """A part of a header: mostly the right shape, else any JSON value instead."""
    return st.one_of(valid, valid, valid, json_values)


loose_tree = st.recursive(
    st.fixed_dictionaries(
        {"name": loose(vertex_names)},
        optional={
            "port": loose(
                st.fixed_dictionaries(
                    {}, optional={"address": loose(st.text(max_size=5)), "type": loose(port_types)}
                )
            ),
            "params": loose(tree_params),
        },
    ),
    lambda inner: st.fixed_dictionaries(
        {"name": loose(vertex_names)},
        optional={"children": loose(st.lists(inner, max_size=3)), "params": loose(tree_params)},
    ),
    max_leaves=8,
)
loose_flat = st.fixed_dictionaries(
    {
        "clients": loose(
            st.lists(
                loose(
                    st.fixed_dictionaries(
                        {
                            "clientid": json_values,
                            "ports": loose(
                                st.lists(
                                    loose(
                                        st.fixed_dictionaries(
                                            {
                                                "portid": json_values,
                                                "ztype": loose(port_types),
                                                "addresses": loose(
                                                    st.lists(loose(st.text(max_size=5)), max_size=3)
                                                ),
                                            },
                                            optional={"idparms": loose(idparms)},
                                        )
                                    ),
                                    max_size=3,
                                )
                            ),
                        },
                        optional={"idparms": loose(idparms)},
                    )
                ),
                max_size=3,
            )
        )
    },
    optional={"idparms": loose(idparms)},
)
any_headers = st.one_of(
    loose_tree.map(json.dumps),
    loose_flat.map(json.dumps),
    loose_flat.map(json.dumps),
    json_texts,
    st.binary(max_size=30).map(lambda b: b.decode("latin-1")),
)


@fuzz(300)
# found: JSON nested too deeply; a flat port without addresses (discovery takes the first)
@example(node="n", header="[" * 1000 + "]" * 1000)
@example(
    node="n",
    header='{"clients": [{"clientid": "c", "ports": [{"portid": "p", '
    '"addresses": [], "ztype": "PUB"}]}]}',
)
@given(node=st.text(max_size=8), header=any_headers)
def test_yamz_any_header_gives_ports_or_a_header_error_300_examples(node, header):
    try:
        ports = ports_of(node, header)
    except HeaderError as exc:
        assert repr(node) in str(exc)
        return
    for port in ports:
        assert port.node == node and all(isinstance(p, str) for p in port.path)
        assert port.addresses and all(isinstance(a, str) and a for a in port.addresses)
        assert isinstance(port.socket_type, str) and port.socket_type == port.socket_type.upper()
        assert all(
            isinstance(k, str) and v and all(isinstance(x, str) for x in v)
            for k, v in port.params.items()
        )


# -- matching ------------------------------------------------------------------------------------

plain_names = st.text("abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=6)
plain_trees = st.recursive(
    st.fixed_dictionaries(
        {"name": plain_names}, optional={"port": tree_ports, "params": tree_params}
    ),
    lambda inner: st.fixed_dictionaries(
        {"name": plain_names},
        optional={
            "port": tree_ports,
            "params": tree_params,
            "children": st.lists(inner, max_size=3, unique_by=lambda v: v["name"]),
        },
    ),
    max_leaves=8,
)


@fuzz(300)
@given(
    data=st.data(),
    node=plain_names,
    tree=plain_trees,
    expected_nodes=st.none() | st.frozensets(plain_names, max_size=2),
)
def test_yamz_abstract_addresses_match_the_ports_they_name_300_examples(
    data, node, tree, expected_nodes
):
    ports = ports_of(node, json.dumps(tree))
    assume(ports)
    port = data.draw(st.sampled_from(ports), "port")
    assume(port.path)
    path = [data.draw(st.sampled_from([element, "*"])) for element in port.path]
    # a parameter with an empty name cannot be named in a query (``=v`` is malformed)
    named_keys = sorted(key for key in port.params if key)
    keys = data.draw(
        st.lists(st.sampled_from(named_keys), unique=True) if named_keys else st.just([]), "keys"
    )
    query = "&".join(
        f"{quote(k, safe='')}={quote(re.escape(port.params[k][0]), safe='')}" for k in keys
    )
    named = data.draw(st.sampled_from([node, "*"]), "node")
    text = f"yamz://{named}/{'/'.join(path)}" + (f"?{query}" if query else "")
    address = for_connect(text)
    assert address.node == named and address.path == tuple(path)
    assert dict(address.query) == {k: re.escape(port.params[k][0]) for k in keys}

    wildcard_allowed = expected_nodes is None or node in expected_nodes
    assert matches(address, port) is True
    assert matches(address, port, expected_nodes) is (named != "*" or wildcard_allowed)
    # another node, a longer or shorter path, another parameter value: no match
    assert not matches(for_connect(f"yamz://{node}x/{'/'.join(path)}"), port)
    assert not matches(for_connect(f"yamz://{named}/{'/'.join(path)}/*"), port)
    if len(path) > 1:
        assert not matches(for_connect(f"yamz://{named}/{'/'.join(path[:-1])}"), port)
    if keys:
        value = port.params[keys[0]][0]
        other = quote(re.escape(value + "x"), safe="")
        key = quote(keys[0], safe="")
        assert not matches(for_connect(f"yamz://{named}/{'/'.join(path)}?{key}={other}"), port)


# -- the format ----------------------------------------------------------------------------------

yamz = Yamz()
YAMZ_READER = yamz.reader_settings({"address": "yamz://*/out"})
YAMZ_WRITER = yamz.writer_settings({})
maybe_text = st.one_of(st.none(), st.text(max_size=8))


def yamz_rows(max_frames: int, max_rows: int) -> st.SearchStrategy:
    """Writer input rows: ``frames`` (some null), ``topic`` and ``payload``, each maybe null."""
    frames = st.lists(st.one_of(st.none(), st.text(max_size=6)), max_size=max_frames)
    row = st.fixed_dictionaries(
        {"frames": st.one_of(st.none(), frames), "topic": maybe_text, "payload": maybe_text}
    )
    return st.lists(row, min_size=1, max_size=max_rows)


@fuzz(200)
@given(
    rows=yamz_rows(max_frames=3, max_rows=8),
    params=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
)
def test_yamz_encode_then_decode_keeps_every_frame_200_examples(rows, params):
    schema = pa.schema(
        [("frames", pa.list_(pa.string())), ("topic", pa.string()), ("payload", pa.string())]
    )
    encoded = yamz.encode(pa.RecordBatch.from_pylist(rows, schema=schema), YAMZ_WRITER)
    sent = []
    for row, message, error in zip(rows, encoded.messages, encoded.errors):
        assert (message is None) != (error is None)
        if (
            row["frames"] is not None
            and row["topic"] is None
            and row["payload"] is None
            and row["frames"]
            and None not in row["frames"]
        ):
            assert message == [f.encode() for f in row["frames"]]
        elif row["frames"] is None and row["payload"] is not None:
            assert message == [p.encode() for p in (row["topic"], row["payload"]) if p is not None]
        else:
            assert message is None
        if message is not None:
            sent.append(message)
    metadata = {"node": "n", "path": "a/b", "address": "tcp://h:1", "params": json.dumps(params)}
    decoded = yamz.decode(list_array(sent + [[]]), Source("tcp://h:1", metadata), YAMZ_READER)
    assert decoded.error.to_pylist() == [None] * (len(sent) + 1)
    assert decoded.columns["frames"].to_pylist() == sent + [[]]
    assert decoded.payload.to_pylist() == [m[-1] for m in sent] + [None]
    assert all(dict(p) == params for p in decoded.columns["params"].to_pylist())


@fuzz(200)
@given(
    rows=yamz_rows(max_frames=4, max_rows=12),
    binary=st.booleans(),
    skip=st.integers(0, 2),
)
def test_yamz_encodes_the_same_messages_column_wise_200_examples(rows, binary, skip):
    """What the compiled send loop sends (``encode_columns``) is what the Python path sends
    (``encode``), row by row, for text or binary columns and for a slice of a batch."""
    kind = pa.binary() if binary else pa.string()
    filler = {"frames": ["x", "y", "z", "w", "v"], "topic": None, "payload": None}
    rows = [filler] * skip + rows
    if binary:
        rows = [
            {
                "frames": None if r["frames"] is None else [_utf8(f) for f in r["frames"]],
                "topic": _utf8(r["topic"]),
                "payload": _utf8(r["payload"]),
            }
            for r in rows
        ]
    schema = pa.schema([("frames", pa.list_(kind)), ("topic", kind), ("payload", kind)])
    batch = pa.RecordBatch.from_pylist(rows, schema=schema).slice(skip)

    by_columns = yamz.encode_columns(batch, YAMZ_WRITER)

    assert by_columns.as_encoded() == yamz.encode(batch, YAMZ_WRITER)
    assert all(frame.type == pa.binary() for frame in [*by_columns.frames, by_columns.topics])


def _utf8(text):
    return None if text is None else text.encode("utf-8")


@fuzz(100)
@given(
    rows=captured(st.lists(st.binary(max_size=16), min_size=1, max_size=3)),
    params=st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=3),
)
def test_yamz_read_path_keeps_the_delivery_contract_100_examples(rows, params):
    metadata = {"node": "n", "path": "a/b", "address": "tcp://h:1", "params": json.dumps(params)}
    reading = {"address": "yamz://*/a/b"}  # required, as a query's options have it
    delivered = check_read_path(yamz, reading, Source("tcp://h:1", metadata), rows)
    for row in delivered:
        if row["offset"] not in rows.faults():
            assert row["frames"] == rows.rows[row["offset"]] and row["error"] is None
            assert row["payload"] == row["frames"][-1] and dict(row["params"]) == params
