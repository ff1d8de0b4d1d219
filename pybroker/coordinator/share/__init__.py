"""Share groups (KIP-932, "queues for Kafka"): share partitions, share-group membership, durable share state."""
