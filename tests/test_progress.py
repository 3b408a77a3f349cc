"""Stage progress (msprobe.core.progress) and prompt, clean Ctrl-C (msprobe.core.procpool).

- compare, graph and merge_result log one INFO line per stage with counts and time; the live display is drawn
  only on a terminal or with MSPROBE_PROGRESS=1, never into a pipe, and it is cleared (cursor restored);
- Ctrl-C (SIGINT) on a 2-rank compare: exit 130, one line "msprobe: interrupted", no traceback, no temporary
  or partial report left, no worker process left;
- the worker pool: a failing task stops the others at once and its error reaches the caller; results come
  back in task order; temporary files of killed workers are removed.
"""

from __future__ import annotations

import glob
import json
import logging
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ROOT
from msprobe.core import progress as pg
from msprobe.core.fileio import atomic_write
from msprobe.core.procpool import run_tasks

ANSI = re.compile(r"\x1b\[")


def write_dumps(root: Path, ranks: int, entries: int) -> Path:
    """target/ and golden/ step dirs of ``ranks`` statistics rank dumps with ``entries`` APIs of 3 tensors."""
    for side, seed in (("target", 1), ("golden", 2)):
        rnd = random.Random(seed)
        for r in range(ranks):
            d = root / side / "step0" / f"rank{r}"
            d.mkdir(parents=True)

            def t():
                v = rnd.random()
                return {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [4, 8], "Max": v + 1, "Min": -v,
                        "Mean": v / 3, "Norm": v * 5, "requires_grad": False}

            data = {f"Functional.linear.{i}.forward": {"input_args": [t(), t()], "input_kwargs": {}, "output": [t()]}
                    for i in range(entries)}
            (d / "dump.json").write_text(json.dumps({"task": "statistics", "level": "L1", "framework": "pytorch",
                                                     "dump_data_dir": None, "data": data}))
    return root


def _env(**extra):
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env.pop("MSPROBE_PROGRESS", None)
    env.update(extra)
    return env


def msprobe(*args, **env):
    return subprocess.run([sys.executable, "-m", "msprobe", *map(str, args)], capture_output=True, text=True,
                          env=_env(**env), cwd=str(ROOT), timeout=300)


def stage_lines(err: str, name: str):
    return [ln for ln in err.splitlines() if ln.startswith(f"[msprobe] INFO {name}: ")]


# ------------------------------------------------------------------------------------------ stage lines


def test_compare_logs_one_line_per_stage_and_no_display_in_a_pipe(tmp_path):
    root = write_dumps(tmp_path / "d", 2, 50)
    res = msprobe("compare", "-tp", root / "target" / "step0", "-gp", root / "golden" / "step0", "-o", tmp_path / "o",
                  "-c")
    assert res.returncode == 0, res.stderr
    assert not ANSI.search(res.stderr)               # stderr is a pipe: no live display
    for rank in ("rank0", "rank1"):
        lines = stage_lines(res.stderr, f"compare {rank}")
        assert [ln.split(": ")[1].split()[0] for ln in lines] == ["read", "match", "metrics", "write"], lines
        assert "read 2 files (150 + 150 rows) in " in lines[0]
        assert "match 150 rows (150 matched) in " in lines[1]
        assert "metrics 150 rows (statistics) in " in lines[2]
        assert re.search(rf"write 150 rows \(compare_result_{rank}_\d{{14}}\.xlsx\) in \d+\.\d\d s$", lines[3])
    # merge_result on those reports: read, merge, write
    (tmp_path / "c.yaml").write_text("api:\n- Functional.linear.1\ncompare_index:\n- Max diff\n")
    res = msprobe("merge_result", "-i", tmp_path / "o", "-o", tmp_path / "m", "-config", tmp_path / "c.yaml")
    assert res.returncode == 0, res.stderr
    lines = stage_lines(res.stderr, "merge_result")
    assert [ln.split(": ")[1].split()[0] for ln in lines] == ["read", "merge", "write"], res.stderr
    assert "read 2 reports (6 rows kept) in " in lines[0]
    assert "merge 3 rows (2 rank columns) in " in lines[1]
    assert re.search(r"write 3 rows \(1 sheet, multi_ranks_compare_merge_\d{14}\.xlsx\) in ", lines[2])


def test_graph_logs_stages_per_rank(tmp_path):
    from test_graph import small_model, write_dump

    c, d, s = small_model()
    for r in (0, 1):
        write_dump(str(tmp_path / "step0" / f"rank{r}"), c, d, s)
    res = msprobe("graph", "-tp", tmp_path / "step0", "-gp", tmp_path / "step0", "-o", tmp_path / "o", "-j", "2")
    assert res.returncode == 0, res.stderr
    assert not ANSI.search(res.stderr)
    for rank in ("rank0", "rank1"):
        lines = stage_lines(res.stderr, f"graph {rank}")
        assert [ln.split(": ")[1].split()[0] for ln in lines] == ["read", "match", "write"], res.stderr
        assert "read 2 dumps (14 nodes + 14 nodes) in " in lines[0]
        assert "match 14 nodes (14 matched pairs, summary) in " in lines[1]
        assert "write 28 nodes (vis) in " in lines[2]
    res = msprobe("graph", "-tp", tmp_path / "step0" / "rank0", "-o", tmp_path / "o2")
    assert res.returncode == 0, res.stderr
    assert [ln.split(": ")[1] for ln in stage_lines(res.stderr, "graph")][0].startswith("read 1 dump (14 nodes) in ")


def test_forced_display_draws_stages_and_restores_the_cursor(tmp_path):
    root = write_dumps(tmp_path / "d", 1, 30)
    res = msprobe("compare", "-tp", root / "target" / "step0" / "rank0" / "dump.json",
                  "-gp", root / "golden" / "step0" / "rank0" / "dump.json", "-o", tmp_path / "o", "-c",
                  MSPROBE_PROGRESS="1")
    assert res.returncode == 0, res.stderr
    err = res.stderr
    assert ANSI.search(err)                          # the live display was drawn
    assert "compare: read" in err or "compare: match" in err or "compare: write" in err
    if "\x1b[?25l" in err:                           # the cursor was hidden: it is shown again at the end
        assert err.rindex("\x1b[?25h") > err.rindex("\x1b[?25l")
    # the stage log lines are still there, printed above the display
    assert "compare: write 90 rows" in err
    # -q turns the display off even when forced
    res = msprobe("compare", "-tp", root / "target" / "step0" / "rank0" / "dump.json",
                  "-gp", root / "golden" / "step0" / "rank0" / "dump.json", "-o", tmp_path / "o2", "-c", "-q",
                  MSPROBE_PROGRESS="1")
    assert res.returncode == 0 and not ANSI.search(res.stderr)


def test_display_wanted(monkeypatch):
    class Tty:
        def isatty(self):
            return True

    class Pipe:
        def isatty(self):
            return False

    monkeypatch.delenv(pg.ENV, raising=False)
    assert pg.display_wanted(stream=Tty()) and not pg.display_wanted(stream=Pipe())
    assert not pg.display_wanted(quiet=True, stream=Tty())
    monkeypatch.setenv(pg.ENV, "1")
    assert pg.display_wanted(stream=Pipe()) and not pg.display_wanted(quiet=True, stream=Pipe())
    monkeypatch.setenv(pg.ENV, "0")
    assert not pg.display_wanted(stream=Tty())


def test_job_stage_lines(caplog):
    with caplog.at_level(logging.INFO, logger="msprobe"):
        with pg.Progress("merge_result") as prog:
            job = prog.job()
            job("read", 0, 3, "reports")
            job("read", 3, 3, "reports", "12,000 rows")
            job("write", 0, 10)
            job("write", 10, 10, None, "out.xlsx")
            job.finish()
            failed = prog.job("rank1")
            failed("read", 1, 3, "reports")
            failed.abandon()                         # no line for a stage that did not finish
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2
    assert re.fullmatch(r"merge_result: read 3 reports \(12,000 rows\) in \d+\.\d\d s", lines[0])
    assert re.fullmatch(r"merge_result: write 10 rows \(out\.xlsx\) in \d+\.\d\d s", lines[1])


def test_slow_stages_quiet_when_quick_and_speak_when_slow(caplog):
    with caplog.at_level(logging.INFO, logger="msprobe"):
        with pg.SlowStages("dump step 0", delay=60) as s:
            s.stage("statistics", 10, "tensors")
            s.stage("dump.json", 5, "entries")
    assert caplog.records == []
    with caplog.at_level(logging.INFO, logger="msprobe"):
        with pg.SlowStages("dump step 0", delay=0.05) as s:
            s.stage("statistics", 10, "tensors")
            deadline = time.monotonic() + 30
            while not caplog.records and time.monotonic() < deadline:     # the timer speaks after the delay
                time.sleep(0.01)
            s.stage("dump.json", 5, "entries")
    text = [r.getMessage() for r in caplog.records]
    assert text[0].startswith("dump step 0: statistics (10 tensors) ... (")
    assert "dump step 0: statistics (10 tensors) done in" in text[1]
    assert text[2] == "dump step 0: dump.json (5 entries) ..."
    assert "dump step 0: dump.json (5 entries) done in" in text[3]
    assert text[4].startswith("dump step 0: finished after ")


# ------------------------------------------------------------------------------------------ Ctrl-C


def _alive_with(marker: str):
    """Processes (other than this one) whose command line holds ``marker``."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmd = f.read().decode(errors="replace")
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmd and state != "Z":
            found.append(pid)
    return found


def _own_group():
    """In the child: a process group of its own (what a shell gives a foreground job) and the default SIGINT."""
    os.setpgrp()
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to find leftover processes")
@pytest.mark.parametrize("display", ["0", "1"])
def test_ctrl_c_on_a_two_rank_compare_is_prompt_and_clean(tmp_path, display):
    root = write_dumps(tmp_path / "d", 2, 6000)
    out = tmp_path / f"out-{display}"
    proc = subprocess.Popen([sys.executable, "-m", "msprobe", "compare", "-tp", str(root / "target" / "step0"),
                             "-gp", str(root / "golden" / "step0"), "-o", str(out), "-c", "-j", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=str(ROOT),
                            env=_env(MSPROBE_PROGRESS=display),
                            preexec_fn=_own_group)
    err_lines = []
    started = threading.Event()

    def read_err():
        for line in proc.stderr:
            err_lines.append(line)
            if "INFO compare rank" in line:          # a rank finished its first stage: the workers are busy
                started.set()
        started.set()

    reader = threading.Thread(target=read_err, daemon=True)
    reader.start()
    assert started.wait(240), "".join(err_lines)
    assert proc.poll() is None, "the compare ended before it could be interrupted: " + "".join(err_lines)
    os.killpg(proc.pid, signal.SIGINT)               # as a terminal's Ctrl-C: the whole process group
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("compare did not stop after SIGINT")
    reader.join(10)
    stdout = proc.stdout.read()
    err = "".join(err_lines)
    assert proc.returncode == 130, err
    assert "Traceback" not in err, err
    lines = [ANSI.sub("", ln).strip() for ln in err.splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("[msprobe] INFO")]
    assert lines[-1:] == ["msprobe: interrupted"], err
    assert "ends successfully" not in stdout
    if "\x1b[?25l" in err:
        assert err.rindex("\x1b[?25h") > err.rindex("\x1b[?25l")       # cursor shown again
    left = [p for p in glob.glob(str(out / "**" / "*"), recursive=True) + glob.glob(str(out / "**" / ".*"),
                                                                                     recursive=True)
            if os.path.isfile(p)]
    assert left == [], left                          # no temporary file, no partial or finished report
    deadline = time.monotonic() + 10
    while _alive_with(str(out)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _alive_with(str(out)) == []               # no worker left behind


# ------------------------------------------------------------------------------------------ the worker pool


def _double(task, emit):
    emit("seen", task)
    if task == "boom":
        raise ValueError("task failed")
    if task == "slow":
        time.sleep(60)
    return task * 2


def test_pool_results_in_order_and_events():
    events = []
    assert run_tasks(_double, [1, 2, 3, 4], 2, on_event=lambda i, *a: events.append((i, a))) == [2, 4, 6, 8]
    assert sorted(events) == [(0, ("seen", 1)), (1, ("seen", 2)), (2, ("seen", 3)), (3, ("seen", 4))]


def test_pool_failing_task_stops_the_others_at_once():
    start = time.monotonic()
    with pytest.raises(ValueError, match="task failed"):
        run_tasks(_double, ["slow", "boom"], 2)
    assert time.monotonic() - start < 50             # did not wait for the 60 s task


def test_pool_removes_temporary_files_of_killed_workers(tmp_path):
    def write_slowly(task, emit):
        def w(tmp):
            Path(tmp).write_text("partial")
            emit("writing")
            time.sleep(60)
        return atomic_write(str(tmp_path / f"{task}.txt"), w)

    def interrupt(i, *args):
        raise KeyboardInterrupt                      # as Ctrl-C in the parent while the workers write

    with pytest.raises(KeyboardInterrupt):
        run_tasks(write_slowly, ["a", "b"], 2, on_event=interrupt)
    assert os.listdir(tmp_path) == []


# ------------------------------------------------------------------------------------------ the dump's flush


def test_slow_dump_flush_names_its_stages(tmp_path, caplog, monkeypatch):
    """A flush that takes longer than SLOW_FLUSH_SECONDS says what it is doing (one line per stage, then the
    total); a quick one says nothing. Slowness is simulated by a slow JSON writer."""
    torch = pytest.importorskip("torch")
    from msprobe.core.dump import lifecycle, writer
    from msprobe.pytorch import PrecisionDebugger

    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps({"task": "statistics", "dump_path": str(tmp_path / "dump"), "rank": [], "step": [],
                               "level": "L1", "async_dump": False}))
    real_dumps = writer.dumps      # write_step_files serialises each step file with writer.dumps

    def slow_dumps(obj, *a, **kw):
        time.sleep(0.4)
        return real_dumps(obj, *a, **kw)

    PrecisionDebugger._reset_for_tests()
    try:
        dbg = PrecisionDebugger(config_path=str(cfg))
        x = torch.randn(3, 4)
        with caplog.at_level(logging.INFO, logger="msprobe"):
            dbg.start()
            torch.relu(x)
            dbg.stop()
            dbg.step()                                   # quick: nothing said
        assert not [r for r in caplog.records if "dump step" in r.getMessage()]
        monkeypatch.setattr(lifecycle, "SLOW_FLUSH_SECONDS", 0.2)
        monkeypatch.setattr(writer, "dumps", slow_dumps)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="msprobe"):
            dbg.start()
            torch.relu(x)
            torch.sigmoid(x)
            dbg.stop()
            dbg.step()
    finally:
        PrecisionDebugger._reset_for_tests()
    text = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dump step 1")]
    assert text, [r.getMessage() for r in caplog.records]
    assert any(re.fullmatch(r"dump step 1: writing: writing dump\.json \(2 entries\) \.\.\. \(0\.\d s so far\)", t)
               for t in text), text
    assert any(t.startswith("dump step 1: writing: writing stack.json") for t in text), text
    assert re.fullmatch(r"dump step 1: writing: finished after \d+\.\d\d s", text[-1]), text
    assert json.loads((tmp_path / "dump" / "step1" / "rank" / "dump.json").read_text())["data"]   # written


def test_xlsx_writer_counts_rows_for_the_write_stage(tmp_path):
    from msprobe.core.io.xlsx import CHUNK_ROWS, write_xlsx

    n = CHUNK_ROWS * 2 + 5
    seen = []
    with pg.counting_rows(seen.append):
        write_xlsx(str(tmp_path / "a.xlsx"), ["x"], [list(range(n))])
    assert seen == [CHUNK_ROWS, 2 * CHUNK_ROWS, n]
    write_xlsx(str(tmp_path / "b.xlsx"), ["x"], [list(range(n))])       # nobody counting: nothing called
    assert seen == [CHUNK_ROWS, 2 * CHUNK_ROWS, n]
