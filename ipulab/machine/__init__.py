"""The numba core: tiles, bytes, copy plans, supersteps and cycles. Knows nothing of tensors."""
