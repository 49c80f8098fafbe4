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
from ..poplar import FLOAT, Regions, program as prog
from ..poplar.tensor import Tensor
from ..poplar.types import as_type
from ..poplar.vertices import ragged
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
    """Block boundaries of a plan, the tiles of its grid, and the blocked layout of tensors
    over it. Tile t of the plan works on A block (gi, i, kk) and B block (gi, kk, j), with
    (gi, i, j, kk) = np.unravel_index(t, (pg, pm, pn, pk)) (plan.tile's order)."""

    def __init__(self, plan: MatMulPlan):
        self.plan = plan
        self.g, self.m, self.k, self.n = (plan.bounds(d) for d in ("groups", "m", "k", "n"))
        s = plan.split
        self.grid = (s.groups, s.m, s.n, s.k)
        self.gi, self.i, self.j, self.kk = np.unravel_index(
            np.arange(int(np.prod(self.grid)), dtype=np.int64), self.grid)

    def layout(self, rows: np.ndarray, cols: np.ndarray):
        """Blocked layout of a (groups, R, C) tensor cut at the given row and column bounds:
        (ids of the logical tensor into the flat variable, start of each block [gi, r, c]).
        The blocks are stored one after another in (gi, r, c) order, each row-major."""
        extent = [np.diff(b) for b in (self.g, rows, cols)]
        sizes = extent[0][:, None, None] * extent[1][None, :, None] * extent[2][None, None, :]
        starts = (np.cumsum(sizes) - sizes.ravel()).reshape(sizes.shape)
        axes = []
        for bounds, ext in zip((self.g, rows, cols), extent):
            idx = np.arange(bounds[-1], dtype=np.int64)
            block = np.searchsorted(bounds, idx, side="right") - 1
            axes.append((block, idx - bounds[block], ext[block]))
        (bg, og, _), (br, orow, er), (bc, oc, ec) = axes
        ids = (starts[bg[:, None, None], br[None, :, None], bc[None, None, :]]
               + (og[:, None, None] * er[None, :, None] + orow[None, :, None])
               * ec[None, None, :] + oc[None, None, :])
        return ids, starts

    def tile(self, gi, i, j, kk):
        """plan.tile for arrays of block coordinates."""
        _, pm, pn, pk = self.grid
        return ((gi * pm + i) * pn + j) * pk + kk


def _new_blocked(g, dtype, shape3, rows, cols, blocks: Blocks, name: str):
    """A variable in blocked layout: (flat variable, logical (groups, R, C) view, block starts)."""
    var = g.add_variable(dtype, [int(np.prod(shape3))], name)
    ids, starts = blocks.layout(rows, cols)
    return var, var.element_view(ids, name), starts


def _shape_back(t: Tensor, grouped: bool, name: str) -> Tensor:
    return t if grouped else t.element_view(np.arange(t.num_elements()).reshape(t.shape[1:]),
                                            name)


def _piece(q: np.ndarray, rows: np.ndarray, pieces: int) -> np.ndarray:
    """For row q of a block of `rows` rows cut into `pieces` near-equal ranges (piece p is
    rows [p * rows // pieces, (p + 1) * rows // pieces)): the piece holding it."""
    return ((q + 1) * pieces - 1) // rows


def _map_pieces(g, var, starts, rows, cols, blocks: Blocks, lhs: bool) -> None:
    """Spread each block of an input by rows over the tiles that read it.

    An A block (gi, i, kk) is read by the pn tiles (gi, i, j, kk); a B block (gi, kk, j) by
    the pm tiles (gi, i, j, kk). Piece p of a block (a range of its rows) goes to the p-th of
    them."""
    s = blocks.plan.split
    pieces = s.n if lhs else s.m
    gi, r, c = np.unravel_index(np.arange(starts.size), starts.shape)
    bg = np.diff(blocks.g)[gi]
    nrows, width = bg * np.diff(rows)[r], np.diff(cols)[c]
    size = nrows * width
    block = np.repeat(np.arange(starts.size), size)
    q = (np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)) // \
        np.repeat(np.maximum(width, 1), size)
    p = _piece(q, nrows[block], pieces)
    # blocks are stored one after another in (gi, r, c) order: this is the variable's order
    g.set_tile_mapping(var, blocks.tile(gi[block], r[block], p, c[block]) if lhs else
                       blocks.tile(gi[block], p, c[block], r[block]))


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
    g.set_tile_mapping(c, np.repeat(np.arange(rows.shape[0], dtype=np.int64), rows[0].size))
    return c


def _check_acc(g, c, shape, dtype) -> None:
    g.check_tensor(c)
    if c.shape != shape or c.dtype is not dtype:
        raise GraphError(f"mat_mul_acc: c is {list(c.shape)} {c.dtype} but the product is "
                         f"{list(shape)} {dtype}")


def _rows_of(starts: np.ndarray, rows: np.ndarray, row0: np.ndarray, stride: int,
             col0: np.ndarray, width: np.ndarray):
    """Regions that are rows: for each item, rows row0 .. row0 + rows - 1 of a matrix whose
    rows are `stride` apart from `starts`, columns col0 .. col0 + width - 1 of each.
    Returns (begins, ends) of every row, item by item."""
    item = np.repeat(np.arange(rows.size), rows)
    row = ragged(row0, rows)
    begins = starts[item] + row * stride + col0[item]
    return begins, begins + width[item]


class _Product:
    """One planned product being built: its plan, blocks, and the block ranges of every tile
    (arrays indexed by tile: g0, g1, m0, m1, k0, k1, n0, n1)."""

    def __init__(self, g, a3, b3, plan: MatMulPlan, name: str):
        self.g, self.a3, self.b3, self.plan, self.name = g, a3, b3, plan, name
        bl = self.blocks = Blocks(plan)
        self.g0, self.g1 = bl.g[bl.gi], bl.g[bl.gi + 1]
        self.m0, self.m1 = bl.m[bl.i], bl.m[bl.i + 1]
        self.k0, self.k1 = bl.k[bl.kk], bl.k[bl.kk + 1]
        self.n0, self.n1 = bl.n[bl.j], bl.n[bl.j + 1]
        self.T = bl.gi.size

    def sizes(self) -> np.ndarray:
        """Elements of each tile's (groups, m, n) block of C."""
        return (self.g1 - self.g0) * (self.m1 - self.m0) * (self.n1 - self.n0)

    def products(self, seq, dest: Tensor, starts: np.ndarray) -> None:
        """Compute set 1: a MatMulBlock vertex per group on every tile; tile t writes its
        (groups, m, n) block to dest (flat) from starts[t]."""
        g, dtype = self.g, self.a3.dtype
        cls = codelets.matmul_block_codelet(dtype, macs_per_cycle(g.target, dtype))
        dm, dk, dn = self.m1 - self.m0, self.k1 - self.k0, self.n1 - self.n0
        dims = _constant_rows(g, "INT", np.stack([dm, dk, dn], 1), f"{self.name}.dims")
        per_tile = self.g1 - self.g0
        t = np.repeat(np.arange(self.T), per_tile)          # one vertex per tile and group
        q = np.arange(t.size) - np.repeat(np.cumsum(per_tile) - per_tile, per_tile)
        gg = self.g0[t] + q
        _, M, K = self.a3.shape
        N = self.b3.shape[2]
        a = _rows_of(gg * M * K, dm[t], self.m0[t], K, self.k0[t], dk[t])
        b = _rows_of(gg * K * N, dk[t], self.k0[t], N, self.n0[t], dn[t])
        c0 = np.asarray(starts, np.int64)[t] + q * dm[t] * dn[t]
        cs = g.add_compute_set(f"{self.name}/products")
        g.add_vertices(cs, cls, t, {
            "dims": Regions(dims, 3 * t, 3 * t + 3),
            "a": Regions(self.a3, *a, counts=dm[t]), "b": Regions(self.b3, *b, counts=dk[t]),
            "c": Regions(dest, c0, c0 + dm[t] * dn[t])})
        seq.add(prog.Execute(cs))

    def partials(self) -> tuple[Tensor, np.ndarray]:
        """The float partials: tile t's block contiguous from start[t], mapped to tile t."""
        sizes = self.sizes()
        start = np.concatenate([[0], np.cumsum(sizes)])
        var = self.g.add_variable(FLOAT, [int(start[-1])], f"{self.name}.partials")
        self.g.set_tile_mapping(var, np.repeat(np.arange(self.T, dtype=np.int64), sizes))
        return var, start

    def reduce(self, seq, part: Tensor, part_start, out: Regions, keep, acc_alpha=None):
        """Compute set 2: tile (gi, i, j, kk) sums chunk kk of C block (gi, i, j) from the pk
        partials into `out` (regions for the tiles `keep`, whose chunk is not empty)."""
        g, pk = self.g, self.plan.split.k
        t = np.flatnonzero(keep)
        c0, c1 = self.chunks()
        first = t - self.blocks.kk[t]
        begins = (part_start[first[:, None] + np.arange(pk)] + c0[t, None]).ravel()
        conns = {"partials": Regions(part, begins, begins + np.repeat(c1[t] - c0[t], pk),
                                     np.full(t.size, pk)), "out": out}
        cls = codelets.reduce_codelet(self.a3.dtype, acc_alpha is not None)
        if acc_alpha is not None:
            alpha = _constant_rows(g, FLOAT, np.full((self.T, 1), float(acc_alpha)),
                                   f"{self.name}.alpha")
            conns["alpha"] = Regions(alpha, t, t + 1)
        cs = g.add_compute_set(f"{self.name}/reduce")
        g.add_vertices(cs, cls, t, conns)
        seq.add(prog.Execute(cs))

    def chunks(self) -> tuple[np.ndarray, np.ndarray]:
        """[c0, c1) of each tile's chunk of its C block: chunk kk of pk."""
        size, pk, kk = self.sizes(), self.plan.split.k, self.blocks.kk
        return kk * size // pk, (kk + 1) * size // pk


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
        tile_start = out_starts[bl.gi, bl.i, bl.j]
    if pk == 1 and acc is None and dtype == FLOAT:       # the products write C directly
        p.products(seq, out, tile_start)
        return _shape_back(result, grouped, name)
    part, part_start = p.partials()
    p.products(seq, part, part_start[:-1])
    c0, c1 = p.chunks()
    keep = c1 > c0
    if acc is None:
        p.reduce(seq, part, part_start, Regions(out, (tile_start + c0)[keep],
                                                (tile_start + c1)[keep]), keep)
        return _shape_back(result, grouped, name)
    p.reduce(seq, part, part_start, _block_chunks(p, _grouping(acc[0], grouped), keep), keep,
             acc[1])
    return acc[0]


def _block_chunks(p: _Product, c3: Tensor, keep: np.ndarray) -> Regions:
    """For each kept tile: elements [c0, c1) of its C block of c3 (a (groups, M, N) tensor),
    in the block's row-major order."""
    _, M, N = c3.shape
    c0, c1 = p.chunks()
    t = np.flatnonzero(keep)
    e = ragged(c0[t], c1[t] - c0[t])                  # element within the tile's block
    item = np.repeat(t, c1[t] - c0[t])
    dm, dn = (p.m1 - p.m0)[item], (p.n1 - p.n0)[item]
    dg, rest = np.divmod(e, dm * dn)
    row, col = np.divmod(rest, dn)
    index = ((p.g0[item] + dg) * M + p.m0[item] + row) * N + p.n0[item] + col
    return Regions.from_indices(c3, index, c1[t] - c0[t])


def _map_blocks(g, var, starts, blocks: Blocks, chunks: int) -> None:
    """Map the result: C block (gi, i, j) cut into `chunks` pieces over tiles (gi, i, j, kk).
    The blocks are stored one after another in (gi, i, j) order."""
    gi, i, j = np.unravel_index(np.arange(starts.size), starts.shape)
    size = np.diff(blocks.g)[gi] * np.diff(blocks.m)[i] * np.diff(blocks.n)[j]
    block = np.repeat(np.arange(starts.size), size)
    e = np.arange(int(size.sum())) - np.repeat(np.cumsum(size) - size, size)
    g.set_tile_mapping(var, blocks.tile(gi[block], i[block], j[block],
                                        _piece(e, size[block], chunks)))


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
