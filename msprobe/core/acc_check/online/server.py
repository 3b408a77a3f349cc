"""The checker side of the online pre-check (framework-free): receive API calls over TCP/TLS or from a shared
directory, judge each once with the framework's judge, write the result/details CSVs, acknowledge.

Outputs, per training process (session) and rank: ``{out}/rank{r}/accuracy_checking_result_{ts}.csv`` and
``..._details_{ts}.csv`` (the offline writers; a row is named ``{api}.step{S}``, e.g.
``Functional.linear.0.step3``), ``online_session_{session}.txt`` (which pair belongs to the session: a
restarted checker resumes that pair, so a call written before a crash is acknowledged, not judged again) and, when
the session ends, ``online_report_{session}.json`` (the client's totals and every call it dropped).

A call is acknowledged only after its rows are flushed; a connection that breaks loses nothing (the client sends
unacknowledged calls again). The receive queue is bounded: when the judge is slower than training, the reader
threads stop reading and TCP flow control (or the client's window in the shared directory) slows the sender.
"""

from __future__ import annotations

import errno
import importlib
import json
import logging
import os
import queue
import re
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

from msprobe.core.acc_check.online import protocol as P
from msprobe.core.acc_check.online.config import OnlineConfig
from msprobe.core.acc_check.online.tlssock import SerialTLS
from msprobe.core.acc_check.results import ResultFiles, free_timestamp, open_resume
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, ensure_output_dir, make_dirs

log = logging.getLogger("msprobe")

RECEIVE_QUEUE = 32
POLL_SECONDS = 0.05
_SESSION_RE = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


@dataclass
class Counts:
    judged: int = 0
    duplicate: int = 0
    filtered: int = 0
    bad_frames: int = 0
    sessions: int = 0
    results: Dict[str, int] = field(default_factory=lambda: {"pass": 0, "Warning": 0, "error": 0, "SKIP": 0})


class _Conn:
    """One TCP connection: frames are read by its thread, acknowledgements written by the judging thread."""

    def __init__(self, sock, peer):
        self.sock, self.peer = sock, peer
        self.lock = threading.Lock()
        self.session: Optional[str] = None
        self.closed = False

    def send(self, kind: int, header: Dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            with self.lock:
                for part in P.encode(kind, header):
                    self.sock.sendall(part)
        except (OSError, ssl.SSLError):
            self.closed = True  # the reader thread reports the loss

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass


def tls_server_context(tls_path: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.options |= getattr(ssl, "OP_NO_RENEGOTIATION", 0)
    ctx.set_ciphers("ECDHE+AESGCM:DHE+AESGCM:ECDHE+CHACHA20:DHE+CHACHA20:ECDHE+AESCCM:DHE+AESCCM")
    ctx.load_cert_chain(os.path.join(tls_path, "server.crt"), os.path.join(tls_path, "server.key"))
    ca = os.path.join(tls_path, "ca.crt")
    if os.path.isfile(ca):  # mutual TLS when a CA is given
        ctx.load_verify_locations(ca)
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class OnlineChecker:
    def __init__(self, cfg: OnlineConfig, out_dir: str, judge: Callable[[Dict, List], Dict], quiet: bool = False):
        self.cfg, self.judge, self.quiet = cfg, judge, quiet
        self.out = ensure_output_dir(out_dir or "./")
        self.events: "queue.Queue" = queue.Queue(maxsize=RECEIVE_QUEUE)
        self.files: Dict[str, ResultFiles] = {}
        self.ended: set = set()
        self.conns: List[_Conn] = []
        self.counts = Counts()
        self._lock = threading.Lock()
        self._listener = None
        self._stop = threading.Event()
        self.address = None

    # ------------------------------------------------------------------ receiving: TCP
    def listen(self) -> None:
        cfg = self.cfg
        ctx = tls_server_context(cfg.tls_path) if cfg.tls_path else None
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((cfg.host, cfg.port))
        except OSError as exc:
            sock.close()
            if exc.errno == errno.EADDRINUSE:
                raise MsprobeError(f"run_ut online: port {cfg.port} on {cfg.host} is in use (another checker or "
                                   f"program); free it or choose another \"port\" in {cfg.source} (and in the "
                                   f"training config)")
            raise MsprobeError(f"run_ut online: cannot listen on {cfg.host}:{cfg.port}: {exc.strerror}; \"host\" "
                               f"must be an address of this machine ({cfg.source})")
        sock.listen(16)
        sock.settimeout(0.2)
        self._listener = sock
        self.address = sock.getsockname()
        threading.Thread(target=self._accept, args=(sock, ctx), daemon=True, name="msprobe-online-accept").start()

    def _accept(self, sock, ctx) -> None:
        while not self._stop.is_set():
            try:
                raw, peer = sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(raw, peer, ctx), daemon=True,
                             name="msprobe-online-conn").start()

    def _serve(self, raw, peer, ctx) -> None:
        raw.settimeout(None)
        try:
            s = SerialTLS(ctx.wrap_socket(raw, server_side=True)) if ctx else raw
        except (ssl.SSLError, OSError) as exc:
            log.warning("run_ut online: TLS handshake with %s:%d failed: %s", peer[0], peer[1], exc)
            raw.close()
            return
        conn = _Conn(s, peer)
        with self._lock:
            self.conns.append(conn)

        def read_exact(n: int) -> bytes:
            buf = bytearray()
            while len(buf) < n:
                chunk = s.recv(min(n - len(buf), 1 << 20))
                if not chunk:
                    raise EOFError
                buf += chunk
            return bytes(buf)
        reason = None
        try:
            while not conn.closed:
                frame = P.read_frame(read_exact)
                if frame.kind in (P.HELLO, P.DATA, P.STOP):
                    self.events.put(("frame", conn, frame))  # blocks when full: back-pressure
        except EOFError:
            pass
        except P.ProtocolError as exc:
            reason = str(exc)
            self.counts.bad_frames += 1
        except (OSError, ssl.SSLError) as exc:
            reason = str(exc) or type(exc).__name__
        if reason and not conn.closed:
            log.warning("run_ut online: connection from %s:%d dropped: %s", peer[0], peer[1], reason)
        conn.close()
        self.events.put(("closed", conn, None))

    # ------------------------------------------------------------------ receiving: shared directory
    def _poll_dir(self) -> None:
        """Frames from the shared directory, in order: ``*.start``, then each session's ``*.msg`` by sequence,
        then ``*.end`` once no ``.msg`` of its session is left. A file is deleted after it is handled."""
        d = self.cfg.nfs_path
        handed = set()
        while not self._stop.is_set():
            try:
                names = sorted(n for n in os.listdir(d) if not n.startswith("."))
            except OSError as exc:
                log.warning("run_ut online: cannot read %s: %s", d, exc)
                time.sleep(1.0)
                continue
            handed &= set(names)
            pending = {n.split(".", 1)[0] for n in names if n.endswith(".msg")}
            order = ([n for n in names if n.endswith(".start")] + [n for n in names if n.endswith(".msg")]
                     + [n for n in names if n.endswith(".end") and n[:-4] not in pending])
            for n in order:
                if n in handed:
                    continue
                handed.add(n)
                path = os.path.join(d, n)
                try:
                    with open(path, "rb") as fh:
                        data = fh.read()
                    frame = P.parse_bytes(data)
                except FileNotFoundError:
                    continue
                except (OSError, P.ProtocolError) as exc:
                    log.warning("run_ut online: %s is not a readable frame (%s); moved aside as %s.bad", path, exc, n)
                    self.counts.bad_frames += 1
                    try:
                        os.replace(path, os.path.join(d, "." + n + ".bad"))
                    except OSError:
                        pass
                    continue
                self.events.put(("file", path, frame))
            time.sleep(POLL_SECONDS)

    # ------------------------------------------------------------------ judging (the calling thread)
    def _files(self, session: str, rank: int) -> ResultFiles:
        files = self.files.get(session)
        if files is not None:
            return files
        rank_dir = os.path.join(self.out, f"rank{rank}")
        make_dirs(rank_dir, 0o750)
        marker = os.path.join(rank_dir, f"online_session_{session}.txt")
        if os.path.isfile(marker):
            with open(marker, "r", encoding="utf-8") as fh:
                name = fh.read().strip()
            files = open_resume(os.path.join(rank_dir, name))
            log.warning("run_ut online: session %s (rank %d) resumed in %s: %d calls already written", session, rank,
                        files.result_path, len(files.done))
        else:
            files = ResultFiles.create(rank_dir, free_timestamp(rank_dir))

            def write(tmp: str) -> None:
                with open(tmp, "w", encoding="utf-8") as fh:
                    fh.write(os.path.basename(files.result_path) + "\n")
            atomic_write(marker, write)
            if not self.quiet:
                print(f"run_ut online: rank {rank} session {session}: results in {files.result_path}", flush=True)
        self.files[session] = files
        return files

    def _filtered(self, h: Dict) -> bool:
        if h["rank"] not in self.cfg.rank_list:
            return True
        api = ".".join(h["name"].split(".")[1:-1])
        if api in self.cfg.black_list or h["name"] in self.cfg.black_list:
            return True
        return bool(self.cfg.white_list) and api not in self.cfg.white_list and h["name"] not in self.cfg.white_list

    def _handle_data(self, frame: P.Frame) -> str:
        h = frame.header
        P.check_data_header(h)
        if not _SESSION_RE.match(h["session"]):
            raise P.ProtocolError(f"bad session id {h['session']!r}")
        if self._filtered(h):
            self.counts.filtered += 1
            return "filtered"
        files = self._files(h["session"], h["rank"])
        row = f"{h['name']}.step{h['step']}"
        if row in files.done:
            self.counts.duplicate += 1
            return "duplicate"
        try:
            tensors = P.tensor_views(frame)
        except P.ProtocolError as exc:  # a whole frame whose tensors cannot be read: its row says why
            tensors = None
            res = {"forward": "SKIP", "backward": "SKIP", "message": f"{h['name']}: the received tensors cannot be "
                   f"read ({exc}). SKIP.", "details": []}
        try:
            if tensors is not None:
                res = self.judge(h, tensors)
        except Exception as exc:  # noqa: BLE001 - one call's failure is its row
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            res = {"forward": "SKIP", "backward": "SKIP", "message": f"Run {h['name']} UT Error: {text}", "details": []}
        details = []
        prefix = h["name"] + "."
        for d in res.get("details") or []:
            d = dict(d)
            n = str(d.get("API Name", ""))
            d["API Name"] = row + "." + n[len(prefix):] if n.startswith(prefix) else n
            details.append(d)
        files.write_api(row, res["forward"], res.get("backward") or " ", res.get("message") or "", details)
        self.counts.judged += 1
        status = res["forward"] if res["forward"] in self.counts.results else "SKIP"
        self.counts.results[status] += 1
        return "judged"

    def _handle_stop(self, frame: P.Frame) -> None:
        h = frame.header
        session, rank = h.get("session"), h.get("rank")
        if not isinstance(session, str) or not _SESSION_RE.match(session) or not isinstance(rank, int):
            raise P.ProtocolError("STOP without a valid session and rank")
        self.ended.add(session)
        if rank not in self.cfg.rank_list:
            return  # a rank this checker does not judge: no folder, no report
        rank_dir = os.path.join(self.out, f"rank{rank}")
        files = self.files.get(session)
        report = {"session": session, "rank": rank, "host": h.get("host"), "pid": h.get("pid"),
                  "client": h.get("stats"), "dropped": h.get("dropped") or [],
                  "rows_in_result_csv": len(files.done) if files else 0,
                  "result_csv": files.result_path if files else None}
        make_dirs(rank_dir, 0o750)

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8") as fh:
                json.dump(report, fh, indent=1)
        path = atomic_write(os.path.join(rank_dir, f"online_report_{session}.json"), write)
        stats = h.get("stats") or {}
        dropped = stats.get("dropped", 0) if isinstance(stats, dict) else 0
        line = (f"run_ut online: rank {rank} session {session} ended: {report['rows_in_result_csv']} calls in "
                f"the result CSV, {dropped} dropped by the training side (report {path})")
        if dropped:
            log.warning(line)
        elif not self.quiet:
            print(line, flush=True)

    def _done(self) -> bool:
        if not self.ended:
            return False
        with self._lock:
            open_conns = [c for c in self.conns if not c.closed]
        if open_conns or not self.events.empty():
            return False
        if self.cfg.nfs_path:
            try:
                left = [n for n in os.listdir(self.cfg.nfs_path) if n.endswith((".msg", ".start", ".end"))]
            except OSError:
                left = []
            return not left and self.ended >= set(self.files) | self._started
        return self.ended >= set(self.files)

    _started: set = set()

    def serve(self) -> Counts:
        """Run until every session seen has sent STOP and gone; Ctrl-C ends it too (files closed)."""
        self._started = set()
        if self.cfg.nfs_path:
            threading.Thread(target=self._poll_dir, daemon=True, name="msprobe-online-dir").start()
            where = f"shared directory {self.cfg.nfs_path}"
        else:
            if self._listener is None:
                self.listen()
            where = f"{self.address[0]}:{self.address[1]} ({self.cfg.transport})"
        if not self.quiet:
            print(f"run_ut online: Successfully start unittest process; waiting for training on {where}", flush=True)
        try:
            while not self._done():
                try:
                    kind, src, frame = self.events.get(timeout=0.2)
                except queue.Empty:
                    continue
                if kind == "closed":
                    continue
                try:
                    if frame.kind == P.HELLO:
                        s = frame.header.get("session")
                        if isinstance(s, str) and _SESSION_RE.match(s):
                            self._started.add(s)
                            self.counts.sessions += 1
                            if kind == "frame":
                                src.session = s
                        status = None
                    elif frame.kind == P.DATA:
                        status = self._handle_data(frame)
                    else:
                        self._handle_stop(frame)
                        status = "stop"
                except P.ProtocolError as exc:
                    self.counts.bad_frames += 1
                    log.warning("run_ut online: a bad frame was dropped: %s", exc)
                    if kind == "frame":
                        src.close()
                    else:
                        try:
                            os.replace(src, os.path.join(os.path.dirname(src), "." + os.path.basename(src) + ".bad"))
                        except OSError:
                            pass
                    continue
                if kind == "frame":
                    if status == "stop":
                        src.send(P.BYE, {"judged": self.counts.judged})
                    elif status is not None:
                        src.send(P.ACK, {"seq": frame.header["seq"], "status": status})
                else:
                    try:
                        os.unlink(src)  # the acknowledgement of the shared directory
                    except FileNotFoundError:
                        pass
        finally:
            self._stop.set()
            if self._listener is not None:
                self._listener.close()
            for c in list(self.conns):
                c.close()
            for f in self.files.values():
                f.close()
        return self.counts


def load_judge(target: str, init: Dict[str, Any]):
    mod, fn = target.split(":")
    return getattr(importlib.import_module(mod), fn)(init)


def run_online(cfg: OnlineConfig, out_dir: str, target: str, quiet: bool = False) -> Counts:
    """The checker: ``target`` ("module:function") builds the judge from an init dict (error_data_path ...)."""
    checker = OnlineChecker(cfg, out_dir, None, quiet=quiet)
    if not cfg.nfs_path:
        checker.listen()  # a port in use is said at once, before the framework is imported
    checker.judge = load_judge(target, {"error_data_path": cfg.error_data_path, "seed": 1234})
    counts = checker.serve()
    r = counts.results
    print(f"run_ut online: Successfully stop unittest process: {counts.judged} calls judged ({r['pass']} passed, "
          f"{r['Warning']} warning, {r['error']} error, {r['SKIP']} skipped), {counts.duplicate} already judged "
          f"(resent), {counts.filtered} filtered, {counts.bad_frames} bad frames", flush=True)
    return counts
