"""The accuracy pre-check (run_ut / acc_check) of MindSpore PyNative dumps: the checker the workers run."""
