"""Lowering the programs that move data: tensor copies, host streams, remote buffers, copies
between replicas, and PrintTensor. Each becomes one step with its cost; a copy between tensors
is a compiled copy plan (one numba call per run)."""
from __future__ import annotations

import numpy as np

from ..errors import EngineError, ProgramError
from ..machine import bsp
from ..machine.exchange import CopyPlan
from .lower_compute import first_duplicate
from .state import DataStream, RemoteBuffer


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

    def action(state):
        for plan, key in plans:
            plan.run(state.arenas[key], state.arenas[key])
    step.action = action if plans else None
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
    n, name, storage = ids.size, stream.name, tensor.dtype.storage

    if to_device:
        def action(state):
            state.arenas[key][ids] = state.stream_read(name, n).astype(storage)
    else:
        def action(state):
            state.stream_write(name, state.arenas[key][ids])
    step.action = action
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
    if c.rep.r == 1:
        step.action = lambda state: state.print(p.title,
                                                state.arenas[key][ids].astype(t.dtype.host))
    else:   # one line (or block) per replica
        rep_ids = c.rep.addrs(key, ids.ravel()).reshape((c.rep.r,) + ids.shape)

        def action(state):
            values = state.arenas[key][rep_ids].astype(t.dtype.host)
            for i, v in enumerate(values):
                state.print(f"{p.title} [replica {i}]", v)
        step.action = action
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
    step.action = _remote_action(p.name, buf, key, ids, t.dtype.storage, to_buffer,
                                 np.repeat(np.arange(c.rep.r, dtype=np.int64), rows_per_replica),
                                 rows_at)
    c.add_step(step)
    c.touch(step, reads, writes)
    return step


def _remote_action(name, buf, key, ids, storage, to_buffer, replica_of_row, rows_at):
    """Move the rows (picked by the offset tensor at rows_at, else row 0) of every replica's
    buffer to or from the tensor's elements ids."""
    n, repeats = buf.num_elements, buf.repeats
    cols = np.arange(n, dtype=np.int64)

    def action(state):
        if rows_at is None:
            rows = np.zeros(replica_of_row.size, np.int64)
        else:
            rows = state.arenas[rows_at[0]][rows_at[1]].astype(np.int64)
            bad = np.flatnonzero((rows < 0) | (rows >= repeats))
            if bad.size:
                raise EngineError(
                    f"{name}: offset {rows[bad[0]]} (replica {replica_of_row[bad[0]]}) "
                    f"is outside remote buffer '{buf.name}', which has rows 0 to {repeats - 1}")
        flat = ((replica_of_row * repeats + rows)[:, None] * n + cols).ravel()
        store = state.remote[buf.name]
        if to_buffer:
            store[flat] = state.arenas[key][ids]
        else:
            state.arenas[key][ids] = store[flat].astype(storage)
    return action
