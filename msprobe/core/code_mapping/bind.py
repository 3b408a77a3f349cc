"""Link dump files to IR nodes and write the code_mapping results.

Tensor dumps (``.npy``): MindSpore names them
``{OpType}.{op_name}.{task_id}.{stream_id}.{timestamp}.{input|output}.{slot}.{format}[.{dtype}].npy``
where ``op_name`` is the node's scope with ``/`` replaced by ``_``.  A name that is all digits is a
long name shortened by the dumper; ``mapping.csv`` in the same directory gives the real one.  Each file
gives one row of ``code_mapping_{ts}.csv``: ``File Path, Code Stack, Scope Name``.

Statistic dumps: every ``statistic.csv`` gets a copy under the output directory (same relative
directory as under ``--dump_data``) with ``Code Stack`` and ``Scope Name`` columns, looked up from its
``Op Name`` column.  The inputs are never modified.

Matching is exact: the op name must equal a node's scope key (after turning ``/`` or ``--`` separators
into ``_``); ``op1`` never matches ``op10``.  When several IR nodes carry the same scope (e.g. in
different graphs) and the dump path names the graph (``.../{net}/{graph_id}/{iteration}/file``), the
nodes of ``kernel_graph{graph_id}`` are preferred; otherwise the distinct candidates are all listed,
one line each, as the reference lists its (substring) matches.
"""

from __future__ import annotations

import csv
import os
import re
import time
from typing import Dict, Iterator, List, Optional, Tuple

from msprobe.core.code_mapping.ir import IrIndex, IrNode
from msprobe.core.errors import MsprobeError
from msprobe.core.fileio import atomic_write, unique_path

HEADER = ["File Path", "Code Stack", "Scope Name"]
STATISTIC_FILE = "statistic.csv"
STAT_COLUMNS = ["Code Stack", "Scope Name"]
_GRAPH_DIR_RE = re.compile(r"\d+")


class Summary:
    """What a run did, for the command's report."""

    def __init__(self) -> None:
        self.tensor_files = 0
        self.tensor_matched = 0
        self.csv_path: Optional[str] = None
        self.statistic_outputs: List[Tuple[str, str, int, int]] = []  # (input, output, rows, matched)
        self.unnamed: List[str] = []  # files whose name holds no op name
        self.missing_mapping: List[str] = []  # directories of shortened names without a mapping.csv
        self.already_mapped: List[str] = []  # statistic.csv files that already carry the two columns


def find_dump_files(path: str) -> Tuple[List[str], List[str]]:
    """(``.npy`` files, ``statistic.csv`` files) at or under ``path``, sorted; links are not followed."""
    if os.path.isfile(path):
        base = os.path.basename(path)
        if base.endswith(".npy"):
            return [path], []
        if base == STATISTIC_FILE:
            return [], [path]
        return [], []
    npys: List[str] = []
    stats: List[str] = []
    for root, dirs, files in os.walk(path):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(".npy"):
                full = os.path.join(root, name)
                if not os.path.islink(full):
                    npys.append(full)
            elif name == STATISTIC_FILE:
                full = os.path.join(root, name)
                if not os.path.islink(full):
                    stats.append(full)
    return npys, stats


def op_name_of(file_name: str) -> Optional[str]:
    """The op name field of a dump file name (the second ``.``-separated field), or None."""
    stem = file_name[:-4] if file_name.endswith(".npy") else file_name
    parts = stem.split(".", 2)
    if len(parts) < 2 or not parts[1]:
        return None
    return parts[1]


def _normalise(name: str) -> str:
    return name.replace("/", "_").replace("--", "_")


def _graph_id(path: str) -> Optional[str]:
    """``graph_id`` of a file laid out as ``.../{net}/{graph_id}/{iteration}/file``, else None."""
    it_dir = os.path.dirname(path)
    graph_dir = os.path.dirname(it_dir)
    if _GRAPH_DIR_RE.fullmatch(os.path.basename(it_dir)) and _GRAPH_DIR_RE.fullmatch(os.path.basename(graph_dir)):
        return os.path.basename(graph_dir)
    return None


class Binder:
    """Looks op names up in an :class:`IrIndex`, with a per-name cache."""

    def __init__(self, index: IrIndex):
        self.index = index
        self._cache: Dict[Tuple[str, Optional[str]], Tuple[str, str]] = {}

    def candidates(self, op_name: str, graph_id: Optional[str] = None) -> List[IrNode]:
        nodes = self.index.lookup(op_name)
        if not nodes and ("/" in op_name or "--" in op_name):
            nodes = self.index.lookup(_normalise(op_name))
        if len(nodes) > 1 and graph_id is not None:
            same = [n for n in nodes if n.graph == f"kernel_graph{graph_id}"]
            if same:
                nodes = same
        return nodes

    def bind(self, op_name: Optional[str], graph_id: Optional[str] = None) -> Tuple[str, str]:
        """(code stack, scope name) for an op name; ("", "") when nothing matches."""
        if not op_name:
            return "", ""
        key = (op_name, graph_id)
        hit = self._cache.get(key)
        if hit is None:
            seen = set()
            stacks: List[str] = []
            scopes: List[str] = []
            for node in self.candidates(op_name, graph_id):
                ident = (node.scope, node.code)
                if ident in seen:
                    continue
                seen.add(ident)
                stacks.append("\n".join(node.code))
                scopes.append(node.scope)
            hit = ("\n".join(stacks), "\n".join(scopes))
            self._cache[key] = hit
        return hit


class _LongNames:
    """Real names of the dumper's shortened (all-digit) file names, from each directory's mapping.csv."""

    def __init__(self) -> None:
        self._dirs: Dict[str, Optional[Dict[str, str]]] = {}
        self.missing: List[str] = []

    def real_name(self, directory: str, file_name: str) -> Optional[str]:
        table = self._dirs.get(directory, False)
        if table is False:
            table = self._load(directory)
            self._dirs[directory] = table
        if table is None:
            return None
        stem = file_name[:-4] if file_name.endswith(".npy") else file_name
        return table.get(file_name) or table.get(stem)

    def _load(self, directory: str) -> Optional[Dict[str, str]]:
        path = os.path.join(directory, "mapping.csv")
        if not os.path.isfile(path):
            self.missing.append(directory)
            return None
        table: Dict[str, str] = {}
        with open(path, "r", encoding="utf-8-sig", errors="replace", newline="") as fh:
            for row in csv.reader(fh):
                if len(row) >= 2 and row[0].strip():
                    table.setdefault(row[0].strip(), row[1].strip())
        return table


def tensor_rows(npy_files: List[str], binder: Binder, summary: Summary) -> Iterator[List[str]]:
    long_names = _LongNames()
    for path in npy_files:
        real = os.path.realpath(path)
        directory, file_name = os.path.split(real)
        name = file_name
        if file_name[:-4].isdigit():
            mapped = long_names.real_name(directory, file_name)
            if mapped:
                name = mapped
        op = op_name_of(name)
        if op is None:
            summary.unnamed.append(real)
        stack, scope = binder.bind(op, _graph_id(real))
        summary.tensor_files += 1
        if scope:
            summary.tensor_matched += 1
        yield [real, stack, scope]
    summary.missing_mapping.extend(long_names.missing)


def write_tensor_csv(npy_files: List[str], binder: Binder, output_dir: str, summary: Summary) -> str:
    timestamp = time.strftime("%Y%m%d%H%M%S", time.localtime())
    final = unique_path(os.path.join(output_dir, f"code_mapping_{timestamp}.csv"))

    def write(tmp: str) -> None:
        with open(tmp, "w", encoding="utf-8", newline="") as fh:
            w = csv.writer(fh, lineterminator="\n")
            w.writerow(HEADER)
            w.writerows(tensor_rows(npy_files, binder, summary))

    summary.csv_path = atomic_write(final, write)
    return summary.csv_path


def write_statistic_csv(stat_file: str, dump_root: str, binder: Binder, output_dir: str, summary: Summary) -> Optional[str]:
    """Write a copy of ``stat_file`` with Code Stack and Scope Name columns; return its path.

    A file whose header already ends with those columns (an earlier result, e.g. under an output
    directory inside the dump) is skipped: None.
    """
    if os.path.isdir(dump_root):
        rel_dir = os.path.relpath(os.path.dirname(stat_file), dump_root)
    else:
        rel_dir = "."
    target_dir = os.path.normpath(os.path.join(output_dir, rel_dir))
    graph_id = _graph_id(os.path.realpath(stat_file))
    counts = [0, 0]

    with open(stat_file, "r", encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header:
            raise MsprobeError(f"statistic file {stat_file} is empty; expected a MindSpore statistic.csv with an 'Op Name' column")
        trailing = len(header) > 1 and header[-1] == ""
        if trailing:
            header = header[:-1]
        if [h.strip() for h in header[-2:]] == STAT_COLUMNS:
            summary.already_mapped.append(stat_file)
            return None
        try:
            col = [h.strip() for h in header].index("Op Name")
        except ValueError:
            raise MsprobeError(
                f"statistic file {stat_file} has no 'Op Name' column (header: {','.join(header)[:200]}); "
                "expected a MindSpore statistic.csv"
            )
        width = len(header)
        os.makedirs(target_dir, mode=0o750, exist_ok=True)
        final = unique_path(os.path.join(target_dir, STATISTIC_FILE))

        def write(tmp: str) -> None:
            with open(tmp, "w", encoding="utf-8", newline="") as out:
                w = csv.writer(out, lineterminator="\n")
                w.writerow(header + STAT_COLUMNS)
                for row in reader:
                    if not row:
                        continue
                    if len(row) == width + 1 and row[-1] == "":
                        row = row[:-1]  # MindSpore ends every row with a comma
                    op = row[col].strip() if col < len(row) else ""
                    stack, scope = binder.bind(op, graph_id)
                    counts[0] += 1
                    if scope:
                        counts[1] += 1
                    if len(row) < width:
                        row = row + [""] * (width - len(row))
                    w.writerow(row + [stack, scope])

        written = atomic_write(final, write)
    summary.statistic_outputs.append((stat_file, written, counts[0], counts[1]))
    return written
