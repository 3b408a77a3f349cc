"""free_benchmark for MindSpore PyNative (forward stage; msprobe.core.free_benchmark holds the rules)."""
