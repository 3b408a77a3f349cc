"""PyTorch dump internals: capture hooks, collector, statistics, call stacks, lifecycle."""
