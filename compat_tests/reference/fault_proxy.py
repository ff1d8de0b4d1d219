"""A fault-injecting TCP proxy in front of each broker listener of a local cluster.

Every listener a cluster node advertises (client/inter-broker and controller) points at a proxy port;
the proxy forwards to the node's real port.  ``isolate(node)`` cuts that node off from everyone, as a
network partition would: bytes of every connection *to* the node's listeners and every connection the
node itself opened to another node's listener stop flowing (they are read and dropped, so the peers see
silence and must time out, not a reset), and new connections are accepted and then left hanging.
``heal(node)`` closes the connections that were black-holed (their byte streams have gaps, like a TCP
connection that timed out) and lets new ones through.

Who opened a connection is found from the kernel: the accepted peer port is looked up in
``/proc/net/tcp{,6}`` for its socket inode, and that inode among the open descriptors of the node
processes (``set_pids``).  Anything else (a test's client) is "a client" and is cut only from the
isolated node.  Linux only; the proxies run in their own process (commands as JSON lines on its
stdin) so the test's clients and the proxies do not share an interpreter lock.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

CLIENT = 0  # the source id of a connection no node process owns
CHUNK = 256 * 1024


@dataclass(frozen=True)
class Route:
    """``listen_port`` on 127.0.0.1 forwards to ``target_port``: a listener of node ``owner``."""

    owner: int
    listen_port: int
    target_port: int


def _socket_inode(peer_port: int, listen_port: int) -> int | None:
    """The inode of the socket 127.0.0.1:peer_port -> :listen_port (the connecting side)."""
    want_local, want_remote = f"{peer_port:04X}", f"{listen_port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    local, remote = fields[1], fields[2]
                    if local.endswith(":" + want_local) and remote.endswith(":" + want_remote):
                        return int(fields[9])
        except FileNotFoundError:
            continue
    return None


def _owner_of(inode: int, pids: dict[int, int]) -> int:
    target = f"socket:[{inode}]"
    for node, pid in pids.items():
        fd_dir = f"/proc/{pid}/fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(f"{fd_dir}/{name}") == target:
                    return node
            except OSError:
                continue
    return CLIENT


@dataclass(eq=False)
class _Link:
    owner: int
    source: int
    peer_port: int
    listen_port: int
    writers: list[asyncio.StreamWriter] = field(default_factory=list)
    blackholed: bool = False
    dropped_bytes: int = 0

    def involves(self, node: int) -> bool:
        return node in (self.owner, self.source)

    def close(self) -> None:
        for writer in self.writers:
            writer.close()


class _ProxyServer:
    """Runs in the child process: one asyncio server per route."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = routes
        self.pids: dict[int, int] = {}
        self.isolated: set[int] = set()
        self.links: set[_Link] = set()
        self.counters = {"accepted": 0, "blackholed_at_accept": 0, "cut": 0, "closed_on_heal": 0}

    async def serve(self) -> list[asyncio.base_events.Server]:
        servers = []
        for route in self.routes:

            async def on_connect(
                reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route = route
            ) -> None:
                await self._handle(route, reader, writer)

            servers.append(await asyncio.start_server(on_connect, "127.0.0.1", route.listen_port))
        return servers

    def _identify(self, link: _Link) -> None:
        inode = _socket_inode(link.peer_port, link.listen_port)
        link.source = _owner_of(inode, self.pids) if inode is not None else CLIENT

    def _blocked(self, link: _Link) -> bool:
        return any(link.involves(node) for node in self.isolated)

    async def _handle(self, route: Route, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.counters["accepted"] += 1
        peer_port = writer.get_extra_info("peername")[1]
        link = _Link(route.owner, CLIENT, peer_port, route.listen_port, [writer])
        self._identify(link)
        self.links.add(link)
        try:
            if self._blocked(link):
                self.counters["blackholed_at_accept"] += 1
                link.blackholed = True
                await self._pump(reader, None, link)
                return
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", route.target_port)
            except OSError:
                return  # the node is down: the client sees its connection closed, as with a refused port
            link.writers.append(up_writer)
            if self._blocked(link):  # cut while connecting
                link.blackholed = True
            await asyncio.gather(self._pump(reader, up_writer, link), self._pump(up_reader, writer, link))
        finally:
            self.links.discard(link)
            link.close()

    async def _pump(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter | None, link: _Link
    ) -> None:
        try:
            while True:
                data = await reader.read(CHUNK)
                if not data:
                    break
                if link.blackholed or writer is None:
                    link.dropped_bytes += len(data)
                    continue
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            link.close()  # one side ended: end both, as a TCP proxy does

    # ---- commands (on the loop) ------------------------------------------------------------
    def command(self, name: str, arg: Any) -> Any:
        if name == "set_pids":
            self.pids = {int(node): int(pid) for node, pid in arg.items()}
        elif name == "isolate":
            self.isolated.add(arg)
            for link in list(self.links):
                if link.source == CLIENT:  # opened before its process's pid was known: look again
                    self._identify(link)
                if link.involves(arg) and not link.blackholed:
                    link.blackholed = True
                    self.counters["cut"] += 1
        elif name == "heal":
            self.isolated.discard(arg)
            for link in list(self.links):
                if link.blackholed and not self._blocked(link):
                    self.counters["closed_on_heal"] += 1
                    link.close()
        elif name == "stats":
            return {**self.counters, "links": len(self.links), "isolated": sorted(self.isolated)}
        else:
            raise ValueError(f"unknown proxy command {name!r}")
        return None


def _child_main(routes: list[Route]) -> int:
    """The proxy process: JSON-lines commands on stdin, one JSON answer per command on stdout."""
    logging.basicConfig(level=logging.WARNING)
    loop = asyncio.new_event_loop()
    server = _ProxyServer(routes)
    try:
        servers = loop.run_until_complete(server.serve())
    except OSError as error:
        print(json.dumps({"status": "error", "result": str(error)}), flush=True)
        return 1
    print(json.dumps({"status": "ready"}), flush=True)

    def read_commands() -> None:
        for line in sys.stdin:
            command = json.loads(line)
            if command["name"] == "exit":
                break
            future = asyncio.run_coroutine_threadsafe(_run(server, command["name"], command.get("arg")), loop)
            try:
                answer = {"status": "ok", "result": future.result()}
            except Exception as error:  # report any command failure to the parent, keep serving
                answer = {"status": "error", "result": repr(error)}
            print(json.dumps(answer), flush=True)
        loop.call_soon_threadsafe(loop.stop)  # stdin closed (the parent is gone) or "exit"

    threading.Thread(target=read_commands, daemon=True).start()
    loop.run_forever()
    for item in servers:
        item.close()
    for link in list(server.links):
        link.close()
    return 0


async def _run(server: _ProxyServer, name: str, arg: Any) -> Any:
    return server.command(name, arg)


class FaultProxies:
    """The parent's handle on the proxy process (``python -m compat_tests.reference.fault_proxy``)."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = list(routes)
        self._process: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self) -> None:
        spec = json.dumps([[r.owner, r.listen_port, r.target_port] for r in self.routes])
        repo_root = Path(__file__).resolve().parents[2]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(repo_root), env.get("PYTHONPATH", "")) if p)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "compat_tests.reference.fault_proxy", spec],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env, start_new_session=True,
        )  # fmt: skip
        assert self._process.stdout is not None
        answer = json.loads(self._process.stdout.readline() or '{"status": "exited"}')
        if answer["status"] != "ready":
            self.stop()
            raise RuntimeError(f"fault proxy failed to start: {answer}")
        logger.info("fault proxies pid %d: %d routes", self._process.pid, len(self.routes))

    def _call(self, name: str, arg: Any = None) -> Any:
        with self._lock:
            process = self._process
            assert process is not None and process.stdin is not None and process.stdout is not None
            process.stdin.write(json.dumps({"name": name, "arg": arg}) + "\n")
            process.stdin.flush()
            answer = json.loads(process.stdout.readline() or '{"status": "exited"}')
        if answer["status"] != "ok":
            raise RuntimeError(f"fault proxy command {name} failed: {answer}")
        return answer["result"]

    def set_pids(self, pids: dict[int, int]) -> None:
        self._call("set_pids", {str(node): pid for node, pid in pids.items()})

    def isolate(self, node: int) -> None:
        self._call("isolate", node)

    def heal(self, node: int) -> None:
        self._call("heal", node)

    def stats(self) -> dict[str, Any]:
        return self._call("stats")

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None:
            return
        try:
            assert process.stdin is not None
            process.stdin.close()  # EOF: the proxy stops
        except OSError:
            pass
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(10)


if __name__ == "__main__":
    sys.exit(_child_main([Route(*map(int, spec)) for spec in json.loads(sys.argv[1])]))
