"""Reference systems the compat scenarios can run against instead of pybroker (Apache Kafka itself)."""
