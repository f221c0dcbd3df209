"""The scheduler's socket, served without blocking its loop: every connection is read as it becomes
readable, a request is handled once its whole line is in, and a client that stays silent, dribbles or
floods is cut off (``IDLE_S`` without a whole line, over ``api.MAX_REQUEST`` bytes, or the oldest when
``MAX_CLIENTS`` are open) while the loop goes on placing jobs.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

from .api import MAX_REQUEST

IDLE_S = 10.0  # a whole request line must arrive within this long of the connection
MAX_CLIENTS = 64


class Client:
    def __init__(self, conn: socket.socket) -> None:
        self.conn = conn
        self.since = time.monotonic()
        self.data = bytearray()
        self.reply = b""


class RequestServer:
    """``poll(timeout)`` accepts, reads and answers what is ready; ``handle(bytes) -> dict`` answers one
    request line (it must not raise)."""

    def __init__(self, listener: socket.socket, handle: Callable[[bytes], dict[str, Any]]) -> None:
        self.listener = listener
        self.handle = handle
        self.sel = selectors.DefaultSelector()
        self.sel.register(listener, selectors.EVENT_READ)
        self.clients: dict[socket.socket, Client] = {}
        # ``wake`` from another thread ends a wait in ``poll`` at once (a cleanup that finished)
        self.woken, self.waker = socket.socketpair()
        for end in (self.woken, self.waker):
            end.setblocking(False)
        self.sel.register(self.woken, selectors.EVENT_READ, self.drain)

    def replace_listener(self, listener: socket.socket) -> None:
        """Serve on ``listener`` from now on (the socket path was removed or replaced and bound again)."""
        self.unregister(self.listener)
        with contextlib.suppress(OSError):
            self.listener.close()
        self.listener = listener
        self.sel.register(listener, selectors.EVENT_READ)

    def wake(self) -> None:
        """Thread-safe: the loop's ``poll`` returns now rather than at its timeout."""
        with contextlib.suppress(OSError):  # full: a wake is pending already; closed: the loop ended
            self.waker.send(b"\0")

    def drain(self) -> None:
        with contextlib.suppress(OSError):
            while self.woken.recv(4096):
                pass

    def register(self, fileobj: Any, callback: Callable[[], None]) -> None:
        """Wake the loop when ``fileobj`` becomes readable (a launcher's pidfd) and call ``callback``."""
        self.sel.register(fileobj, selectors.EVENT_READ, callback)

    def unregister(self, fileobj: Any) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self.sel.unregister(fileobj)

    def poll(self, timeout: float) -> None:
        for key, events in self.sel.select(timeout):
            if key.fileobj is self.listener:
                self.accept()
            elif callable(key.data):
                key.data()
            elif isinstance(key.data, Client):
                if events & selectors.EVENT_READ:
                    self.read(key.data)
                if events & selectors.EVENT_WRITE:
                    self.write(key.data)
        self.expire()

    def accept(self) -> None:
        for _ in range(MAX_CLIENTS):
            try:
                conn, _ = self.listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return  # out of descriptors, say: the client retries
            conn.setblocking(False)
            if len(self.clients) >= MAX_CLIENTS:  # the oldest is the likeliest to be stuck
                self.close(min(self.clients.values(), key=lambda c: c.since))
            client = Client(conn)
            self.clients[conn] = client
            self.sel.register(conn, selectors.EVENT_READ, client)
            self.read(client)  # a client usually sends at once: answer it before the loop goes on

    def read(self, client: Client) -> None:
        try:
            chunk = client.conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(client)
            return
        if not chunk:
            if client.data.strip():
                self.answer(client, bytes(client.data))  # a last line without its newline
            else:
                self.close(client)
            return
        client.data += chunk
        line, newline, _rest = client.data.partition(b"\n")
        if newline:
            self.answer(client, bytes(line))
        elif len(client.data) > MAX_REQUEST:
            self.refuse(client, f"the request is larger than {MAX_REQUEST} bytes")

    def refuse(self, client: Client, message: str) -> None:
        self.reply(client, {"ok": False, "error": "invalid", "message": message})

    def answer(self, client: Client, line: bytes) -> None:
        self.reply(client, self.handle(line))

    def reply(self, client: Client, doc: dict[str, Any]) -> None:
        client.data = bytearray()
        client.reply = json.dumps(doc).encode() + b"\n"
        with contextlib.suppress(KeyError, ValueError):
            self.sel.modify(client.conn, selectors.EVENT_WRITE, client)
        self.write(client)

    def write(self, client: Client) -> None:
        try:
            sent = client.conn.send(client.reply)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self.close(client)
            return
        client.reply = client.reply[sent:]
        if not client.reply:
            self.close(client)

    def expire(self) -> None:
        now = time.monotonic()
        for client in list(self.clients.values()):
            if now - client.since > IDLE_S:
                self.close(client)

    def close(self, client: Client) -> None:
        self.clients.pop(client.conn, None)
        self.unregister(client.conn)
        with contextlib.suppress(OSError):
            client.conn.close()

    def shutdown(self) -> None:
        for client in list(self.clients.values()):
            self.close(client)
        self.unregister(self.listener)
        self.unregister(self.woken)
        self.sel.close()
        self.woken.close()
        self.waker.close()
