"""Client quotas (Kafka's ClientQuotaManager family, KIP-13/KIP-124/KIP-219) and connection limits
(Kafka's ConnectionQuotas: max.connections, max.connections.per.ip, KIP-612 creation rates)."""
