"""Observability: the running totals the request path keeps (``recorder``), a narrow view of broker
state (``view``), consumer lag (``lag``), the Prometheus collector and the HTTP endpoints.

Only ``recorder`` is imported on the request path; the rest (and prometheus_client, aiohttp) load
when ``metrics.listener`` or ``console.listener`` is set.
"""
