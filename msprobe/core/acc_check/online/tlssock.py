"""A TLS socket that one thread may read while another writes.

Both ends of the online pre-check read and write one connection from two threads (the sender writes calls
while a reader takes acknowledgements; the checker reads frames while its judging thread writes
acknowledgements). A plain TCP socket is full duplex, but an ``ssl.SSLSocket`` is one OpenSSL ``SSL`` object,
which must not be used by two threads at once: CPython releases the GIL inside ``SSL_read`` and
``SSL_write``, so a read and a write at the same moment corrupt the record state ("bad record mac",
"decryption failed"; the connection is lost and its unacknowledged calls are sent again, about one run in
ten of the TLS test on a 2-core machine).

``SerialTLS`` puts the SSL socket in non-blocking mode and makes every OpenSSL call under one lock, so no
two ever overlap; a thread that must wait for the network waits with ``poll`` outside the lock, and wakes at
least every ``POLL_SECONDS`` (a write may have read the record a reader waits for into OpenSSL's buffer).
"""

import select
import socket
import ssl
import threading

POLL_SECONDS = 0.05
SEND_CHUNK = 1 << 20


class SerialTLS:
    """``recv``, ``sendall``, ``shutdown`` and ``close`` of a connected, handshaken ``ssl.SSLSocket``."""

    def __init__(self, sock: ssl.SSLSocket):
        self._sock = sock
        self._lock = threading.Lock()
        self._closed = False
        sock.setblocking(False)

    def _wait(self, for_write: bool) -> None:
        if self._closed:
            raise OSError("the connection is closed")
        try:
            fd = self._sock.fileno()
            if fd < 0:
                raise OSError("the connection is closed")
            if hasattr(select, "poll"):
                p = select.poll()
                p.register(fd, (select.POLLOUT if for_write else select.POLLIN) | select.POLLERR | select.POLLHUP)
                p.poll(POLL_SECONDS * 1000)
            else:  # pragma: no cover - platforms without poll
                r, w = ([], [fd]) if for_write else ([fd], [])
                select.select(r, w, [], POLL_SECONDS)
        except ValueError as exc:
            raise OSError(f"the connection is closed ({exc})")

    def recv(self, n: int) -> bytes:
        while True:
            with self._lock:
                if self._closed:
                    return b""
                try:
                    return self._sock.recv(n)
                except ssl.SSLWantReadError:
                    for_write = False
                except ssl.SSLWantWriteError:
                    for_write = True
            self._wait(for_write)

    def sendall(self, data) -> None:
        with memoryview(data) as view, view.cast("B") as left:
            while len(left):
                part = left[:SEND_CHUNK]
                with self._lock:
                    if self._closed:
                        raise OSError("the connection is closed")
                    try:
                        sent = self._sock.send(part)
                    except ssl.SSLWantWriteError:
                        sent, for_write = 0, True
                    except ssl.SSLWantReadError:
                        sent, for_write = 0, False
                if sent:
                    left = left[sent:]
                else:  # OpenSSL wants the same bytes again once the socket is ready
                    self._wait(for_write)

    def shutdown(self, how: int = socket.SHUT_RDWR) -> None:
        with self._lock:
            self._closed = True
            self._sock.shutdown(how)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            self._sock.close()

    def fileno(self) -> int:
        return self._sock.fileno()
