"""Fault-injection acceptance suite (issue 16, "Done means").

Small models (a 2-block transformer, a CNN, a 2-rank gloo MLP) are dumped twice with msprobe's
PrecisionDebugger: the target run carries one fault planted at a known op (forward, backward, parameter
gradient, collective; statistics, md5 and tensor tasks; levels mix and L1; fp32, and bf16 autocast
against fp32), the golden run is clean.  Control pairs (bf16 / fp16 autocast against fp32, no fault)
must name nothing.  ``msprobe compare -da`` runs once per pair; the tests check that

* the advisor (``advisor_*.txt`` Suspect Nodes and the console's first failing row) and ``-da`` (the
  console's ``first divergence`` block) name the injected op in at least 95 % of the fault cases (19 of 20);
* every report's colours, ``Result``/``Accuracy Reached or Not``, the console's red/yellow counts and the
  advisor agree row by row;
* on control pairs nothing is named and the console says why (``rank_0: none (...)``).

Cases and expected culprits: tests/fault_injection/cases.py.  The pairs are generated once per session
(tests/fault_injection/generate.py, in a subprocess: one step per run, tiny models).
"""

from __future__ import annotations

import json
import math
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("openpyxl")

from fault_injection.cases import CASES, CONTROLS, FAULTS  # noqa: E402
from fault_injection.evaluate import (answer, consistency_problems, generate_pairs, names_op,  # noqa: E402
                                      outcomes)

MIN_SHARE = 0.95   # 19 of 20


@pytest.fixture(scope="session")
def fi_pairs(tmp_path_factory):
    return generate_pairs(tmp_path_factory.mktemp("fault_pairs"))


@pytest.fixture(scope="session")
def fi_outcomes(fi_pairs, tmp_path_factory):
    return outcomes(fi_pairs, tmp_path_factory.mktemp("fault_out"), CASES)


def _hit(case, outcome, which):
    """Whether every expected rank's answer (``advisor`` or ``da``) names the injected op; and what was named."""
    named = {}
    ok = True
    for rank, exp in case.expected.items():
        a = outcome.ranks.get(rank)
        if a is None:
            named[rank] = "(no answer)"
            ok = False
            continue
        named[rank] = answer(a, which)
        ok = ok and names_op(a, which, exp)
    return ok, named


def _score(fi_outcomes, which):
    lines, hits = [], 0
    for case in FAULTS:
        out = fi_outcomes[case.name]
        ok, named = _hit(case, out, which)
        hits += ok
        exp = "; ".join(f"{r}: {' | '.join(e)}" for r, e in case.expected.items())
        got = "; ".join(f"{r}: {n}" for r, n in named.items())
        lines.append(f"{'hit ' if ok else 'MISS'} {case.name:28s} expected {exp}  named {got}  (rc {out.rc})")
    table = "\n".join(lines)
    print(f"\n{which}: {hits}/{len(FAULTS)}\n{table}")
    return hits, table


def test_there_are_enough_cases():
    assert len(FAULTS) >= 20
    kinds = {c.model for c in FAULTS}
    assert kinds == {"tf", "cnn", "dist"}
    assert {c.task for c in FAULTS} == {"statistics", "md5", "tensor"}
    assert {c.level for c in FAULTS} == {"mix", "L1"}
    assert len(CONTROLS) >= 4


def test_pairs_hold_the_expected_culprit(fi_pairs):
    """Each expected culprit is an op of both dumps (of the target's for an op only the target runs): the
    cases' names follow the models."""
    missing = []
    for case in FAULTS:
        for rank, names in case.expected.items():
            for side in ("target",) if case.target_only else ("target", "golden"):
                with open(fi_pairs / case.name / side / "step0" / rank / "dump.json", encoding="utf-8") as fh:
                    data = json.load(fh)["data"]
                for n in names:
                    if not any(k == n or k.startswith(n + ".") for k in data):
                        missing.append(f"{case.name} {side} {rank}: {n}")
    assert not missing, missing


def test_clean_runs_are_reproducible(fi_pairs):
    """Two clean fp32 runs of the same model, task and level (golden sides of different cases) dump the same
    statistics: generation is deterministic, so every difference in a pair comes from its fault."""
    a = json.loads((fi_pairs / "tf_attn_scale_stat" / "golden/step0/rank/dump.json").read_text())["data"]
    b = json.loads((fi_pairs / "tf_gelu_out_stat" / "golden/step0/rank/dump.json").read_text())["data"]
    assert a == b


def test_compare_runs_cleanly(fi_outcomes):
    bad = {n: (o.rc, o.stderr[-500:]) for n, o in fi_outcomes.items()
           if o.rc != 0 or "Traceback" in o.stderr}
    assert not bad, bad


def test_advisor_names_the_injected_op(fi_outcomes):
    hits, table = _score(fi_outcomes, "advisor")
    need = math.ceil(MIN_SHARE * len(FAULTS))
    assert hits >= need, f"advisor named the injected op in {hits}/{len(FAULTS)} cases (need {need}):\n{table}"


def test_diff_analyze_names_the_injected_op(fi_outcomes):
    hits, table = _score(fi_outcomes, "da")
    need = math.ceil(MIN_SHARE * len(FAULTS))
    assert hits >= need, f"-da named the injected op in {hits}/{len(FAULTS)} cases (need {need}):\n{table}"


def test_colours_result_summary_and_advisor_agree(fi_outcomes):
    problems = []
    for case in CASES:
        out = fi_outcomes[case.name]
        for rank, ans in sorted(out.ranks.items()):
            problems += [f"{case.name} {rank}: {p}" for p in consistency_problems(ans)]
    assert not problems, "\n".join(problems[:60]) + f"\n({len(problems)} problems)"


def test_control_pairs_name_no_op(fi_outcomes):
    """No fault: the advisor names nothing, and the first-divergence block says ``rank_N: none (<reason>)``."""
    problems = []
    for case in CONTROLS:
        out = fi_outcomes[case.name]
        expected_ranks = ["rank0", "rank1"] if case.model == "dist" else ["rank"]
        for rank in expected_ranks:
            a = out.ranks.get(rank)
            if a is None:
                problems.append(f"{case.name} {rank}: no answer")
                continue
            if a.da_first is not None:
                problems.append(f"{case.name} {rank}: first divergence names {a.da_first}")
            elif not re.match(r"^rank_?\d*: none \(.+\)", a.da_first_text):
                problems.append(f"{case.name} {rank}: no 'rank_N: none (<reason>)' line "
                                f"(got {a.da_first_text!r})")
            if a.advisor_file or a.advisor_console:
                problems.append(f"{case.name} {rank}: advisor names {a.advisor_file or a.advisor_console}")
            elif not a.advisor_none_text:
                problems.append(f"{case.name} {rank}: the console's advisor line does not say why nothing is named")
    assert not problems, "\n".join(problems)


def test_control_pairs_growth_ranking_names_no_op(fi_outcomes):
    """-da's growth ranking (msprobe_suspects) lists no suspect where nothing is wrong."""
    named = {c.name: {r: a.growth[:3] for r, a in fi_outcomes[c.name].ranks.items() if a.growth}
             for c in CONTROLS}
    named = {k: v for k, v in named.items() if v}
    assert not named, named
