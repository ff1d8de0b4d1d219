"""Sockets, framing and dispatch: the only module that touches connections.

One ``KafkaConnection`` (an ``asyncio.BufferedProtocol``: measured ~5x cheaper than streams for 1 KiB
frames here, and the transport reads into buffers the framing offers, so a produced batch reaches
the log without a copy in user space) per client.  Frames are cut sans-IO by ``protocol.framing``; each request is decoded
by ``protocol.codec``, handled by its ``apis`` module, encoded and written.  Requests of one
connection are answered strictly in order: handlers that answer at once are written in one batch
per read; a handler that must wait (long-poll fetch, acks=all) holds back the following requests
of that connection until it is done, as Kafka's own network layer mutes a channel while a request
is in flight.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import resource
import socket
import ssl
import struct
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from time import perf_counter
from typing import TYPE_CHECKING, Any, Protocol, cast

from pybroker.apis import REGISTRY, CloseConnection, RequestContext
from pybroker.protocol import codec
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.framing import Frame, FrameError, FrameReader, thread_scratch_buffer
from pybroker.quotas.client_quotas import CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE
from pybroker.quotas.rate import throttle_time_ms
from pybroker.replication.append import Appended
from pybroker.security.authenticator import SASL_HANDSHAKE, Outcome, SaslServerAuthenticator
from pybroker.security.context import ConnectionSecurity, uses_sasl

if TYPE_CHECKING:
    from pybroker.apis.services import BrokerServices
    from pybroker.config import BrokerConfig, Endpoint
    from pybroker.metrics.recorder import BrokerMetrics
    from pybroker.protocol.memory_pool import MemoryPool
    from pybroker.protocol.schema import MessageSpec
    from pybroker.quotas.client_quotas import ClientQuotaManager
    from pybroker.quotas.connection_quotas import ConnectionQuotas
    from pybroker.security.delegation_token import TokenCredential
    from pybroker.security.sasl_config import SaslListenerConfig
    from pybroker.security.scram import ScramCredential, ScramMechanism
    from pybroker.security.ssl_factory import ServerSslFactory

log = logging.getLogger(__name__)


class ServerHost(Protocol):
    """What the server uses of the broker that runs it (``pybroker.broker.Broker``): settings, the
    request memory pool, the open connections and acceptors, the counters, the SASL settings and
    credentials, and the services it hands each request's handler."""

    config: BrokerConfig
    memory_pool: MemoryPool
    memory_waiters: MemoryWaiters
    connections: set[Any]
    metrics: BrokerMetrics
    acceptors: list[Acceptor]
    services: BrokerServices
    client_quotas: ClientQuotaManager  # producer_byte_rate, consumer_byte_rate, request_percentage
    connection_quotas: ConnectionQuotas  # max.connections(.per.ip), max.connection.creation.rate

    # Read-only: the broker's own dicts are fine where the server only reads.
    @property
    def request_specs(self) -> Mapping[int, MessageSpec]: ...
    @property
    def sasl_configs(self) -> Mapping[str, SaslListenerConfig]: ...

    def scram_credential(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None: ...

    def delegation_token_credential(self, token_id: str, mechanism: ScramMechanism) -> TokenCredential | None: ...

_SIZE = struct.Struct(">i")
API_VERSIONS = 18
SENDFILE_MIN_BYTES = 64 * 1024  # below this a pread copy is cheaper than a sendfile call
# PYBROKER_SENDFILE=0 serves every slice by pread, for benchmarking the two paths against each other.
USE_SENDFILE = os.environ.get("PYBROKER_SENDFILE", "1") != "0"


def _part_size(part: Any) -> int:
    return (
        part.size
        if hasattr(part, "size") and not isinstance(part, bytes | bytearray | memoryview)
        else len(part)
    )


class KafkaConnection(asyncio.BufferedProtocol):
    def __init__(
        self, broker: ServerHost, listener: Endpoint | None = None, ssl_factory: ServerSslFactory | None = None
    ) -> None:
        self.broker = broker
        self.listener = listener if listener is not None else broker.config.listener_endpoints[0]
        self.ssl_factory = ssl_factory  # set on an SSL listener: the transport is TLS
        self.security: ConnectionSecurity | None = None  # made once the connection is established
        self.pool = broker.memory_pool
        # A buffered protocol: the transport reads into the buffers the reader offers (the rest of a
        # frame straight into that frame's own buffer), so produced records are never copied.
        self.reader = FrameReader(broker.config.socket_request_max_bytes, self.pool, thread_scratch_buffer())
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._backlog: deque[Frame] = deque()
        self._busy = False  # a request waits for those before it to be answered (see _process)
        self._pipeline: deque[_Pending | _Answered] = deque()  # requests handled, answers not yet sent
        self._pipeline_blocked = 0  # pending requests in it that are not Produce (nothing may overtake them)
        self._closed = False
        # sendfile writes file bytes straight to the socket: never under TLS, whose records OpenSSL makes.
        self._use_sendfile = USE_SENDFILE and ssl_factory is None
        self._dup_fd = -1
        self._sending: tuple[Any, int] | None = None  # (file slice, bytes already sent)
        self._out_queue: deque[Any] = deque()
        self._write_paused = False  # the client does not read its responses
        self._memory_paused = False  # waiting for the memory pool (queued.max.request.bytes)
        # KIP-219: muted (not read) until this loop time after a quota violation; 0.0 when not.
        self._throttled_until = 0.0
        self._throttle_timer: asyncio.TimerHandle | None = None
        self.last_active = time.monotonic()  # connections.max.idle.ms
        self.quota_slot: Any = None  # ConnectionQuotas' hold on this connection's count
        # SASL listeners: Kafka's SaslServerAuthenticator; until it completes only ApiVersions and the SASL
        # requests are served.
        self.authenticator: SaslServerAuthenticator | None = None
        self._close_after: str | None = None  # close once the responses of this batch are written

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream server's transport (create_server / connect_accepted_socket): a full Transport.
        transport = cast(asyncio.Transport, transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            cfg = self.broker.config
            # -1 keeps the operating system's default, as in Kafka.
            if cfg.socket_send_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, cfg.socket_send_buffer_bytes)
            if cfg.socket_receive_buffer_bytes > 0:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, cfg.socket_receive_buffer_bytes)
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.security = ConnectionSecurity(
            self.listener.listener_name,
            self.listener.security_protocol,
            str(peer[0]) if peer else "",
            int(peer[1]) if peer else -1,
        )
        if self.ssl_factory is not None:
            # The handshake is done: the principal is the client certificate's mapped DN, if any.
            try:
                principal, dn = self.ssl_factory.principal(transport.get_extra_info("ssl_object"))
            except Exception as e:  # noqa: BLE001 - NoMatchingRule or an unreadable certificate
                log.info("Failed authentication with %s (SSL principal: %s)", self.peer, e)
                self._closed = True
                transport.abort()
                return
            self.security.principal, self.security.ssl_peer_dn = principal, dn
        if uses_sasl(self.security.security_protocol):
            sasl_config = self.broker.sasl_configs[self.listener.listener_name]
            self.authenticator = SaslServerAuthenticator(
                sasl_config,
                self.broker.scram_credential,
                self.security,
                token_lookup=self.broker.delegation_token_credential,
            )
            # sasl.server.max.receive.size bounds what an unauthenticated peer may make the broker read.
            self.reader.max_size = min(self.reader.max_size, sasl_config.max_receive_size)
        self.broker.connections.add(self)
        self.broker.metrics.connection_opened()
        log.debug("connection from %s", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        if self.quota_slot is not None:
            self.quota_slot.release()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._release_dup_fd()
        if self in self.broker.connections:
            self.broker.connections.discard(self)
            self.broker.metrics.connection_closed()
        for acceptor in self.broker.acceptors:
            acceptor.descriptor_freed()
        held = sum(len(f) for f in self._backlog) + self.reader.allocated_partial_bytes
        self._backlog.clear()
        if held:
            self.pool.release(held)
        if self._memory_paused:
            self._memory_paused = False
            self.broker.memory_waiters.discard(self)
        share_groups = self.broker.services.share_groups
        if share_groups is not None:  # its share sessions end: their acquired records are released
            share_groups.connection_closed(self.peer)
        log.debug("connection from %s closed (%s)", self.peer, exc or "eof")

    @property
    def queued_requests(self) -> int:
        """Requests read but waiting for an earlier one of this connection (metrics)."""
        return len(self._backlog)

    @property
    def request_in_flight(self) -> bool:
        return self._busy or bool(self._pipeline)

    def pause_writing(self) -> None:
        # The client is not reading its responses: stop reading its requests too.
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.transport is not None and not self._closed and not self._memory_paused and not self._throttled_until:
            self.transport.resume_reading()

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.reader.get_buffer()

    def buffer_updated(self, nbytes: int) -> None:
        self.last_active = time.monotonic()
        try:
            frames = self.reader.buffer_updated(nbytes)
        except FrameError as e:
            # A TLS record header (handshake, TLS 1.0-1.3) where a frame size should be.
            hint = " (a TLS handshake on a plaintext listener?)" if self.reader.unread_head(2) == b"\x16\x03" else ""
            self.close(f"invalid frame: {e}{hint}")
            return
        self._frames_read(frames)

    def _frames_read(self, frames: list[Frame]) -> None:
        if self.reader.blocked:
            self._wait_for_memory()
        if not frames:
            return
        if self._busy or self._throttled_until:
            self._backlog.extend(frames)
            if self.pool.available <= 0:
                self._wait_for_memory()  # a pipelining client must not queue without bound
            return
        self._process(frames)

    # -- the memory pool: Kafka mutes a channel whose next request cannot be allocated ----------
    def _wait_for_memory(self) -> None:
        if self._memory_paused or self._closed:
            return
        self._memory_paused = True
        self.broker.memory_waiters.add(self)
        if self.transport is not None:
            self.transport.pause_reading()

    def memory_available(self) -> None:
        """The pool has memory again: assemble the frame that waited and read on."""
        if not self._memory_paused or self._closed:
            return
        self._memory_paused = False
        self.broker.memory_waiters.discard(self)
        try:
            frames = self.reader.retry()
        except FrameError as e:  # pragma: no cover - the prefix was checked when it arrived
            self.close(f"invalid frame: {e}")
            return
        if self.reader.blocked or (self._busy and self.pool.available <= 0):
            self._wait_for_memory()
        if frames:
            if self._busy or self._throttled_until:
                self._backlog.extend(frames)
            else:
                self._process(frames)
        if not self._memory_paused and not self._write_paused and not self._closed and not self._throttled_until:
            assert self.transport is not None  # reading was paused, so the connection was made
            self.transport.resume_reading()

    # -- dispatch ----------------------------------------------------------------------------
    # Requests are answered in order.  A handler that returns an awaitable (long-poll fetch,
    # acks=all, a produce waiting for the log directory's writer thread) joins ``_pipeline``; while
    # it waits, only further Produce requests of the connection are handled (up to PIPELINE_DEPTH):
    # their appends queue behind its own in the same logs, so the writer threads get several writes
    # per wake-up instead of one, and their answers wait their turn.  Any other request waits until
    # everything before it is answered (``_busy``), as Kafka's network layer mutes a channel.
    def _process(self, frames: list[Frame] | deque[Frame]) -> None:
        out: list[Any] = []  # answers not yet written (only while nothing before them is pending)
        queue = deque(frames) if not isinstance(frames, deque) else frames
        handled = 0  # pool bytes of the frames answered here, released in one go
        pipeline = self._pipeline
        quotas = self.broker.client_quotas
        while queue and not self._closed:
            frame = queue[0]
            # Under client quotas a produce request is throttled when it is answered: none may overtake.
            produce = _is_produce(frame) and not quotas.quotas
            if pipeline and (not produce or self._pipeline_blocked or len(pipeline) >= PIPELINE_DEPTH):
                self._busy = True  # waits until the requests before it are answered
                break
            queue.popleft()
            try:
                result = self._handle(frame)
            except CloseConnection as e:
                handled += len(frame)
                self._write(out)
                self.close(str(e))
                break
            except Exception:
                # A bug of ours, not the peer's: keep the traceback, drop only this connection.
                handled += len(frame)
                log.exception("internal error while handling a request from %s", self.peer)
                self._write(out)
                self.close("internal error while handling a request")
                break
            if result is None or isinstance(result, list):
                if pipeline:  # answered already, but sent after the requests still pending before it
                    pipeline.append(_Answered(result, len(frame)))
                else:
                    handled += len(frame)
                    if result:
                        out.extend(result)
                    if self._close_after is not None:  # a SASL failure: its answer goes out, then the connection closes
                        self._write(out)
                        out = []
                        self.close(self._close_after)
                        break
                if self._throttled_until and queue:
                    # Muted by a quota (KIP-219): the rest waits, still charged, until the throttle ends.
                    break
                continue
            # An awaitable: its frame stays charged until it is answered.
            if not pipeline:
                self._write(out)
                out = []
            # Only a produce request whose batches are already appended may be followed at once by the
            # next one (replication/append.Appended); one that validates off the loop or asks a
            # transaction coordinator first would be overtaken.
            produce = produce and isinstance(result, Appended)
            task = asyncio.ensure_future(result)
            pipeline.append(_Pending(task, len(frame), produce))
            task.add_done_callback(self._request_done)
            if not produce:
                self._pipeline_blocked += 1
                self._busy = True
                break
        if queue:
            if self._closed:  # nothing left will be handled
                handled += sum(len(f) for f in queue)
                queue.clear()
            else:
                self._backlog.extendleft(reversed(queue))
                queue.clear()
        if not self._closed:
            self._write(out)
        self.pool.release(handled)

    def _request_done(self, task: asyncio.Future) -> None:
        """A pending request is done: send every answer now due, in order, and go on reading."""
        pipeline = self._pipeline
        out: list[Any] = []
        released = 0
        while pipeline:
            head = pipeline[0]
            if isinstance(head, _Pending):
                if not head.task.done():
                    break
                pipeline.popleft()
                released += head.size
                if not head.produce:
                    self._pipeline_blocked -= 1
                if self._closed:
                    continue
                try:
                    parts = head.task.result()
                except CloseConnection as e:
                    self._write(out)
                    out = []
                    self.close(str(e))
                    continue
                except Exception:
                    log.exception("request from %s failed", self.peer)
                    self._write(out)
                    out = []
                    self.close("internal error while handling a request")
                    continue
            else:
                pipeline.popleft()
                released += head.size
                parts = head.parts
            if parts and not self._closed:
                out.extend(parts)
        if out and not self._closed:
            self._write(out)
        self.pool.release(released)
        if self._closed:
            return
        # What waited may go on now (_process stops again at whatever must still wait).
        self._busy = False
        if self._backlog and not self._throttled_until:
            backlog = self._backlog
            self._backlog = deque()
            self._process(backlog)

    def _handle(self, frame: Frame):
        """Returns the response parts, None (no response), or an awaitable of the parts."""
        # Request latency is timed only when the metrics endpoint serves it (a clock read is ~0.2 us).
        started = perf_counter() if self.broker.metrics.timed else 0.0
        security = self.security
        assert security is not None  # frames arrive only after connection_made
        auth = self.authenticator
        if auth is not None and not auth.complete:
            outcome = auth.receive(frame)
            if not outcome.passthrough:
                return self._sasl_outcome(outcome)
        try:
            header = codec.decode_request_header(frame)
        except Exception as e:  # noqa: BLE001 - any decode failure of a header is the peer's fault
            raise CloseConnection(f"unparseable request header: {e}") from None
        if auth is not None and auth.complete:
            # KIP-368: a SaslHandshake may begin re-authentication; otherwise an expired session ends here.
            if header.api_key == SASL_HANDSHAKE and auth.maybe_begin_reauthentication():
                return self._sasl_outcome(auth.receive(frame))
            if auth.session_expired():
                raise CloseConnection(
                    f"the SASL session of {security.principal} expired (connections.max.reauth.ms or the "
                    "credential's lifetime) and was not re-authenticated"
                )
        handler = REGISTRY.get(header.api_key)
        version = header.api_version
        if header.api_key == API_VERSIONS and (handler is None or version > handler.max_version):
            if not header.complete:
                # Apache Kafka parses a too-new ApiVersions header as v2 (flexible) and closes the
                # connection when that fails; answering a header we could not read would guess.
                raise CloseConnection(f"unparseable header of ApiVersions v{version}")
            # KIP-511: a too-new ApiVersions request is answered in v0 with UNSUPPORTED_VERSION and our range.
            return self._encode_response(
                header.api_key,
                0,
                header.correlation_id,
                {
                    "error_code": ErrorCode.UNSUPPORTED_VERSION,
                    "api_keys": [
                        {
                            "api_key": API_VERSIONS,
                            "min_version": handler.min_version if handler else 0,
                            "max_version": handler.max_version if handler else 0,
                        }
                    ],
                },
            )
        if handler is None:
            raise CloseConnection(f"unknown api key {header.api_key}")
        if not handler.min_version <= version <= handler.max_version:
            # Also a version advertised below the implemented minimum (Produce v0-2, KAFKA-18659):
            # Kafka's Processor.parseRequestHeader refuses it (UnsupportedVersionException, closed).
            raise CloseConnection(
                f"unsupported version {version} of api key {header.api_key} "
                f"(supported {handler.min_version}-{handler.max_version})"
            )
        try:
            request, end = codec.decode(self.broker.request_specs[header.api_key], version, frame, header.body_offset)
        except Exception as e:  # noqa: BLE001
            raise CloseConnection(
                f"unparseable {codec_name(header.api_key)} v{version} request: {e}"
            ) from None
        metrics = self.broker.metrics
        ctx = RequestContext(self.broker.services, header, self.peer, metrics, security)
        quotas = self.broker.client_quotas
        if quotas.quotas and header.api_key not in REQUEST_QUOTA_EXEMPT:
            # request_percentage: the time this request holds the event loop (the handler's synchronous
            # part; an awaiting handler's wait is not the loop's work), as Kafka's ClientRequestQuotaManager
            # charges request handler thread time.
            handler_started = perf_counter()
            response = handler.fn(ctx, request)
            self._record_request_time(header, perf_counter() - handler_started, response)
        else:
            response = handler.fn(ctx, request)
        quota_api = quotas.quotas and header.api_key in QUOTA_APIS and not _from_follower(header.api_key, request)
        if response is None:
            if quota_api:  # acks=0: no response to carry the throttle time, the channel is muted alone
                self._record_quota(header, len(frame), None)
            if started:
                metrics.request_done(header.api_key, version, perf_counter() - started)
            return None
        if isinstance(response, dict):
            if quota_api:
                parts = self._encode_throttled(header, len(frame), response)
            else:
                parts = self._encode_response(header.api_key, version, header.correlation_id, response)
            if started:
                metrics.request_done(header.api_key, version, perf_counter() - started)
            return parts
        later = self._await_response(
            header.api_key, version, header.correlation_id, response, started, header if quota_api else None,
            len(frame),
        )
        return Appended(later) if isinstance(response, Appended) else later

    def _sasl_outcome(self, outcome: Outcome) -> list[Any] | None:
        parts: list[Any] = []
        if outcome.response is not None:
            parts = self._encode_response(*outcome.response)
        elif outcome.raw is not None:
            parts = [_SIZE.pack(len(outcome.raw)) + outcome.raw]
        if outcome.close is not None:
            if not parts:
                raise CloseConnection(outcome.close)
            self._close_after = outcome.close
        elif self.authenticator is not None and self.authenticator.complete:
            self.reader.max_size = self.broker.config.socket_request_max_bytes
        return parts

    async def _await_response(
        self, api_key: int, version: int, correlation_id: int, awaitable, started: float,
        quota_header: Any = None, request_size: int = 0,
    ) -> list[Any] | None:
        response = await awaitable
        parts = None
        if quota_header is not None:
            if response is None:
                self._record_quota(quota_header, request_size, None)
            else:
                parts = self._encode_throttled(quota_header, request_size, response)
        elif response is not None:
            parts = self._encode_response(api_key, version, correlation_id, response)
            if api_key in MUTATION_APIS and response.get("throttle_time_ms"):
                self.throttle(response["throttle_time_ms"])  # controller_mutation_rate (KIP-599)
        if started:
            self.broker.metrics.request_done(api_key, version, perf_counter() - started)
        return parts

    # -- client quotas (KIP-219): the response carries throttle_time_ms and the channel is muted -------
    def _quota_identity(self, header: Any) -> tuple[str, str]:
        principal = self.security.principal if self.security is not None else None
        return (principal.name if principal is not None else "ANONYMOUS"), header.client_id or ""

    def _record_quota(self, header: Any, size: int, response: dict | None) -> int:
        """Record a Produce request's bytes (ClientQuotaManager for produce) and mute if over quota."""
        user, client_id = self._quota_identity(header)
        ms = self.broker.client_quotas.record_and_get_throttle_time_ms(PRODUCER_BYTE_RATE, user, client_id, size)
        if response is not None and ms > response.get("throttle_time_ms", 0):
            response["throttle_time_ms"] = ms
        self.throttle(ms)
        return ms

    def _encode_throttled(self, header: Any, request_size: int, response: dict) -> list[Any]:
        api_key, version, cid = header.api_key, header.api_version, header.correlation_id
        if api_key == PRODUCE:
            self._record_quota(header, request_size, response)
            return self._encode_response(api_key, version, cid, response)
        # Fetch: the response's size is what counts against consumer_byte_rate.
        parts = self._encode_response(api_key, version, cid, response)
        user, client_id = self._quota_identity(header)
        size = sum(_part_size(p) for p in parts)
        ms = self.broker.client_quotas.record_and_get_throttle_time_ms(CONSUMER_BYTE_RATE, user, client_id, size)
        if ms > 0:
            response["throttle_time_ms"] = max(ms, response.get("throttle_time_ms", 0))
            if not response.get("session_id"):
                # KafkaApis: a throttled fetch is answered empty and its bytes are not counted (they
                # are read again after the throttle).  Inside a fetch session the handler has already
                # moved the session's cached state on, so the data goes out and the throttle follows.
                self.broker.client_quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size)
                response = {**response, "responses": []}
            parts = self._encode_response(api_key, version, cid, response)
            self.throttle(ms)
        return parts

    def _record_request_time(self, header: Any, seconds: float, response: Any) -> None:
        user, client_id = self._quota_identity(header)
        # Percent of one thread for a second: 100 % is one second of handler time per second.
        ms = self.broker.client_quotas.record_and_get_throttle_time_ms(
            REQUEST_PERCENTAGE, user, client_id, seconds * 100.0
        )
        if ms > 0:
            if isinstance(response, dict) and ms > response.get("throttle_time_ms", ms):
                response["throttle_time_ms"] = ms
            self.throttle(ms)

    def throttle(self, ms: int) -> None:
        """Mute the channel (no reads) for ``ms`` after the response that told the client so."""
        if ms <= 0 or self._closed or self.transport is None:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + ms / 1000.0
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        self.transport.pause_reading()
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = loop.call_at(until, self._unthrottle)

    def _unthrottle(self) -> None:
        self._throttle_timer = None
        self._throttled_until = 0.0
        if self._closed:
            return
        if not self._memory_paused and not self._write_paused:
            assert self.transport is not None  # throttle() muted a connected transport
            self.transport.resume_reading()
        if self._backlog and not self._busy:
            backlog = self._backlog
            self._backlog = deque()
            self._process(backlog)

    @staticmethod
    def _encode_response(api_key: int, version: int, correlation_id: int, response: dict) -> list[Any]:
        return codec.encode_response_frame(api_key, version, correlation_id, response)

    # -- output ------------------------------------------------------------------------------
    # Large file slices go out with os.sendfile on a dup() of the socket (neither event loop offers
    # zero-copy on a Protocol transport cheaply: uvloop has no sendfile at all, asyncio's costs
    # ~100 us a call).  sendfile runs only while the transport's own buffer is empty, so bytes stay
    # in order; if the socket fills up mid-slice, later output waits in ``_out_queue`` until the
    # slice is done.  Small slices are cheaper as one pread copy joined with the headers.
    def _write(self, parts: list[Any]) -> None:
        if not parts or self._closed or self.transport is None:
            return
        self.last_active = time.monotonic()
        if self._sending is not None:
            self._out_queue.extend(parts)
            return
        self._emit(parts)

    def _emit(self, parts: list[Any] | deque[Any]) -> None:
        transport = self.transport
        assert transport is not None  # _write and the writer callback run on a connected transport
        if len(parts) == 1 and type(parts[0]) is bytes:  # one response frame: most reads' answer
            transport.write(parts[0])
            return
        chunk: list[Any] = []
        queue = deque(parts)
        while queue:
            p = queue.popleft()
            if isinstance(p, bytes | bytearray | memoryview):
                chunk.append(p)
                continue
            if p.size < SENDFILE_MIN_BYTES or not self._use_sendfile:
                chunk.append(p.read())  # a storage FileSlice: one copy from the page cache
                continue
            if chunk:
                transport.write(b"".join(chunk) if len(chunk) > 1 else chunk[0])
                chunk = []
            if transport.get_write_buffer_size() > 0 or not self._ensure_dup_fd():
                chunk.append(p.read())
                continue
            if not self._sendfile_slice(p, 0):
                self._out_queue.extend(queue)
                return
            if self._closed:
                return
        if chunk:
            transport.write(b"".join(chunk) if len(chunk) > 1 else chunk[0])

    def _ensure_dup_fd(self) -> bool:
        """The socket's duplicate for sendfile; False when there is no descriptor to spare (EMFILE):
        the slice is then copied, which needs none."""
        if self._dup_fd < 0:
            assert self.transport is not None  # called by _emit, on a connected transport
            try:
                self._dup_fd = os.dup(self.transport.get_extra_info("socket").fileno())
            except OSError:
                return False
        return True

    def _sendfile_slice(self, sl: Any, done: int) -> bool:
        """Send what the socket takes now; False (and a writer callback armed) if it is not all."""
        fd_in = sl.fileno()
        while done < sl.size:
            try:
                n = os.sendfile(self._dup_fd, fd_in, sl.position + done, sl.size - done)
            except BlockingIOError:
                n = -1
            except OSError as e:
                self.close(f"sendfile failed: {e}")
                return True
            if n == 0:
                self.close("file ended before the end of a fetch slice")
                return True
            if n < 0:
                self._sending = (sl, done)
                asyncio.get_running_loop().add_writer(self._dup_fd, self._on_writable)
                return False
            done += n
        return True

    def _on_writable(self) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_writer(self._dup_fd)
        if self._closed or self._sending is None:
            return
        sl, done = self._sending
        self._sending = None
        if not self._sendfile_slice(sl, done):
            return
        if self._out_queue:
            queued = self._out_queue
            self._out_queue = deque()
            self._emit(queued)

    def close(self, reason: str, *, quiet: bool = False) -> None:
        if self._closed:
            return
        (log.debug if quiet else log.warning)("closing connection from %s: %s", self.peer, reason)
        self._closed = True
        if self.transport is not None:
            self.transport.close()
        self._release_dup_fd()

    def _release_dup_fd(self) -> None:
        if self._dup_fd >= 0:
            if self._sending is not None:
                asyncio.get_running_loop().remove_writer(self._dup_fd)
                self._sending = None
            os.close(self._dup_fd)
            self._dup_fd = -1
        self._out_queue.clear()


PRODUCE, FETCH = 0, 1
# Produce requests of one connection handled while earlier ones wait for their writes (see _process).
PIPELINE_DEPTH = 8


class _Pending:
    """A request whose handler is still working: its task and its frame's pool bytes."""

    __slots__ = ("task", "size", "produce")

    def __init__(self, task: asyncio.Future, size: int, produce: bool) -> None:
        self.task = task
        self.size = size
        self.produce = produce


class _Answered:
    """A request answered at once behind pending ones: its response parts (None: none)."""

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[Any] | None, size: int) -> None:
        self.parts = parts
        self.size = size


def _is_produce(frame: Frame) -> bool:
    return len(frame) > 1 and frame[0] == 0 and frame[1] == PRODUCE
QUOTA_APIS = frozenset({PRODUCE, FETCH})
MUTATION_APIS = frozenset({19, 20, 37})  # CreateTopics, DeleteTopics, CreatePartitions
# ApiVersions and the SASL exchange are never throttled (a client must be able to connect).
REQUEST_QUOTA_EXEMPT = frozenset({18, 17, 36})


def _from_follower(api_key: int, request: dict) -> bool:
    """A replica's fetch is not a client's: client quotas do not apply (replication has its own)."""
    if api_key != FETCH:
        return False
    state = request.get("replica_state")
    replica = state.get("replica_id", -1) if state else request.get("replica_id", -1)
    return replica is not None and replica >= 0


class MemoryWaiters:
    """Connections muted because the memory pool ran out, woken in the order they were muted once
    released memory ends the out-of-memory spell (Kafka's Selector unmutes them then)."""

    def __init__(self) -> None:
        self.pool: Any = None
        self._waiting: dict[KafkaConnection, None] = {}  # insertion-ordered
        self._scheduled = False

    def add(self, conn: KafkaConnection) -> None:
        self._waiting[conn] = None

    def discard(self, conn: KafkaConnection) -> None:
        self._waiting.pop(conn, None)

    def __len__(self) -> int:
        return len(self._waiting)

    def schedule_wake(self) -> None:
        # Not at once: release() runs inside another connection's request handling.
        if self._waiting and not self._scheduled:
            self._scheduled = True
            asyncio.get_running_loop().call_soon(self._wake)

    def _wake(self) -> None:
        self._scheduled = False
        while self._waiting and self.pool.available > 0:
            conn = next(iter(self._waiting))
            del self._waiting[conn]
            conn.memory_available()


def codec_name(api_key: int) -> str:
    from pybroker.protocol.api import API_NAMES

    return API_NAMES.get(api_key, f"api key {api_key}")


# accept() failures that mean "out of descriptors or memory": the listening socket stays, the
# connections wait in its backlog until something is freed.
_OUT_OF_RESOURCES = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
ACCEPT_BATCH = 128  # connections accepted per readiness event, so a flood cannot starve the loop
ACCEPT_RETRY_S = 0.5  # retry while out of descriptors, unless a connection closes before
LOG_INTERVAL_S = 10.0  # at most one accept-failure line per this interval
# A TLS handshake not done by then is dropped (Kafka bounds it by connections.max.idle.ms): a peer
# that opens a connection and says nothing must not hold a descriptor for ever.
SSL_HANDSHAKE_TIMEOUT_S = 30.0


class Acceptor:
    """Accepts connections on the listening socket itself instead of ``loop.create_server``, so
    that running out of file descriptors is seen, logged and survived on both event loops: uvloop
    (libuv) answers EMFILE by accepting and closing each pending connection with a reserved
    descriptor and reports nothing; asyncio logs every failed accept.  Here the failure is logged
    at most once per ``LOG_INTERVAL_S`` (with how often it happened), accepting pauses and resumes
    as soon as a connection closes (or after ``ACCEPT_RETRY_S``), and the waiting connections stay
    in the kernel's backlog instead of being reset."""

    def __init__(
        self,
        broker: ServerHost,
        sock: socket.socket,
        listener: Endpoint | None = None,
        ssl_factory: ServerSslFactory | None = None,
    ) -> None:
        self.broker = broker
        self.sock = sock
        self.listener = listener if listener is not None else broker.config.listener_endpoints[0]
        self.ssl_factory = ssl_factory
        self.address = "{}:{}".format(*sock.getsockname()[:2])
        self._loop = asyncio.get_running_loop()
        self._reading = False
        self._closed = False
        self._retry: asyncio.TimerHandle | None = None
        self._failures = 0  # failed accepts not yet logged
        self._last_log = self._last_recovery_log = -LOG_INTERVAL_S
        self._stalled_since: float | None = None
        self._tasks: set[asyncio.Task] = set()
        self.quotas = broker.connection_quotas
        self._name = self.listener.listener_name
        self._waiting_for_slot = False  # max.connections reached: not accepting until one closes
        # KIP-612: max.connection.creation.rate (broker-wide, and this listener's own when prefixed).
        self._creation_rates = broker.connection_quotas.creation_rates(self._name)
        self._rate_timer: asyncio.TimerHandle | None = None
        self.quotas.on_release.append(self._slot_freed)
        idle_ms = broker.config.connections_max_idle_ms
        self._idle_s = idle_ms / 1000.0 if idle_ms > 0 else 0.0
        self._idle_timer: asyncio.TimerHandle | None = None
        if self._idle_s:
            self._idle_timer = self._loop.call_later(self._idle_check_s(), self._close_idle)

    def start(self) -> None:
        if not self._reading and not self._closed:
            self._loop.add_reader(self.sock.fileno(), self._on_readable)
            self._reading = True

    def _idle_check_s(self) -> float:
        return min(max(self._idle_s / 4, 0.05), 30.0)

    def _close_idle(self) -> None:
        """connections.max.idle.ms: close this listener's connections with no traffic for that long
        (checked every quarter of it, at most every 30 s, as Kafka's Selector checks on its polls)."""
        now = time.monotonic()
        for conn in list(self.broker.connections):
            if conn.listener is self.listener and not conn.request_in_flight and now - conn.last_active > self._idle_s:
                conn.close(f"idle for more than connections.max.idle.ms ({self._idle_s * 1000:.0f} ms)", quiet=True)
        if not self._closed:
            self._idle_timer = self._loop.call_later(self._idle_check_s(), self._close_idle)

    def _rate_throttled(self) -> bool:
        """Over a connection creation rate: stop accepting for the throttle time (Kafka's Acceptor
        delays accepts; the connections wait in the listen backlog)."""
        now_ms = time.monotonic() * 1000.0
        delay = max(throttle_time_ms(rate, bound, now_ms, rate.samples * rate.window_ms)
                    for rate, bound in self._creation_rates)
        if delay <= 0:
            return False
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False
        if self._rate_timer is None:
            self._rate_timer = self._loop.call_later(delay / 1000.0, self._rate_resume)
        return True

    def _rate_resume(self) -> None:
        self._rate_timer = None
        if not self._closed:
            self._resume()

    def _slot_freed(self) -> None:
        if self._waiting_for_slot and not self._closed and not self.quotas.at_max(self._name):
            self._waiting_for_slot = False
            self._resume()

    def close(self) -> None:
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        if self._rate_timer is not None:
            self._rate_timer.cancel()
        if self._slot_freed in self.quotas.on_release:
            self.quotas.on_release.remove(self._slot_freed)
        if self._retry is not None:
            self._retry.cancel()
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False
        self.sock.close()

    def descriptor_freed(self) -> None:
        """A connection closed: if accepting stalled for lack of descriptors, try again now."""
        if self._stalled_since is not None and not self._closed:
            self._resume()

    def _resume(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self.start()
        self._on_readable()

    def _on_readable(self) -> None:
        for _ in range(ACCEPT_BATCH):
            if self._creation_rates and self._rate_throttled():
                return
            if self.quotas.at_max(self._name):
                # Kafka's Acceptor waits for a slot: the connections stay in the listen backlog.
                self._waiting_for_slot = True
                if self._reading:
                    self._loop.remove_reader(self.sock.fileno())
                    self._reading = False
                return
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                self._backlog_drained()
                break
            except OSError as e:
                if e.errno in _OUT_OF_RESOURCES:
                    self._out_of_resources(e)
                    return
                # ECONNABORTED and the like: that one connection is gone, the listener is fine.
                log.debug("accept on %s failed: %s", self.address, e)
                continue
            self._start_connection(conn)

    def _backlog_drained(self) -> None:
        """Every waiting connection is accepted: a stall for lack of descriptors is over."""
        if self._stalled_since is None:
            return
        now = time.monotonic()
        if now - self._last_recovery_log >= LOG_INTERVAL_S:
            log.warning(
                "accepting connections on %s again, %.1f s after descriptors ran out",
                self.address,
                now - self._stalled_since,
            )
            self._last_recovery_log = now
        self._stalled_since = None

    def _start_connection(self, conn: socket.socket) -> None:
        try:
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            conn.close()
            return
        try:
            address = conn.getpeername()
        except OSError:
            conn.close()
            return
        if self._creation_rates:
            now_ms = time.monotonic() * 1000.0
            for rate, _ in self._creation_rates:
                rate.record(1, now_ms)
        slot = self.quotas.acquire(str(address[0]), self._name)
        if slot is None:  # max.connections.per.ip: closed at once (logged, rate-limited, by the quotas)
            conn.close()
            return
        broker, listener, factory = self.broker, self.listener, self.ssl_factory

        def protocol() -> KafkaConnection:
            connection = KafkaConnection(broker, listener, factory)
            connection.quota_slot = slot
            return connection

        setup: Coroutine[Any, Any, object]
        if factory is None:
            setup = self._loop.connect_accepted_socket(protocol, conn)
        else:
            peer = "{}:{}".format(*address[:2])
            handshake = self._loop.connect_accepted_socket(
                protocol,
                conn,
                ssl=factory.context,
                ssl_handshake_timeout=SSL_HANDSHAKE_TIMEOUT_S,
            )
            setup = self._handshake(handshake, peer, slot)
        task = self._loop.create_task(setup)
        self._tasks.add(task)
        task.add_done_callback(lambda t: self._connected(t, slot))

    async def _handshake(self, setup: Any, peer: str, slot: Any) -> None:
        """A failed TLS handshake (a plaintext client, an untrusted or missing client certificate, no
        common protocol) is one line, as Kafka's "Failed authentication with ... (SSL handshake
        failed)"; the event loop has already sent the alert, if any, and closed the socket."""
        try:
            await setup
        except (TimeoutError, ssl.SSLError, OSError, EOFError) as e:
            slot.release()
            reason = getattr(e, "reason", None) or str(e) or type(e).__name__
            log.info(
                "Failed authentication with %s on %s (SSL handshake failed: %s)", peer, self.address, reason
            )

    def _connected(self, task: asyncio.Task, slot: Any) -> None:
        self._tasks.discard(task)
        if task.cancelled() or task.exception() is not None:
            slot.release()
        if not task.cancelled() and task.exception() is not None:
            log.warning("could not set up a connection on %s: %s", self.address, task.exception())

    def _out_of_resources(self, e: OSError) -> None:
        now = time.monotonic()
        self._failures += 1
        if self._stalled_since is None:
            self._stalled_since = now
        if now - self._last_log >= LOG_INTERVAL_S:
            soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
            log.error(
                "cannot accept connections on %s: %s (%d failed accepts since the last such message; "
                "%d client connections open, open-file limit %d, hard limit %d); the waiting connections "
                "stay queued and are accepted as descriptors are freed",
                self.address,
                e,
                self._failures,
                len(self.broker.connections),
                soft,
                hard,
            )
            self._last_log = now
            self._failures = 0
        # Stop polling the listener (it stays readable: a busy loop otherwise) until a connection
        # closes or the retry timer fires.
        if self._reading:
            self._loop.remove_reader(self.sock.fileno())
            self._reading = False
        if self._retry is None:
            self._retry = self._loop.call_later(ACCEPT_RETRY_S, self._retry_accept)

    def _retry_accept(self) -> None:
        self._retry = None
        if not self._closed:
            self._resume()


def raise_open_file_limit() -> tuple[int, int]:
    """Raise this process's soft RLIMIT_NOFILE to its hard limit, as Kafka's documentation asks
    operators to do for the broker (every connection and every segment file is a descriptor);
    returns (soft, hard) afterwards and logs them."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        try:  # the kernel refuses more than fs.nr_open per process
            with open("/proc/sys/fs/nr_open") as f:
                target = int(f.read())
        except (OSError, ValueError):
            target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            log.info("open-file limit raised from %d to %d (the hard limit)", soft, target)
            return target, hard
        except (OSError, ValueError) as e:
            log.warning("could not raise the open-file limit from %d to %d: %s", soft, target, e)
            return soft, hard
    log.info("open-file limit %d (hard limit %d)", soft, hard)
    return soft, hard


async def serve(
    broker: ServerHost,
    host: str,
    port: int,
    listener: Endpoint | None = None,
    ssl_factory: ServerSslFactory | None = None,
) -> Acceptor:
    loop = asyncio.get_running_loop()
    if not host:  # every interface, as Kafka binds an empty listener host
        family = socket.AF_INET6 if socket.has_dualstack_ipv6() else socket.AF_INET
        sock = socket.create_server(
            ("", port), family=family, backlog=1024, dualstack_ipv6=family == socket.AF_INET6
        )
    else:
        infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        sock = socket.create_server(infos[0][4][:2], family=infos[0][0], backlog=1024)
    sock.setblocking(False)
    acceptor = Acceptor(broker, sock, listener, ssl_factory)
    acceptor.start()
    name = acceptor.listener.listener_name
    protocol = acceptor.listener.security_protocol
    log.info(
        "listening on %s:%d (listener %s, %s, %s)",
        host,
        port,
        name,
        protocol,
        type(loop).__module__.split(".")[0],
    )
    return acceptor
