"""poprand: uniform, normal, Bernoulli and dropout, deterministic and mapping-independent.

    u = poprand.uniform(g, [4, 5], poplar.FLOAT, -1.0, 1.0, seed=42, seq=seq)
    z = poprand.normal(g, x, poplar.FLOAT, 0.0, 1.0, 7, seq)      # shaped and mapped like x
    y, keep = poprand.dropout(g, x, 0.1, 7, seq)                  # p = probability of DROPPING

`seed` is a Python int (0 <= seed < 2^64) or an UNSIGNED_INT tensor of 2 elements
[low 32 bits, high 32 bits] (PopLibs' seed tensor), which a program may change between runs
(e.g. popops.add_in_place(g, seed, step, seq)) so dropout masks differ step by step.
`seed_modifier` (a 32-bit int) gives each call site its own stream from one seed, as in
PopLibs. See codelets.py for the generator: values depend only on (seed, modifier, element
index in the flattened tensor), never on the mapping or the number of tiles.

The first argument after the graph is a shape or a reference tensor: with a tensor, the result
has its shape and is mapped like it (PopLibs' `reference`); with a shape, it is mapped linearly.
Each tile's elements are cut into at most one piece per worker context, one vertex each.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import BOOL, FLOAT, HALF, INT, UNSIGNED_INT, Regions, Tensor
from ..poplar import program as prog
from ..poplar.types import as_type
from .. import popops
from ..poputil import (grain_of, new_like, tile_constant, tile_pieces, typed_variant,
                       vertex_constants)
from ..popops.expr import _1, _2, select
from . import codelets as rc

MAX_ELEMENTS = 2 ** 32     # element indices are 32-bit on the tiles


def _seed_words(graph, seed, tiles, name, what) -> Regions:
    """The seed each vertex (on tiles[v]) reads: the seed tensor, or a constant on its tile."""
    if isinstance(seed, Tensor):
        graph.check_tensor(seed)
        if seed.dtype != UNSIGNED_INT or seed.num_elements() != 2:
            raise GraphError(f"{what}: a seed tensor must be UNSIGNED_INT with 2 elements "
                             f"[low word, high word], not '{seed.name}' {seed.dtype} "
                             f"{list(seed.shape)}")
        return Regions.whole(seed.flatten(), len(tiles))
    if isinstance(seed, (bool, np.bool_)) or not isinstance(seed, (int, np.integer)) or \
            not 0 <= int(seed) < 2 ** 64:
        raise GraphError(f"{what}: seed must be an int in [0, 2^64) or an UNSIGNED_INT tensor "
                         f"of 2 elements, not {seed!r}")
    seed = int(seed)
    return tile_constant(graph, UNSIGNED_INT, [seed & 0xFFFFFFFF, seed >> 32], tiles,
                         f"{name}/seed").regions(tiles)


def _modifier(seed_modifier, what) -> int:
    if isinstance(seed_modifier, bool) or not isinstance(seed_modifier, (int, np.integer)) or \
            not 0 <= int(seed_modifier) < 2 ** 32:
        raise GraphError(f"{what}: seed_modifier must be an int in [0, 2^32), not "
                         f"{seed_modifier!r}")
    return int(seed_modifier)


def _output(graph, reference, dtype, name, what) -> Tensor:
    """A new tensor shaped and mapped like reference, or of a shape and mapped linearly."""
    if isinstance(reference, Tensor):
        graph.check_tensor(reference)
        return new_like(graph, dtype, reference.shape, reference, name)
    try:
        shape = [int(s) for s in (reference if isinstance(reference, (list, tuple))
                                  else [reference])]
    except (TypeError, ValueError):
        raise GraphError(f"{what}: expected a shape or a reference tensor, not "
                         f"{reference!r}") from None
    return new_like(graph, dtype, shape, None, name)


def _generate(graph, codelet, out, params, params_dtype, seed, seed_modifier, seq, name, what,
              fields=None):
    """The compute set: per tile, its elements of out cut into pieces (one vertex each); each
    vertex gets the seed, [modifier, distribution, first element index of each region] and
    params."""
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"{what}: seq must be a program.Sequence, not {type(seq).__name__}")
    modifier = _modifier(seed_modifier, what)
    if out.num_elements() >= MAX_ELEMENTS:
        raise GraphError(f"{what}: at most 2^32 - 1 elements, not {out.num_elements()}")
    work = tile_pieces(graph, out, graph.target.num_worker_contexts, grain_of(out.dtype), what)
    if work.tile.size == 0:
        return
    seeds = _seed_words(graph, seed, work.tile, name, what)
    consts = tile_constant(graph, params_dtype, params, work.tile, f"{name}/params")
    first = np.cumsum(work.counts) - work.counts
    meta = np.insert(work.begins, np.repeat(first, 2), np.tile([modifier, codelet.kind],
                                                             work.tile.size))
    conns = {"seed": seeds, "params": consts.regions(work.tile),
             "meta": vertex_constants(graph, UNSIGNED_INT, meta, work.counts + 2, work.tile,
                                      f"{name}/meta")}
    for key, t in {"out": out, **(fields or {})}.items():
        conns[key] = Regions(t.flatten(), work.begins, work.ends, work.counts)
    cs = graph.add_compute_set(name)
    graph.add_vertices(cs, codelet, work.tile, conns)
    seq.add(prog.Execute(cs))


def _float_type(dtype, what):
    dtype = as_type(dtype)
    if dtype not in (FLOAT, HALF):
        raise GraphError(f"{what}: dtype must be FLOAT or HALF, not {dtype}")
    return dtype


def uniform(graph, reference, dtype, low, high, seed, seq, name: str = "",
            seed_modifier: int = 0) -> Tensor:
    """Uniform random values: floats in [low, high) (high itself only through rounding to
    the type), INT in [low, high] inclusive, as PopLibs."""
    name = name or "uniform"
    what = f"poprand.uniform '{name}'"
    dtype = as_type(dtype)
    if dtype == INT:
        if not low <= high or not -2 ** 31 <= low <= high < 2 ** 31:
            raise GraphError(f"{what}: INT bounds need low <= high within 32 bits, got "
                             f"{low!r}, {high!r}")
        codelet, params, ptype = rc.UniformInt, [int(low), int(high)], INT
    else:
        _float_type(dtype, what)
        if not low <= high:
            raise GraphError(f"{what}: low {low!r} must not exceed high {high!r}")
        codelet, params, ptype = rc.Uniform, [float(low), float(high)], FLOAT
    out = _output(graph, reference, dtype, f"{name}/out", what)
    cls = typed_variant(codelet, dtype, rc.DATA_FIELDS[codelet], dtype.name.title())
    _generate(graph, cls, out, params, ptype, seed, seed_modifier, seq, name, what)
    return out


def normal(graph, reference, dtype, mean, stddev, seed, seq, name: str = "",
           seed_modifier: int = 0) -> Tensor:
    """Normally distributed values with the given mean and standard deviation."""
    name = name or "normal"
    what = f"poprand.normal '{name}'"
    dtype = _float_type(dtype, what)
    if not stddev >= 0:
        raise GraphError(f"{what}: stddev must be >= 0, not {stddev!r}")
    out = _output(graph, reference, dtype, f"{name}/out", what)
    cls = typed_variant(rc.Normal, dtype, rc.DATA_FIELDS[rc.Normal], dtype.name.title())
    _generate(graph, cls, out, [float(mean), float(stddev)], FLOAT, seed, seed_modifier, seq,
              name, what)
    return out


def _probability(p, what, word="probability"):
    if not 0.0 <= float(p) <= 1.0:
        raise GraphError(f"{what}: {word} must be in [0, 1], not {p!r}")
    return float(p)


def bernoulli(graph, reference, dtype, prob, seed, seq, name: str = "",
              seed_modifier: int = 0) -> Tensor:
    """1 with probability prob, else 0, in dtype (FLOAT, HALF or INT)."""
    name = name or "bernoulli"
    what = f"poprand.bernoulli '{name}'"
    dtype = as_type(dtype)
    if dtype not in (FLOAT, HALF, INT):
        raise GraphError(f"{what}: dtype must be FLOAT, HALF or INT, not {dtype}")
    prob = _probability(prob, what)
    out = _output(graph, reference, dtype, f"{name}/out", what)
    cls = typed_variant(rc.Bernoulli, dtype, rc.DATA_FIELDS[rc.Bernoulli], dtype.name.title())
    _generate(graph, cls, out, [prob, 0.0], FLOAT, seed, seed_modifier, seq, name, what)
    return out


def dropout(graph, t, p, seed, seq, name: str = "", seed_modifier: int = 0,
            scale: float | None = None):
    """(out, mask): each element of t dropped with probability p (set to 0) or kept and scaled
    by `scale` (default 1 / (1 - p), so the expectation is unchanged; 0 when p == 1).

    p is the probability of DROPPING, as torch.nn.Dropout(p) (PopLibs' poprand::dropout takes
    the keep probability). out is mapped like t; mask is BOOL (True = kept), mapped like t,
    for dropout_input_gradient."""
    name = name or "dropout"
    what = f"poprand.dropout '{name}'"
    if not isinstance(t, Tensor):
        raise GraphError(f"{what}: expected a tensor, got {type(t).__name__}")
    graph.check_tensor(t)
    dtype = _float_type(t.dtype, what)
    p = _probability(p, what, "the drop probability p")
    if scale is None:
        scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    out = new_like(graph, dtype, t.shape, t, f"{name}/out")
    mask = new_like(graph, BOOL, t.shape, t, f"{name}/mask")
    cls = typed_variant(rc.Dropout, dtype, rc.DATA_FIELDS[rc.Dropout], dtype.name.title())
    _generate(graph, cls, out, [p, float(scale)], FLOAT, seed, seed_modifier, seq, name, what,
              fields={"in": t, "mask": mask})
    return out, mask


def dropout_input_gradient(graph, out_grad, mask, p, seq, name: str = "",
                           scale: float | None = None) -> Tensor:
    """dL/dx of dropout: out_grad * scale where mask is True, else 0 (one popops.map)."""
    p = _probability(p, f"poprand.dropout_input_gradient '{name}'", "the drop probability p")
    if scale is None:
        scale = 0.0 if p == 1.0 else 1.0 / (1.0 - p)
    return popops.map(graph, select(_1 * float(scale), 0, _2), [out_grad, mask], seq,
                      name or "dropout_grad")
