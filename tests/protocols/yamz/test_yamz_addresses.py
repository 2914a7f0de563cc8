"""yamz addresses (no network): the seed's three categories, every misuse it rules out, and
matching of abstract addresses over announced trees (the seed's tree with inherited and
overridden parameters, and the flat header of the public yamz code)."""

from __future__ import annotations

import json

import pytest

from spark_zmq.protocols.yamz.wire import (
    AddressError,
    Category,
    HeaderError,
    for_bind,
    for_connect,
    matches,
    parse,
    ports_of,
)


@pytest.mark.parametrize(
    "text, category, location",
    [
        ("tcp://127.0.0.1:5555", Category.CONCRETE, "tcp://127.0.0.1:5555"),
        ("ipc:///tmp/x.ipc", Category.CONCRETE, "ipc:///tmp/x.ipc"),
        ("inproc://internal", Category.CONCRETE, "inproc://internal"),
        ("tcp://*:*", Category.EPHEMERAL, "tcp://*:*"),
        ("tcp://127.0.0.1:*?det=tpc", Category.EPHEMERAL, "tcp://127.0.0.1:*"),
        ("ipc:///tmp/*.ipc", Category.EPHEMERAL, "ipc:///tmp/*.ipc"),
        ("yamz://*/log", Category.ABSTRACT, "yamz://*/log"),
    ],
)
def test_addresses_are_classified(text, category, location):
    address = parse(text)
    assert (address.category, address.location) == (category, location)


def test_query_of_a_bind_address_is_its_attributes_and_regexes_keep_their_characters():
    bind = for_bind("tcp://*:*?part=2&det=tpc&role=tpsource&apa=42&face=1")
    assert bind.attributes == {
        "part": "2",
        "det": "tpc",
        "role": "tpsource",
        "apa": "42",
        "face": "1",
    }
    abstract = for_connect("yamz://friend/*/out?apa=4[12]&name=a+b%26c")
    assert (abstract.node, abstract.path) == ("friend", ("*", "out"))
    assert dict(abstract.query) == {"apa": "4[12]", "name": "a+b&c"}
    assert abstract.patterns[1][1].fullmatch("aab&c")


@pytest.mark.parametrize(
    "use, text, fault",
    [
        (for_connect, "tcp://*:*", "is ephemeral"),
        (for_connect, "tcp://127.0.0.1:*", "can only be bound"),
        (for_bind, "yamz://*/log", "cannot be bound"),
        (parse, "udp://127.0.0.1:5", "unsupported scheme 'udp'"),
        (parse, "127.0.0.1:5555", "has no scheme"),
        (parse, "tcp://127.0.0.1", "needs host:port"),
        (parse, "tcp://127.0.0.1:http", "is not a port number"),
        (parse, "tcp://*:*?det", "malformed query item 'det'"),
        (parse, "tcp://*:*?=tpc", "malformed query item '=tpc'"),
        (parse, "tcp://*:*?a=1&a=2", "query key 'a' is given twice"),
        (parse, "yamz:///log", "names no node"),
        (parse, "yamz://node", "needs a path"),
        (parse, "yamz://node/a//b", "needs a path of non-empty elements"),
        (parse, "yamz://*/tps?apa=4[12", "is not a valid regular expression"),
    ],
)
def test_each_misuse_gets_an_error_naming_the_address(use, text, fault):
    with pytest.raises(AddressError, match=fault) as failure:
        use(text)
    assert repr(text) in str(failure.value)


def vertex(name, port=None, params=None, children=()):
    tree = {"name": name}
    if port:
        tree["port"] = {"address": port, "type": "PUB"}
    if params:
        tree["params"] = params
    if children:
        tree["children"] = list(children)
    return tree


#: two DAQ nodes of the seed's example: parameters on the root apply to every port below and
#: a vertex's own parameters override them
NODES = {
    "daq1": vertex(
        "daq1",
        params={"part": "2", "det": "pds"},
        children=[
            vertex(
                "tps",
                "tcp://10.0.0.1:7001",
                {"det": "tpc", "role": "tpsource", "apa": "42", "face": "1"},
            ),
            vertex("log", "tcp://10.0.0.1:7002"),
            vertex(
                "fanout",
                children=[
                    vertex("out", "tcp://10.0.0.1:7003"),
                    vertex("aux", "tcp://10.0.0.1:7004"),
                ],
            ),
        ],
    ),
    "friend": vertex(
        "friend",
        params={"part": "2"},
        children=[
            vertex("tps", "tcp://10.0.0.2:7001", {"det": "tpc", "apa": "43"}),
            vertex("log", "tcp://10.0.0.2:7002"),
            vertex(
                "fanout",
                children=[
                    vertex("out", "tcp://10.0.0.2:7003"),
                    vertex("aux", "tcp://10.0.0.2:7004"),
                ],
            ),
            vertex("merge", children=[vertex("out", "tcp://10.0.0.2:7005")]),
            vertex("pds", children=[vertex("tps", "tcp://10.0.0.2:7006", {"apa": "41"})]),
        ],
    ),
}
PORTS = [port for node, tree in NODES.items() for port in ports_of(node, json.dumps(tree))]


def resolve(text, expected=None):
    address = for_connect(text)
    return sorted(a for port in PORTS if matches(address, port, expected) for a in port.addresses)


def test_parameters_are_inherited_and_overridden_down_the_tree():
    tps = next(p for p in PORTS if p.node == "daq1" and p.path == ("tps",))
    assert tps.shown_params() == {
        "apa": "42",
        "det": "tpc",
        "face": "1",
        "part": "2",
        "role": "tpsource",
    }
    log = next(p for p in PORTS if p.node == "daq1" and p.path == ("log",))
    assert log.shown_params() == {"det": "pds", "part": "2"}


@pytest.mark.parametrize(
    "text, expected",
    [
        # the seed's examples
        ("yamz://*/log", ["tcp://10.0.0.1:7002", "tcp://10.0.0.2:7002"]),
        ("yamz://friend/*/out", ["tcp://10.0.0.2:7003", "tcp://10.0.0.2:7005"]),
        ("yamz://friend/fanout/*", ["tcp://10.0.0.2:7003", "tcp://10.0.0.2:7004"]),
        ("yamz://*/tps?part=2&det=tpc&apa=4[12]", ["tcp://10.0.0.1:7001"]),
        # a '*' is one element; patterns must match the whole value; an absent key fails
        (
            "yamz://*/*",
            [
                "tcp://10.0.0.1:7001",
                "tcp://10.0.0.1:7002",
                "tcp://10.0.0.2:7001",
                "tcp://10.0.0.2:7002",
            ],
        ),
        ("yamz://*/tps?apa=4", []),
        ("yamz://*/tps?apa=4.", ["tcp://10.0.0.1:7001", "tcp://10.0.0.2:7001"]),
        ("yamz://*/log?face=.*", []),
        # a path matches element by element, so only a two-element path ends in tps here
        ("yamz://*/*/tps?part=2", ["tcp://10.0.0.2:7006"]),
        # daq1's det=pds reaches log by inheritance; tps overrides it with det=tpc
        ("yamz://*/*?det=pds", ["tcp://10.0.0.1:7002"]),
    ],
)
def test_abstract_addresses_match_the_seed_examples(text, expected):
    assert resolve(text) == expected


def test_expected_nodes_restrict_the_wildcard_only():
    assert resolve("yamz://*/log", frozenset({"friend"})) == ["tcp://10.0.0.2:7002"]
    assert resolve("yamz://daq1/log", frozenset({"friend"})) == ["tcp://10.0.0.1:7002"]


FLAT = {
    "clients": [
        {
            "clientid": "hitfinder",
            "idparms": [{"key": "det", "val": "tpc"}],
            "ports": [
                {
                    "addresses": ["tcp://10.0.0.3:6001", "ipc:///tmp/hits.ipc"],
                    "idparms": [{"key": "apa", "val": "41"}, {"key": "apa", "val": "42"}],
                    "portid": "hits",
                    "ztype": "pub",
                }
            ],
        },
        {
            "clientid": "ctrl",
            "ports": [{"addresses": ["tcp://10.0.0.3:6002"], "portid": "cmd", "ztype": "PULL"}],
        },
    ],
    "idparms": [{"key": "part", "val": "2"}],
}


def test_the_flat_header_of_the_public_yamz_code_is_understood():
    ports = ports_of("flatnode", json.dumps(FLAT, sort_keys=True, separators=(",", ":")))
    hits, cmd = ports
    assert (hits.node, hits.path, hits.socket_type) == ("flatnode", ("hitfinder", "hits"), "PUB")
    assert hits.addresses == ("tcp://10.0.0.3:6001", "ipc:///tmp/hits.ipc")
    assert hits.shown_params() == {"apa": "41,42", "det": "tpc", "part": "2"}
    assert cmd.params == {"part": ("2",)} and cmd.socket_type == "PULL"
    assert matches(for_connect("yamz://flatnode/hitfinder/hits?apa=42&part=2"), hits)
    assert matches(for_connect("yamz://*/*/hits?apa=4[0-1]"), hits)
    assert not matches(for_connect("yamz://*/*/hits?apa=43"), hits)
    assert not matches(for_connect("yamz://*/*/cmd?det=tpc"), cmd)


@pytest.mark.parametrize(
    "header, fault",
    [
        ("{not json", "is not JSON"),
        ("[1, 2]", "neither a tree"),
        ('{"name": "n", "children": [{"name": "a"}, {"name": "a"}]}', "two children of one name"),
        ('{"name": "n", "children": [{"port": {"address": "tcp://h:1"}}]}', "malformed part"),
        ('{"clients": [{"clientid": "c", "ports": [{"portid": "p"}]}]}', "malformed part"),
    ],
)
def test_a_malformed_header_is_an_error_naming_the_node(header, fault):
    with pytest.raises(HeaderError, match=fault) as failure:
        ports_of("badnode", header)
    assert "'badnode'" in str(failure.value)


def test_the_writers_header_is_what_the_yamz_cpp_library_parses():
    """The C++ library reads only ``clients`` and ``idparms`` of compact, key-sorted JSON
    (shared/protocols/yamz.md); the tree stays beside them for readers of the seed's design."""
    from spark_zmq.protocols.yamz.publisher import port_header

    text = port_header("w", ("spark", "out"), "tcp://10.0.0.5:4242", {"det": "tpc", "apa": "4"})
    doc = json.loads(text)
    assert text == json.dumps(doc, sort_keys=True, separators=(",", ":"))
    assert {"clients": doc["clients"], "idparms": doc["idparms"]} == {
        "clients": [
            {
                "clientid": "spark",
                "idparms": [],
                "ports": [
                    {
                        "addresses": ["tcp://10.0.0.5:4242"],
                        "idparms": [{"key": "apa", "val": "4"}, {"key": "det", "val": "tpc"}],
                        "portid": "out",
                        "ztype": "PUB",
                    }
                ],
            }
        ],
        "idparms": [],
    }
    (tree_port,) = ports_of("w", json.dumps({"name": doc["name"], "children": doc["children"]}))
    (flat_port,) = ports_of("w", text)
    assert tree_port == flat_port
    assert "clients" not in port_header("w", ("a", "b", "c"), "tcp://10.0.0.5:1", {})
