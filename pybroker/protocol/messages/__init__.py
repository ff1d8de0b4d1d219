"""Generated Kafka message declarations, one module per API family (see tools/gen_protocol.py)."""

FAMILIES = ('admin', 'api_versions', 'fetch', 'groups', 'headers', 'metadata', 'offsets', 'other', 'produce', 'producer')
