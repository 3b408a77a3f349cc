"""PyTorch side of msprobe: PrecisionDebugger and tensor I/O through torch.

Importing this package does not import torch; modules that need torch import it lazily.
"""
