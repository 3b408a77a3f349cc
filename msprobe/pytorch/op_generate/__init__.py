"""op_generate: a standalone single-API reproduction script from a dump (see docs/op_generate.md)."""
