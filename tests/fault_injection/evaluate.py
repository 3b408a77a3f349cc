"""Run ``msprobe compare -da`` on one dump pair and read back what it named and what it wrote.

:func:`run_ours` returns an :class:`Outcome`: per rank (``"rank"`` for a single process, ``"rank0"``,
``"rank1"`` for the 2-rank cases) the advisor file's ``Suspect Nodes``, the console's ``first failing row``,
the ``first divergence`` block's name (or ``None`` with its reason), the growth ranking of
``diff_analyze_*.json``, the console's red/yellow counts and the report path.
:func:`consistency_problems` checks that a report's colours, ``Result`` (``Accuracy Reached or Not`` in
tensor mode), the console summary and the advisor agree row by row.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

REPO = Path(__file__).resolve().parents[2]

#: Result / Accuracy values that mean "this row fails" (statistics Warning, md5 Different, tensor No)
FAILING_RESULTS = {"warning", "different", "no", "fail", "failed"}


@dataclass
class RankAnswer:
    advisor_file: Optional[str] = None      # Suspect Nodes (None: NA)
    advisor_line: Optional[str] = None      # Line:
    advisor_producer: Optional[str] = None  # "Producer: produced by X ..." (the op that made a failing input)
    advisor_console: Optional[str] = None   # "first failing row: X"
    advisor_console_row: Optional[int] = None
    advisor_none_text: str = ""             # the console line when nothing fails
    da_first: Optional[str] = None          # first divergence (None: none or absent)
    da_first_text: str = ""                 # the whole line
    da_producer: Optional[str] = None       # "..., produced by X ..." on that line
    growth: List[str] = field(default_factory=list)   # msprobe_suspects, best first
    red: Optional[int] = None
    yellow: Optional[int] = None
    report: Optional[str] = None


@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    out_dir: str
    ranks: Dict[str, RankAnswer]


def pair_paths(pair_dir: Path, multi: bool):
    """(target, golden) as compare takes them: the rank dirs, or the step dirs for 2-rank pairs."""
    sub = "step0" if multi else os.path.join("step0", "rank")
    return pair_dir / "target" / sub, pair_dir / "golden" / sub


def _key(label: Optional[str], multi: bool) -> str:
    """Console / file labels (None, 'rank0', 'rank_0', 'rank') -> 'rank' (single) or 'rank<N>'."""
    if not multi:
        return "rank"
    m = re.search(r"(\d+)$", label or "")
    return f"rank{m.group(1)}" if m else (label or "rank")


def parse_console(text: str, multi: bool) -> Dict[str, RankAnswer]:
    ranks: Dict[str, RankAnswer] = {}

    def get(label):
        return ranks.setdefault(_key(label, multi), RankAnswer())

    current = None
    in_da = False
    for line in text.splitlines():
        m = re.match(r"^compare(?: (\S+?))?:", line)
        if m and not line.startswith("compare result"):
            current = get(m.group(1))
            in_da = False
            continue
        m = re.search(r"\bred: (\d+)\s+yellow: (\d+)", line)
        if m and current is not None and current.red is None:
            current.red, current.yellow = int(m.group(1)), int(m.group(2))
            continue
        m = re.match(r"^\s+report: (\S+)", line)
        if m and current is not None and current.report is None:
            current.report = m.group(1)
            continue
        m = re.match(r"^advisor(?: (\S+?))?: first failing row: (\S+)(?: \(report row (\d+))?", line)
        if m:
            a = get(m.group(1))
            a.advisor_console = m.group(2)
            a.advisor_console_row = int(m.group(3)) if m.group(3) else None
            in_da = False
            continue
        m = re.match(r"^advisor(?: (\S+?))?: (.*)$", line)
        if m and not line.lstrip().startswith("advisor: /"):
            get(m.group(1)).advisor_none_text = m.group(2)
            in_da = False
            continue
        if line.startswith("first divergence"):
            in_da = True
            continue
        if in_da:
            if not line.startswith("  "):
                in_da = False
                continue
            if "reference rule" in line:
                continue
            m = re.match(r"^\s+(rank_?\d*):\s+(\S+)(.*)$", line)
            if m:
                a = get(m.group(1))
                a.da_first_text = line.strip()
                name = m.group(2).rstrip(",")
                a.da_first = None if name.lower().startswith("none") else name
                p = re.search(r"produced by (\S+)", m.group(3))
                a.da_producer = p.group(1).rstrip(",") if p else None
    return ranks


def parse_advisor_files(out_dir: str, multi: bool, ranks: Dict[str, RankAnswer]) -> None:
    for path in sorted(glob.glob(os.path.join(out_dir, "**", "advisor_*.txt"), recursive=True)):
        m = re.match(r"advisor_(?:(.+)_)?\d{14}(?:_\d+)?\.txt$", os.path.basename(path))
        label = m.group(1) if m else None
        a = ranks.setdefault(_key(label, multi), RankAnswer())
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                if line.startswith("Suspect Nodes:"):
                    v = line.split(":", 1)[1].strip()
                    a.advisor_file = None if v in ("", "NA", "N/A", "None") else v
                elif line.startswith("Line:"):
                    a.advisor_line = line.split(":", 1)[1].strip()
                elif line.startswith("Producer:"):
                    p = re.search(r"produced by (\S+)", line)
                    a.advisor_producer = p.group(1).rstrip(",") if p else None


def parse_diff_analyze(out_dir: str, multi: bool, ranks: Dict[str, RankAnswer]) -> None:
    for path in glob.glob(os.path.join(out_dir, "**", "diff_analyze_*.json"), recursive=True):
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        for label, items in (data.get("msprobe_suspects") or {}).get("ranks", {}).items():
            ranks.setdefault(_key(label, multi), RankAnswer()).growth = [s.get("op_name") for s in items]


def run_ours(target: Path, golden: Path, out_dir: Path, multi: bool, extra=(), timeout=300) -> Outcome:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    for var in ("MSPROBE_DEBUG", "MSPROBE_MEMORY_LIMIT"):
        env.pop(var, None)
    res = subprocess.run([sys.executable, "-m", "msprobe", "compare", "-tp", str(target), "-gp", str(golden),
                          "-o", str(out_dir), "-da", "-j", "1", *extra],
                         capture_output=True, text=True, env=env, timeout=timeout)
    ranks = parse_console(res.stdout, multi)
    parse_advisor_files(str(out_dir), multi, ranks)
    parse_diff_analyze(str(out_dir), multi, ranks)
    return Outcome(res.returncode, res.stdout, res.stderr, str(out_dir), ranks)


def names_match(named: Optional[str], expected: List[str]) -> bool:
    """``named`` (a row or an op) is one of ``expected`` or a row of it."""
    if not named:
        return False
    return any(named == e or named.startswith(e + ".") for e in expected)


def answer(a: RankAnswer, which: str) -> str:
    """What one rank's advisor (``which="advisor"``) or -da names, for tables."""
    if which == "advisor":
        named = a.advisor_file if a.advisor_file == a.advisor_console else \
            f"file {a.advisor_file} / console {a.advisor_console}"
        prod = a.advisor_producer
    else:
        named, prod = a.da_first, a.da_producer
    named = "none" if named is None else named
    return f"{named} (produced by {prod})" if prod else named


def names_op(a: RankAnswer, which: str, expected: List[str]) -> bool:
    """The named row is the expected op's, or the op named as its producer is (an input that differs is
    blamed on the op that produced it).  The advisor's file and console must name the same row."""
    if which == "advisor":
        if a.advisor_file != a.advisor_console:
            return False
        return names_match(a.advisor_file, expected) or names_match(a.advisor_producer, expected)
    return names_match(a.da_first, expected) or names_match(a.da_producer, expected)


def names_nothing(a: RankAnswer, which: str) -> bool:
    if which == "advisor":
        return a.advisor_file is None and a.advisor_console is None
    return a.da_first is None


# ------------------------------------------------------------------------------------- report consistency
def _colour(row) -> Optional[str]:
    red = yellow = False
    for c in row:
        f = c.fill
        if f is None or f.patternType in (None, "none"):
            continue
        rgb = str(f.fgColor.rgb or "").upper()
        if rgb.endswith("FF0000"):
            red = True
        elif rgb.endswith("FFFF00"):
            yellow = True
    return "red" if red else "yellow" if yellow else None


VERDICT_WORDS = ("fail", "warn", "noise", "pass")


def verdict_word(err_message) -> Optional[str]:
    """msprobe's per-row verdict as written at the start of an Err_message line (``fail: ...``), if any."""
    if not err_message:
        return None
    for line in reversed(str(err_message).splitlines()):
        word = line.split(":", 1)[0].strip().lower()
        if word in VERDICT_WORDS:
            return word
    return None


def read_report(path: str):
    """(mode column, [(xlsx row number, name, colour, Result/Accuracy value, verdict word)]) of the report."""
    import openpyxl

    wb = openpyxl.load_workbook(path)
    out = []
    col_name = None
    for ws in wb.worksheets:
        rows = ws.iter_rows()
        header = [c.value for c in next(rows)]
        col_name = "Result" if "Result" in header else "Accuracy Reached or Not"
        col = header.index(col_name)
        err = header.index("Err_message") if "Err_message" in header else None
        for i, row in enumerate(rows, start=2):
            out.append((i, row[0].value, _colour(row), row[col].value,
                        verdict_word(row[err].value) if err is not None else None))
    return col_name, out


def is_failing(value) -> bool:
    if value is None:
        return False
    v = str(value).strip().lower()
    return v in FAILING_RESULTS or v.startswith("fail") or v.startswith("warn")


def consistency_problems(ans: RankAnswer) -> List[str]:
    """Disagreements between a report's colours, Result, the console summary and the advisor.

    * statistics and md5 ``Result``: a red row has a failing Result (``Warning`` / ``Different``) and every
      failing Result is coloured;
    * tensor mode keeps the reference's ``Accuracy Reached or Not``; where it disagrees with the colour (a red
      row that reaches the accuracy bar, a ``No`` row left uncoloured) the row's Err_message must give
      msprobe's verdict (``fail: ...`` / ``noise: ...``) that explains the colour;
    * wherever Err_message carries a verdict, red = ``fail`` and yellow = ``warn``;
    * the console's red/yellow counts are the report's;
    * the advisor's row (file and console, same row number) is the first red row, and names nothing
      when no row is red.
    """
    probs: List[str] = []
    if not ans.report or not os.path.isfile(ans.report):
        return [f"no report found ({ans.report})"]
    col_name, rows = read_report(ans.report)
    tensor = col_name != "Result"
    reds = [r for r in rows if r[2] == "red"]
    yellows = [r for r in rows if r[2] == "yellow"]
    for n, name, colour, result, word in rows:
        failing = is_failing(result)
        if word is not None:
            want = {"fail": "red", "warn": "yellow"}.get(word)
            if colour != want:
                probs.append(f"row {n} {name}: verdict {word!r} but colour {colour}")
        if colour == "red" and not failing and not (tensor and word == "fail"):
            probs.append(f"row {n} {name}: red but {col_name} is {result!r}")
        if failing and colour is None and not (tensor and word in ("noise", "pass")):
            probs.append(f"row {n} {name}: {col_name} {result!r} but not coloured")
    if ans.red is not None and (ans.red, ans.yellow) != (len(reds), len(yellows)):
        probs.append(f"console says red {ans.red} yellow {ans.yellow}, the report has red {len(reds)} "
                     f"yellow {len(yellows)}")
    if ans.red is None:
        probs.append("no red/yellow counts in the console summary")
    named = ans.advisor_console
    if reds:
        first = reds[0]
        by_row = {n: (name, colour) for n, name, colour, _, _ in rows}
        if ans.advisor_file is None or named is None:
            probs.append(f"{len(reds)} red rows but the advisor names none (file {ans.advisor_file!r}, "
                         f"console {named!r})")
        else:
            if ans.advisor_file != named:
                probs.append(f"advisor file names {ans.advisor_file}, the console {named}")
            row = ans.advisor_console_row
            if row is None or by_row.get(row, (None,))[0] != named:
                probs.append(f"console advisor row {row} is not {named}'s xlsx row")
            elif by_row[row][1] != "red":
                probs.append(f"advisor's row {row} {named} is not red")
            if ans.advisor_line is not None and str(row) != ans.advisor_line:
                probs.append(f"advisor file Line {ans.advisor_line} vs console report row {row}")
    else:
        if ans.advisor_file is not None or named is not None:
            probs.append(f"no red row but the advisor names {ans.advisor_file or named}")
    return probs


def generate_pairs(root: Path, *args: str, timeout: float = 600) -> Path:
    """Dump the pairs of ``generate.py`` (its arguments after the root, e.g. ``--family hf --only ...``) into
    ``root`` in one subprocess with this checkout on PYTHONPATH; raises with its stderr's tail on failure."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    res = subprocess.run([sys.executable, str(REPO / "tests" / "fault_injection" / "generate.py"), str(root), *args],
                         capture_output=True, text=True, env=env, timeout=timeout)
    if res.returncode != 0:
        raise RuntimeError(f"generate.py {' '.join(args)} exited {res.returncode}:\n{res.stderr[-4000:]}")
    return root


def outcomes(pairs: Path, outs: Path, cases, workers: int = 2) -> Dict[str, Outcome]:
    """``run_ours`` on each case's pair (2-rank pairs for the ``dist`` model; the case's compare options),
    ``workers`` at a time: case name -> :class:`Outcome`."""
    from concurrent.futures import ThreadPoolExecutor

    def one(case):
        multi = case.model == "dist"
        t, g = pair_paths(pairs / case.name, multi)
        return case.name, run_ours(t, g, outs / case.name, multi, extra=case.compare_args)

    with ThreadPoolExecutor(max_workers=workers) as ex:
        return dict(ex.map(one, cases))


# ------------------------------------------------------------------------------------ checks the suites share
def missing_culprits(pairs: Path, cases, sides=("target", "golden"), every: bool = False) -> List[str]:
    """Fault cases whose dump (each of ``sides``) holds none of the expected names (``every``: not all of them);
    a name is held as itself or as the prefix of a row."""
    missing = []
    for case in cases:
        if case.control:
            continue
        for side in sides:
            with open(pairs / case.name / side / "step0" / "rank" / "dump.json", encoding="utf-8") as fh:
                data = json.load(fh)["data"]
            names = case.expected["rank"]
            held = [any(k == n or k.startswith(n + ".") for k in data) for n in names]
            if not (all(held) if every else any(held)):
                missing.append(f"{case.name} {side}: {'not all' if every else 'none'} of {names}")
    return missing


def culprit_misses(cases, outs: Dict[str, Outcome]) -> List[str]:
    """Single-process fault cases whose run failed, or whose advisor or ``-da`` does not name the injected op."""
    misses = []
    for case in cases:
        if case.control:
            continue
        out = outs[case.name]
        if out.rc != 0 or "Traceback" in out.stderr:
            misses.append(f"{case.name}: compare exited {out.rc}: {out.stderr[-2000:]}")
            continue
        a = out.ranks.get("rank")
        for which in ("advisor", "da"):
            if a is None or not names_op(a, which, case.expected["rank"]):
                misses.append(f"{case.name} {which}: expected {case.expected['rank']}, named "
                              f"{answer(a, which) if a else '(no answer)'}")
    return misses


def control_problems(cases, outs: Dict[str, Outcome]) -> List[str]:
    """Single-process control cases where something is named, the console gives no reason for naming nothing,
    the growth ranking names a suspect, or a row is red."""
    problems = []
    for case in cases:
        if not case.control:
            continue
        a = outs[case.name].ranks.get("rank")
        if a is None:
            problems.append(f"{case.name}: no answer")
            continue
        for which in ("advisor", "da"):
            if not names_nothing(a, which):
                problems.append(f"{case.name} {which}: named {answer(a, which)}")
        if not re.match(r"^rank_?\d*: none \(.+\)", a.da_first_text):
            problems.append(f"{case.name}: no 'rank_N: none (<reason>)' line (got {a.da_first_text!r})")
        if a.growth:
            problems.append(f"{case.name}: growth ranking names {a.growth[:3]}")
        if a.red:
            problems.append(f"{case.name}: {a.red} red rows")
    return problems


def disagreements(cases, outs: Dict[str, Outcome]) -> List[str]:
    """Where a report's colours, Result column, console summary and advisor disagree (consistency_problems)."""
    problems = []
    for case in cases:
        for rank, ans in sorted(outs[case.name].ranks.items()):
            problems += [f"{case.name} {rank}: {p}" for p in consistency_problems(ans)]
    return problems
