"""msprobe parse: the pt / cn / pk / dc commands (one-shot and through the shell on stdin)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, fixtures_or_skip
from msprobe.cli.main import main
from msprobe.core.errors import MsprobeError
from msprobe.core.parse.arrays import compare, head_rows, load_array, save_txt, summary_text


@pytest.fixture
def pair(tmp_path):
    rng = np.random.RandomState(0)
    a = rng.randn(4, 5).astype(np.float32)
    b = a.copy()
    b[0, 1] += 0.5
    b[2, 3] -= 0.01
    np.save(tmp_path / "my.npy", a)
    np.save(tmp_path / "golden.npy", b)
    return tmp_path, a, b


def test_compare_values(pair):
    _, a, b = pair
    res = compare(a, b)
    assert res.total == 20 and res.error_count == 2 and res.error_ratio == 0.1
    assert res.all_close is False
    assert [r[0] for r in res.errors] == ["1", "13"]
    assert float(res.errors[0][3]) == pytest.approx(0.5, abs=1e-6)
    assert float(res.errors[1][3]) == pytest.approx(0.01, abs=1e-6)
    # float64 cosine of the two arrays (the reference's float32 dot gives 0.99423414)
    a64, b64 = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    expect = a64 @ b64 / np.sqrt(a64 @ a64) / np.sqrt(b64 @ b64)
    assert float(res.cos_sim) == pytest.approx(expect, abs=2e-7)
    assert float(res.cos_sim) == pytest.approx(0.99423414, abs=5e-7)
    assert [r[0] for r in res.top] == [str(i) for i in range(20)]
    assert res.warning is None
    # tolerances: with atol 0.02 only index 1 is an error
    res2 = compare(a, b, atol=0.02, count=1)
    assert res2.error_count == 1 and len(res2.top) == 1 and res2.errors[0][0] == "1"
    assert compare(a, a).all_close is True and compare(a, a).error_ratio == 0.0


def test_compare_pads_shorter_with_zeros(pair):
    _, a, b = pair
    short = b.reshape(-1)[:7]
    res = compare(a, short, count=2)
    assert res.total == 20
    assert res.error_ratio == pytest.approx(0.7)  # index 1 and the 13 padded non-zero positions
    assert [r[0] for r in res.errors] == ["1", "7"]
    assert res.errors[1][2] == "0.0"
    assert "shapes differ: (4, 5) vs (7,)" in res.warning and "padded" in res.warning


def test_compare_nan_and_zero():
    a = np.array([1.0, np.nan, 3.0], np.float32)
    res = compare(a, np.array([1.0, np.nan, 3.0], np.float32))
    assert res.error_count == 0
    res = compare(a, np.array([1.0, 2.0, 3.0], np.float32))
    assert res.error_count == 1 and res.errors[0][0] == "1"
    z = compare(np.zeros(4, np.float32), np.ones(4, np.float32))
    assert z.cos_sim == "Nan" and "Zero" in z.cos_message


def test_head_rows_and_txt(tmp_path):
    arr = np.arange(200, dtype=np.int64).reshape(10, 20)
    rows = head_rows(arr)
    assert len(rows) == 16 and rows[1] == ("8", "8 9 10 11 12 13 14 15")
    path = str(tmp_path / "a.npy.txt")
    assert save_txt(arr, path) == path
    np.testing.assert_array_equal(np.loadtxt(path), arr)
    before = open(path).read()
    assert save_txt(np.zeros(3), path) is None  # never replaced
    assert open(path).read() == before
    assert summary_text(arr) == "[Shape: (10, 20)] [Dtype: int64] [Max: 199] [Min: 0] [Mean: 99.5]"


def test_cli_cn_one_shot(pair, capsys):
    d, _, _ = pair
    rc = main(["parse", "cn", "-m", str(d / "my.npy"), "-g", str(d / "golden.npy"), "-p", "3"])
    out = capsys.readouterr().out
    assert rc == 0
    for text in ("Error Item Table", "Top Item Table", "NumCnt:   20", "AllClose: False", "CosSim:   0.99423",
                 "ErrorPer: 0.1  (rl= 0.001, al= 0.001)", "[Shape: (4, 5)] [Dtype: float32]"):
        assert text in out, text
    assert not os.path.exists(d / "my.npy.txt")  # only with -s


def test_cli_cn_save_and_pt(pair, capsys):
    d, a, _ = pair
    assert main(["-f", "pytorch", "parse", "cn", "-m", str(d / "my.npy"), "-g", str(d / "golden.npy"), "-s"]) == 0
    out = capsys.readouterr().out
    assert "TxtFile:" in out
    assert os.path.exists(d / "my.npy.txt") and os.path.exists(d / "golden.npy.txt")
    np.testing.assert_allclose(np.loadtxt(d / "my.npy.txt"), a, rtol=1e-5)
    assert main(["parse", "pt", "-n", str(d / "my.npy")]) == 0
    cap = capsys.readouterr()
    assert "1.7640524" in cap.out and "[Max: 2.2408931]" in cap.out and "TextFile:" in cap.out
    assert "exists, not replaced" in cap.err


def test_pt_reads_pt_files_safely(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    t = torch.arange(6, dtype=torch.bfloat16).reshape(2, 3)
    torch.save(t, tmp_path / "t.pt")
    assert main(["parse", "pt", "-n", str(tmp_path / "t.pt")]) == 0
    assert "[Shape: (2, 3)] [Dtype: float32] [Max: 5.0]" in capsys.readouterr().out

    class Evil:
        def __reduce__(self):
            return (os.system, ("touch " + str(tmp_path / "pwned"),))

    torch.save({"x": Evil()}, tmp_path / "evil.pt", _use_new_zipfile_serialization=True)
    rc = main(["parse", "pt", "-n", str(tmp_path / "evil.pt")])
    err = capsys.readouterr().err
    assert rc == 2 and not (tmp_path / "pwned").exists()
    assert len(err.strip().splitlines()) == 1 and "evil.pt" in err


@pytest.mark.parametrize("case", ["missing", "not_array", "object", "dir"])
def test_bad_input_one_line(tmp_path, capsys, case):
    good = tmp_path / "good.npy"
    np.save(good, np.ones(3))
    if case == "missing":
        bad = tmp_path / "nope.npy"
    elif case == "not_array":
        bad = tmp_path / "text.npy"
        bad.write_text("hello, not an array\n")
    elif case == "object":
        bad = tmp_path / "obj.npy"
        np.save(bad, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    else:
        bad = tmp_path
    rc = main(["parse", "cn", "-m", str(bad), "-g", str(good)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("msprobe: error:"), err


def test_shape_mismatch_is_one_warning_line(pair, capsys):
    d, _, b = pair
    np.save(d / "short.npy", b.reshape(-1)[:7])
    assert main(["parse", "cn", "-m", str(d / "my.npy"), "-g", str(d / "short.npy")]) == 0
    cap = capsys.readouterr()
    assert cap.err.strip().splitlines() == [
        "warning: shapes differ: (4, 5) vs (7,); the shorter is padded with zeros to 20 elements"]
    assert "ErrorPer: 0.7" in cap.out


def test_unknown_command_and_bad_option(capsys):
    assert main(["parse", "vc", "-m", "x"]) == 2
    assert "unknown parse command 'vc'" in capsys.readouterr().err
    assert main(["parse", "cn", "-m", "x.npy"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "required: -g/--golden_dump_path" in err[0]


def test_shell_on_stdin(pair):
    d, _, _ = pair
    cmds = ("pt -n my.npy\n\nfoo bar\ncn -m my.npy\ncn -m my.npy -g golden.npy -p 2\n"
            "pt -n missing.npy\nhelp\n")
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    res = subprocess.run([sys.executable, "-m", "msprobe", "-f", "pytorch", "parse"], input=cmds, cwd=str(d),
                         env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "Start Parsing........" in out
    assert out.count("Parse >>> ") == 8  # seven lines, then the prompt that meets the end of input
    assert "Command invalid, Only support command start with dc/pk/cn/pt" in out
    assert "error: cn: the following arguments are required: -g/--golden_dump_path" in out
    assert "error: array file (-n) missing.npy does not exist" in out
    assert "ErrorPer: 0.1  (rl= 0.001, al= 0.001)" in out and "[Mean: 0.5693346]" in out
    assert (d / "my.npy.txt").exists()
    assert not (d / "parse_data").exists()


def test_pk_dump_json(tmp_path, capsys):
    fix = fixtures_or_skip() / "mindspore_cpu_mix" / "target" / "step0" / "proc17945" / "dump.json"
    assert main(["parse", "pk", "-f", str(fix), "-n", "Mint.matmul.0.forward"]) == 0
    out = capsys.readouterr().out
    lines = [l for l in out.splitlines() if l.startswith("  [")]
    assert lines[0] == ("  [Mint.matmul.0.forward.input.0][dtype: Float32][shape: [2, 16]][max: 2.225224256515503]"
                        "[min: 0.0][mean: 0.3922693133354187]")
    assert len(lines) == 3 and lines[2].startswith("  [Mint.matmul.0.forward.output.0]")
    assert "Statistic Info:" in out and "Trace back(Mint.matmul.0.forward):" in out


def test_pk_pkl_and_missing_api(tmp_path, capsys):
    pkl = tmp_path / "api_stack_dump.pkl"
    pkl.write_text(
        json.dumps(["Functional_conv2d_0_forward_input.0", 1, 0, "torch.float32", [2, 1, 2, 2], [1.5, -0.9, 0.49]])
        + "\n" + json.dumps(["Functional_relu_0_forward_output", 2, 0, "torch.float32", [2], [1.0, 0.0, 0.5]])
        + "\n" + json.dumps(["Functional_conv2d_0_forward_stack_info", [["a.py", 3, "f", "y = conv(x)"]]]) + "\n")
    assert main(["parse", "pk", "-f", str(pkl), "-n", "Functional_conv2d_0_forward"]) == 0
    out = capsys.readouterr().out
    assert "  [Functional_conv2d_0_forward_input.0][dtype: torch.float32][shape: [2, 1, 2, 2]][max: 1.5]" \
           "[min: -0.9][mean: 0.49]" in out
    assert "relu" not in out and 'File "a.py", line 3, in f' in out
    assert main(["parse", "pk", "-f", str(pkl), "-n", "Torch.nothing"]) == 2
    assert "no API whose name starts with 'Torch.nothing'" in capsys.readouterr().err


def test_dc_pt_to_npy_and_msaccucmp(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    src = tmp_path / "src"
    src.mkdir()
    torch.save(torch.ones(2, 2), src / "a.pt")
    torch.save(torch.arange(3), src / "b.pt")
    out = tmp_path / "out"
    assert main(["parse", "dc", "-n", str(src), "-out", str(out)]) == 0
    assert " - a.npy" in capsys.readouterr().out
    np.testing.assert_array_equal(np.load(out / "b.npy"), [0, 1, 2])
    # an Ascend dump needs msaccucmp.py: missing -> one line
    bin_file = tmp_path / "Add.add_1.3.5.1700000000.bin"
    bin_file.write_bytes(b"\x00" * 16)
    rc = main(["parse", "dc", "-n", str(bin_file), "-out", str(out), "-cmp_path", str(tmp_path / "none.py")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "msaccucmp.py not found" in err[0]
    # a stand-in msaccucmp.py: called as `msaccucmp.py convert -d SRC -out DIR [-f FMT]`
    fake = tmp_path / "msaccucmp.py"
    fake.write_text("import sys, numpy as np, os\n"
                    "a = sys.argv\n"
                    "assert a[1] == 'convert' and a[2] == '-d' and a[4] == '-out' and a[6:] == ['-f', 'NCHW'], a\n"
                    "np.save(os.path.join(a[5], os.path.basename(a[3]) + '.output.0.npy'), np.ones(2))\n")
    assert main(["parse", "dc", "-n", str(bin_file), "-out", str(out), "-cmp_path", str(fake), "-f", "NCHW"]) == 0
    assert " - Add.add_1.3.5.1700000000.bin.output.0.npy" in capsys.readouterr().out
    fake.write_text("import sys\nprint('bad dump file')\nsys.exit(3)\n")
    assert main(["parse", "dc", "-n", str(bin_file), "-out", str(out), "-cmp_path", str(fake)]) == 2
    assert "msaccucmp.py failed to convert" in capsys.readouterr().err


def test_load_array_refuses_non_numeric(tmp_path):
    p = tmp_path / "s.npy"
    np.save(p, np.array(["a", "b"]))
    with pytest.raises(MsprobeError, match="not a numeric array"):
        load_array(str(p))


def test_pt_when_the_text_file_cannot_be_written(tmp_path, capsys, monkeypatch):
    import msprobe.core.parse.arrays as arrays

    def refuse(arr, path):
        raise MsprobeError(f"cannot write {path}: Read-only file system")

    monkeypatch.setattr(arrays, "save_txt", refuse)
    np.save(tmp_path / "a.npy", np.arange(3.0))
    assert main(["parse", "pt", "-n", str(tmp_path / "a.npy")]) == 0
    cap = capsys.readouterr()
    assert "[Shape: (3,)]" in cap.out and "not written" in cap.err and "TextFile:" not in cap.out


def test_shell_without_readable_stdin_is_one_line(monkeypatch, capsys):
    """The shell with a standard input that cannot be read (closed, or captured as under pytest) says so in one
    line and exits 2, instead of an internal error (found by the argument fuzzer: ``msprobe parse``)."""
    import io

    from msprobe.cli.main import main

    class Unreadable(io.StringIO):
        def readline(self, *a):
            raise OSError("reading from stdin while output is captured")

    monkeypatch.setattr("sys.stdin", Unreadable())
    assert main(["parse"]) == 2
    err = capsys.readouterr().err
    assert "cannot read commands from standard input" in err and "internal error" not in err
