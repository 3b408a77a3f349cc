"""``GradComparator``: compare two grad_probe runs' gradient directions, step by step and parameter by parameter.

API as the reference's (spec checks_and_monitors.md 3.4)::

    from msprobe import GradComparator
    GradComparator.compare_distributed(dump_path1, dump_path2, output_path)   # every rank{N} in both
    GradComparator.compare(rank_dir1, rank_dir2, output_dir)                  # one rank

Both runs must have used grad_level L1 or L2 (the ``step{S}/{param}.npy`` direction files).  The similarity of
a parameter at a step is the fraction of elements whose direction (grad > 0) is the same in both runs; the
``summary`` row weights the parameters by their element counts.  Per rank it writes ``similarities.csv``
(first row ``step,{s0},{s1},...``, one row per parameter, then ``summary``) and
``similarities_picture/{param}_similarities.png`` plus ``summary_similarities.png`` (matplotlib line plots;
skipped with a warning when matplotlib is not installed).  On top of the reference it also writes
``similarities_picture/similarities_heatmap.png`` (all parameters x steps) and reports where the runs part,
with the reference documentation's rule: a similarity below 0.97 at the first compared step, or a drop of
more than 0.03 from one compared step to the next.  Framework-free; inputs are never modified.
"""
from __future__ import annotations

import csv
import logging
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

import numpy as np

from msprobe.core.errors import MsprobeError
from msprobe.core.grad_probe import stats

log = logging.getLogger("msprobe")

SUMMARY = "summary"
FIRST_STEP_MIN = 0.97      # the reference docs' reading rule
MAX_DROP = 0.03
GRAD_FILE_SUFFIXES = (".npy",)


class GradCompareError(MsprobeError, RuntimeError):
    """A comparison that cannot be made (also a RuntimeError, which the reference raises)."""


@dataclass
class Divergence:
    """Where two runs part: the first compared step any parameter breaks the rule, and which ones."""
    step: int
    params: List[Tuple[str, float, Optional[float]]]   # (name, similarity, similarity at the step before)

    def line(self) -> str:
        shown = []
        for name, value, before in self.params[:8]:
            shown.append(f"{name} {value:.4f}" + (f" (was {before:.4f})" if before is not None else ""))
        more = f" and {len(self.params) - 8} more" if len(self.params) > 8 else ""
        return f"directions part at step {self.step}: " + ", ".join(shown) + more


@dataclass
class RankResult:
    rank_dir1: str
    rank_dir2: str
    output_dir: str
    steps: List[int]
    similarities: Dict[str, List[float]]                # param (and "summary") -> one value per step
    divergence: Optional[Divergence] = None
    files: List[str] = field(default_factory=list)


def _fail(text: str) -> GradCompareError:
    return GradCompareError(text)


def _check_dir(path: str, what: str) -> str:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise _fail(f"{what} {path!r} is not a directory path")
    path = os.fspath(path)
    if not os.path.isdir(path):
        raise _fail(f"{what} {path} is not a directory" + (" (it does not exist)" if not os.path.exists(path) else ""))
    return path


def _matched_indexes(path1: str, path2: str, prefix: str) -> List[int]:
    out = []
    for name in os.listdir(path1):
        index = name[len(prefix):]
        if name.startswith(prefix) and index.isdigit() and os.path.isdir(os.path.join(path2, name)) \
                and os.path.isdir(os.path.join(path1, name)):
            out.append(int(index))
    return sorted(out)


def _param_order(path1: str, path2: str) -> List[str]:
    """The parameter column of the first grad_summary csv (lowest step) present on both sides."""
    found = sorted((s, n) for n in os.listdir(path1) if (s := stats.summary_step(n)) is not None
                   and os.path.isfile(os.path.join(path2, n)))
    if not found:
        raise _fail(f"no matched grad_summary.csv for comparison in {path1} and {path2}, please dump data in same "
                    f"configuration")
    csv_path = os.path.join(path1, found[0][1])
    try:
        rows = stats.read_summary(csv_path)
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else f"{type(exc).__name__}: {exc}"
        raise _fail(f"cannot read {csv_path} ({why}); it is not a grad_summary csv written by grad_probe: "
                    f"dump the run again") from None
    if not rows or not rows[0] or rows[0][0] not in stats.NAME_COLUMNS:
        raise _fail(f"{csv_path} is not a grad_summary csv (its first column is not param_name)")
    order = [r[0] for r in rows[1:] if r]
    seen = set()
    for name in order:
        if name in seen:
            raise _fail(f"{csv_path} names the parameter {name!r} twice; the file is damaged: dump the run again")
        seen.add(name)
    return order


def _load_direction(path: str) -> np.ndarray:
    from msprobe.core.io.tensors import TensorReadError, load_npy

    try:
        # the header is checked before any data is read: a damaged header claiming a huge shape is refused
        # without allocating it, pickled (object) arrays are never loaded
        arr = load_npy(path)
    except TensorReadError as exc:
        raise _fail(f"cannot read the direction file {path}: {exc.reason}; dump the run again") from None
    except Exception as exc:  # noqa: BLE001 - a damaged file: one line
        raise _fail(f"cannot read the direction file {path}: {type(exc).__name__}: {exc}; dump the run again") from None
    if arr.dtype != np.bool_:
        raise _fail(f"tensor type is not bool: {path} holds {arr.dtype}; direction files are written at grad_level "
                    f"L1/L2")
    return arr


def _similarities(path1: str, path2: str, steps: List[int], order: List[str]) -> Dict[str, List[float]]:
    log.info("%d steps will be compared", len(steps))
    result: Dict[str, List[float]] = {}
    for step in steps:
        d1 = os.path.join(path1, f"{stats.STEP_PREFIX}{step}")
        d2 = os.path.join(path2, f"{stats.STEP_PREFIX}{step}")
        names2 = set(os.listdir(d2))
        files = {}
        for name in os.listdir(d1):
            stem, ext = os.path.splitext(name)
            if ext in GRAD_FILE_SUFFIXES and name in names2:
                files[stem] = name
        same_total = 0
        count_total = 0
        for param in order:
            if param not in files:
                raise _fail(f"no matched grad_file for comparison: {param}.npy is missing from {d1} or {d2}, please "
                            f"dump data in same configuration")
            a = _load_direction(os.path.join(d1, files[param]))
            b = _load_direction(os.path.join(d2, files[param]))
            if a.shape != b.shape:
                raise _fail(f"tensor shape is not equal: {os.path.join(d1, files[param])} {list(a.shape)}, "
                            f"{os.path.join(d2, files[param])} {list(b.shape)}")
            same = int(np.count_nonzero(a == b))
            result.setdefault(param, []).append(same / a.size if a.size else 0)
            same_total += same
            count_total += a.size
        result.setdefault(SUMMARY, []).append(same_total / count_total if count_total else 0)
    return result


def find_divergence(steps: List[int], similarities: Dict[str, List[float]],
                    first_min: float = FIRST_STEP_MIN, max_drop: float = MAX_DROP) -> Optional[Divergence]:
    """The first compared step at which a parameter's similarity is below ``first_min`` (first step) or drops
    by more than ``max_drop`` from the step before, with the parameters that do so there (lowest first)."""
    names = [n for n in similarities if n != SUMMARY]
    if not names or not steps:
        return None
    table = np.array([similarities[n] for n in names], dtype=np.float64)      # (params, steps)
    flagged = np.zeros_like(table, dtype=bool)
    flagged[:, 0] = table[:, 0] < first_min
    if table.shape[1] > 1:
        flagged[:, 1:] = (table[:, :-1] - table[:, 1:]) > max_drop
    cols = np.flatnonzero(flagged.any(axis=0))
    if not cols.size:
        return None
    col = int(cols[0])
    rows = np.flatnonzero(flagged[:, col])
    rows = rows[np.argsort(table[rows, col], kind="stable")]
    params = [(names[r], float(table[r, col]), float(table[r, col - 1]) if col else None) for r in rows]
    return Divergence(step=steps[col], params=params)


def _write_csv(output_dir: str, steps: List[int], similarities: Dict[str, List[float]]) -> str:
    from msprobe.core.dump.writer import write_bytes
    rows = [["step"] + [str(s) for s in steps]]
    rows += [[name] + values for name, values in similarities.items()]
    path = os.path.join(output_dir, "similarities.csv")
    if os.path.exists(path):
        log.warning("%s will be deleted", path)
    write_bytes(path, stats.csv_bytes(rows))
    return path


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        return plt
    except Exception:  # noqa: BLE001 - not installed or no backend
        return None


_PLOT_WARNED = []


def _save_fig(fig, path: str) -> None:
    from msprobe.core.dump.writer import write_path
    write_path(path, lambda tmp: fig.savefig(tmp, format="png"))


def _plots(output_dir: str, steps: List[int], similarities: Dict[str, List[float]],
           divergence: Optional[Divergence]) -> List[str]:
    plt = _pyplot()
    if plt is None:
        if not _PLOT_WARNED:
            _PLOT_WARNED.append(True)
            log.warning("matplotlib is not installed: similarities.csv is written, the similarities_picture/*.png "
                        "plots are not (pip install matplotlib, or msprobe[plots])")
        return []
    pic_dir = os.path.join(output_dir, "similarities_picture")
    os.makedirs(pic_dir, mode=0o750, exist_ok=True)
    out = []
    for name, values in similarities.items():
        fig, ax = plt.subplots()
        ax.plot(steps, values)
        if divergence is not None and (name == SUMMARY or any(p[0] == name for p in divergence.params)):
            ax.axvline(divergence.step, color="tab:red", linestyle="--", linewidth=0.8)
        ax.set_xlabel("steps")
        ax.set_ylabel("similarities")
        ax.set_title(f"{name}_similarities")
        path = os.path.join(pic_dir, f"{name}_similarities.png")
        _save_fig(fig, path)
        plt.close(fig)
        out.append(path)
    names = [n for n in similarities if n != SUMMARY]
    if names:
        table = np.array([similarities[n] for n in names], dtype=np.float64)
        fig, ax = plt.subplots(figsize=(min(4 + 0.25 * len(steps), 16), min(2 + 0.25 * len(names), 24)))
        im = ax.imshow(table, aspect="auto", cmap="viridis", vmin=min(0.5, float(table.min())), vmax=1.0,
                       interpolation="nearest")
        ax.set_yticks(range(len(names)))
        ax.set_yticklabels(names, fontsize=7)
        ticks = list(range(0, len(steps), max(1, len(steps) // 12)))
        ax.set_xticks(ticks)
        ax.set_xticklabels([str(steps[t]) for t in ticks])
        ax.set_xlabel("steps")
        ax.set_title("gradient direction similarity")
        if divergence is not None:
            ax.axvline(steps.index(divergence.step) - 0.5, color="tab:red", linewidth=1.0)
        fig.colorbar(im, ax=ax)
        fig.tight_layout()
        path = os.path.join(pic_dir, "similarities_heatmap.png")
        _save_fig(fig, path)
        plt.close(fig)
        out.append(path)
    return out


class GradComparator:
    """Compare two grad_probe dumps (see the module docstring)."""

    @classmethod
    def compare_distributed(cls, path1: str, path2: str, output_dir: str, plots: bool = True) -> List[RankResult]:
        path1 = _check_dir(path1, "dump_path1")
        path2 = _check_dir(path2, "dump_path2")
        ranks = _matched_indexes(path1, path2, stats.RANK_PREFIX)
        log.info("the following ranks will be compared: %s", ranks)
        if not ranks:
            raise _fail(f"no matched ranks for comparison (rank{{N}} folders in both {path1} and {path2}), please "
                        f"dump data in same configuration")
        _make_output(output_dir)
        results = []
        for rank in ranks:
            log.info("now comparing rank %d:", rank)
            results.append(cls.compare(os.path.join(path1, f"rank{rank}"), os.path.join(path2, f"rank{rank}"),
                                       os.path.join(output_dir, f"rank{rank}"), plots=plots))
        return results

    @classmethod
    def compare(cls, path1: str, path2: str, output_dir: str, plots: bool = True) -> RankResult:
        path1 = _check_dir(path1, "rank folder 1")
        path2 = _check_dir(path2, "rank folder 2")
        steps = _matched_indexes(path1, path2, stats.STEP_PREFIX)
        if not steps:
            raise _fail(f"no matched steps for comparison (step{{N}} folders in both {path1} and {path2}; they are "
                        f"written at grad_level L1 and L2, not L0), please dump data in same configuration")
        order = _param_order(path1, path2)
        similarities = _similarities(path1, path2, steps, order)
        _make_output(output_dir)
        divergence = find_divergence(steps, similarities)
        result = RankResult(path1, path2, output_dir, steps, similarities, divergence)
        result.files.append(_write_csv(output_dir, steps, similarities))
        if plots:
            result.files += _plots(output_dir, steps, similarities, divergence)
        if divergence is None:
            log.info("%s: the gradient directions agree at every compared step (%d steps, rule: >= %.2f at the first, "
                     "no drop > %.2f)", output_dir, len(steps), FIRST_STEP_MIN, MAX_DROP)
        else:
            log.warning("%s: %s", output_dir, divergence.line())
        return result


def _make_output(path: str) -> None:
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise _fail(f"output_path {path!r} is not a directory path")
    path = os.fspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise _fail(f"output_path {path} exists and is a file, not a directory")
    try:
        os.makedirs(path, mode=0o750, exist_ok=True)
    except OSError as exc:
        raise _fail(f"cannot create output_path {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise _fail(f"output_path {path} is not writable by this user")
