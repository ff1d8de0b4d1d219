"""Security of connections: listeners' security protocols, TLS, principals (Kafka's
``org.apache.kafka.common.security``)."""
