"""A TCP proxy on 127.0.0.1 in front of a real redis-server, which the tests make flap.

While *up* it forwards bytes both ways. While *down* it either drops (``mode="drop"``: every
open connection is closed and new ones are closed as soon as they are accepted, so clients
see a reset or an end of stream at once) or stalls (``mode="stall"``: connections are held
but nothing is forwarded, so clients wait for their timeouts, as with a slow Redis).

A test can also make the proxy lose answers: :attr:`FlappingProxy.lose_answers` answers from
the server are dropped and their connections closed (the client sees a reset at once), after
Redis has applied what they answer, as when an answer comes after the client's timeout.

The state changes either when a test calls :meth:`FlappingProxy.set_up` (which returns once
the proxy thread has applied it: deterministic for tests on virtual time), or on a schedule
of real time (:func:`flap_schedule`, drawn from a seed) that the proxy thread follows.
"""

from __future__ import annotations

import contextlib
import queue
import random
import selectors
import socket
import threading
import time
from collections.abc import Sequence
from typing import NamedTuple


class Flap(NamedTuple):
    """One change of state, at *at* seconds after the schedule starts."""

    at: float
    up: bool


def flap_schedule(
    seed: int,
    duration: float,
    up: tuple[float, float] = (0.05, 0.3),
    down: tuple[float, float] = (0.005, 0.08),
) -> list[Flap]:
    """Alternating periods up and down, their lengths drawn uniformly from *up* and *down*
    (seconds) by ``random.Random(seed)``, until *duration*; the proxy ends up."""
    rng = random.Random(seed)
    flaps = []
    at = rng.uniform(*up)
    while at < duration:
        flaps.append(Flap(at, False))
        at += rng.uniform(*down)
        flaps.append(Flap(min(at, duration), True))
        at += rng.uniform(*up)
    return flaps


class _Pair:
    __slots__ = ("client", "server")

    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server

    def close(self) -> None:
        for sock in (self.client, self.server):
            with contextlib.suppress(OSError):
                # RST rather than FIN: the client sees the connection die at once.
                sock.setsockopt(
                    socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
                )
            with contextlib.suppress(OSError):
                sock.close()


class FlappingProxy:
    """Forwards 127.0.0.1:``port`` to 127.0.0.1:``target_port``; see the module docstring."""

    def __init__(self, target_port: int, *, mode: str = "drop") -> None:
        if mode not in ("drop", "stall"):
            raise ValueError(f"mode must be 'drop' or 'stall', got {mode!r}")
        self.target_port = target_port
        self.mode = mode
        self.up = True
        self.drops = 0  # connections closed by the proxy
        self.downs = 0  # times it went down
        self.lose_answers = 0  # answers still to lose (set by the test, read by the thread)
        self.lost = 0  # answers lost
        self._listener = socket.create_server(("127.0.0.1", 0), backlog=128)
        self._listener.setblocking(False)
        self.port: int = self._listener.getsockname()[1]
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._listener, selectors.EVENT_READ, None)
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, "wake")
        self._commands: queue.Queue[tuple[bool, threading.Event]] = queue.Queue()
        self._pairs: list[_Pair] = []
        self._held: list[socket.socket] = []  # accepted while stalled, never forwarded
        self._schedule: list[Flap] = []
        self._schedule_start = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="flapping-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    # -- control ------------------------------------------------------------------------------

    def set_up(self, up: bool) -> None:
        """Go up or down; returns once the proxy thread has applied it."""
        done = threading.Event()
        self._commands.put((up, done))
        self._wake_w.send(b"x")
        if not done.wait(5.0):
            raise RuntimeError("the proxy thread did not answer")

    def follow(self, schedule: Sequence[Flap]) -> None:
        """Follow *schedule* from now on (real time), in the proxy thread."""
        done = threading.Event()
        self._schedule = sorted(schedule)
        self._schedule_start = time.monotonic()
        self._commands.put((self.up, done))
        self._wake_w.send(b"x")
        done.wait(5.0)

    def following(self) -> bool:
        """Whether changes of the schedule are still to come."""
        return bool(self._schedule)

    def close(self) -> None:
        self._stop = True
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        self._thread.join(5.0)
        for pair in self._pairs:
            pair.close()
        for sock in self._held:
            sock.close()
        self._selector.close()
        self._listener.close()
        self._wake_r.close()
        self._wake_w.close()

    def __enter__(self) -> FlappingProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the thread ---------------------------------------------------------------------------

    def _apply(self, up: bool) -> None:
        if up == self.up:
            return
        self.up = up
        if not up:
            self.downs += 1
            if self.mode == "drop":
                for pair in self._pairs:
                    self._forget(pair)
                    self.drops += 1
                self._pairs = []
            else:
                for pair in self._pairs:
                    # Stop forwarding; the connections stay open.
                    for sock in (pair.client, pair.server):
                        with contextlib.suppress(KeyError, ValueError):
                            self._selector.unregister(sock)
        else:
            # Whatever was stalled is out of step with its client: close it.
            for pair in self._pairs if self.mode == "stall" else []:
                pair.close()
                self.drops += 1
            if self.mode == "stall":
                self._pairs = []
            for sock in self._held:
                sock.close()
                self.drops += 1
            self._held = []

    def _forget(self, pair: _Pair) -> None:
        for sock in (pair.client, pair.server):
            with contextlib.suppress(KeyError, ValueError):
                self._selector.unregister(sock)
        pair.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            if not self.up:
                if self.mode == "drop":
                    _Pair(client, client).close()
                    self.drops += 1
                else:
                    self._held.append(client)
                continue
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port), timeout=1.0)
            except OSError:
                client.close()  # the server itself is down: the client sees a reset
                self.drops += 1
                continue
            server.settimeout(None)
            client.setblocking(True)
            for sock in (client, server):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            pair = _Pair(client, server)
            self._pairs.append(pair)
            self._selector.register(client, selectors.EVENT_READ, (pair, server))
            self._selector.register(server, selectors.EVENT_READ, (pair, client))

    def _pump(self, sock: socket.socket, pair: _Pair, to: socket.socket) -> None:
        try:
            data = sock.recv(65536)
            if data and sock is pair.server and self.lose_answers > 0:
                # Redis has run what this answers: the client never hears it.
                self.lose_answers -= 1
                self.lost += 1
                self.drops += 1
                data = b""
            if data:
                to.sendall(data)
                return
        except OSError:
            pass
        self._forget(pair)
        if pair in self._pairs:
            self._pairs.remove(pair)

    def _run(self) -> None:
        while not self._stop:
            timeout = 0.05
            if self._schedule:
                due = self._schedule_start + self._schedule[0].at - time.monotonic()
                timeout = max(0.0, min(timeout, due))
            for key, _ in self._selector.select(timeout):
                if key.data is None:
                    self._accept()
                elif key.data == "wake":
                    with contextlib.suppress(BlockingIOError):
                        self._wake_r.recv(4096)
                else:
                    pair, to = key.data
                    self._pump(key.fileobj, pair, to)  # type: ignore[arg-type]
            while self._schedule and (
                time.monotonic() >= self._schedule_start + self._schedule[0].at
            ):
                self._apply(self._schedule.pop(0).up)
            while True:
                try:
                    up, done = self._commands.get_nowait()
                except queue.Empty:
                    break
                self._apply(up)
                done.set()
