"""Client telemetry (KIP-714): GetTelemetrySubscriptions (71), PushTelemetry (72) and the
client-metrics subscriptions they serve (CLIENT_METRICS config resources), after Kafka's
ClientMetricsManager.

A subscription is a CLIENT_METRICS config resource with ``metrics`` (metric-name prefixes, ``*`` for
all), ``interval.ms`` and ``match`` (``selector=regex`` pairs on the client's identity); it is kept in
the metadata store. A client's instance gets the union of the matching subscriptions' metrics at the
shortest of their intervals. Pushes are decompressed, their OTLP ``MetricsData`` decoded far enough to
name the metrics, and the last ``RECENT_PUSHES`` kept for the metrics endpoint and tests.
"""

from __future__ import annotations

import logging
import re
import struct
import time
import uuid
import zlib
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pybroker.apis import RequestContext, handles
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.messages.api_keys import ApiKey
from pybroker.records.streams import decompress_bounded

if TYPE_CHECKING:
    from pybroker.protocol.typed.other import (
        GetTelemetrySubscriptionsRequest,
        GetTelemetrySubscriptionsResponse,
        PushTelemetryRequest,
        PushTelemetryResponse,
    )

log = logging.getLogger(__name__)

CLIENT_METRICS = 16
METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
DEFAULT_INTERVAL_MS = 300_000
MIN_INTERVAL_MS, MAX_INTERVAL_MS = 100, 3_600_000
TELEMETRY_MAX_BYTES = 1024 * 1024  # Kafka's telemetry.max.bytes default
MATCH_SELECTORS = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)
# gzip, snappy, lz4, zstd: every codec but none, as Kafka lists them (none is accepted too).
ACCEPTED_COMPRESSION = [1, 2, 3, 4]
RECENT_PUSHES = 256
MAX_INSTANCES = 100_000
ZERO_UUID = uuid.UUID(int=0)


class ClientMetricsConfigError(ValueError):
    pass


def validate_subscription(configs: dict[str, str]) -> None:
    """Kafka's ClientMetricsConfigs.validate: known keys, an interval in range, ``match`` selectors
    that exist with values that compile as regular expressions."""
    for key in configs:
        if key not in (METRICS, INTERVAL_MS, MATCH):
            raise ClientMetricsConfigError(f"Unknown client metrics configuration: {key}")
    if INTERVAL_MS in configs:
        try:
            interval = int(configs[INTERVAL_MS])
        except ValueError:
            raise ClientMetricsConfigError(f"Invalid value {configs[INTERVAL_MS]} for {INTERVAL_MS}") from None
        if not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
            raise ClientMetricsConfigError(
                f"Invalid value {interval} for {INTERVAL_MS}, interval must be between "
                f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS}"
            )
    _parse_match(configs.get(MATCH, ""))


def _parse_match(text: str) -> dict[str, re.Pattern]:
    patterns: dict[str, re.Pattern] = {}
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        selector, sep, regex = item.partition("=")
        if not sep or selector not in MATCH_SELECTORS:
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {item}")
        try:
            patterns[selector] = re.compile(regex)
        except re.error as e:
            raise ClientMetricsConfigError(f"Illegal regex pattern {regex}: {e}") from None
    return patterns


def describe_entries(configs: dict[str, str]) -> list[tuple[str, str]]:
    """A subscription's configs as DescribeConfigs shows them: every key, defaults filled in."""
    return [
        (METRICS, configs.get(METRICS, "")),
        (INTERVAL_MS, configs.get(INTERVAL_MS, str(DEFAULT_INTERVAL_MS))),
        (MATCH, configs.get(MATCH, "")),
    ]


@dataclass
class ClientInstance:
    instance_id: uuid.UUID
    subscription_id: int
    metrics: list[str]
    push_interval_ms: int
    version: int  # the subscription set's version it was computed from
    last_get_ms: float = 0.0
    last_push_ms: float = 0.0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE


@dataclass
class TelemetryPush:
    client_instance_id: uuid.UUID
    client_id: str
    compression_type: int
    size: int
    metrics: list[tuple[str, float | None]] = field(default_factory=list)  # (name, latest value)


class ClientMetricsManager:
    def __init__(self, store) -> None:
        self.store = store
        self.version = 0
        self.instances: dict[uuid.UUID, ClientInstance] = {}
        self.pushes: deque[TelemetryPush] = deque(maxlen=RECENT_PUSHES)
        self.pushes_accepted = 0

    def set_subscription(self, name: str, configs: dict[str, str]) -> None:
        self.store.set_client_metrics(name, configs)
        self.version += 1  # every client instance recomputes its subscription on its next request

    def _instance(self, instance_id: uuid.UUID, ctx: RequestContext) -> ClientInstance:
        metrics: set[str] = set()
        interval = None
        identity = {
            "client_instance_id": str(instance_id),
            "client_id": ctx.header.client_id or "",
            # The ApiVersions self-description is not kept per connection yet: software selectors
            # see an empty name and version.
            "client_software_name": "",
            "client_software_version": "",
            "client_source_address": ctx.peer.rsplit(":", 1)[0],
            "client_source_port": ctx.peer.rsplit(":", 1)[-1],
        }
        for configs in self.store.client_metrics.values():
            patterns = _parse_match(configs.get(MATCH, ""))
            if not all(p.fullmatch(identity.get(s, "")) for s, p in patterns.items()):
                continue
            wanted = [m.strip() for m in configs.get(METRICS, "").split(",") if m.strip()]
            if not wanted:
                continue
            metrics.update("" if m == "*" else m for m in wanted)
            sub_interval = int(configs.get(INTERVAL_MS, DEFAULT_INTERVAL_MS))
            interval = sub_interval if interval is None else min(interval, sub_interval)
        requested = [""] if "" in metrics else sorted(metrics)
        push_interval = interval if interval is not None else DEFAULT_INTERVAL_MS
        # Kafka's subscription id: a CRC32 of the metrics and interval with the instance; opaque to clients.
        digest = zlib.crc32(f"{requested}{push_interval}{instance_id}".encode())
        subscription_id = digest - (1 << 32) if digest >= 1 << 31 else digest
        return ClientInstance(instance_id, subscription_id, requested, push_interval, self.version)

    def _lookup(self, instance_id: uuid.UUID, ctx: RequestContext) -> ClientInstance:
        """The instance from the cache, made (again) when it is new or the subscriptions changed since."""
        instance = self.instances.get(instance_id)
        if instance is None or instance.version != self.version:
            instance = self._instance(instance_id, ctx)
            if instance_id not in self.instances and len(self.instances) >= MAX_INSTANCES:
                self.instances.pop(next(iter(self.instances)))  # bounded: forget the oldest instance
            self.instances[instance_id] = instance
        return instance

    def get_subscriptions(
        self, ctx: RequestContext, request: GetTelemetrySubscriptionsRequest
    ) -> GetTelemetrySubscriptionsResponse:
        instance_id = request.get("client_instance_id") or ZERO_UUID
        while instance_id == ZERO_UUID or instance_id in self.instances and not request.get("client_instance_id"):
            instance_id = uuid.uuid4()  # a new client: an id no cached instance has
        now = time.monotonic() * 1000
        instance = self._lookup(instance_id, ctx)
        # Kafka: a Get within the push interval of the client's last request is throttled, unless its last
        # push was refused for its subscription id (the client is expected to re-fetch at once).
        last = max(instance.last_get_ms, instance.last_push_ms)
        throttled = (
            last > 0
            and now - last < instance.push_interval_ms
            and instance.last_error != ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        )
        instance.last_get_ms = now
        if throttled:
            return {"throttle_time_ms": 0, "error_code": ErrorCode.THROTTLING_QUOTA_EXCEEDED}
        instance.last_error = ErrorCode.NONE
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.NONE,
            "client_instance_id": instance_id,
            "subscription_id": instance.subscription_id,
            "accepted_compression_types": ACCEPTED_COMPRESSION,
            "push_interval_ms": instance.push_interval_ms,
            "telemetry_max_bytes": TELEMETRY_MAX_BYTES,
            "delta_temporality": True,
            "requested_metrics": instance.metrics,
        }

    def push(self, ctx: RequestContext, request: PushTelemetryRequest) -> ErrorCode:
        instance_id = request["client_instance_id"]
        if instance_id is None or instance_id == ZERO_UUID:
            return ErrorCode.INVALID_REQUEST
        now = time.monotonic() * 1000
        instance = self._lookup(instance_id, ctx)
        code = self._validate_push(instance, request, now)
        instance.terminating = request["terminating"]
        instance.last_push_ms = now
        if code != ErrorCode.NONE:
            instance.last_error = code
            return code
        payload = request["metrics"] or b""
        compression = request["compression_type"]
        try:
            data = decompress_bounded(compression, payload, TELEMETRY_MAX_BYTES * 16) if compression else payload
            metrics = decode_metrics(bytes(data))
        except Exception as e:  # Kafka hands the bytes to a plugin and answers NONE: so do we, and log it
            log.info("undecodable telemetry push from %s: %s", instance_id, e)
            metrics = []
        self.pushes_accepted += 1
        self.pushes.append(TelemetryPush(instance_id, ctx.header.client_id or "", compression, len(payload), metrics))
        instance.last_error = ErrorCode.NONE
        return ErrorCode.NONE

    @staticmethod
    def _validate_push(instance: ClientInstance, request: PushTelemetryRequest, now: float) -> ErrorCode:
        """Kafka's checks, in its order."""
        if instance.terminating:
            return ErrorCode.INVALID_REQUEST  # nothing is accepted after the terminating push
        # A push right after a Get is accepted whatever the interval: clients jitter their first push.
        may_push = instance.last_get_ms > instance.last_push_ms or now - instance.last_push_ms >= (
            instance.push_interval_ms
        )
        if not may_push and not request["terminating"]:
            return ErrorCode.THROTTLING_QUOTA_EXCEEDED
        if request["subscription_id"] != instance.subscription_id:
            return ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        if request["compression_type"] not in (0, *ACCEPTED_COMPRESSION):
            return ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        if len(request["metrics"] or b"") > TELEMETRY_MAX_BYTES:
            return ErrorCode.TELEMETRY_TOO_LARGE
        return ErrorCode.NONE


# -- OTLP: MetricsData{1: ResourceMetrics{2: ScopeMetrics{2: Metric{1: name}}}} ------------------------


def _fields(buf: bytes):
    """(field number, wire type, value) of one protobuf message; length-delimited values as bytes."""
    pos, end = 0, len(buf)
    while pos < end:
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: int | bytes  # a varint's number, else the field's bytes
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos : pos + 8], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > end:
                raise ValueError("truncated length-delimited field")
            value, pos = buf[pos : pos + length], pos + length
        elif wire == 5:
            value, pos = buf[pos : pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        yield number, wire, value
    if pos != end:
        raise ValueError("truncated message")


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("bad varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def decode_metrics(metrics_data: bytes) -> list[tuple[str, float | None]]:
    """Each metric's name and the value of its last number data point (gauge 5 or sum 7: NumberDataPoint
    as_double 4 / as_int 6); None for the other kinds (histograms, summaries)."""
    out = []
    for n, w, resource_metrics in _fields(metrics_data):
        if n != 1 or w != 2:
            continue
        for n2, w2, scope_metrics in _fields(resource_metrics):
            if n2 != 2 or w2 != 2:
                continue
            for n3, w3, metric in _fields(scope_metrics):
                if n3 != 2 or w3 != 2:
                    continue
                name, value = "", None
                for n4, w4, part in _fields(metric):
                    if n4 == 1 and w4 == 2:
                        name = bytes(part).decode()
                    elif n4 in (5, 7) and w4 == 2:
                        for n5, w5, point in _fields(part):
                            if n5 == 1 and w5 == 2:
                                value = _number(point)
                out.append((name, value))
    return out


def _number(point: bytes) -> float | None:
    value = None
    for n, w, v in _fields(point):
        if n == 4 and w == 1:
            value = struct.unpack("<d", v)[0]
        elif n == 6 and w == 1:
            value = float(struct.unpack("<q", v)[0])
    return value


def manager(ctx: RequestContext) -> ClientMetricsManager:
    return ctx.services.client_metrics


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, 0, 0)
def handle_get_telemetry_subscriptions(
    ctx: RequestContext, request: GetTelemetrySubscriptionsRequest
) -> GetTelemetrySubscriptionsResponse:
    return manager(ctx).get_subscriptions(ctx, request)


@handles(ApiKey.PUSH_TELEMETRY, 0, 0)
def handle_push_telemetry(ctx: RequestContext, request: PushTelemetryRequest) -> PushTelemetryResponse:
    return {"throttle_time_ms": 0, "error_code": manager(ctx).push(ctx, request)}
