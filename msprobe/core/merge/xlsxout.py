"""A workbook of several sheets, each its own table, written with the streaming xlsx writer's parts.

:func:`msprobe.core.io.xlsx.write_xlsx` writes one table (split over sheets only when it is too long);
the merged result needs one table per compare index.  This module assembles such a package from the
same building blocks (cell rendering, sheet head and tail, package parts, background deflate), so the
cells are exactly what the compare reports get.  The helpers are private to ``msprobe.core.io.xlsx``;
``tests/test_merge_result.py`` round-trips the output through openpyxl to catch any drift.
"""

from __future__ import annotations

import zipfile
from typing import List, Sequence, Tuple

from msprobe.core.io import xlsx as _x


def write_sheets(path: str, sheets: Sequence[Tuple[str, List[str], list]]) -> List[str]:
    """Write ``sheets`` = [(name, header, columns)] to ``path``; columns as for ``write_xlsx``."""
    if not sheets:
        raise ValueError("no sheets to write")
    prepared = []
    for name, header, columns in sheets:
        _x._check_sheet_name(name)
        header = [str(h) for h in header]
        columns = list(columns)
        if len(columns) != len(header):
            raise ValueError(f"sheet {name!r}: {len(columns)} columns for {len(header)} header items")
        nrows = len(columns[0]) if columns else 0
        if nrows > _x.EXCEL_MAX_ROWS - 1:
            raise ValueError(f"sheet {name!r}: {nrows} rows do not fit an Excel sheet")
        columns = [_x._normalise_column(c, nrows, j) for j, c in enumerate(columns)]
        prepared.append((name, header, columns, nrows, _x._default_widths(header, columns, nrows)))
    try:
        _write(path, prepared, force_zip64=False)
    except RuntimeError as exc:  # a sheet's XML grew past 2 GiB: redo with ZIP64 members
        if "force_zip64" not in str(exc):
            raise
        _write(path, prepared, force_zip64=True)
    return [p[0] for p in prepared]


def _write(path: str, prepared, force_zip64: bool) -> None:
    names = [p[0] for p in prepared]
    refs = [f"$A$1:${_x._col_letters(len(h) - 1)}${n + 1}" if h else None for _, h, _, n, _ in prepared]
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=_x.COMPRESS_LEVEL) as zf:
        zf.writestr("[Content_Types].xml", _x._content_types(len(names)))
        zf.writestr("_rels/.rels", _x._ROOT_RELS)
        zf.writestr("docProps/app.xml", _x._APP_XML)
        zf.writestr("docProps/core.xml", _x._core_xml())
        zf.writestr("xl/workbook.xml", _x._workbook(names, refs))
        zf.writestr("xl/_rels/workbook.xml.rels", _x._workbook_rels(len(names)))
        zf.writestr("xl/styles.xml", _x._STYLES_XML)
        for i, (_, header, columns, nrows, widths) in enumerate(prepared):
            ncols = len(header)
            builder = _x._ChunkBuilder(ncols)
            with zf.open(f"xl/worksheets/sheet{i + 1}.xml", "w", force_zip64=force_zip64) as fh:
                out = _x._BackgroundWriter(fh)
                try:
                    out.write(_x._sheet_head(ncols, nrows, widths, selected=i == 0) + _x._header_row(header))
                    for c0 in range(0, nrows, _x.CHUNK_ROWS):
                        c1 = min(c0 + _x.CHUNK_ROWS, nrows)
                        out.write(builder.build([col[c0:c1] for col in columns], None, c0 + 2))
                    out.write(_x._sheet_tail(ncols, nrows))
                finally:
                    out.close()
