"""Liveness: which variables need tile memory when, so that variables alive at different times
can share addresses (Poplar's "not always live" variables). Accounting only: the simulation
keeps every variable in its arena, so sharing never changes a result.

The compiled programs are laid out in one execution order: every step of every root program
gets a *position* (a compute set executed twice is one step at two positions; a loop body is
laid out once). Each step reads and writes variables (vertex fields by direction, copies from
source to destination, predicates are read). A variable is **not always live** when

- it is not a constant and no host handle (create_host_write / create_host_read) views it,
- some program touches it, and
- in every root program that touches it, its first touch is a write: its value never has to
  survive from an earlier run.

It then needs memory only over [first touch, last touch] in each root program that uses it
(the programs never run at the same time), and variables whose intervals never overlap share
addresses (assign_offsets, tile by tile). Control flow keeps the intervals safe:

- loops: a variable whose first touch in the body is a read is loop-carried: it needs memory
  over the whole loop (and is always live if nothing writes it before the loop); a variable the
  body writes first is redefined in every iteration and needs no memory between iterations;
- optional parts (If arms, which run one or the other, a RepeatWhile body, which may not run,
  a Repeat(0) body): a variable such a part reads before writing, or writes and is touched
  after it, may need its value from before the part, so it is read where the If or loop starts.
Elements are not tracked one by one: a write to part of a variable starts its life.
"""
from __future__ import annotations

import numpy as np

from ..machine import bsp
from ..machine.kernels import place_on_tiles

READ, WRITE = 0, 1


class VariableIndex:
    """Element ids -> the variables holding them: variable i occupies [offset, offset + size)
    of its dtype's arena."""

    def __init__(self, variables):
        self.num_variables = len(variables)
        by_arena: dict[str, list] = {}
        for i, v in enumerate(variables):
            if v.size:
                by_arena.setdefault(v.dtype.storage.name, []).append((v.offset, i))
        self._starts = {k: (np.array([o for o, _ in vs], np.int64),
                            np.array([i for _, i in vs], np.int64)) for k, vs in by_arena.items()}

    def _lookup(self, key: str, ids: np.ndarray) -> np.ndarray:
        starts, index = self._starts[key]
        return index[np.searchsorted(starts, ids, side="right") - 1]

    def _distinct(self, var: np.ndarray) -> np.ndarray:
        if var.size > self.num_variables:
            return np.flatnonzero(np.bincount(var, minlength=self.num_variables))
        return np.unique(var)

    def of(self, key: str, ids) -> np.ndarray:
        """The variables (sorted, each once) that hold any of the element ids of arena key."""
        ids = np.asarray(ids, np.int64).ravel()
        return self._distinct(self._lookup(key, ids)) if ids.size else np.zeros(0, np.int64)

    def of_segments(self, key: str, ids: np.ndarray, lens: np.ndarray,
                    picks: list[np.ndarray]) -> list[np.ndarray]:
        """ids is cut into consecutive segments of lens elements (the slots of a compute set);
        for each boolean pick over the segments: the variables holding any of its segments'
        elements. A segment within one variable is looked up by its ends, only the others (a
        view over several variables) element by element."""
        full = lens > 0
        if not full.any():
            return [np.zeros(0, np.int64) for _ in picks]
        st, ln = (np.cumsum(lens) - lens)[full], lens[full]
        v_lo = self._lookup(key, np.minimum.reduceat(ids, st))
        v_hi = self._lookup(key, np.maximum.reduceat(ids, st))
        one = v_lo == v_hi
        out = []
        for pick in picks:
            pick = pick[full]
            many = np.flatnonzero(pick & ~one)
            spread = ids[np.repeat(st[many] - np.cumsum(ln[many]) + ln[many], ln[many])
                         + np.arange(int(ln[many].sum()))]
            out.append(self._distinct(np.concatenate([v_lo[pick & one],
                                                      self._lookup(key, spread)])))
        return out


class ProgramOrder:
    """The positions of the lowered root programs, in execution order, and how control can pass
    between them (to find, for an executed trace, which position each step ran at).

    step[p], root[p]: the step index and root program at position p. regions: loops and optional
    parts, as (kind, first, last, extent_first, depth) position ranges. follow[p]: positions
    that can run right after p; starts: positions that can run first."""

    def __init__(self, roots):
        self.step: list[int] = []
        self.root: list[int] = []
        self.regions: list[tuple] = []
        self._follow: list[set] = []
        starts: set = set()
        self.root_end = []
        for r, node in enumerate(roots):
            first, _, _ = self._walk(node, 0)
            starts |= first
            self.root += [r] * (len(self.step) - len(self.root))
            self.root_end.append(len(self.step) - 1)
        self.starts = tuple(sorted(starts))
        self.follow = [tuple(sorted(f)) for f in self._follow]
        del self._follow
        at: dict[int, list] = {}
        for p, s in enumerate(self.step):
            at.setdefault(s, []).append(p)
        self.positions_of_step = {s: tuple(ps) for s, ps in at.items()}

    # --- building: each node gives (first positions, last positions, can run no step) ---------
    def _position(self, step: bsp.Step) -> int:
        self.step.append(step.index)
        self._follow.append(set())
        return len(self.step) - 1

    def _link(self, lasts, firsts) -> None:
        for p in lasts:
            self._follow[p] |= firsts

    def _walk(self, node, depth: int):
        if isinstance(node, bsp.Step):
            p = self._position(node)
            return {p}, {p}, False
        if isinstance(node, (bsp.Block, bsp.AtOnce)):
            first, last, empty = set(), set(), True
            for child in node.nodes:
                f, l_, e = self._walk(child, depth)
                self._link(last, f)
                first |= f if empty else set()
                last = l_ | (last if e else set())
                empty = empty and e
            return first, last, empty
        if isinstance(node, bsp.Loop):
            a = len(self.step)
            f, l_, e = self._walk(node.body, depth + 2)
            b = len(self.step) - 1
            if b >= a:
                self.regions.append(("loop", a, b, a, depth + 1))
                if node.count == 0:   # never runs: as optional as a branch arm
                    self.regions.append(("optional", a, b, a, depth + 2))
            if node.count == 0:
                return set(), set(), True
            if node.count > 1:
                self._link(l_, f)
            return f, l_, e
        if isinstance(node, bsp.Branch):
            q = self._position(node.predicate.step)
            arms = []
            for arm in (node.then, node.otherwise):
                a = len(self.step)
                f, l_, e = self._walk(arm, depth + 1)
                arms.append((a, len(self.step) - 1, f, l_, e))
            last = set()
            for a, b, f, l_, e in arms:
                if b >= a:
                    self.regions.append(("optional", a, b, q, depth + 1))
                self._follow[q] |= f
                last |= l_ | ({q} if e else set())
            return {q}, last, False
        if isinstance(node, bsp.WhileLoop):
            a = len(self.step)
            fc, lc, ec = self._walk(node.cond, depth + 2)
            q = self._position(node.predicate.step)
            b0 = len(self.step)
            fb, lb, eb = self._walk(node.body, depth + 2)
            b = len(self.step) - 1
            self.regions.append(("loop", a, b, a, depth + 1))
            if b >= b0:
                self.regions.append(("optional", b0, b, a, depth + 2))
            again = fc | ({q} if ec else set())     # where the next iteration starts
            self._link(lc, {q})
            self._follow[q] |= fb | (again if eb else set())
            self._link(lb, again)
            return again, {q}, False
        raise TypeError(f"not a lowered program node: {node!r}")

    # --- a trace -> positions ----------------------------------------------------------------
    def replay(self, trace) -> list[tuple]:
        """For each executed step index of one root program's run: the positions it can have
        run at (one, unless two positions of the same step are indistinguishable)."""
        out, cur, cache = [], None, {}
        for s in trace:
            nxt = cache.get((cur, s))
            if nxt is None:
                pool = self.starts if cur is None else {q for p in cur for q in self.follow[p]}
                nxt = tuple(sorted(p for p in pool if self.step[p] == s)) \
                    or self.positions_of_step.get(s, ())
                cache[(cur, s)] = nxt
            out.append(nxt)
            cur = nxt
        return out


def lifetimes(order: ProgramOrder, touches: dict, num_variables: int):
    """The rule of the module docstring applied to the reads and writes at every position.

    touches: step index -> (variables read, variables written). Loops and optional parts add
    reads where their variables must already hold a value (innermost first, so that they count
    for the enclosing ones). Returns (touched, read_first, start, end): per variable whether
    any program touches it and whether some root program reads it before writing it (always
    live); start/end: (variables, roots) first and last position of its interval in each root
    program (-1 where that root does not touch it)."""
    pos, var, kind = [], [], []
    for p, s in enumerate(order.step):
        reads, writes = touches.get(s, ((), ()))
        for vs, k in ((reads, READ), (writes, WRITE)):
            if len(vs):
                pos.append(np.full(len(vs), p, np.int64)), var.append(np.asarray(vs, np.int64))
                kind.append(np.full(len(vs), k, np.int8))
    cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dt))
    pos, var, kind = cat(pos, np.int64), cat(var, np.int64), cat(kind, np.int8)
    root_of = np.asarray(order.root, np.int64)
    root_end = np.asarray(order.root_end, np.int64)
    for rkind, a, b, ext, _ in sorted(order.regions, key=lambda r: -r[4]):   # innermost first
        inside = (pos >= a) & (pos <= b)
        first_var, first_kind = _first_events(pos[inside], var[inside], kind[inside])
        hoist = first_var[first_kind == READ]
        if rkind == "loop":     # carried into the next iteration, and out of the loop
            extra = [(hoist, a), (hoist, b)]
        else:                   # needed from before the branch if the part is skipped
            after = (pos > b) & (pos <= root_end[root_of[a]])
            later = np.intersect1d(first_var[first_kind == WRITE], var[after])
            extra = [(np.union1d(hoist, later), ext)]
        for vs, at in extra:
            pos = np.concatenate([pos, np.full(vs.size, at, np.int64)])
            var = np.concatenate([var, vs])
            kind = np.concatenate([kind, np.full(vs.size, READ, np.int8)])
    R = len(order.root_end)
    touched = np.zeros(num_variables, bool)
    touched[var] = True
    read_first = np.zeros(num_variables, bool)
    start = np.full((num_variables, R), -1, np.int64)
    end = np.full((num_variables, R), -1, np.int64)
    if pos.size:
        roots = root_of[pos]
        key = roots * num_variables + var
        fk, fkind = _first_events(pos, key, kind)
        read_first[fk[fkind == READ] % num_variables] = True
        order_ = np.lexsort((pos, key))
        k, p = key[order_], pos[order_]
        bounds = np.flatnonzero(np.r_[True, k[1:] != k[:-1]])
        ends = np.r_[bounds[1:], k.size] - 1
        vr, rr = k[bounds] % num_variables, k[bounds] // num_variables
        start[vr, rr], end[vr, rr] = p[bounds], p[ends]
    return touched, read_first, start, end


def _first_events(pos, var, kind):
    """Per variable (or key): its first event's kind; a read and a write at one position count
    as a read first (a step reads its inputs before it writes)."""
    if pos.size == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int8)
    order = np.lexsort((kind, pos, var))
    v = var[order]
    first = order[np.r_[True, v[1:] != v[:-1]]]
    return var[first], kind[first]


def assign_offsets(start: np.ndarray, end: np.ndarray, var: np.ndarray, tile: np.ndarray,
                   size: np.ndarray) -> np.ndarray:
    """Addresses for the variables that are not always live: a byte offset for each of their
    allocations (var[i]'s size[i] bytes on tile[i]) into its tile's not-always-live area.

    start/end: per variable (row) and root program (column), its interval, -1 where unused.
    On each tile the allocations are placed largest first, each at the lowest offset that
    meets none of those placed before it whose variables are live at the same time (in some
    root): variables live at other times, or on other tiles, may take the same bytes
    ("greedy by size", as memory planners for accelerators do)."""
    order = np.lexsort((var, -size, tile))
    offset = np.empty(var.size, np.int64)
    offset[order] = place_on_tiles(tile[order], var[order], size[order],
                                   np.ascontiguousarray(start), np.ascontiguousarray(end))
    return offset


class Liveness:
    """What the memory views need of a compile's liveness: the program order, the not-always-live
    variables (their intervals and per-tile bytes), and the bytes live at a position."""

    def __init__(self, order: ProgramOrder, variables: np.ndarray, start, end,
                 tiles, nbytes, owners, num_tiles: int):
        self.order = order
        self.variables = variables        # indices of the not-always-live variables (sorted)
        self.start, self.end = start, end  # per one of them and root program: its interval
        self.num_tiles = num_tiles
        # their allocations (tile, aligned bytes), grouped by variable: rows _bounds[i]:[i+1]
        by_owner = np.argsort(owners, kind="stable")
        self._tile, self._bytes = tiles[by_owner], nbytes[by_owner]
        row = np.searchsorted(variables, owners[by_owner])
        self._bounds = np.searchsorted(row, np.arange(variables.size + 1))

    def live_bytes(self, positions):
        """Yield (position, per-tile bytes of the not-always-live variables live there) for the
        given positions in increasing order: one sweep over the intervals (do not keep the
        array: it is updated in place)."""
        i_var, i_root = np.nonzero(self.start >= 0)
        s, e = self.start[i_var, i_root], self.end[i_var, i_root]
        by_start, by_end = np.argsort(s, kind="stable"), np.argsort(e, kind="stable")
        s, e = s[by_start], e[by_end]
        cur = np.zeros(self.num_tiles, np.int64)
        added = removed = 0
        for p in positions:
            k = int(np.searchsorted(s, p, side="right"))      # started at or before p
            self._add(cur, i_var[by_start[added:k]], 1)
            added, k = k, int(np.searchsorted(e, p, side="left"))   # ended before p
            self._add(cur, i_var[by_end[removed:k]], -1)
            removed = k
            yield p, cur

    def _add(self, cur, vs, sign) -> None:
        if vs.size == 0:
            return
        idx = np.concatenate([np.arange(self._bounds[v], self._bounds[v + 1]) for v in vs])
        if idx.size:
            cur += sign * np.bincount(self._tile[idx], weights=self._bytes[idx],
                                      minlength=self.num_tiles).astype(np.int64)
