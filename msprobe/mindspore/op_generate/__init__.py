"""op_generate for MindSpore: a standalone single-API reproduction script from a MindSpore dump
(mint.*, ops.*, mint.nn.functional.* and Tensor methods; see docs/op_generate.md)."""
