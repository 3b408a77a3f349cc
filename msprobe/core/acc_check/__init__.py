"""API accuracy pre-check (run_ut / acc_check, api_precision_compare): the framework-free part."""
