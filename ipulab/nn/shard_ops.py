"""The operations a tensor-parallel transformer layer is built from (nn/megatron.py), on the
shards of a stage (nn/shards.py): each on every shard side by side, with the all-reduces its
split needs.

    z = column(b, grid, builds, part, xs, relu)     # a Linear split by output columns
    y = row(b, grid, builds, part, zs)              # ... by input columns, all-reduced over t1
    y = dropout(b, grid, part, ys, dim, last_axis)  # masks drawn on the whole tensor
    y = layer_norm(b, grid, builds, part, xs)       # whole, or over t2 with shared statistics

b is the layer's build on the stage's graph (names, the seed, the sequence the step goes
into), builds {shard: its LayerBuild} on each shard's IPU, xs {shard: its piece} the pieces
of an activation; part a _Part of the layer (its weights under the layer's keys) or Whole(the
layer). Each returns the pieces of its output (None for an input gradient not needed).
"""
from __future__ import annotations

from .. import popops, poprand
from ..poplar import FLOAT, concat, parallel
from ..poplar import program as prog
from ..popops import expr as E
from ..popops.expr import _1, _2, _3, _4, _5
from .layers import Linear, ReLU
from .transformer import _Part


# --- the pieces a layer is built from, on each shard ------------------------------------------
class Whole:
    """A layer in the place of a part (a standalone Linear or LayerNorm): its own weight names,
    its own build (names unscoped)."""

    scope, stream = "", 0

    def __init__(self, layer):
        self.layer, self.keys = layer, {n: n for n in layer.param_names}

    def forward(self, b, x, relu: bool = False):
        b.relu = relu
        return self.layer.forward(b, x)

    def backward(self, b, dy, need_dx: bool = True):
        b.need_dx = need_dx
        return self.layer.backward(b, dy)


def scoped(part, what: str) -> str:
    """A name under the part's scope."""
    return f"{part.scope}/{what}" if part.scope else what


def last_axis(pieces: list):
    """The whole tensor of pieces split along the last axis, and the cut back (dropout)."""
    a = pieces[0].rank - 1
    starts = [sum(p.shape[a] for p in pieces[:i]) for i in range(len(pieces))]
    whole = pieces[0] if len(pieces) == 1 else concat(pieces, a)
    return whole, lambda t, i: t.slice(starts[i], starts[i] + pieces[i].shape[a], a)


def heads_axis(samples: int):
    """For attention weights [B*h_i, S, S] of each shard's heads: the whole [B*h, S, S] (sample
    major, as one IPU holds them), and the cut back."""
    def join(pieces: list):
        _, S, S2 = pieces[0].shape
        heads = [p.shape[0] // samples for p in pieces]
        starts = [sum(heads[:i]) for i in range(len(heads))]
        whole = concat([p.reshape([samples, h, S, S2]) for p, h in zip(pieces, heads)], 1)
        return whole.reshape([samples * sum(heads), S, S2]), \
            lambda t, i: t.reshape([samples, sum(heads), S, S2]).slice(
                starts[i], starts[i] + heads[i], 1).reshape([samples * heads[i], S, S2])
    return join


def each(b, grid, builds: dict, what: str, fn) -> dict:
    """fn(k, build of shard k) on every shard side by side, into b's sequence."""
    def run(k, g, s):
        builds[k].seq = s
        return fn(k, builds[k])
    return grid.each(b.seq, b.name(what), run)


# --- Linear layers, split by columns or by rows ------------------------------------------------
def linear(builds, part, k, bias: bool):
    """Shard k's Linear of part over its views of the weights (the bias folded into its
    product if asked), kept in the shard's build for the backward pass."""
    sb = builds[k]
    w = sb.params[part.keys["weight"]]
    layer = Linear(w.shape[1], w.shape[0], bias=bias)
    keys = {n: part.keys[n] for n in layer.param_names}
    local = _Part(part.scope, layer, part.stream, keys) if part.scope else Whole(layer)
    sb.save(**{f"linear/{part.scope}": local})
    return local


def relu_part(part):
    """The ReLU after a split Linear part whose bias comes after its all-reduce."""
    return _Part(f"{part.scope}_relu" if part.scope else "relu", ReLU())


def column(b, grid, builds, part, xs: dict, relu: bool) -> dict:
    """A column-parallel Linear part: shard (i1, i2) computes its t1 block of output
    columns (identical over t2: from its t2 block of input columns, all-reduced over t2,
    then the bias; t2 = 1: the bias folded in, as one IPU)."""
    bias = "bias" in part.keys
    fold = grid.t2 == 1
    z = each(b, grid, builds, scoped(part, "shards"), lambda k, sb: linear(
        builds, part, k, bias and fold).forward(sb, xs[k], relu and fold))
    if fold:
        return z
    z = grid.all_reduce(b.seq, b.name(scoped(part, "all_reduce/t2")), z, 2)

    def finish(k, sb):
        y = z[k]
        if bias:
            y = popops.map(sb.graph, _1 + _2, [y, sb.params[part.keys["bias"]]], sb.seq,
                           sb.name(scoped(part, "bias")))
        return relu_part(part).forward(sb, y) if relu else y
    return each(b, grid, builds, scoped(part, "bias"), finish)


def column_grad(b, grid, builds, part, dzs: dict, relu: bool, need_dx: bool):
    """Its weight (and bias) gradients per shard, and the input gradient all-reduced over
    t1 (each shard's covers its output columns only)."""
    fold = grid.t2 == 1

    def grad(k, sb):
        dz = dzs[k]
        if not fold:
            if relu:
                dz = relu_part(part).backward(sb, dz)
            if "bias" in part.keys:
                sb.grad(part.keys["bias"], _column_sums(sb, dz, scoped(part, "bias_grad")))
        return sb.saved(f"linear/{part.scope}").backward(sb, dz, need_dx)

    dx = each(b, grid, builds, scoped(part, "shards backward"), grad)
    if not need_dx:
        return None
    return grid.all_reduce(b.seq, b.name(scoped(part, "input_grad/all_reduce/t1")), dx, 1)


def row(b, grid, builds, part, xs: dict) -> dict:
    """A row-parallel Linear part: shard (i1, i2) multiplies its input columns (its t1
    block: heads or feed-forward columns) into its t2 block of outputs; all-reduced over
    t1 (the sublayer's all-reduce), then the bias on every shard."""
    y = each(b, grid, builds, scoped(part, "shards"),
             lambda k, sb: linear(builds, part, k, False).forward(sb, xs[k]))
    y = grid.all_reduce(b.seq, b.name(scoped(part, "all_reduce/t1")), y, 1)
    if "bias" not in part.keys:
        return y
    return each(b, grid, builds, scoped(part, "bias"), lambda k, sb: popops.map(
        sb.graph, _1 + _2, [y[k], sb.params[part.keys["bias"]]], sb.seq,
        sb.name(scoped(part, "bias"))))


def row_grad(b, grid, builds, part, dys: dict) -> dict:
    """Its gradients per shard, and the input gradient all-reduced over t2 (t2 > 1: each
    shard's covers its t2 block of outputs only)."""
    def grad(k, sb):
        if "bias" in part.keys:
            sb.grad(part.keys["bias"], _column_sums(sb, dys[k], scoped(part, "bias_grad")))
        return sb.saved(f"linear/{part.scope}").backward(sb, dys[k])

    dx = each(b, grid, builds, scoped(part, "shards backward"), grad)
    return grid.all_reduce(b.seq, b.name(scoped(part, "input_grad/all_reduce/t2")), dx, 2)


# --- dropout, drawn on the whole tensor ------------------------------------------------
def dropout(b, grid, part, xs: dict, dim: int, join) -> dict:
    """part (a Dropout) on the pieces xs, split over grid dimension dim: each group's
    pieces joined into the whole tensor (join: (whole, cut back)), dropped there as one
    IPU drops it (the same stream, the same element indices), so the masks are the
    one-IPU run's; every group at once."""
    p = part.layer.p
    if not b.train or p == 0.0:
        return xs
    sub = b.part(part.scope, {}, part.stream)
    out, masks, seqs = {}, {}, []
    for group in grid.groups(dim):
        s = prog.Sequence()
        whole, cut = join([xs[k] for k in group])
        y, mask = poprand.dropout(b.graph, whole, p, b.seed, s, sub.name("dropout"),
                                  seed_modifier=sub.seed_modifier)
        for i, k in enumerate(group):
            out[k], masks[k] = cut(y, i), cut(mask, i)
        seqs.append(s)
    b.seq.add(parallel(b.graph, seqs, sub.name("dropout")))
    b.save(**{f"mask/{part.scope}": masks})
    return out


def dropout_grad(b, grid, builds, part, dys: dict) -> dict:
    """dL/dx of dropout on every shard, with its piece of the mask."""
    p = part.layer.p
    if not b.train or p == 0.0:
        return dys
    masks = b.saved(f"mask/{part.scope}")
    return each(b, grid, builds, f"{part.scope}/dropout_grad", lambda k, sb: (
        poprand.dropout_input_gradient(sb.graph, dys[k], masks[k], p, sb.seq,
                                       sb.name(f"{part.scope}/dropout_grad"))))


def add(b, grid, sbs, xs: dict, ys: dict, what: str) -> dict:
    """xs + ys on every shard (a residual)."""
    return each(b, grid, sbs, what, lambda k, sb: popops.map(
        sb.graph, _1 + _2, [xs[k], ys[k]], sb.seq, sb.name(what)))


# --- layer norm ---------------------------------------------------------------------------
def layer_norm(b, grid, sbs, part, xs: dict) -> dict:
    """LayerNorm on every shard's copy; t2 > 1: over its column block, the row statistics
    all-reduced over t2 (PopXL's LayerNormDistributed)."""
    if grid.t2 == 1:
        return each(b, grid, sbs, scoped(part, "shards"), lambda k, sb: part.forward(sb, xs[k]))
    d, eps = part.layer.dim, part.layer.eps
    key = f"norm/{part.scope}"

    def sums(k, sb):
        x = xs[k] if xs[k].dtype == FLOAT else popops.cast(sb.graph, xs[k], FLOAT, sb.seq,
                                                           sb.name(scoped(part, "float")))
        sb.save(**{f"{key}/x": x})
        return popops.reduce(sb.graph, x, [x.rank - 1], "add", sb.seq,
                             sb.name(scoped(part, "sum")))

    total = _statistics(b, grid, sbs, part, sums, "mean")

    def squares(k, sb):
        x = sb.saved(f"{key}/x")
        mean = popops.map(sb.graph, _1 / float(d), [total[k]], sb.seq,
                          sb.name(scoped(part, "mean")))
        centred = popops.map(sb.graph, _1 - _2, [x, _per_row(mean)], sb.seq,
                             sb.name(scoped(part, "centred")))
        sb.save(**{f"{key}/centred": centred})
        return popops.reduce(sb.graph, centred, [x.rank - 1], "square_add", sb.seq,
                             sb.name(scoped(part, "square_sum")))

    total = _statistics(b, grid, sbs, part, squares, "variance")

    def normalise(k, sb):
        inv_std = popops.map(sb.graph, 1.0 / E.sqrt(_1 / float(d) + float(eps)),
                             [total[k]], sb.seq, sb.name(scoped(part, "inv_std")))
        sb.save(**{f"{key}/inv_std": inv_std})
        w, bias = (sb.params[part.keys[n]] for n in ("weight", "bias"))
        return popops.map(sb.graph, E.cast(_1 * _2 * E.cast(_3, FLOAT)
                                           + E.cast(_4, FLOAT), xs[k].dtype),
                          [sb.saved(f"{key}/centred"), _per_row(inv_std), w, bias], sb.seq,
                          sb.name(scoped(part, "layer_norm")))

    return each(b, grid, sbs, scoped(part, "normalise"), normalise)


def _statistics(b, grid, sbs, part, fn, what: str) -> dict:
    """fn's partial row statistics on every shard, all-reduced over t2."""
    partial = each(b, grid, sbs, scoped(part, f"{what} sums"), fn)
    return grid.all_reduce(b.seq, b.name(scoped(part, f"{what}/all_reduce/t2")), partial, 2)


def layer_norm_grad(b, grid, sbs, part, dys: dict, need_dx: bool = True):
    """Its weight and bias gradients per shard, and dL/dx (t2 > 1: the rows' sums of
    g = dy * gamma and g * xhat all-reduced over t2, as one)."""
    if grid.t2 == 1:
        dx = each(b, grid, sbs, scoped(part, "shards backward"),
                  lambda k, sb: part.backward(sb, dys[k], need_dx))
        return dx if need_dx else None
    d = part.layer.dim
    key = f"norm/{part.scope}"

    def sums(k, sb):
        dy, inv_std = dys[k], sb.saved(f"{key}/inv_std")
        w = sb.params[part.keys["weight"]]
        xhat = popops.map(sb.graph, _1 * _2, [sb.saved(f"{key}/centred"), _per_row(inv_std)],
                          sb.seq, sb.name(scoped(part, "normalised")))
        g = popops.map(sb.graph, E.cast(_1, FLOAT) * E.cast(_2, FLOAT), [dy, w], sb.seq,
                       sb.name(scoped(part, "scaled_grad")))
        both = popops.map(sb.graph, _1 * _2, [g, xhat], sb.seq,
                          sb.name(scoped(part, "scaled_grad_x")))
        rows = xhat.rank - 1
        sb.save(**{f"{key}/xhat": xhat, f"{key}/g": g})
        dyx = popops.map(sb.graph, E.cast(E.cast(_1, FLOAT) * _2, dy.dtype), [dy, xhat],
                         sb.seq, sb.name(scoped(part, "dy_xhat")))
        lead = list(range(rows))
        sb.grad(part.keys["weight"], popops.reduce(sb.graph, dyx, lead, "add", sb.seq,
                                                   sb.name(scoped(part, "weight_grad"))))
        sb.grad(part.keys["bias"], popops.reduce(sb.graph, dy, lead, "add", sb.seq,
                                                 sb.name(scoped(part, "bias_grad"))))
        return concat([popops.reduce(sb.graph, t, [rows], "add", sb.seq,
                                     sb.name(scoped(part, "grad_sums"))).flatten()
                       for t in (g, both)])

    total = _statistics(b, grid, sbs, part, sums, "grad")
    if not need_dx:
        return None

    def dx(k, sb):
        n = total[k].num_elements() // 2
        shape = list(sb.saved(f"{key}/inv_std").shape) + [1]
        a, c = (total[k].slice(i * n, (i + 1) * n).reshape(shape) for i in range(2))
        return popops.map(sb.graph, E.cast(_1 * (_2 - _3 / float(d) - _4 * (_5 / float(d))),
                                           dys[k].dtype),
                          [_per_row(sb.saved(f"{key}/inv_std")), sb.saved(f"{key}/g"), a,
                           sb.saved(f"{key}/xhat"), c], sb.seq,
                          sb.name(scoped(part, "input_grad")))

    return each(b, grid, sbs, scoped(part, "input_grad"), dx)


def _per_row(t):
    """t [..] as [.., 1]: one value per row, broadcast along it."""
    return t.reshape(list(t.shape) + [1])


def _column_sums(b, dy, what: str):
    """dy's sums over every row: a Linear's bias gradient [n]."""
    n = dy.shape[-1]
    return popops.reduce(b.graph, dy.reshape([dy.num_elements() // n, n]), [0], "add", b.seq,
                         b.name(what))


__all__ = ["Whole", "scoped", "last_axis", "heads_axis", "each", "linear", "relu_part", "column",
           "column_grad", "row", "row_grad", "dropout", "dropout_grad", "add", "layer_norm",
           "layer_norm_grad"]
