"""The online pre-check: a real training loop (one process) streams its API calls to the checker (another
process) over TCP, TLS or a shared directory; the checker is killed and restarted mid-run; bad inputs."""

import csv
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

torch = pytest.importorskip("torch")

from msprobe.core.acc_check.online import protocol as P  # noqa: E402
from msprobe.core.errors import MsprobeError  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TRAIN = r'''
import json, logging, os, sys, time
logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
import torch
import msprobe.core.acc_check.online.client as C
opts = json.loads(sys.argv[1])
for k, v in opts.get("client", {}).items():
    setattr(C, k, v)
from msprobe.pytorch import PrecisionDebugger
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
dbg = PrecisionDebugger(config_path=opts["config"])
t0 = time.time()
for s in range(opts["steps"]):
    dbg.start(model)
    x = torch.randn(4, 8)
    y = torch.randn(4, 1)
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    dbg.stop()
    dbg.step()
    print(f"step {s} loss {loss.item():.6f}", flush=True)
print(f"TRAIN_SECONDS {time.time() - t0:.3f}", flush=True)
stats = dbg.service.online.close() if dbg.service.online.sender is not None else dbg.service.stats
print("STATS " + json.dumps(stats), flush=True)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = ROOT + os.pathsep + env.get("PYTHONPATH", "")
    return env


def start_checker(tmp_path, run_ut_block, out, name="checker"):
    cfg = tmp_path / f"{name}.json"
    cfg.write_text(json.dumps({"task": "run_ut", "run_ut": dict(run_ut_block, is_online=True)}))
    log = open(tmp_path / f"{name}.log", "w")
    return subprocess.Popen([sys.executable, "-m", "msprobe", "-f", "pytorch", "run_ut", "-config", str(cfg),
                             "-o", str(out)], cwd=str(tmp_path), env=_env(), stdout=log, stderr=subprocess.STDOUT)


def start_training(tmp_path, tensor_block, steps, client=None):
    """The forward calls only (online_run_ut_recompute: the backward aten ops are not sent; they are tested in
    tests/test_run_ut_online_backward.py), so that these tests count STEP_APIS."""
    cfg = tmp_path / "train.json"
    cfg.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "dump"), "level": "L1",
                               "tensor": dict({"online_run_ut_recompute": True}, **tensor_block,
                                              online_run_ut=True)}))
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    opts = {"config": str(cfg), "steps": steps, "client": client or {}}
    return subprocess.Popen([sys.executable, str(script), json.dumps(opts)], cwd=str(tmp_path), env=_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finish(proc, timeout=90):
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out


def stats_of(output):
    line = [ln for ln in output.splitlines() if ln.startswith("STATS ")]
    assert line, output
    return json.loads(line[-1][6:])


def rows(out, kind="result"):
    files = glob.glob(os.path.join(str(out), "rank0", f"accuracy_checking_{kind}_*.csv"))
    assert len(files) == 1, files
    with open(files[0], encoding="utf-8-sig", newline="") as fh:
        return list(csv.reader(fh))[1:]


def wait_rows(out, n, proc, timeout=60):
    deadline = time.time() + timeout
    while time.time() < deadline:
        files = glob.glob(os.path.join(str(out), "rank0", "accuracy_checking_result_*.csv"))
        if files:
            with open(files[0], encoding="utf-8-sig") as fh:
                if sum(1 for _ in fh) - 1 >= n:
                    return
        assert proc.poll() is None, "the checker ended early"
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} rows after {timeout} s")


STEP_APIS = ["Functional.linear.0", "Functional.relu.0", "Functional.linear.1", "Functional.mse_loss.0",
             "Torch.ones_like.0", "Tensor.add_.0", "Tensor.add_.1", "Tensor.add_.2", "Tensor.add_.3"]


# ------------------------------------------------------------------ the wire format
def test_frame_round_trip_and_damage():
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    buf = t.reshape(-1).view(torch.uint8).numpy().data
    head = {"seq": 0, "session": "s", "rank": 0, "step": 1, "name": "Functional.relu.0",
            "record": {"input_args": [{"data_name": "@0"}]},
            "tensors": [{"dtype": "torch.float32", "shape": [2, 3], "nbytes": 24}]}
    data = P.encode_bytes(P.DATA, head, [buf])
    frame = P.parse_bytes(data)
    assert frame.kind == P.DATA and frame.header["name"] == "Functional.relu.0"
    (dtype, shape, mv), = P.tensor_views(frame)
    from msprobe.pytorch.acc_check.online_checker import to_tensor
    assert torch.equal(to_tensor(dtype, shape, mv), t)
    damaged = bytearray(data)
    damaged[-1] ^= 1
    with pytest.raises(P.ProtocolError, match="checksum"):
        P.parse_bytes(bytes(damaged))
    with pytest.raises(P.ProtocolError, match="magic"):
        P.parse_bytes(b"PK\x03\x04" + data[4:])
    bad = dict(head, tensors=[{"dtype": "torch.float32", "shape": [2, 2], "nbytes": 24}])
    with pytest.raises(P.ProtocolError, match="do not match"):
        P.tensor_views(P.parse_bytes(P.encode_bytes(P.DATA, bad, [buf])))


def test_checker_judges_a_call_once_across_restarts(tmp_path):
    from msprobe.core.acc_check.online.config import OnlineConfig
    from msprobe.core.acc_check.online.server import OnlineChecker
    calls = []

    def judge(header, tensors):
        calls.append(header["name"])
        return {"forward": "pass", "backward": " ", "message": "",
                "details": [{"API Name": header["name"] + ".forward.output.0", "Status": "pass"}]}
    cfg = OnlineConfig(host="127.0.0.1", port=1)
    head = {"seq": 0, "session": "sess-1", "rank": 0, "step": 2, "name": "Functional.relu.0", "record": {},
            "tensors": []}
    frame = P.parse_bytes(P.encode_bytes(P.DATA, head))
    first = OnlineChecker(cfg, str(tmp_path / "out"), judge, quiet=True)
    assert first._handle_data(frame) == "judged"
    assert first._handle_data(frame) == "duplicate"
    for f in first.files.values():
        f.close()
    again = OnlineChecker(cfg, str(tmp_path / "out"), judge, quiet=True)   # a restarted checker
    assert again._handle_data(frame) == "duplicate"
    other_rank = P.parse_bytes(P.encode_bytes(P.DATA, dict(head, rank=3)))
    assert again._handle_data(other_rank) == "filtered"
    assert calls == ["Functional.relu.0"]
    assert [r[0] for r in rows(tmp_path / "out")] == ["Functional.relu.0.step2"]
    assert [r[0] for r in rows(tmp_path / "out", "details")] == ["Functional.relu.0.step2.forward.output.0"]


# ------------------------------------------------------------------ both transports, with a checker restart
@pytest.mark.parametrize("transport", ["tcp", "dir"])
def test_loop_with_checker_killed_and_restarted(tmp_path, transport):
    out = tmp_path / "out"
    if transport == "tcp":
        port = free_port()
        block = {"host": "127.0.0.1", "port": port}
    else:
        (tmp_path / "nfs").mkdir()
        block = {"nfs_path": str(tmp_path / "nfs")}
    steps = 20
    checker = start_checker(tmp_path, block, out, "checker1")
    train = start_training(tmp_path, block, steps, client={"QUEUE_SIZE": 8, "WINDOW": 4})
    try:
        wait_rows(out, 40, checker)
        checker.send_signal(signal.SIGKILL)
        checker.wait(10)
        time.sleep(0.3)
        checker = start_checker(tmp_path, block, out, "checker2")
        rc, output = finish(train)
        assert rc == 0, output
        assert checker.wait(60) == 0, (tmp_path / "checker2.log").read_text()
    finally:
        for p in (checker, train):
            if p.poll() is None:
                p.kill()
    assert f"step {steps - 1} loss" in output
    stats = stats_of(output)
    captured = steps * len(STEP_APIS)
    assert stats["captured"] == captured
    assert stats["dropped"] == 0 and stats["unsent_at_close"] == 0
    names = [r[0] for r in rows(out)]
    assert len(names) == len(set(names)) == captured          # every call judged exactly once
    assert set(names) == {f"{a}.step{s}" for s in range(steps) for a in STEP_APIS}
    verdicts = {r[0]: r[1] for r in rows(out)}
    assert set(verdicts.values()) <= {"pass", "Warning", "error"}
    assert all(verdicts[f"{a}.step{s}"] == "pass" for s in range(steps) for a in STEP_APIS[:4])
    log2 = (tmp_path / "checker2.log").read_text()
    assert "resumed" in log2 and "Traceback" not in log2
    report = json.loads(open(glob.glob(str(out / "rank0" / "online_report_*.json"))[0]).read())
    assert report["rows_in_result_csv"] == captured and report["dropped"] == []
    if transport == "tcp":
        assert stats["reconnects"] >= 1 and "connection to the checker lost" in output
    else:
        assert os.listdir(tmp_path / "nfs") == []
    details = rows(out, "details")
    assert {r[0] for r in details} >= {f"Functional.linear.0.step{s}.forward.output.0" for s in range(steps)}


# ------------------------------------------------------------------ TLS
def _openssl(folder, prefix):
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(folder / f"{prefix}.key"), "-out", str(folder / f"{prefix}.crt"), "-days", "1",
                    "-subj", "/CN=127.0.0.1"], check=True, capture_output=True, timeout=60)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl CLI (and no cryptography package) to "
                                                            "make a self-signed certificate")
def test_tls_transport(tmp_path):
    tls = tmp_path / "tls"
    tls.mkdir()
    _openssl(tls, "server")
    _openssl(tls, "client")
    out = tmp_path / "out"
    block = {"host": "127.0.0.1", "port": free_port(), "tls_path": str(tls)}
    checker = start_checker(tmp_path, block, out)
    train = start_training(tmp_path, block, 3)
    try:
        rc, output = finish(train)
        assert rc == 0, output
        assert checker.wait(60) == 0
    finally:
        for p in (checker, train):
            if p.poll() is None:
                p.kill()
    stats = stats_of(output)
    assert stats["judged"] == 3 * len(STEP_APIS)
    assert stats["reconnects"] == 0 and stats["duplicate"] == 0, output   # the connection was never lost
    assert len(rows(out)) == 3 * len(STEP_APIS)


def _tls_pair(tls, wrap):
    """A connected (client, server) pair of TLS sockets over loopback, each wrapped by ``wrap``."""
    import ssl
    from msprobe.core.acc_check.online.client import tls_client_context
    from msprobe.core.acc_check.online.server import tls_server_context
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    got = {}

    def accept():
        raw, _ = listener.accept()
        got["server"] = tls_server_context(str(tls)).wrap_socket(raw, server_side=True)
    t = threading.Thread(target=accept)
    t.start()
    client = tls_client_context(str(tls)).wrap_socket(socket.create_connection(listener.getsockname()))
    t.join(30)
    listener.close()
    assert isinstance(client, ssl.SSLSocket)
    return wrap(client), wrap(got["server"])


SIZES = (16, 300)


def _duplex(a, b, frames=3000):
    """Both ends send ``frames`` frames (16 or 300 bytes: many small records) while reading the other's: every frame must arrive
    whole and in order."""
    import random
    errors = []

    def writer(sock, seed):
        try:
            rnd = random.Random(seed)
            for i in range(frames):
                payload = rnd.randbytes(rnd.choice(SIZES))
                for part in P.encode(P.DATA, {"i": i}, [payload]):
                    sock.sendall(part)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    def reader(sock, seed):
        def read_exact(n):
            buf = bytearray()
            while len(buf) < n:
                chunk = sock.recv(n - len(buf))
                if not chunk:
                    raise EOFError
                buf += chunk
            return bytes(buf)
        try:
            rnd = random.Random(seed)
            for i in range(frames):
                frame = P.read_frame(read_exact)
                assert frame.header == {"i": i}
                assert bytes(frame.payload) == rnd.randbytes(rnd.choice(SIZES))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)
    threads = [threading.Thread(target=writer, args=(a, 1)), threading.Thread(target=reader, args=(b, 1)),
               threading.Thread(target=writer, args=(b, 2)), threading.Thread(target=reader, args=(a, 2))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return errors + [f"{t.name} still waiting after 60 s" for t in threads if t.is_alive()]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="no openssl CLI to make a self-signed certificate")
def test_tls_socket_reads_and_writes_from_two_threads_at_once(tmp_path):
    """The CI failure of test_tls_transport (25 of 27 judged): a plain SSLSocket read by one thread while
    another writes lost the connection now and then ("bad record mac"); SerialTLS keeps OpenSSL to one thread
    at a time. Three rounds of 3,000 frames each way, both ends reading and writing at once."""
    from msprobe.core.acc_check.online.tlssock import SerialTLS
    tls = tmp_path / "tls"
    tls.mkdir()
    _openssl(tls, "server")
    _openssl(tls, "client")
    for _ in range(3):
        a, b = _tls_pair(tls, SerialTLS)
        try:
            assert _duplex(a, b) == []
            a.shutdown(socket.SHUT_RDWR)
            assert b.recv(10) == b""   # the peer sees the end, no error
        finally:
            a.close()
            b.close()


# ------------------------------------------------------------------ bad inputs
def test_unreachable_checker_never_stops_training(tmp_path):
    block = {"host": "127.0.0.1", "port": free_port()}   # nothing listens there
    train = start_training(tmp_path, block, 5, client={"QUEUE_SIZE": 4, "PUT_TIMEOUT": 0.2,
                                                       "CONNECT_TIMEOUT": 0.3})
    rc, output = finish(train)
    assert rc == 0, output
    assert "step 4 loss" in output
    assert "Failed to connect 127.0.0.1" in output and "Traceback" not in output
    stats = stats_of(output)
    assert stats["captured"] == 5 * len(STEP_APIS)
    assert stats["judged"] == 0 and stats["dropped"] == stats["captured"]
    assert not (tmp_path / "dump").exists() or not os.listdir(tmp_path / "dump")


def _cli_error(tmp_path, block):
    out = tmp_path / "out"
    proc = start_checker(tmp_path, block, out)
    assert proc.wait(60) != 0
    text = (tmp_path / "checker.log").read_text()
    assert "Traceback" not in text
    lines = [ln for ln in text.splitlines() if ln.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_port_in_use(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        line = _cli_error(tmp_path, {"host": "127.0.0.1", "port": s.getsockname()[1]})
    assert "is in use" in line


def test_wrong_tls_files(tmp_path):
    tls = tmp_path / "tls"
    tls.mkdir()
    for n in ("server.crt", "server.key", "client.crt", "client.key"):
        (tls / n).write_text("not a certificate\n")
    line = _cli_error(tmp_path, {"host": "127.0.0.1", "port": free_port(), "tls_path": str(tls)})
    assert "The SSL certificate is invalid" in line and "server.crt" in line
    from msprobe.core.dump.config import load_dump_config
    cfg = tmp_path / "train.json"
    cfg.write_text(json.dumps({"task": "tensor", "dump_path": str(tmp_path / "d"), "level": "L1",
                               "tensor": {"online_run_ut": True, "host": "127.0.0.1", "port": 1234,
                                          "tls_path": str(tls)}}))
    with pytest.raises(MsprobeError, match="The SSL certificate is invalid.*client.crt"):
        load_dump_config(str(cfg))


@pytest.mark.parametrize("block, words", [
    ({"host": "localhost", "port": 1234}, "host: 'localhost' is invalid"),
    ({"host": "127.0.0.1", "port": 70000}, "port: 70000 is invalid"),
    ({"nfs_path": "/nonexistent/msprobe-online"}, "does not exist"),
    ({"host": "127.0.0.1", "port": 1234, "rank_list": "0"}, "rank_list must be a list"),
])
def test_bad_checker_config(tmp_path, block, words):
    assert words in _cli_error(tmp_path, block)


def test_judge_uses_the_training_output(tmp_path):
    """The verdict is about the output the training computed (received), not a re-run on the checker."""
    from msprobe.pytorch.acc_check.online_checker import make_judge
    judge = make_judge({})
    x = torch.randn(4, 8)
    w = torch.randn(3, 8)
    good = torch.nn.functional.linear(x, w)

    def call(out):
        bufs = [t.contiguous().reshape(-1).view(torch.uint8).numpy().data for t in (x, w, out)]
        rec = lambda k, t: {"type": "torch.Tensor", "dtype": str(t.dtype), "shape": list(t.shape),  # noqa: E731
                            "requires_grad": False, "data_name": f"@{k}"}
        head = {"seq": 0, "session": "s", "rank": 0, "step": 0, "name": "Functional.linear.0",
                "record": {"input_args": [rec(0, x), rec(1, w)], "input_kwargs": {}, "output": [rec(2, out)]},
                "tensors": [{"dtype": str(t.dtype), "shape": list(t.shape), "nbytes": t.numel() * t.element_size()}
                            for t in (x, w, out)]}
        frame = P.parse_bytes(P.encode_bytes(P.DATA, head, bufs))
        return judge(frame.header, P.tensor_views(frame))

    assert call(good)["forward"] == "pass"
    wrong = good.clone()
    wrong[0, 0] += 1.0
    res = call(wrong)
    assert res["forward"] == "error"
    assert res["details"][0]["API Name"] == "Functional.linear.0.forward.output.0"


def test_shared_dir_checker_started_after_training(tmp_path):
    """No checker while training runs: the written calls wait in nfs_path, a checker started later judges them;
    what could not be written is named as dropped in its report."""
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    block = {"nfs_path": str(nfs)}
    train = start_training(tmp_path, block, 3, client={"QUEUE_SIZE": 8, "WINDOW": 12, "PUT_TIMEOUT": 0.2,
                                                       "CLOSE_TIMEOUT": 1.0})
    rc, output = finish(train)
    assert rc == 0, output
    stats = stats_of(output)
    assert stats["captured"] == 27 and stats["judged"] == 0
    assert stats["left_in_shared_dir"] == 12 and stats["dropped"] == 15
    assert len([n for n in os.listdir(nfs) if n.endswith(".msg")]) == 12
    out = tmp_path / "out"
    checker = start_checker(tmp_path, block, out)
    assert checker.wait(60) == 0, (tmp_path / "checker.log").read_text()
    assert len(rows(out)) == 12 and os.listdir(nfs) == []
    report = json.loads(open(glob.glob(str(out / "rank0" / "online_report_*.json"))[0]).read())
    assert report["rows_in_result_csv"] == 12 and len(report["dropped"]) == 15
    assert {d["reason"] for d in report["dropped"]} <= {"queue full for 0.2 s", "queue full (drop mode)",
                                                         "not acknowledged when training ended"}


def test_judge_runs_only_hooked_apis():
    from msprobe.pytorch.acc_check.online_checker import skip_reason
    assert skip_reason("Functional.linear.0") == "" and skip_reason("Tensor.add_.3") == ""
    assert "not in the hooked API list" in skip_reason("Torch.load.0")
    assert "not in the hooked API list" in skip_reason("Torch.save.0")
    assert "only Functional, Tensor and Torch" in skip_reason("Distributed.all_reduce.0")


def test_slow_checker_drops_are_exactly_the_gaps(tmp_path, caplog):
    """A checker far slower than training: training never waits more than put_timeout per outage, and the calls
    missing from the result CSV are exactly those the report names as dropped."""
    import threading
    from msprobe.core.acc_check.online.client import Sender
    from msprobe.core.acc_check.online.config import OnlineConfig
    from msprobe.core.acc_check.online.server import OnlineChecker

    def slow_judge(header, tensors):
        time.sleep(0.01)
        return {"forward": "pass", "backward": " ", "message": "", "details": []}
    cfg = OnlineConfig(host="127.0.0.1", port=free_port(), source="test")
    checker = OnlineChecker(cfg, str(tmp_path / "out"), slow_judge, quiet=True)
    checker.listen()
    served = threading.Thread(target=checker.serve, daemon=True)
    served.start()
    sender = Sender(cfg, 0, queue_size=4, put_timeout=0.05, window=2, close_timeout=30)
    payload = memoryview(bytearray(16))
    for step in range(10):
        for k in range(20):
            sender.submit(f"Functional.relu.{k}", step, {"input_args": []},
                          [("torch.float32", [4], payload)])
    stats = sender.close()
    served.join(30)
    assert not served.is_alive()
    assert stats["captured"] == 200 and stats["dropped"] > 0
    assert stats["judged"] + stats["dropped"] == 200
    judged = {r[0] for r in rows(tmp_path / "out")}
    assert len(judged) == stats["judged"]
    dropped = {f"{d['name']}.step{d['step']}" for d in sender.dropped}
    everything = {f"Functional.relu.{k}.step{s}" for s in range(10) for k in range(20)}
    assert judged | dropped == everything and not judged & dropped
    report = json.loads(open(glob.glob(str(tmp_path / "out" / "rank0" / "online_report_*.json"))[0]).read())
    assert len(report["dropped"]) == stats["dropped"]
    waits = [r for r in caplog.records if "has not taken a call" in r.getMessage()]
    assert 1 <= len(waits) < stats["dropped"]   # drop mode: not one put_timeout wait per dropped call


def test_queue_is_bounded_in_bytes_too(tmp_path):
    from msprobe.core.acc_check.online.client import Sender
    from msprobe.core.acc_check.online.config import OnlineConfig
    cfg = OnlineConfig(host="127.0.0.1", port=free_port(), source="test")   # nobody listens
    sender = Sender(cfg, 0, queue_size=64, put_timeout=0.05, close_timeout=0.1)
    sender.queue_bytes = 1500
    kb = memoryview(bytearray(1024))
    queued = [sender.submit(f"Functional.relu.{k}", 0, {}, [("torch.uint8", [1024], kb)]) for k in range(3)]
    assert queued == [True, False, False]       # a second KiB would pass 1500 bytes: waited, then dropped
    stats = sender.close(0.1)
    assert stats["captured"] == 3 and stats["dropped"] == 3 and stats["unsent_at_close"] == 1


def test_garbage_on_the_port_is_dropped_and_the_checker_goes_on(tmp_path):
    import threading
    from msprobe.core.acc_check.online.client import Sender
    from msprobe.core.acc_check.online.config import OnlineConfig
    from msprobe.core.acc_check.online.server import OnlineChecker
    cfg = OnlineConfig(host="127.0.0.1", port=free_port(), source="test")
    checker = OnlineChecker(cfg, str(tmp_path / "out"), lambda h, t: {"forward": "pass", "backward": " ",
                                                                      "message": "", "details": []}, quiet=True)
    checker.listen()
    served = threading.Thread(target=checker.serve, daemon=True)
    served.start()
    with socket.create_connection(("127.0.0.1", cfg.port)) as raw:
        raw.sendall(b"\x80\x04\x95 a pickle, say" * 8)
    sender = Sender(cfg, 0, close_timeout=30)
    for k in range(3):
        sender.submit(f"Functional.relu.{k}", 0, {}, [])
    stats = sender.close()
    served.join(30)
    assert not served.is_alive()
    assert checker.counts.bad_frames == 1 and stats["judged"] == 3 and len(rows(tmp_path / "out")) == 3


def test_unreadable_tensors_are_a_skip_row_not_a_lost_connection(tmp_path):
    from msprobe.core.acc_check.online.config import OnlineConfig
    from msprobe.core.acc_check.online.server import OnlineChecker
    checker = OnlineChecker(OnlineConfig(host="127.0.0.1", port=1), str(tmp_path / "out"),
                            lambda h, t: {"forward": "pass", "backward": " ", "message": "", "details": []}, quiet=True)
    head = {"seq": 0, "session": "s", "rank": 0, "step": 0, "name": "Functional.relu.0", "record": {},
            "tensors": [{"dtype": "torch.float8_e4m3fn", "shape": [2], "nbytes": 2}]}
    assert checker._handle_data(P.parse_bytes(P.encode_bytes(P.DATA, head, [b"\x00\x01"]))) == "judged"
    (row,) = rows(tmp_path / "out")
    assert row[:2] == ["Functional.relu.0.step0", "SKIP"] and "unsupported dtype" in row[3]
