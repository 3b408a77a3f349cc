"""free_benchmark for PyTorch: re-run selected APIs with perturbed inputs (msprobe.core.free_benchmark holds the rules)."""
