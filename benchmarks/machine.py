"""The machine description line: it lives in benchmarks/harness.py; this name stays for the scripts that import it
from here (benchmarks/fault_score.py)."""
from harness import machine_line  # noqa: F401
