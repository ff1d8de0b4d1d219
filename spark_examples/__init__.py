"""Spark pipelines that use Spark's built-in kafka source and sink against pybroker (or any Kafka)."""
