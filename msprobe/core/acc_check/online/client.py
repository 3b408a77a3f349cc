"""The training side's sender (framework-free): a bounded queue, one background thread, TCP/TLS or a shared
directory, resending after a reconnect, and a drop-and-report policy that never blocks training for long.

Policy (docs/acc_check.md "Online pre-check"):

* ``submit`` puts one API call into a queue of ``queue_size`` items (and ``QUEUE_BYTES`` tensor bytes). When the
  queue is full, the training thread
  waits up to ``put_timeout`` seconds for room (back-pressure: a slower checker slows training down, nothing is
  lost). If the wait runs out, that call is dropped and the sender enters *drop mode*: further calls are dropped
  at once (no waiting) until the queue has drained to half, so a dead checker costs training one wait per outage.
  Every dropped call is counted and named in the final report (training log and the checker's report file).
* At most ``window`` sent calls wait for their acknowledgement; the checker acknowledges a call once its rows are
  written (or it found them written already), so after a lost connection the unacknowledged calls are sent again
  and the checker never judges one twice.
* A lost connection is one warning line; the thread reconnects with growing pauses (0.2 s to 5 s) and goes on.
* ``close`` sends STOP with the totals once the queue is empty, waits up to ``close_timeout`` for the checker,
  and returns the totals. Nothing here raises into the training thread.
"""

from __future__ import annotations

import collections
import logging
import os
import socket
import ssl
import threading
import time
import uuid
from typing import Any, Dict, List, Optional, Sequence, Tuple

from msprobe.core.acc_check.online import protocol as P
from msprobe.core.acc_check.online.config import OnlineConfig
from msprobe.core.acc_check.online.tlssock import SerialTLS

log = logging.getLogger("msprobe")

QUEUE_SIZE = 64
QUEUE_BYTES = 1 << 30        # the queue also holds at most this many tensor bytes (one larger call is let in alone)
PUT_TIMEOUT = 60.0
WINDOW = 16
CONNECT_TIMEOUT = 5.0
CLOSE_TIMEOUT = 60.0
MAX_DROP_NAMES = 10000


class Item:
    __slots__ = ("seq", "name", "step", "record", "tensors", "frame", "nbytes")

    def __init__(self, seq: int, name: str, step: int, record: dict, tensors: Sequence[Tuple[str, List[int], Any]],
                 nbytes: int = 0):
        self.seq, self.name, self.step, self.record, self.tensors = seq, name, step, record, tensors
        self.frame = None
        self.nbytes = nbytes

    def encode(self, session: str, rank: int) -> List[Any]:
        if self.frame is None:
            specs, bufs = [], []
            for dtype, shape, buf in self.tensors:
                mv = memoryview(buf).cast("B")
                specs.append({"dtype": dtype, "shape": list(shape), "nbytes": mv.nbytes})
                bufs.append(mv)
            head = {"seq": self.seq, "session": session, "rank": rank, "step": self.step, "name": self.name,
                    "record": self.record, "tensors": specs}
            self.frame = P.encode(P.DATA, head, bufs)
            self.tensors = ()
        return self.frame


def tls_client_context(tls_path: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(os.path.join(tls_path, "client.crt"), os.path.join(tls_path, "client.key"))
    ca = os.path.join(tls_path, "ca.crt")
    if os.path.isfile(ca):
        ctx.load_verify_locations(ca)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_REQUIRED
    else:  # as the reference: encrypted, the server's certificate not verified (give ca.crt to verify it)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


class Sender:
    """See the module docstring. ``stats`` (a dict) is safe to read at any time."""

    def __init__(self, cfg: OnlineConfig, rank: int, queue_size: int = None, put_timeout: float = None,
                 window: int = None, close_timeout: float = None):
        self.cfg, self.rank = cfg, rank
        self.queue_size = queue_size or QUEUE_SIZE
        self.put_timeout = PUT_TIMEOUT if put_timeout is None else put_timeout
        self.window = window or WINDOW
        self.close_timeout = CLOSE_TIMEOUT if close_timeout is None else close_timeout
        self.session = f"{socket.gethostname()[:32]}-{os.getpid()}-{uuid.uuid4().hex[:12]}".replace(".", "_")
        self._q: collections.deque = collections.deque()
        self._q_bytes = 0
        self.queue_bytes = QUEUE_BYTES
        self._inflight: "collections.OrderedDict[int, Item]" = collections.OrderedDict()
        self._cv = threading.Condition()
        self._seq = 0
        self._closing = False
        self._stopped = threading.Event()     # the sender thread has ended
        self._ok = threading.Event()          # ... because the checker answered STOP
        self._drop_mode = False
        self.dropped: List[Dict[str, Any]] = []
        self.stats = {"captured": 0, "sent": 0, "acked": 0, "judged": 0, "duplicate": 0, "filtered": 0,
                      "dropped": 0, "resent": 0, "reconnects": 0, "unsent_at_close": 0, "left_in_shared_dir": 0}
        self._thread = threading.Thread(target=self._run, name="msprobe-online-sender", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ training thread
    def submit(self, name: str, step: int, record: dict, tensors) -> bool:
        """Queue one API call (see the policy); False when it was dropped. Never raises."""
        try:
            with self._cv:
                if self._closing:
                    return False
                self.stats["captured"] += 1
                size = sum(memoryview(t[2]).nbytes for t in tensors)
                if self._full(size):
                    if self._drop_mode:
                        return self._drop(name, step, "queue full (drop mode)")
                    deadline = time.monotonic() + self.put_timeout
                    while self._full(size):
                        left = deadline - time.monotonic()
                        if left <= 0:
                            self._drop_mode = True
                            log.warning("msprobe online run_ut: the checker at %s has not taken a call for %g s (queue "
                                        "of %d full); calls are dropped and counted until it catches up",
                                        self.cfg.where(), self.put_timeout, self.queue_size)
                            return self._drop(name, step, f"queue full for {self.put_timeout:g} s")
                        self._cv.wait(left)
                elif self._drop_mode and len(self._q) <= self.queue_size // 2:
                    self._drop_mode = False
                    log.warning("msprobe online run_ut: the checker caught up; %d calls dropped so far",
                                self.stats["dropped"])
                item = Item(self._seq, name, step, record, tensors, size)
                self._seq += 1
                self._q.append(item)
                self._q_bytes += size
                self._cv.notify_all()
                return True
        except Exception as exc:  # noqa: BLE001 - never into the training
            log.warning("msprobe online run_ut: %s not queued: %s", name, exc)
            return False

    def _full(self, size: int) -> bool:
        return len(self._q) >= self.queue_size or bool(self._q and self._q_bytes + size > self.queue_bytes)

    def _take(self) -> "Item":
        item = self._q.popleft()
        self._q_bytes -= item.nbytes
        return item

    def _put_back(self, item: "Item") -> None:
        self._q.appendleft(item)
        self._q_bytes += item.nbytes

    def _drop(self, name: str, step: int, reason: str) -> bool:
        self.stats["dropped"] += 1
        if len(self.dropped) < MAX_DROP_NAMES:
            self.dropped.append({"name": name, "step": step, "reason": reason})
        return False

    def close(self, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Send what is queued, then STOP; wait at most ``timeout`` (default close_timeout) seconds."""
        timeout = self.close_timeout if timeout is None else timeout
        if not self._ever_connected and not self.cfg.nfs_path:
            timeout = min(timeout, 2 * CONNECT_TIMEOUT)  # the checker never answered: do not hold the exit
        with self._cv:
            if not self._closing:
                self._closing = True
                self._cv.notify_all()
        self._stopped.wait(timeout)
        with self._cv:
            self._give_up = True
            self._cv.notify_all()
            if not self._ok.is_set():
                written = list(self._inflight.values()) if self.cfg.nfs_path else []
                unsent = list(self._q) + ([] if self.cfg.nfs_path else list(self._inflight.values()))
                # shared directory: calls already written stay there for a checker started later
                self.stats["left_in_shared_dir"] = len(written)
                self.stats["unsent_at_close"] = len(unsent)
                for it in unsent:
                    self._drop(it.name, it.step, "not acknowledged when training ended")
                self._q.clear()
                self._q_bytes = 0
                self._inflight.clear()
        self._thread.join(2.0)
        if self.cfg.nfs_path and not self._ok.is_set():
            end = os.path.join(self.cfg.nfs_path, self.session + ".end")
            try:
                if not os.path.exists(end):
                    self._write(end, P.encode(P.STOP, self._stop_header()))
            except OSError as exc:
                log.warning("msprobe online run_ut: cannot write %s: %s", end, exc)
        s = self.stats
        say = log.warning if s["dropped"] else log.info
        say("msprobe online run_ut (%s, session %s): %d calls captured, %d checked, %d already checked "
            "(resent), %d filtered by rank, %d dropped%s%s", self.cfg.where(), self.session, s["captured"],
            s["judged"], s["duplicate"], s["filtered"], s["dropped"],
            f", {s['left_in_shared_dir']} left in the shared directory for a later checker"
            if s["left_in_shared_dir"] else "",
            "" if not self.dropped else " (first: " + ", ".join(
                f"{d['name']} step {d['step']}" for d in self.dropped[:3]) + ")")
        return dict(s)

    _give_up = False
    _ever_connected = False

    # ------------------------------------------------------------------ sender thread
    def _hello(self) -> Dict[str, Any]:
        return {"session": self.session, "rank": self.rank, "pid": os.getpid(), "host": socket.gethostname()}

    def _stop_header(self) -> Dict[str, Any]:
        return dict(self._hello(), stats=dict(self.stats), dropped=self.dropped)

    def _run(self) -> None:
        try:
            if self.cfg.nfs_path:
                self._run_dir()
            else:
                self._run_tcp()
        except Exception as exc:  # noqa: BLE001 - logged; training goes on (calls are then dropped at close)
            log.warning("msprobe online run_ut: the sender stopped: %s: %s", type(exc).__name__, exc)
        finally:
            self._stopped.set()

    # --- TCP / TLS
    def _connect(self):
        sock = socket.create_connection((self.cfg.host, self.cfg.port), timeout=CONNECT_TIMEOUT)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(None if not self.cfg.tls_path else CONNECT_TIMEOUT)
        if self.cfg.tls_path:  # handshake, then one lock around OpenSSL (the ack reader runs beside the sender)
            return SerialTLS(tls_client_context(self.cfg.tls_path).wrap_socket(sock))
        return sock

    def _run_tcp(self) -> None:
        pause, failures, ever = 0.2, 0, False
        while not self._give_up:
            try:
                sock = self._connect()
            except (OSError, ssl.SSLError) as exc:
                if failures == 0:
                    log.warning("msprobe online run_ut: Failed to connect %s %d (%s); retrying, calls wait in the "
                                "queue (%d max)", self.cfg.host, self.cfg.port, exc, self.queue_size)
                failures += 1
                with self._cv:
                    self._cv.wait(pause)
                pause = min(5.0, pause * 2)
                continue
            if failures or ever:
                self.stats["reconnects"] += 1 if ever else 0
                log.warning("msprobe online run_ut: connected to the checker at %s:%d", self.cfg.host, self.cfg.port)
            else:
                log.info("msprobe online run_ut: successfully connect server %s:%d", self.cfg.host, self.cfg.port)
            failures, pause, ever = 0, 0.2, True
            self._ever_connected = True
            try:
                if self._session(sock):
                    return
            except (OSError, ssl.SSLError, EOFError, P.ProtocolError) as exc:
                log.warning("msprobe online run_ut: connection to the checker lost (%s); reconnecting, %d "
                            "unacknowledged calls will be sent again", exc or type(exc).__name__, len(self._inflight))
            finally:
                try:
                    sock.close()
                except OSError:
                    pass
            with self._cv:  # unacknowledged calls go back to the front of the queue, in order
                for seq in reversed(list(self._inflight)):
                    self._put_back(self._inflight[seq])
                    self.stats["resent"] += 1
                self._inflight.clear()

    def _send(self, sock, parts) -> None:
        for p in parts:
            sock.sendall(p)

    def _session(self, sock) -> bool:
        """One connection: HELLO, then calls, then STOP. True when the checker answered STOP."""
        self._send(sock, P.encode(P.HELLO, self._hello()))
        done = threading.Event()
        errors: List[BaseException] = []
        reader = threading.Thread(target=self._read_acks, args=(sock, done, errors), daemon=True,
                                  name="msprobe-online-acks")
        reader.start()
        stop_sent = False
        try:
            while True:
                with self._cv:
                    while True:
                        if errors or self._give_up:
                            break
                        if done.is_set():
                            self._ok.set()
                            return True
                        if self._q and len(self._inflight) < self.window:
                            break
                        if self._closing and not self._q and not self._inflight and not stop_sent:
                            break
                        self._cv.wait(0.5)
                    if errors:
                        raise errors[0]
                    if self._give_up:
                        return False
                    if self._q and len(self._inflight) < self.window:
                        item = self._take()
                        self._inflight[item.seq] = item
                        self._cv.notify_all()
                    else:
                        item = None
                if item is not None:
                    self._send(sock, item.encode(self.session, self.rank))
                    self.stats["sent"] += 1
                else:
                    self._send(sock, P.encode(P.STOP, self._stop_header()))
                    stop_sent = True
        finally:
            if not done.is_set():
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            reader.join(2.0)

    def _read_acks(self, sock, done: threading.Event, errors: List[BaseException]) -> None:
        def read_exact(n: int) -> bytes:
            buf = bytearray()
            while len(buf) < n:
                chunk = sock.recv(n - len(buf))
                if not chunk:
                    raise EOFError("the checker closed the connection")
                buf += chunk
            return bytes(buf)
        try:
            while True:
                frame = P.read_frame(read_exact)
                if frame.kind == P.BYE:
                    done.set()
                    with self._cv:
                        self._cv.notify_all()
                    return
                if frame.kind == P.ACK:
                    self._acked(frame.header.get("seq"), frame.header.get("status"))
        except BaseException as exc:  # noqa: BLE001 - handed to the sender loop
            with self._cv:
                errors.append(exc)
                self._cv.notify_all()

    def _acked(self, seq, status) -> None:
        with self._cv:
            if self._inflight.pop(seq, None) is None:
                return
            self.stats["acked"] += 1
            key = status if status in ("judged", "duplicate", "filtered") else "judged"
            self.stats[key] += 1
            self._cv.notify_all()

    # --- shared directory: one file per frame; the checker deletes a file once its rows are written
    def _path(self, seq: int) -> str:
        return os.path.join(self.cfg.nfs_path, f"{self.session}.{seq:010d}.msg")

    def _write(self, path: str, parts) -> None:
        tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".tmp")
        with open(tmp, "wb") as fh:
            for p in parts:
                fh.write(p)
        os.replace(tmp, path)

    def _run_dir(self) -> None:
        base = os.path.join(self.cfg.nfs_path, self.session)
        self._write(base + ".start", P.encode(P.HELLO, self._hello()))
        warned = False
        while True:
            with self._cv:
                for seq in [s for s in self._inflight if not os.path.exists(self._path(s))]:
                    self._inflight.pop(seq)
                    self.stats["acked"] += 1
                    self.stats["judged"] += 1
                    self._cv.notify_all()
                if self._give_up:
                    return
                if self._closing and not self._q and not self._inflight:
                    break
                if not (self._q and len(self._inflight) < self.window):
                    self._cv.wait(0.05)
                    continue
                item = self._take()
                self._inflight[item.seq] = item
                self._cv.notify_all()
            try:
                self._write(self._path(item.seq), item.encode(self.session, self.rank))
                item.frame = None  # the file holds it now
                self.stats["sent"] += 1
                warned = False
            except OSError as exc:
                if not warned:
                    log.warning("msprobe online run_ut: cannot write to %s (%s); retrying", self.cfg.nfs_path, exc)
                    warned = True
                with self._cv:
                    self._inflight.pop(item.seq, None)
                    self._put_back(item)
                    self._cv.wait(0.5)
        self._write(base + ".end", P.encode(P.STOP, self._stop_header()))
        # the checker takes .end once every .msg of the session is gone, writes its report and deletes .end
        while os.path.exists(base + ".end") and not self._give_up:
            time.sleep(0.05)
        if not os.path.exists(base + ".end"):
            self._ok.set()
