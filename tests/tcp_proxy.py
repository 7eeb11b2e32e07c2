"""A TCP proxy on localhost that a test can cut, to stand for a network partition without root.

`CuttableProxy(port)` forwards connections made to `proxy.port` to `127.0.0.1:port`. After
`cut()` it forwards nothing more, in either direction, and keeps every connection open: the
bytes a side sends are read and dropped, and new connections are accepted and never answered.
Each side then sees what a pulled cable or a dropped route gives: silence, not a reset (a reset
or a refused connection would be the easier fault, a process that ended).
"""

from __future__ import annotations

import socket
import threading


class CuttableProxy:
    def __init__(self, target_port: int):
        self._target = ("127.0.0.1", target_port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._cut = threading.Event()
        self._sockets: list[socket.socket] = [self._listener]
        threading.Thread(target=self._accept, name="proxy-accept", daemon=True).start()

    def cut(self) -> None:
        """From now on nothing goes through, and nothing is closed."""
        self._cut.set()

    def close(self) -> None:
        for s in self._sockets:
            s.close()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            self._sockets.append(client)
            if self._cut.is_set():
                threading.Thread(target=self._pump, args=(client, None), daemon=True).start()
                continue
            try:
                server = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            self._sockets.append(server)
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket | None) -> None:
        while True:
            try:
                data = source.recv(65536)
            except OSError:
                return
            if not data:
                if sink is not None and not self._cut.is_set():
                    try:
                        sink.shutdown(socket.SHUT_WR)  # before the cut, an end goes through
                    except OSError:
                        pass
                return
            if sink is None or self._cut.is_set():
                continue
            try:
                sink.sendall(data)
            except OSError:
                return
