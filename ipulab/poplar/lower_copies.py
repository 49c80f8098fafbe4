"""Lowering the programs that move data: tensor copies, host streams, remote buffers, copies
between replicas, and PrintTensor. Each becomes one step with its cost; a copy between tensors
is a compiled copy plan (one numba call per run)."""
from __future__ import annotations

import numpy as np

from ..errors import EngineError, ProgramError
from ..machine import bsp
from ..machine.exchange import CopyPlan
from .actions import CopyAction, RingAction
from .lower_compute import first_duplicate
from .state import DataStream, RemoteBuffer
from .types import FLOAT


def copy(c, p) -> bsp.Step:
    """A Copy: between tensors (an exchange), or to or from a stream or a remote buffer."""
    src, dst = p.src, p.dst
    if isinstance(src, RemoteBuffer) or isinstance(dst, RemoteBuffer):
        return remote_copy(c, p)
    if isinstance(src, DataStream) or isinstance(dst, DataStream):
        return stream_copy(c, p)
    key = src.dtype.storage.name
    s, d = src.ids.ravel(), dst.ids.ravel()
    check_destination(c, d, key, dst, p.name)
    plan = c.rep.plan(CopyPlan(c.target, s, d, c.tile_of[key][s], c.tile_of[key][d],
                               src.dtype.size), key)
    return _exchange_step(c, "copy", p.name, [(plan, key)], [(key, s)], [(key, d)])


def _exchange_step(c, kind: str, name: str, plans, reads, writes) -> bsp.Step:
    """A step that runs copy plans (with their arena keys) as one exchange."""
    step = bsp.Step(kind, name, c.T)
    on_tile = c.plan_phases(step, plans)
    step.add("compute", on_tile)
    step.compute_excluding_idle = on_tile
    step.action = CopyAction(plans) if plans else None
    c.add_step(step)
    c.record_traffic(step.index, [plan for plan, _ in plans])
    c.touch(step, reads, writes)
    return step


def check_destination(c, d, key, dst, what) -> None:
    if first_duplicate(d) is not None:
        raise ProgramError(f"{what}: destination '{dst.name}' names some elements twice "
                           "(a broadcast view cannot be written)")
    if c.is_const[key][d].any():
        raise ProgramError(f"{what}: destination '{dst.name}' is a constant")


def stream_copy(c, p) -> bsp.Step:
    to_device = isinstance(p.src, DataStream)
    stream, tensor = (p.src, p.dst) if to_device else (p.dst, p.src)
    key = tensor.dtype.storage.name
    ids = np.ascontiguousarray(tensor.ids.ravel())
    if to_device:
        check_destination(c, ids, key, tensor, p.name)
    tiles = c.rep.tiles(c.tile_of[key][ids])
    touch = [(key, ids)]
    ids = c.rep.addrs(key, ids)   # replica i's block is the i-th of the host's r blocks
    step = bsp.Step("stream_copy", p.name, c.T)
    step.add("sync", c.target.sync_cycles("external"))
    host = np.zeros(c.T, np.int64)
    # [MODEL] every replica's block crosses the system's one host link
    host[np.unique(tiles)] = c.target.host_cycles(ids.size * tensor.dtype.size)
    step.add("host_exchange", host)
    step.action = StreamAction(stream.name, key, ids, tensor.dtype.storage, to_device)
    c.add_step(step)
    if to_device:
        c.touch(step, writes=touch)
    else:
        c.touch(step, reads=touch)
    return step


def print_tensor(c, p) -> bsp.Step:
    t = p.tensor
    key, ids = t.dtype.storage.name, t.ids
    step = bsp.Step("print", p.name, c.T)
    host = np.zeros(c.T, np.int64)
    host[np.unique(c.rep.tiles(c.tile_of[key][ids.ravel()]))] = \
        c.target.host_cycles(c.rep.r * t.num_elements() * t.dtype.size)
    step.add("sync", c.target.sync_cycles("external"))
    step.add("host_exchange", host)
    rep_ids = ids if c.rep.r == 1 else \
        c.rep.addrs(key, ids.ravel()).reshape((c.rep.r,) + ids.shape)
    step.action = PrintAction(p.title, key, rep_ids, t.dtype.host, c.rep.r)
    c.add_step(step)
    c.touch(step, [(key, ids)])
    return step


def cross_replica_copy(c, p) -> bsp.Step:
    """Copies between replicas (built by gcl): ONE exchange, over IPU-Links between
    replicas on different IPUs. Addresses and tiles are given per replica, explicitly."""
    src_all, dst_all, st_all, dt_all, reads, writes = [], [], [], [], [], []
    key, elem_bytes = None, 1
    V, R = c.rep.V, c.rep.R
    for a, src, b, dst in p.moves:
        for x in (a, b):
            if not 0 <= x < c.rep.r:
                raise ProgramError(f"{p.name}: replica {x} does not exist (the graph has "
                                   f"{c.rep.r} replica(s))")
        key, elem_bytes = src.dtype.storage.name, src.dtype.size
        s, d = src.ids.ravel(), dst.ids.ravel()
        if c.is_const[key][d].any():
            raise ProgramError(f"{p.name}: destination '{dst.name}' is a constant")
        src_all.append(s + a * V[key]), dst_all.append(d + b * V[key])
        reads.append((key, s)), writes.append((key, d))
        st_all.append(c.tile_of[key][s] + a * R)
        dt_all.append(c.tile_of[key][d] + b * R)
    cat = (lambda xs: np.concatenate(xs) if xs else np.zeros(0, np.int64))
    d_all = cat(dst_all)
    if first_duplicate(d_all) is not None:
        raise ProgramError(f"{p.name}: some elements are written twice")
    plan = CopyPlan(c.target, cat(src_all), d_all, cat(st_all), cat(dt_all), elem_bytes)
    return _exchange_step(c, "cross_replica_copy", p.name, [(plan, key)] if key else [],
                          reads, writes)


def ring_all_reduce(c, p):
    """gcl's ring all-reduce: its copies and combines lowered one by one (each a step of the
    profile). In compiled mode a FLOAT sum also runs them in one kernel call (bsp.AtOnce),
    when out is flat itself or apart from it; else they run one by one, as a Block."""
    block = bsp.Block(c.lower(x) for x in p.programs)
    steps = list(bsp.inlined(block.nodes))
    if (c.mode != "compiled" or p.combine != "add" or p.flat.dtype != FLOAT
            or not all(isinstance(s, bsp.Step) for s in steps)):
        return block
    key = p.flat.dtype.storage.name
    flat, out, recv, mine = (np.ascontiguousarray(t.ids.ravel(), np.int64)
                             for t in (p.flat, p.out, p.recv, p.mine))
    apart = [np.unique(x) for x in ((flat, recv, mine) if np.array_equal(out, flat)
                                    else (flat, out, recv, mine))]
    everything = np.concatenate(apart)
    if np.unique(everything).size < everything.size or \
            (c.rep.strides(key, everything) != c.rep.V[key]).any():
        return block
    return bsp.AtOnce(steps, RingAction(key, flat, out, recv, mine, c.rep.V[key],
                                        np.asarray(p.size, np.int64)))


def remote_copy(c, p) -> bsp.Step:
    """Tensor <-> remote buffer rows, every replica its own buffer; costed on the
    streaming-memory bandwidth of each machine (shared by the machine's IPUs)."""
    to_buffer = isinstance(p.dst, RemoteBuffer)
    buf, t = (p.dst, p.src) if to_buffer else (p.src, p.dst)
    key = t.dtype.storage.name
    ids = t.ids.ravel()
    if not to_buffer:
        check_destination(c, ids, key, t, p.name)
    tiles = c.rep.tiles(c.tile_of[key][ids])
    reads, writes = ([(key, ids)], []) if to_buffer else ([], [(key, ids)])
    ids = c.rep.addrs(key, ids)
    rows_per_replica = 1 if p.offset is None else p.offset.num_elements()
    rows_at = None
    if p.offset is not None:
        okey = p.offset.dtype.storage.name
        reads.append((okey, p.offset.ids.ravel()))
        rows_at = (okey, c.rep.addrs(okey, p.offset.ids.ravel()))
    step = bsp.Step("remote_copy", p.name, c.T)
    step.add("sync", c.target.sync_cycles("external"))
    machine = c.target.machine_of(tiles)
    per_machine = np.bincount(machine, minlength=c.target.system.num_machines)
    cycles = np.array([c.target.streaming_cycles(int(b) * t.dtype.size)
                       for b in per_machine], np.int64)
    host = np.zeros(c.T, np.int64)
    host[tiles] = cycles[machine]
    step.add("host_exchange", host)
    step.action = RemoteAction(p.name, buf.name, buf.num_elements, buf.repeats, key, ids,
                               t.dtype.storage, to_buffer,
                               np.repeat(np.arange(c.rep.r, dtype=np.int64), rows_per_replica),
                               rows_at)
    c.add_step(step)
    c.out.streaming[step.index] = ids.size * t.dtype.size
    c.touch(step, reads, writes)
    return step


# --- what the steps do when they run (plain data, so a compiled executable can be stored) -----
class StreamAction:
    """A host FIFO copy: elements ids of arena key from (to_device) or to the stream."""

    def __init__(self, stream: str, key: str, ids, storage, to_device: bool):
        self.stream, self.key, self.ids = stream, key, ids
        self.storage, self.to_device = storage, to_device

    def __call__(self, state) -> None:
        arena = state.arenas[self.key]
        if self.to_device:
            arena[self.ids] = state.stream_read(self.stream, self.ids.size).astype(self.storage)
        else:
            state.stream_write(self.stream, arena[self.ids])


class PrintAction:
    """PrintTensor: the values at ids (one block per replica when replicated)."""

    def __init__(self, title: str, key: str, ids, host_dtype, replicas: int):
        self.title, self.key, self.ids = title, key, ids
        self.host_dtype, self.replicas = host_dtype, replicas

    def __call__(self, state) -> None:
        values = state.arenas[self.key][self.ids].astype(self.host_dtype)
        if self.replicas == 1:
            state.print(self.title, values)
            return
        for i, v in enumerate(values):       # one line (or block) per replica
            state.print(f"{self.title} [replica {i}]", v)


class RemoteAction:
    """Move the rows (picked by the offset tensor at rows_at, else row 0) of every replica's
    remote buffer to or from the tensor's elements ids."""

    def __init__(self, name, buffer, n, repeats, key, ids, storage, to_buffer, replica_of_row,
                 rows_at):
        self.name, self.buffer, self.n, self.repeats = name, buffer, n, repeats
        self.key, self.ids, self.storage, self.to_buffer = key, ids, storage, to_buffer
        self.replica_of_row, self.rows_at = replica_of_row, rows_at

    def _rows(self, state) -> np.ndarray:
        if self.rows_at is None:
            return np.zeros(self.replica_of_row.size, np.int64)
        rows = state.arenas[self.rows_at[0]][self.rows_at[1]].astype(np.int64)
        bad = np.flatnonzero((rows < 0) | (rows >= self.repeats))
        if bad.size:
            raise EngineError(
                f"{self.name}: offset {rows[bad[0]]} (replica {self.replica_of_row[bad[0]]}) "
                f"is outside remote buffer '{self.buffer}', which has rows 0 to "
                f"{self.repeats - 1}")
        return rows

    def __call__(self, state) -> None:
        rows = self._rows(state)
        flat = ((self.replica_of_row * self.repeats + rows)[:, None] * self.n
                + np.arange(self.n, dtype=np.int64)).ravel()
        store = state.remote[self.buffer]
        if self.to_buffer:
            store[flat] = state.arenas[self.key][self.ids]
        else:
            state.arenas[self.key][self.ids] = store[flat].astype(self.storage)
