"""Readers and writers for files (JSON, .pt, .npy, xlsx, csv)."""
