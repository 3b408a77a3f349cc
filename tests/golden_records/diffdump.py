"""Print the first differences between two dumps (a reference dump and ours, or a golden list).

    python tests/golden_records/diffdump.py REF_DIR OURS_DIR [--ignore-extra] [-n 10]

REF_DIR / OURS_DIR: a rank directory holding dump.json and construct.json, or a golden .json made by
make_golden.py. Reports: names only on one side, the first order differences (over the common names),
structure differences (keys, shapes, dtypes per leaf), construct.json parent differences and statistics
that differ beyond float32 rounding. Standard library only (runs under either tool's interpreter).
"""
import argparse
import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from golden import load_side, skeleton  # noqa: E402

STATS = ("Max", "Min", "Mean", "Norm")


def _values(rec, path="", out=None):
    """{leaf path: (Max, Min, Mean, Norm)} of every tensor leaf."""
    if out is None:
        out = {}
    if isinstance(rec, dict):
        if "Max" in rec and "dtype" in rec:
            out[path] = tuple(rec.get(k) for k in STATS)
            return out
        for k, v in rec.items():
            _values(v, f"{path}.{k}", out)
    elif isinstance(rec, list):
        for i, v in enumerate(rec):
            _values(v, f"{path}.{i}", out)
    return out


def _close(a, b, rtol):
    if a == b:
        return True
    if a is None or b is None:
        return False
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + 1e-30


def _stats_close(sa, sb, rtol):
    """(Max, Min, Mean, Norm) equal within ``rtol``; the Mean within ``rtol`` of the tensor's magnitude
    max(|Max|, |Min|): a mean near zero (a LayerNorm output, a gradient) is summation-order noise that depends
    on the CPU's vector width, so a dump recorded on one CPU is not bit-exact on another."""
    if sb is None or len(sa) != len(sb):
        return False
    scale = [abs(v) for v in sa[:2] if isinstance(v, (int, float)) and not isinstance(v, bool)
             and math.isfinite(v)]
    for i, (x, y) in enumerate(zip(sa, sb)):
        if _close(x, y, rtol):
            continue
        if i == 2 and scale and isinstance(x, (int, float)) and isinstance(y, (int, float)) \
                and abs(x - y) <= rtol * max(scale):
            continue
        return False
    return True


def diff(ref, ours, limit=10, ignore_extra=False, rtol=1e-5, out=print):
    """Print the differences; returns the number of kinds of difference found."""
    problems = 0
    rn, on = ref["names"], ours["names"]
    rs, os_ = set(rn), set(on)
    missing = [n for n in rn if n not in os_]
    extra = [n for n in on if n not in rs]
    if missing:
        problems += 1
        out(f"missing in ours ({len(missing)}): {missing[:limit]}")
    if extra and not ignore_extra:
        problems += 1
        out(f"extra in ours ({len(extra)}): {extra[:limit]}")
    common_r = [n for n in rn if n in os_]
    common_o = [n for n in on if n in rs]
    shown = 0
    for i, (a, b) in enumerate(zip(common_r, common_o)):
        if a != b:
            if not shown:
                problems += 1
                out("order differs (common names):")
            out(f"  #{i}: ref {a}  ours {b}")
            shown += 1
            if shown >= limit:
                break
    shown = 0
    for n in common_r:
        a, b = ref["records"][n], ours["records"][n]
        if a != b:
            if not shown:
                problems += 1
                out("structure differs:")
            out(f"  {n}:\n    ref  {json.dumps(a)[:400]}\n    ours {json.dumps(b)[:400]}")
            shown += 1
            if shown >= limit:
                break
    shown = 0
    rc, oc = ref.get("construct") or {}, ours.get("construct") or {}
    for n in rc:
        if n in oc and rc[n] != oc[n] or n not in oc:
            if not shown:
                problems += 1
                out("construct.json differs:")
            out(f"  {n}: ref {rc[n]!r}  ours {oc.get(n, '<absent>')!r}")
            shown += 1
            if shown >= limit:
                break
    if not shown and [n for n in oc if n in rc] != [n for n in rc if n in oc]:
        problems += 1
        out("construct.json key order differs")
    extra_c = [n for n in oc if n not in rc]
    if extra_c and not ignore_extra:
        problems += 1
        out(f"construct.json extra in ours ({len(extra_c)}): {extra_c[:limit]}")
    if ref.get("raw") is not None and ours.get("raw") is not None:
        shown = 0
        for n in common_r:
            va, vb = _values(ref["raw"][n]), _values(ours["raw"][n])
            for leaf, sa in va.items():
                sb = vb.get(leaf)
                if not _stats_close(sa, sb, rtol):
                    if not shown:
                        problems += 1
                        out("statistics differ:")
                    out(f"  {n}{leaf}: ref {sa} ours {sb}")
                    shown += 1
                    break
            if shown >= limit:
                break
    if not problems:
        out("no differences" + (f" (ours has {len(extra)} extra records)" if extra else ""))
    return problems


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("ref")
    p.add_argument("ours")
    p.add_argument("--ignore-extra", action="store_true", help="do not report records only ours has")
    p.add_argument("-n", type=int, default=10, help="differences shown per kind")
    p.add_argument("--rtol", type=float, default=1e-5)
    a = p.parse_args(argv)
    return 1 if diff(load_side(a.ref), load_side(a.ours), a.n, a.ignore_extra, a.rtol) else 0


if __name__ == "__main__":
    sys.exit(main())
