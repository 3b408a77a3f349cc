"""Scenarios that need a fresh process (PrecisionDebugger may be a per-process singleton), run by test_npu_dump.py
with the CANN stub on LD_LIBRARY_PATH, like a user's training script on a machine with torch_npu but no device.

usage: python npu_scenarios.py <dump|l2> <config_path> <result_json>
Writes a JSON result; exits 0 when the scenario ran to its end (its checks are done by the test).
"""
import json
import sys
import traceback


def register_cpu_kernels(torch):
    """CPU kernels for npu ops that torch_npu only implements on the device (as the reference's tiny_pt.py)."""
    lib = torch.library.Library("npu", "IMPL")

    def rms_norm(x, gamma, epsilon=1e-6):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + epsilon)
        return x * rstd * gamma, rstd

    lib.impl("npu_rms_norm", rms_norm, "CPU")
    lib.impl("npu_fast_gelu", lambda x: x * torch.sigmoid(1.702 * x), "CPU")
    return lib


def scenario_dump(config_path, result):
    import torch
    import torch.nn as nn
    import torch_npu
    from msprobe.pytorch import PrecisionDebugger
    from msprobe.pytorch.npu import npu_state

    result["npu_state"] = npu_state()
    lib = register_cpu_kernels(torch)  # noqa: F841  (kept alive until the end of the scenario)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(8, 8)
            self.gamma = nn.Parameter(torch.ones(8))

        def forward(self, x):
            y, _ = torch_npu.npu_rms_norm(self.fc(x), self.gamma)
            return torch_npu.npu_fast_gelu(y) + x

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = nn.Linear(4, 8)
            self.block = Block()
            self.head = nn.Linear(8, 2)

        def forward(self, x):
            return self.head(self.block(torch.relu(self.inp(x))))

    torch.manual_seed(0)
    net = Net()
    dbg = PrecisionDebugger(config_path=config_path)
    # foreach auto-detect calls torch.npu.current_device() through torch_npu's patch, which fails without CANN
    opt = torch.optim.SGD(net.parameters(), lr=0.01, foreach=False)
    x, y = torch.randn(2, 4), torch.randn(2, 2)
    dbg.start(net)
    loss = nn.functional.mse_loss(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    dbg.stop()
    dbg.step()
    result["loss"] = float(loss.item())
    result["done"] = True


def scenario_l2(config_path, result):
    from msprobe.core.errors import MsprobeError
    from msprobe.pytorch import PrecisionDebugger

    try:
        PrecisionDebugger(config_path=config_path)
    except MsprobeError as exc:
        result["error"] = "MsprobeError"
        result["message"] = str(exc)
    except Exception as exc:  # the wrong kind of error: reported to the test
        result["error"] = type(exc).__name__
        result["message"] = str(exc)
        result["traceback"] = traceback.format_exc()
    else:
        result["error"] = None
    result["done"] = True


def main():
    which, config_path, out = sys.argv[1:4]
    result = {"done": False}
    try:
        {"dump": scenario_dump, "l2": scenario_l2}[which](config_path, result)
    except BaseException as exc:
        result["exception"] = f"{type(exc).__name__}: {exc}"
        result["traceback"] = traceback.format_exc()
    with open(out, "w", encoding="utf-8") as fh:
        json.dump(result, fh, indent=1)
    return 0 if result.get("done") else 1


if __name__ == "__main__":
    sys.exit(main())
