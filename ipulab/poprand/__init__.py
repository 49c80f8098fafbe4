"""PopLibs' poprand: deterministic, counter-based random numbers computed on the tiles.

    from ipulab import poprand
    w = poprand.normal(g, [64, 32], poplar.FLOAT, 0.0, 0.1, seed=1, seq=seq)
    y, keep = poprand.dropout(g, x, 0.5, seed, seq, seed_modifier=3)

The same (seed, seed_modifier) gives bit-identical values whatever the mapping or tile count.
"""
from . import codelets
from .random import bernoulli, dropout, dropout_input_gradient, normal, uniform

__all__ = ["codelets", "bernoulli", "dropout", "dropout_input_gradient", "normal", "uniform"]
