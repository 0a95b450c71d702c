"""Userspace TCP forwarding (kube-proxy's old userspace mode): a listener on one address that relays each
connection to a target, used for host ports exposed to pods on the node address."""

from __future__ import annotations

import contextlib
import logging
import selectors
import socket
import threading

log = logging.getLogger("kubesim.forward")
_CHUNK = 65536


class Forwarder:
    """Listens on ``listen`` and relays every connection to ``target``, until ``stop()``."""

    def __init__(self, listen: tuple[str, int], target: tuple[str, int]):
        self.target = target
        self.sock = socket.create_server(listen, reuse_port=False)
        self.sock.settimeout(0.2)
        self.stopping = threading.Event()
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._accept, name=f"forward-{listen[1]}", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stopping.is_set():
            try:
                client, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._relay, args=(client,), name="forward-conn", daemon=True).start()

    def _relay(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.target, timeout=10)
        except OSError:
            client.close()
            return
        upstream.settimeout(None)
        client.settimeout(None)
        with self.lock:
            self.conns |= {client, upstream}
        peers = {client: upstream, upstream: client}
        sel = selectors.DefaultSelector()
        for sock in peers:
            sel.register(sock, selectors.EVENT_READ)
        open_ = 2
        try:
            while open_ and not self.stopping.is_set():
                for key, _ in sel.select(timeout=0.5):
                    src: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = src.recv(_CHUNK)
                    except OSError:
                        data = b""
                    if data:
                        peers[src].sendall(data)
                        continue
                    sel.unregister(src)
                    open_ -= 1
                    with contextlib.suppress(OSError):
                        peers[src].shutdown(socket.SHUT_WR)
        except OSError:
            pass
        finally:
            sel.close()
            with self.lock:
                self.conns -= {client, upstream}
            client.close()
            upstream.close()

    def stop(self) -> None:
        """Close the listener and every relayed connection."""
        self.stopping.set()
        self.sock.close()
        with self.lock:
            for conn in list(self.conns):
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
        self.thread.join(timeout=2)
