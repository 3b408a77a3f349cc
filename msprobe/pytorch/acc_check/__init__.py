"""API accuracy pre-check on PyTorch: runs each API of a dump on the device and as a CPU benchmark."""
