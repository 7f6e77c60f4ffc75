"""A slow Docker engine for tests: a unix-socket proxy in front of the real one.

An imagekit process started with ``DOCKER_HOST=<proxy.docker_host>`` talks to the engine
through it, the ``docker`` package and the ``docker`` CLI alike. It passes bytes through
untouched in both directions (``docker exec``'s hijacked streams included) until the test
turns it slow:

- ``slow(seconds)``: from then on, everything the engine sends reaches the client that much later;
- ``hold_deletes()``: from then on, DELETE requests (container and network removal) never reach
  the engine; the client waits until its own timeout.

``deletes`` is set when a DELETE request arrives. A request is recognised by the start of a
read: clients send the next request on a connection only after the previous answer.
"""

from __future__ import annotations

import os
import queue
import shutil
import socket
import tempfile
import threading
import time


def _upstream() -> tuple[int, object]:
    """The real engine's address, from DOCKER_HOST as the tests' own docker calls see it."""
    host = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    if host.startswith("unix://"):
        return socket.AF_UNIX, host[len("unix://"):]
    if host.startswith("tcp://"):
        name, _, port = host[len("tcp://"):].rstrip("/").rpartition(":")
        return socket.AF_INET, (name, int(port))
    raise ValueError(f"slow_engine relays unix:// and tcp:// engines, not DOCKER_HOST={host}")


class SlowEngine:
    """The proxy; a context manager that removes its socket and closes every relayed connection."""

    def __init__(self) -> None:
        self._family, self._address = _upstream()
        # Not under tmp_path: a unix socket's path must stay under 108 bytes.
        self._dir = tempfile.mkdtemp(prefix="ik-slow-engine-")
        self.path = os.path.join(self._dir, "docker.sock")
        self.delay = 0.0
        self.holding = False
        self.deletes = threading.Event()
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(self.path)
        self._server.listen(64)
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def docker_host(self) -> str:
        return f"unix://{self.path}"

    def slow(self, seconds: float) -> None:
        self.delay = seconds

    def hold_deletes(self) -> None:
        self.holding = True

    def close(self) -> None:
        self._server.close()
        with self._lock:
            for sock in self._open:
                sock.close()
            self._open.clear()
        shutil.rmtree(self._dir, ignore_errors=True)

    def __enter__(self) -> SlowEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            engine = socket.socket(self._family, socket.SOCK_STREAM)
            try:
                engine.connect(self._address)
            except OSError:
                client.close()
                engine.close()
                continue
            with self._lock:
                self._open |= {client, engine}
            ends = [2]   # both directions, then both sockets close
            for src, dst, up in ((client, engine, True), (engine, client, False)):
                threading.Thread(target=self._relay, args=(src, dst, up, ends), daemon=True).start()

    def _relay(self, src: socket.socket, dst: socket.socket, up: bool, ends: list[int]) -> None:
        """Read ``src`` into a queue; a second thread writes each chunk to ``dst`` when it is due, so
        that a delay adds latency without cutting the throughput of a long stream."""
        chunks: queue.Queue = queue.Queue()
        writer = threading.Thread(target=self._write, args=(chunks, dst), daemon=True)
        writer.start()
        while True:
            try:
                data = src.recv(1 << 16)
            except OSError:
                break
            if not data:
                break
            if up and data.startswith(b"DELETE "):
                self.deletes.set()
                if self.holding:
                    continue
            chunks.put((time.monotonic() + (0.0 if up else self.delay), data))
        chunks.put(None)
        writer.join()
        with self._lock:
            ends[0] -= 1
            if ends[0] == 0:
                for sock in (src, dst):
                    sock.close()
                    self._open.discard(sock)

    @staticmethod
    def _write(chunks: queue.Queue, dst: socket.socket) -> None:
        while (item := chunks.get()) is not None:
            due, data = item
            time.sleep(max(0.0, due - time.monotonic()))
            try:
                dst.sendall(data)
            except OSError:
                return
        try:
            dst.shutdown(socket.SHUT_WR)   # the half-close a hijacked stream uses to say "no more input"
        except OSError:
            pass
