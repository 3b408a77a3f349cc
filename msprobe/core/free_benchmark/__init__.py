"""free_benchmark (无标杆比对), framework-free part: config, comparison rule, preheat, CSV results."""
