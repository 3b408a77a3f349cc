"""msprobe.pytorch.tensor_io.save_tensor writes .pt files itself (one writev): the same records and pickle as
torch.save, readable by torch.load(weights_only=True), by zipfile (CRC checked) and by the torch-free reader."""
import io
import os
import struct
import zipfile

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from msprobe.core.io.tensors import load_pt  # noqa: E402
from msprobe.pytorch import tensor_io  # noqa: E402
from msprobe.pytorch.tensor_io import save_tensor  # noqa: E402

CASES = {
    "f32": lambda: torch.randn(3, 4),
    "bf16": lambda: torch.randn(2, 3, 5).to(torch.bfloat16),
    "f16": lambda: torch.randn(7).half(),
    "scalar": lambda: torch.tensor(3.5),
    "int64": lambda: torch.arange(10),
    "empty": lambda: torch.randn(0, 3),
    "bool": lambda: torch.tensor([True, False, True]),
    "big": lambda: torch.randn(100_003),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_direct_pt_equals_torch_save(tmp_path, case):
    torch.manual_seed(0)
    t = CASES[case]()
    assert tensor_io._pt_parts(torch, t, "x.pt") is not None      # the direct path is taken
    path = tmp_path / "Tensor.add.0.forward.output.0.pt"
    save_tensor(t, str(path))
    assert os.stat(path).st_mode & 0o777 == 0o640
    back = torch.load(path, weights_only=True)
    assert back.dtype == t.dtype and back.shape == t.shape and torch.equal(back, t)
    with zipfile.ZipFile(path) as z:
        assert z.testzip() is None                                  # every CRC right
        ref = io.BytesIO()
        torch.save(t, ref)
        with zipfile.ZipFile(ref) as zr:
            assert [n.split("/", 1)[1] for n in z.namelist()] == [n.split("/", 1)[1] for n in zr.namelist()]
            assert z.read(z.namelist()[0]) == zr.read(zr.namelist()[0])   # data.pkl byte-identical
        raw = path.read_bytes()
        for info in z.infolist():                                    # payloads 64-byte aligned (mmap loads)
            nlen, elen = struct.unpack("<HH", raw[info.header_offset + 26:info.header_offset + 30])
            assert (info.header_offset + 30 + nlen + elen) % 64 == 0
    assert torch.equal(torch.load(path, weights_only=True, mmap=True), t)
    a = np.asarray(load_pt(str(path)), dtype=np.float64)
    assert np.array_equal(a, t.double().numpy())


def test_views_and_grad_tensors_go_through_torch_save(tmp_path):
    base = torch.randn(4, 6)
    view = base[:, 2:4]              # not compact: torch.save's own format (its whole storage) is kept
    assert tensor_io._pt_parts(torch, view, "v.pt") is None
    assert tensor_io._pt_parts(torch, base[1], "v.pt") is None        # storage offset
    w = torch.randn(3, requires_grad=True)
    assert tensor_io._pt_parts(torch, w, "w.pt") is None
    save_tensor(view, str(tmp_path / "v.pt"))
    assert torch.equal(torch.load(tmp_path / "v.pt", weights_only=True), view)


def test_rewrite_is_atomic_and_leaves_no_temp(tmp_path):
    path = tmp_path / "a.pt"
    save_tensor(torch.ones(2), str(path))
    save_tensor(torch.zeros(2), str(path))       # the rename replaces atomically; no temporary file stays
    assert torch.equal(torch.load(path, weights_only=True), torch.zeros(2))
    assert sorted(os.listdir(tmp_path)) == ["a.pt"]


# ---------------------------------------------------------------------------------------------------------------------
# tool threads (the tensor writer, the CRC worker) call patched Tensor methods: those calls are not the model's


@pytest.fixture
def fresh_debugger():
    from msprobe.pytorch import PrecisionDebugger
    PrecisionDebugger._reset_for_tests()
    yield PrecisionDebugger
    PrecisionDebugger._reset_for_tests()


def _config(tmp_path, task, summary_mode="statistics"):
    import json
    cfg = {"task": task, "dump_path": str(tmp_path / "dump"), "rank": [], "step": [], "level": "L1",
           "async_dump": False, task: {"scope": [], "list": [], "data_mode": ["all"]}}
    if task == "statistics":
        cfg[task]["summary_mode"] = summary_mode
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return str(path)


def _names(tmp_path):
    import json
    with open(tmp_path / "dump" / "step0" / "rank" / "dump.json", encoding="utf-8") as f:
        return list(json.load(f)["data"])


def test_tensor_task_writer_thread_is_not_recorded(tmp_path, fresh_debugger):
    PrecisionDebugger = fresh_debugger
    dbg = PrecisionDebugger(config_path=_config(tmp_path, "tensor"))
    x = torch.randn(64, 32)
    dbg.start()
    y = torch.relu(x)
    z = torch.sigmoid(y)
    dbg.stop()
    dbg.step()
    assert _names(tmp_path) == ["Torch.relu.0.forward", "Torch.sigmoid.0.forward"]
    files = sorted(os.listdir(tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"))
    assert files == ["Torch.relu.0.forward.input.0.pt", "Torch.relu.0.forward.output.0.pt",
                     "Torch.sigmoid.0.forward.input.0.pt", "Torch.sigmoid.0.forward.output.0.pt"]
    d = tmp_path / "dump" / "step0" / "rank" / "dump_tensor_data"
    assert torch.equal(torch.load(d / files[0], weights_only=True), x)
    assert torch.equal(torch.load(d / files[3], weights_only=True), z)


def test_crc_worker_device_snapshot_is_not_recorded(tmp_path, fresh_debugger):
    """The CUDA path of md5 (pinned snapshot + event, hashed on the worker thread, which views the bytes
    with Tensor methods) run on CPU with a stand-in event: the worker's calls are not recorded."""
    PrecisionDebugger = fresh_debugger
    from msprobe.pytorch.dump import stats

    class Event:
        def synchronize(self):
            pass

    dbg = PrecisionDebugger(config_path=_config(tmp_path, "statistics", "md5"))
    snap = torch.arange(16, dtype=torch.bfloat16)
    dbg.start()
    torch.relu(torch.ones(3))
    job = stats.CrcJob()
    stats._WORKER.submit(job, snap, Event())
    got = job.result()
    dbg.stop()
    dbg.step()
    assert _names(tmp_path) == ["Torch.relu.0.forward"]
    assert got == stats.crc32_hex(snap)
