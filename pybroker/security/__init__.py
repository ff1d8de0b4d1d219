"""Security of connections: listeners' security protocols, TLS, principals (Kafka's
``org.apache.kafka.common.security``), and what a principal may do (ACLs, the authorizer)."""
