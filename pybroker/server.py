"""Sockets, framing and dispatch: the only module that touches connections.

One ``KafkaConnection`` (an ``asyncio.Protocol``: measured ~5x cheaper than streams for 1 KiB
frames here) per client.  Frames are cut sans-IO by ``protocol.framing``; each request is decoded
by ``protocol.codec``, handled by its ``apis`` module, encoded and written.  Requests of one
connection are answered strictly in order: handlers that answer at once are written in one batch
per read; a handler that must wait (long-poll fetch, acks=all) holds back the following requests
of that connection until it is done, as Kafka's own network layer mutes a channel while a request
is in flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections import deque
from time import perf_counter
from typing import TYPE_CHECKING, Any

from pybroker.apis import REGISTRY, RequestContext
from pybroker.protocol import codec
from pybroker.protocol.api import RESPONSES
from pybroker.protocol.errors import ErrorCode
from pybroker.protocol.framing import FrameError, FrameReader

if TYPE_CHECKING:
    from pybroker.broker import Broker

log = logging.getLogger(__name__)

_SIZE = struct.Struct(">i")
API_VERSIONS = 18
SENDFILE_MIN_BYTES = 64 * 1024  # below this a pread copy is cheaper than a sendfile call
# PYBROKER_SENDFILE=0 serves every slice by pread, for benchmarking the two paths against each other.
USE_SENDFILE = os.environ.get("PYBROKER_SENDFILE", "1") != "0"


class CloseConnection(Exception):
    """The request cannot be answered in Kafka's protocol: log it and close the connection."""


def _part_size(part: Any) -> int:
    return (
        part.size
        if hasattr(part, "size") and not isinstance(part, bytes | bytearray | memoryview)
        else len(part)
    )


class KafkaConnection(asyncio.Protocol):
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self.reader = FrameReader(broker.config.socket_request_max_bytes)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._backlog: deque[memoryview] = deque()
        self._busy = False  # an async handler is in flight: later requests wait their turn
        self._closed = False
        self._use_sendfile = USE_SENDFILE
        self._dup_fd = -1
        self._sending: tuple[Any, int] | None = None  # (file slice, bytes already sent)
        self._out_queue: deque[Any] = deque()

    # -- asyncio.Protocol ------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
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
        self.broker.connections.add(self)
        self.broker.metrics.connection_opened()
        log.debug("connection from %s", self.peer)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._release_dup_fd()
        self.broker.connections.discard(self)
        self.broker.metrics.connection_closed()
        self._backlog.clear()
        log.debug("connection from %s closed (%s)", self.peer, exc or "eof")

    @property
    def queued_requests(self) -> int:
        """Requests read but waiting for an earlier one of this connection (metrics)."""
        return len(self._backlog)

    @property
    def request_in_flight(self) -> bool:
        return self._busy

    def pause_writing(self) -> None:
        # The client is not reading its responses: stop reading its requests too.
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self._closed:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        try:
            frames = self.reader.feed(data)
        except FrameError as e:
            self.close(f"invalid frame: {e}")
            return
        if not frames:
            return
        if self._busy:
            self._backlog.extend(frames)
            return
        self._process(frames)

    # -- dispatch ----------------------------------------------------------------------------
    def _process(self, frames: list[memoryview] | deque[memoryview]) -> None:
        out: list[Any] = []
        queue = deque(frames) if not isinstance(frames, deque) else frames
        while queue and not self._closed:
            frame = queue.popleft()
            try:
                result = self._handle(frame)
            except CloseConnection as e:
                self._write(out)
                self.close(str(e))
                return
            except Exception:
                # A bug of ours, not the peer's: keep the traceback, drop only this connection.
                log.exception("internal error while handling a request from %s", self.peer)
                self._write(out)
                self.close("internal error while handling a request")
                return
            if result is None:
                continue
            if isinstance(result, list):
                out.extend(result)
                continue
            # An awaitable: everything after it waits.
            self._write(out)
            out = []
            self._busy = True
            self._backlog.extendleft(reversed(queue))
            queue.clear()
            task = asyncio.ensure_future(result)
            task.add_done_callback(self._async_done)
            return
        self._write(out)

    def _async_done(self, task: asyncio.Future) -> None:
        self._busy = False
        if self._closed:
            return
        try:
            parts = task.result()
        except CloseConnection as e:
            self.close(str(e))
            return
        except Exception:
            log.exception("request from %s failed", self.peer)
            self.close("internal error while handling a request")
            return
        if parts:
            self._write(parts)
        if self._backlog:
            backlog = self._backlog
            self._backlog = deque()
            self._process(backlog)

    def _handle(self, frame: memoryview):
        """Returns the response parts, None (no response), or an awaitable of the parts."""
        # Request latency is timed only when the metrics endpoint serves it (a clock read is ~0.2 us).
        started = perf_counter() if self.broker.metrics.timed else 0.0
        try:
            header = codec.decode_request_header(frame)
        except Exception as e:  # noqa: BLE001 - any decode failure of a header is the peer's fault
            raise CloseConnection(f"unparseable request header: {e}") from None
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
        if not (handler.min_version <= version <= handler.max_version) and (
            handler.advertised_min is None or not handler.advertised_min <= version <= handler.max_version
        ):
            raise CloseConnection(
                f"unsupported version {version} of api key {header.api_key} "
                f"(supported {handler.min_version}-{handler.max_version})"
            )
        try:
            request, end = codec.decode(
                self.broker.request_specs[header.api_key], version, frame, header.body_offset
            )
        except Exception as e:  # noqa: BLE001
            raise CloseConnection(
                f"unparseable {codec_name(header.api_key)} v{version} request: {e}"
            ) from None
        metrics = self.broker.metrics
        ctx = RequestContext(self.broker, header, self.peer, metrics)
        response = handler.fn(ctx, request)
        if response is None:
            if started:
                metrics.request_done(header.api_key, version, perf_counter() - started)
            return None
        if isinstance(response, dict):
            parts = self._encode_response(header.api_key, version, header.correlation_id, response)
            if started:
                metrics.request_done(header.api_key, version, perf_counter() - started)
            return parts
        return self._await_response(header.api_key, version, header.correlation_id, response, started)

    async def _await_response(
        self, api_key: int, version: int, correlation_id: int, awaitable, started: float
    ) -> list[Any] | None:
        response = await awaitable
        parts = None
        if response is not None:
            parts = self._encode_response(api_key, version, correlation_id, response)
        if started:
            self.broker.metrics.request_done(api_key, version, perf_counter() - started)
        return parts

    @staticmethod
    def _encode_response(api_key: int, version: int, correlation_id: int, response: dict) -> list[Any]:
        head = codec.encode_response_header(api_key, version, correlation_id)
        parts = codec.encode_parts(RESPONSES[api_key], version, response)
        size = len(head) + sum(_part_size(p) for p in parts)
        if parts and isinstance(parts[0], bytes):
            parts[0] = _SIZE.pack(size) + head + parts[0]
            return parts
        return [_SIZE.pack(size) + head, *parts]

    # -- output ------------------------------------------------------------------------------
    # Large file slices go out with os.sendfile on a dup() of the socket (neither event loop offers
    # zero-copy on a Protocol transport cheaply: uvloop has no sendfile at all, asyncio's costs
    # ~100 us a call).  sendfile runs only while the transport's own buffer is empty, so bytes stay
    # in order; if the socket fills up mid-slice, later output waits in ``_out_queue`` until the
    # slice is done.  Small slices are cheaper as one pread copy joined with the headers.
    def _write(self, parts: list[Any]) -> None:
        if not parts or self._closed or self.transport is None:
            return
        if self._sending is not None:
            self._out_queue.extend(parts)
            return
        self._emit(parts)

    def _emit(self, parts: list[Any] | deque[Any]) -> None:
        transport = self.transport
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
            if transport.get_write_buffer_size() > 0:
                chunk.append(p.read())
                continue
            if not self._sendfile_slice(p, 0):
                self._out_queue.extend(queue)
                return
            if self._closed:
                return
        if chunk:
            transport.write(b"".join(chunk) if len(chunk) > 1 else chunk[0])

    def _sendfile_slice(self, sl: Any, done: int) -> bool:
        """Send what the socket takes now; False (and a writer callback armed) if it is not all."""
        if self._dup_fd < 0:
            sock = self.transport.get_extra_info("socket")
            self._dup_fd = os.dup(sock.fileno())
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

    def close(self, reason: str) -> None:
        if self._closed:
            return
        log.warning("closing connection from %s: %s", self.peer, reason)
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


def codec_name(api_key: int) -> str:
    from pybroker.protocol.api import API_NAMES

    return API_NAMES.get(api_key, f"api key {api_key}")


async def serve(broker: Broker, host: str, port: int) -> asyncio.base_events.Server:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: KafkaConnection(broker), host, port, reuse_address=True, backlog=1024
    )
    log.info("listening on %s:%d (%s)", host, port, type(loop).__module__.split(".")[0])
    return server
