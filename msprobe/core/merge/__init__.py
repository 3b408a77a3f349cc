"""Multi-rank merge of compare reports (``msprobe merge_result``); framework-free."""

from msprobe.core.merge.config import MergeConfig, load_merge_yaml
from msprobe.core.merge.merge import MergeResult, run_merge

__all__ = ["MergeConfig", "MergeResult", "load_merge_yaml", "run_merge"]
