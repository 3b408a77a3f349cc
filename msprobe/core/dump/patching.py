"""Undoing attribute patches (framework-free; the PyTorch and MindSpore API wrappers share it)."""

MISSING = object()  # the attribute was not in the owner's own __dict__: undoing deletes it


def undo_patches(patched) -> None:
    """Put back every ``(owner, attr, original)`` in reverse order; ``MISSING`` deletes the attribute.
    Failures are ignored: restoring must never raise into the training script."""
    for owner, attr, original in reversed(patched):
        try:
            if original is MISSING:
                delattr(owner, attr)
            else:
                setattr(owner, attr, original)
        except Exception:  # noqa: BLE001
            pass
