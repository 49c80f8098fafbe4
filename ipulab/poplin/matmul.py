"""mat_mul, mat_mul_acc, grouped products, and inputs mapped the way a plan wants them.

Everything runs on tiles: one compute set of MatMulBlock vertices (one per group on each tile
of the plan), then, when k is split (or the result is HALF, or accumulated), one compute set of
ReducePartials vertices that sum the partials where the result lives. The exchanges between
them are the compiler's: a field connected to data on other tiles gets a buffer on its own tile.

Tensors made here use a *blocked* layout: the variable holds each block of the plan contiguously
(so a block is one field with no gather), and the tensor returned is a view with the logical
shape. Any other tensor works too; its blocks are then gathered by the exchange.
"""
from __future__ import annotations

import numpy as np

from ..errors import GraphError
from ..poplar import FLOAT, program as prog
from ..poplar.tensor import Tensor, concat
from ..poplar.types import as_type
from . import codelets
from .plan import MatMulPlan, macs_per_cycle, plan_mat_mul


# --- shapes and layouts ---------------------------------------------------------------------
def _grouping(t: Tensor, grouped: bool) -> Tensor:
    """t as a group of matrices: itself when grouped, else a view with one leading group."""
    return t if grouped else t.element_view(np.arange(t.num_elements()).reshape((1,) + t.shape),
                                            t.name)


def _grouped(shape, what: str) -> tuple[int, int, int]:
    shape = tuple(int(s) for s in shape)
    if len(shape) == 2:
        return (1,) + shape
    if len(shape) == 3:
        return shape
    raise GraphError(f"mat_mul: {what} must have rank 2 (a matrix) or 3 (groups of matrices), "
                     f"not shape {list(shape)}")


def _dims(a_shape, b_shape) -> tuple[int, int, int, int, bool]:
    """(groups, m, k, n, grouped) of a product, checking the shapes agree."""
    ga, m, k = _grouped(a_shape, "the left operand")
    gb, k2, n = _grouped(b_shape, "the right operand")
    grouped = len(tuple(a_shape)) == 3 or len(tuple(b_shape)) == 3
    if k != k2 or (grouped and ga != gb) or len(tuple(a_shape)) != len(tuple(b_shape)):
        raise GraphError(f"mat_mul: shapes {list(a_shape)} and {list(b_shape)} do not multiply "
                         "(need (m, k) @ (k, n), or (g, m, k) @ (g, k, n))")
    return ga, m, k, n, grouped


class Blocks:
    """Block boundaries of a plan, and the blocked layout of tensors over its grid."""

    def __init__(self, plan: MatMulPlan):
        self.plan = plan
        self.g, self.m, self.k, self.n = (plan.bounds(d) for d in ("groups", "m", "k", "n"))

    def tiles(self):
        """(tile, gi, i, j, kk) for every tile of the plan, in tile order."""
        s = self.plan.split
        for gi in range(s.groups):
            for i in range(s.m):
                for j in range(s.n):
                    for kk in range(s.k):
                        yield self.plan.tile(gi, i, j, kk), gi, i, j, kk

    def layout(self, rows: np.ndarray, cols: np.ndarray):
        """Blocked layout of a (groups, R, C) tensor cut at the given row and column bounds:
        (ids of the logical tensor into the flat variable, start of each block [gi, r, c])."""
        G, R, C = self.g[-1], rows[-1], cols[-1]
        ids = np.empty((G, R, C), np.int64)
        starts = np.zeros((self.g.size - 1, rows.size - 1, cols.size - 1), np.int64)
        off = 0
        for gi, (g0, g1) in enumerate(zip(self.g[:-1], self.g[1:])):
            for r, (r0, r1) in enumerate(zip(rows[:-1], rows[1:])):
                for c, (c0, c1) in enumerate(zip(cols[:-1], cols[1:])):
                    size = (g1 - g0) * (r1 - r0) * (c1 - c0)
                    ids[g0:g1, r0:r1, c0:c1] = np.arange(off, off + size).reshape(
                        g1 - g0, r1 - r0, c1 - c0)
                    starts[gi, r, c] = off
                    off += size
        return ids, starts


def _new_blocked(g, dtype, shape3, rows, cols, blocks: Blocks, name: str):
    """A variable in blocked layout: (flat variable, logical (groups, R, C) view, block starts)."""
    var = g.add_variable(dtype, [int(np.prod(shape3))], name)
    ids, starts = blocks.layout(rows, cols)
    return var, var.element_view(ids, name), starts


def _shape_back(t: Tensor, grouped: bool, name: str) -> Tensor:
    return t if grouped else t.element_view(np.arange(t.num_elements()).reshape(t.shape[1:]),
                                            name)


def _map_pieces(g, var, starts, rows, cols, blocks: Blocks, lhs: bool) -> None:
    """Spread each block of an input by rows over the tiles that read it.

    An A block (gi, i, kk) is read by the pn tiles (gi, i, j, kk); a B block (gi, kk, j) by the
    pm tiles (gi, i, j, kk). Piece p of a block (a range of its rows) goes to the p-th of them.
    """
    plan = blocks.plan
    s = plan.split
    mapping = [[] for _ in range(g.target.num_tiles)]
    bg = np.diff(blocks.g)
    for gi in range(s.groups):
        for r in range(rows.size - 1):
            for c in range(cols.size - 1):
                width = int(cols[c + 1] - cols[c])
                nrows = int(bg[gi] * (rows[r + 1] - rows[r]))
                pieces = s.n if lhs else s.m
                for p in range(pieces):
                    r0, r1 = p * nrows // pieces, (p + 1) * nrows // pieces
                    if r1 > r0 and width:
                        tile = plan.tile(gi, r, p, c) if lhs else plan.tile(gi, p, c, r)
                        b = int(starts[gi, r, c])
                        mapping[tile].append((b + r0 * width, b + r1 * width))
    g.set_tile_mapping(var, mapping)


def _create_input(g, dtype, a_shape, b_shape, name, options, lhs: bool) -> Tensor:
    dtype = as_type(dtype)
    G, M, K, N, grouped = _dims(a_shape, b_shape)
    plan = plan_mat_mul(g.target, M, K, N, dtype, options, groups=G)
    blocks = Blocks(plan)
    rows, cols = (blocks.m, blocks.k) if lhs else (blocks.k, blocks.n)
    shape3 = (G, M, K) if lhs else (G, K, N)
    var, view, starts = _new_blocked(g, dtype, shape3, rows, cols, blocks,
                                     name or ("matmul.lhs" if lhs else "matmul.rhs"))
    _map_pieces(g, var, starts, rows, cols, blocks, lhs)
    return _shape_back(view, grouped, view.name)


def create_mat_mul_input_lhs(g, dtype, a_shape, b_shape, name: str = "", options=None) -> Tensor:
    """A new (m, k) or (g, m, k) tensor mapped as plan_mat_mul wants the left operand: each
    block in one piece of the variable, spread over the tiles that read it. Give mat_mul the
    same options, so that it plans the same split."""
    return _create_input(g, dtype, a_shape, b_shape, name, options, lhs=True)


def create_mat_mul_input_rhs(g, dtype, a_shape, b_shape, name: str = "", options=None) -> Tensor:
    """A new (k, n) or (g, k, n) tensor mapped as plan_mat_mul wants the right operand (see
    create_mat_mul_input_lhs)."""
    return _create_input(g, dtype, a_shape, b_shape, name, options, lhs=False)


# --- the product ------------------------------------------------------------------------------
def _check(g, a, b, seq):
    for t, what in ((a, "left operand"), (b, "right operand")):
        if not isinstance(t, Tensor):
            raise GraphError(f"mat_mul: the {what} must be a Tensor, not {type(t).__name__}")
        g.check_tensor(t)
    if not isinstance(seq, prog.Sequence):
        raise GraphError(f"mat_mul adds its programs to a Sequence, not {type(seq).__name__}")
    if a.dtype is not b.dtype:
        raise GraphError(f"mat_mul: '{a.name}' is {a.dtype} but '{b.name}' is {b.dtype}")
    return _dims(a.shape, b.shape)


def _constant_rows(g, dtype, rows, name: str) -> Tensor:
    """A constant with one row per tile of the plan, row t mapped to tile t."""
    rows = np.asarray(rows)
    c = g.add_constant(dtype, list(rows.shape), rows, name)
    g.set_tile_mapping(c, [[(t * rows[0].size, (t + 1) * rows[0].size)]
                           for t in range(rows.shape[0])])
    return c


def _check_acc(g, c, shape, dtype) -> None:
    g.check_tensor(c)
    if c.shape != shape or c.dtype is not dtype:
        raise GraphError(f"mat_mul_acc: c is {list(c.shape)} {c.dtype} but the product is "
                         f"{list(shape)} {dtype}")


class _Product:
    """One planned product being built: its plan, blocks, and where its results go."""

    def __init__(self, g, a3, b3, plan: MatMulPlan, name: str):
        self.g, self.a3, self.b3, self.plan, self.name = g, a3, b3, plan, name
        self.blocks = Blocks(plan)
        self.tiles = list(self.blocks.tiles())

    def block_range(self, gi, i, j, kk):
        """(g0, g1, m0, m1, k0, k1, n0, n1) of tile (gi, i, j, kk)'s block product."""
        bl = self.blocks
        return (int(bl.g[gi]), int(bl.g[gi + 1]), int(bl.m[i]), int(bl.m[i + 1]),
                int(bl.k[kk]), int(bl.k[kk + 1]), int(bl.n[j]), int(bl.n[j + 1]))

    def products(self, seq, dest: Tensor, starts) -> None:
        """Compute set 1: a MatMulBlock vertex per group on every tile; tile (gi, i, j, kk)
        writes its (groups, m, n) block to dest (flat) from starts[t] (or starts[gi, i, j])."""
        g, dtype = self.g, self.a3.dtype
        cls = codelets.matmul_block_codelet(dtype, macs_per_cycle(g.target, dtype))
        ranges = [self.block_range(*x[1:]) for x in self.tiles]
        dims = _constant_rows(g, "INT", [[m1 - m0, k1 - k0, n1 - n0] for _, _, m0, m1, k0, k1,
                                         n0, n1 in ranges], f"{self.name}.dims")
        cs = g.add_compute_set(f"{self.name}/products")
        for (t, *_), (g0, g1, m0, m1, k0, k1, n0, n1) in zip(self.tiles, ranges):
            size, base = (m1 - m0) * (n1 - n0), int(starts[t])
            for q, gg in enumerate(range(g0, g1)):
                g.add_vertex(cs, cls, {
                    "dims": dims[t], "a": self.a3[gg, m0:m1, k0:k1].flatten(),
                    "b": self.b3[gg, k0:k1, n0:n1].flatten(),
                    "c": dest[base + q * size:base + (q + 1) * size]}, tile=t)
        seq.add(prog.Execute(cs))

    def partials(self) -> tuple[Tensor, np.ndarray]:
        """The float partials: tile t's block contiguous from start[t], mapped to tile t."""
        sizes = [(g1 - g0) * (m1 - m0) * (n1 - n0) for g0, g1, m0, m1, _, _, n0, n1 in
                 (self.block_range(*x[1:]) for x in self.tiles)]
        start = np.cumsum([0] + sizes)
        var = self.g.add_variable(FLOAT, [int(start[-1])], f"{self.name}.partials")
        self.g.set_tile_mapping(var, [[(int(start[t]), int(start[t + 1]))]
                                      for t in range(len(sizes))])
        return var, start

    def reduce(self, seq, part: Tensor, part_start, out_of, acc_alpha=None) -> None:
        """Compute set 2: tile (gi, i, j, kk) sums chunk kk of C block (gi, i, j) from the pk
        partials into out_of(gi, i, j, c0, c1) (a flat tensor of c1 - c0 elements)."""
        g, pk = self.g, self.plan.split.k
        accumulate = acc_alpha is not None
        cls = codelets.reduce_codelet(self.a3.dtype, accumulate)
        if accumulate:
            alpha = _constant_rows(g, FLOAT, [[float(acc_alpha)]] * len(self.tiles),
                                   f"{self.name}.alpha")
        cs = g.add_compute_set(f"{self.name}/reduce")
        for t, gi, i, j, kk in self.tiles:
            size = int(part_start[t + 1] - part_start[t])
            c0, c1 = kk * size // pk, (kk + 1) * size // pk
            if c1 == c0:
                continue
            first = t - kk
            conns = {"partials": concat([part[part_start[first + q] + c0:
                                              part_start[first + q] + c1] for q in range(pk)]),
                     "out": out_of(gi, i, j, c0, c1)}
            if accumulate:
                conns["alpha"] = alpha[t, 0]
            g.add_vertex(cs, cls, conns, tile=t)
        seq.add(prog.Execute(cs))


def _build(g, a, b, seq, name, options, acc=None):
    """The product's compute sets; returns the result (a new tensor, or acc's c updated)."""
    G, M, K, N, grouped = _check(g, a, b, seq)
    dtype, name = a.dtype, name or "matmul"
    shape = (G, M, N) if grouped else (M, N)
    if acc is not None:
        _check_acc(g, acc[0], shape, dtype)
    if M * N == 0:
        return g.add_variable(dtype, list(shape), name) if acc is None else acc[0]
    a3, b3 = (_grouping(t, grouped) for t in (a, b))
    plan = plan_mat_mul(g.target, M, K, N, dtype, options, groups=G, accumulate=acc is not None)
    p = _Product(g, a3, b3, plan, name)
    bl, pk = p.blocks, plan.split.k
    if acc is None:
        out, result, out_starts = _new_blocked(g, dtype, (G, M, N), bl.m, bl.n, bl, name)
        _map_blocks(g, out, out_starts, bl, chunks=pk)
    if pk == 1 and acc is None and dtype == FLOAT:       # the products write C directly
        p.products(seq, out, [out_starts[gi, i, j] for _, gi, i, j, _ in p.tiles])
        return _shape_back(result, grouped, name)
    part, part_start = p.partials()
    p.products(seq, part, part_start)
    if acc is None:
        p.reduce(seq, part, part_start, lambda gi, i, j, c0, c1:
                 out[int(out_starts[gi, i, j]) + c0:int(out_starts[gi, i, j]) + c1])
        return _shape_back(result, grouped, name)
    c3 = _grouping(acc[0], grouped)

    def c_chunk(gi, i, j, c0, c1):
        g0, g1, m0, m1, _, _, n0, n1 = p.block_range(gi, i, j, 0)
        return c3[g0:g1, m0:m1, n0:n1].flatten()[c0:c1]
    p.reduce(seq, part, part_start, c_chunk, acc[1])
    return acc[0]


def _map_blocks(g, var, starts, blocks: Blocks, chunks: int) -> None:
    """Map the result: C block (gi, i, j) cut into `chunks` pieces over tiles (gi, i, j, kk)."""
    plan = blocks.plan
    s = plan.split
    mapping = [[] for _ in range(g.target.num_tiles)]
    bg, bm, bn = np.diff(blocks.g), np.diff(blocks.m), np.diff(blocks.n)
    for gi in range(s.groups):
        for i in range(s.m):
            for j in range(s.n):
                size = int(bg[gi] * bm[i] * bn[j])
                b = int(starts[gi, i, j])
                for kk in range(chunks):
                    c0, c1 = kk * size // chunks, (kk + 1) * size // chunks
                    if c1 > c0:
                        mapping[plan.tile(gi, i, j, kk)].append((b + c0, b + c1))
    g.set_tile_mapping(var, mapping)


def mat_mul(g, a, b, seq, name: str = "", options=None) -> Tensor:
    """a @ b on tiles: (m, k) @ (k, n) -> (m, n), or grouped (g, m, k) @ (g, k, n) -> (g, m, n).

    Adds its compute sets to seq and returns the result, a new tensor mapped as the plan
    (poplin.plan_mat_mul) chose. options: see plan_mat_mul.
    """
    return _build(g, a, b, seq, name, options)


def mat_mul_grouped(g, a, b, seq, name: str = "", options=None) -> Tensor:
    """Grouped (batched) product: (g, m, k) @ (g, k, n) -> (g, m, n), one product per group."""
    if a.rank != 3 or b.rank != 3:
        raise GraphError(f"mat_mul_grouped takes rank-3 tensors, not {list(a.shape)} and "
                         f"{list(b.shape)}")
    return _build(g, a, b, seq, name, options)


def mat_mul_acc(g, c, alpha: float, a, b, seq, name: str = "", options=None) -> Tensor:
    """c += alpha * (a @ b) on tiles (c of the product's shape and type); returns c."""
    return _build(g, a, b, seq, name or "matmul_acc", options, acc=(c, alpha))
