"""The reference's nan_analyze (8.3.3) / overflow_check (26.2.0) on our gloo dumps: the NaN/inf made before and
after communication, and the clean step (issue 21, "agree with the reference on our dumps").

tests/test_nan_analyze.py compares the steps where the NaN is made during communication
(test_reference_agrees_on_our_dumps, test_reference_differs_on_broadcast_root); this file covers the rest of its
gloo scenarios with the same dump generators.  Skipped when a reference venv (benchmarks/refvenv.py) is missing.
"""
import subprocess

import pytest

from test_nan_analyze import (EXPECTED, REF_VERSIONS, _REF_SCRIPT, _ref_python, analyze, dump2, dump4,  # noqa: F401
                              found, result_files)

#: (world, step): the before / after steps of EXPECTED, and the clean step of the 2-rank run (None: nothing found)
CASES = [(2, 0), (2, 3), (4, 0), (4, 3), (2, 4)]


@pytest.fixture(scope="module")
def runs(dump2, dump4, tmp_path_factory):  # noqa: F811
    """{version: {(world, step): (our output dir, the reference's output dir)}}, or the reason it is missing."""
    base = tmp_path_factory.mktemp("ref_ba")
    dumps = {2: dump2, 4: dump4}
    ours = {}
    for world, step in CASES:
        (base / f"ours{world}_{step}").mkdir()
        ours[(world, step)], _ = analyze(dumps[world] / f"step{step}", base / f"ours{world}_{step}")
    got = {}
    for version, (venv, folder, cls) in REF_VERSIONS.items():
        exe, why = _ref_python(venv, folder)
        if exe is None:
            got[version] = why
            continue
        argv = []
        for world, step in CASES:
            argv += [str(dumps[world] / f"step{step}"), str(base / f"ref{version}_{world}_{step}")]
        res = subprocess.run([str(exe), "-c", _REF_SCRIPT, cls, *argv], capture_output=True, text=True, timeout=600,
                             cwd=str(base))
        assert res.returncode == 0, res.stderr[-3000:]
        got[version] = {case: (ours[case], base / f"ref{version}_{case[0]}_{case[1]}") for case in CASES}
    return got


@pytest.mark.parametrize("version", list(REF_VERSIONS))
@pytest.mark.parametrize("world,step", CASES)
def test_reference_agrees_before_after_and_clean(runs, version, world, step):
    if isinstance(runs[version], str):
        pytest.skip(runs[version])
    ours, ref_out = runs[version][(world, step)]
    if (world, step) not in EXPECTED:   # the clean step: neither writes a file
        assert result_files(ref_out) == [] and result_files(ours) == []
        return
    assert found(ref_out) == found(ours) == EXPECTED[(world, step)][1]
    assert result_files(ref_out)[0].read_bytes() == result_files(ours)[0].read_bytes()
