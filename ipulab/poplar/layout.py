"""Laying out tile memory after lowering: every allocation of every tile (variables, constants,
vertex state, exchange buffers, code), with the variables that are not always live sharing
addresses (liveness.py)."""
from __future__ import annotations

import numpy as np

from ..machine.memory import CATEGORY, TileMemory
from .liveness import Liveness, ProgramOrder, assign_offsets, lifetimes


def _cat(xs) -> np.ndarray:
    return np.concatenate(xs) if xs else np.zeros(0, np.int64)


def variable_placement(c) -> tuple[list, list]:
    """Per variable: the tiles holding it (on every replica) and its bytes on each."""
    var_tiles, var_bytes = [], []
    for v in c.st.variables:
        t = c.tile_of[v.dtype.storage.name][v.offset:v.offset + v.size]
        per_tile = c.rep.per_tile(np.bincount(t, minlength=c.T))
        nz = np.flatnonzero(per_tile)
        var_tiles.append(nz), var_bytes.append(per_tile[nz] * v.dtype.size)
    return var_tiles, var_bytes


def liveness(c, var_tiles: list, var_bytes: list) -> dict[int, np.ndarray]:
    """Find the variables that are not always live, their intervals in the program order and
    their offsets; keep what the memory views need as c.out.liveness. Returns {variable: its
    offset on each of its tiles} for the variables that are not always live (placed on
    replica 0's tiles; every replica the same)."""
    st, align = c.st, c.target.cost.alignment
    order = ProgramOrder(c.out.roots)
    touched, read_first, start, end = lifetimes(order, c.touches, len(st.variables))
    pinned = np.fromiter((v.is_constant for v in st.variables), bool, len(st.variables))
    for _, t in st.handles.values():
        pinned[c.var_index.of(t.dtype.storage.name, t.ids)] = True
    temp = np.flatnonzero(touched & ~read_first & ~pinned)
    tiles = [var_tiles[v] for v in temp.tolist()]
    nbytes = [-(-var_bytes[v] // align) * align for v in temp.tolist()]
    owners = _cat([np.full(t.size, v) for t, v in zip(tiles, temp.tolist())])
    c.out.liveness = Liveness(order, temp, start[temp], end[temp], _cat(tiles), _cat(nbytes),
                              owners, c.T)
    first = [t.size // c.rep.r for t in tiles]           # replica 0's allocations come first
    row = np.repeat(np.arange(temp.size), first)
    offsets = assign_offsets(start[temp], end[temp], row,
                             _cat([t[:n] for t, n in zip(tiles, first)]),
                             _cat([b[:n] for b, n in zip(nbytes, first)]))
    ends = np.cumsum(first)
    return {v: np.tile(offsets[e - n:e], c.rep.r) for v, e, n in zip(temp.tolist(), ends, first)}


def _overheads(c) -> list[tuple[str, str, np.ndarray]]:
    """(name, category, bytes per tile) of what is not a variable: vertex state, exchange
    buffers, codelet code (per codelet used on a tile) and control code (per active step)."""
    cost = c.target.cost
    code = cost.codelet_code_bytes * sum(c.code_tiles.values(), np.zeros(c.T, np.int64))
    control = np.zeros(c.T, np.int64)
    for step in c.out.steps:
        active = np.zeros(c.T, bool)
        for kind, cyc in step.phases:
            if kind != "sync":
                active |= cyc > 0
        control[active] += cost.control_code_bytes_per_step
    return [("vertex state", "vertex_state", c.rep.per_tile(c.vstate)),
            ("exchange buffers", "exchange_buffers", c.buffers),
            ("codelet code", "code", c.rep.per_tile(code)), ("control code", "code", control)]


def layout_memory(c) -> TileMemory:
    """Every allocation of every tile: variables (those that are not always live share
    addresses, see liveness()), constants, vertex state, exchange buffers and code."""
    var_tiles, var_bytes = variable_placement(c)
    offset_of = liveness(c, var_tiles, var_bytes)
    tiles, sizes, cats, owners, names = [], [], [], [], []
    shared = ([], [], [], [])   # tiles, bytes, owners, offsets
    for vi, v in enumerate(c.st.variables):
        nz, nbytes = var_tiles[vi], var_bytes[vi]
        names.append(v.name)
        if vi in offset_of:
            for out, x in zip(shared, (nz, nbytes, np.full(nz.size, vi), offset_of[vi])):
                out.append(x)
        else:
            tiles.append(nz), sizes.append(nbytes), owners.append(np.full(nz.size, vi))
            cats.append(np.full(nz.size, CATEGORY["constants" if v.is_constant
                                                  else "variables"]))
    for name, cat, per_tile in _overheads(c):
        nz = np.flatnonzero(per_tile)
        tiles.append(nz), sizes.append(per_tile[nz])
        cats.append(np.full(nz.size, CATEGORY[cat])), owners.append(np.full(nz.size, len(names)))
        names.append(name)
    return TileMemory(c.T, c.target.bytes_per_tile, c.target.cost.alignment, _cat(tiles),
                      _cat(sizes), _cat(cats), _cat(owners), names,
                      shared=tuple(_cat(x) for x in shared))
