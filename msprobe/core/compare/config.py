"""The one frozen configuration object of a compare run."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from msprobe.core.compare.mapping import MappingOptions


@dataclass(frozen=True)
class CompareConfig:
    target: str  # target (NPU) dump.json, rank dir or step dir
    golden: str  # golden (bench) dump.json, rank dir or step dir
    output_dir: str = "./output"
    fuzzy: bool = False  # -fm / legacy -f
    highlight: bool = True  # --no-highlight turns it off
    fmt: str = "xlsx"  # "xlsx" or "csv"
    stack_path: Optional[str] = None  # legacy compare.json stack_path (else auto-detected)
    tensor_log: bool = False  # -tensor_log / is_print_compare_log: one log line per tensor pair
    jobs: int = 0  # 0 = automatic
    framework: Optional[str] = None  # legacy -f pytorch|mindspore (informational)
    match_column: bool = True  # add the "Match" provenance column at the end of the report
    progress: bool = True  # progress bars (shown only on a terminal)
    mappings: MappingOptions = field(default_factory=MappingOptions)  # -am / -cm / -dm / -lm
    backend: Optional[str] = None  # None/"local": forked processes; "ray[:ADDRESS]": --ray (msprobe.core.executor)
