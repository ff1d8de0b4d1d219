"""Kafka wire protocol, bytes in and dicts out, no I/O.

- ``schema``: ``FieldSpec``/``MessageSpec``/``VersionRange`` (declarations as data)
- ``messages``: generated declarations, one module per API family (``tools/gen_protocol.py``)
- ``api``: ``REQUESTS``, ``RESPONSES``, ``API_NAMES``, ``REQUEST_HEADER``, ``RESPONSE_HEADER``
- ``codec``: ``decode``, ``encode``, ``encode_parts``, ``decode_request_header``, ``encode_response_header``
- ``errors``: ``ErrorCode`` and ``KafkaError``
- ``framing``: the sans-IO frame cutter
"""
