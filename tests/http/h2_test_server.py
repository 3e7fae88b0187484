"""A real HTTP/2 server on 127.0.0.1 (cleartext, prior knowledge), written on the h2 package.

Behaviours are chosen by path; counts are per path:

- ``/refuse/<n>``: the first n requests are reset with REFUSED_STREAM (the server promises it
  processed nothing), then 200 ``ok after <count>``.
- ``/reset/<n>``: the first n requests are reset with INTERNAL_ERROR (the request may have been
  processed), then 200.
- anything else: 200.
"""

from __future__ import annotations

import contextlib
import socket
import threading

import h2.config
import h2.connection
import h2.errors
import h2.events


class H2Server:
    """Serves until :meth:`close`; ``url`` is ``http://127.0.0.1:<port>``."""

    def __init__(self) -> None:
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._listener.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept)]
        self._threads[0].start()

    def count(self, path: str) -> int:
        with self._lock:
            return self.counts.get(path, 0)

    def close(self) -> None:
        self._stop.set()
        for thread in list(self._threads):
            thread.join(5)
        self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._listener.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._serve, args=(conn,))
            self._threads.append(thread)
            thread.start()

    def _serve(self, sock: socket.socket) -> None:
        sock.settimeout(0.05)
        h2conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=False))
        h2conn.initiate_connection()
        with sock:
            sock.sendall(h2conn.data_to_send())
            while not self._stop.is_set():
                try:
                    data = sock.recv(65535)
                except TimeoutError:
                    continue
                except OSError:
                    return
                if not data:
                    return
                for event in h2conn.receive_data(data):
                    if isinstance(event, h2.events.RequestReceived):
                        self._answer(h2conn, event)
                    elif isinstance(event, h2.events.DataReceived):
                        h2conn.acknowledge_received_data(
                            event.flow_controlled_length, event.stream_id
                        )
                    elif isinstance(event, h2.events.ConnectionTerminated):
                        return
                with contextlib.suppress(OSError):
                    sock.sendall(h2conn.data_to_send())

    def _answer(self, h2conn: h2.connection.H2Connection, event: h2.events.RequestReceived) -> None:
        headers = {bytes(k): bytes(v) for k, v in event.headers or ()}
        path = headers[b":path"].decode()
        with self._lock:
            n = self.counts[path] = self.counts.get(path, 0) + 1
        kind, _, rest = path.strip("/").partition("/")
        if kind in ("refuse", "reset") and n <= int(rest):
            code = (
                h2.errors.ErrorCodes.REFUSED_STREAM
                if kind == "refuse"
                else h2.errors.ErrorCodes.INTERNAL_ERROR
            )
            h2conn.reset_stream(event.stream_id, error_code=code)
            return
        body = f"ok after {n}".encode()
        h2conn.send_headers(
            event.stream_id, [(":status", "200"), ("content-length", str(len(body)))]
        )
        h2conn.send_data(event.stream_id, body, end_stream=True)
