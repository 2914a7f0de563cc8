"""One subpackage per ZeroMQ-based system: its wire facts, discovery, columns and decoding.

``contract``   the seam: what a format provides to the generic reader and writer, and the
               invariants it keeps (``StreamProtocol[S]``, ``SinkProtocol[W]``, ``Discovery``,
               ``Endpoint``, ``Decoded``, ``Encoded``, ``SinkPublisher``, ``Requester``)
``arrow``      Arrow helpers the formats share (input columns, frame descriptions)
``addresses``  checks of the addresses and partition keys that peers announce
``xpub``       the XPUB sender several formats' publishers use
``oneshot``    one request and its reply on a fresh REQ socket, bounded in time as a whole
``extjson``    extended JSON for payloads shown as text

Each format is a folder with the same files (``docs/development.md``, "Adding a format"):
``__init__.py``, ``options.py``, ``format.py``, ``discovery.py``, ``wire.py``, ``publisher.py``,
plus files for the parts only it has. Nothing here imports pyspark.
"""
