"""The end of a placed model's step as nn builds it: the weights' fp16 copies, a pipeline's
accumulators, the gradients combined over the replicas by gcl's ring, the optimizer.

gcl's ring (gcl/collectives.py) over a flat tensor of n elements and r replicas: chunks of
m = ⌈n/r⌉, two buffers `recv` and `mine` of m elements (element k where the tensor's element
k·r lives); r − 1 reduce-scatter steps, each a cross-replica copy (a chunk or `recv` to the
next replica's `recv`, the replica's own chunk into `mine` on its own tiles) and a combining
map; r − 1 all-gather steps, the first also copying the replica's result into its own output.
A cross-replica copy's step is a sync, the on-chip exchange of its copies on the replica's own
tiles, the IPU-Links (the slowest pair's link, or a tile's exchange port when one tile holds
much of the chunk: machine.cost.exchange_cost's rule) and the on-tile copies. With RTS
(nn/sharding.py) the gradients are reduce-scattered into this replica's shard (LAMB: each
tensor padded to r chunks on its own, in the shards' order) and the shard of the weights,
mapped linearly, is all-gathered into the layers' weights at the step's start.
"""
from __future__ import annotations

import numpy as np

from ..machine.cost import exchange_cost
from ..poplar import FLOAT
from ..popops import expr as E
from . import ops
from .placed import Placed, concat


def update_placed(walk, ipu, layers, total: int) -> int:
    """The update of these layers (their weights and gradients in state_dict order) on this
    stage's IPU; returns the cycles of the replicas' ring of the `total` gradients of the
    replica's phase (all stages': a chunk is wherever its gradients are, its step as long
    as the slowest copy)."""
    m, mc = walk.m, walk.mc
    keys = [(i, name, shape) for i in layers for name, shape in walk.weights_of(i)]
    if not keys:
        return 0
    weights = concat([walk.layers[i].master(ipu, name, shape).flatten()
                      for i, name, shape in keys])
    grads = concat([mc.once(("grad", i, name), lambda: None).flatten() for i, name, _ in keys])
    if mc.E == 2:
        ops.map_op(ipu, "weights/to_half", E.cast(E._1, mc.dtype), [weights])
    if m.pipeline > 1:
        ops.map_op(ipu, "grad_sum/zero", E.const(0), [grads], in_place=True)
    sizes = [int(np.prod(shape)) for _, _, shape in keys]
    ring = Ring(walk, ipu, total, lambda: _free_gradients(ipu, layers))
    if m.rts:
        weights, grads, sizes = ring.sharded(weights, grads, sizes, walk.opt.norms)
    elif m.replicas > 1:
        out = mc.addr.like(grads)
        ring.all_reduce(grads, out, "all_reduce")
        grads = out
    off_chip = m.optimizer_state == "off-chip" or m.phased     # phases stream it too
    walk.opt.update_placed(ipu, weights, grads, sizes, ring if m.rts else None, off_chip)
    if walk.dropout:
        ops.map_op(ipu, "dropout/next_seed", E._1 + 1, [ipu.seed()[:1]], in_place=True)
    for key in [k for k in ipu.held if isinstance(k, tuple) and k[0] == "ring"]:
        ipu.free(key)
    return ring.cycles


def _free_gradients(ipu, layers) -> None:
    """The layers' weight gradients after their last read (the ring's reduce-scatter)."""
    for key in [k for k in ipu.held if isinstance(k, tuple) and k[0] == "wgrad"
                and k[1] in layers]:
        ipu.free(key)


class Ring:
    """gcl's ring over the replicas, priced from where its tensors are (see the module)."""

    def __init__(self, walk, ipu, total: int, read=lambda: None):
        self.walk, self.ipu, self.mc = walk, ipu, walk.mc
        self.r = walk.m.replicas
        self.cycles = 0
        self.total = total          # the ring's elements over all stages
        self.read = read            # called when the reduced tensor's last read has passed

    def _port(self, where: np.ndarray, nbytes: int) -> int:
        return int(np.bincount(where).max(initial=0)) * nbytes

    def _local(self, src, dst) -> int:
        """Cycles of copying src's elements to dst's tiles on the replica's own tiles."""
        n = min(src.elements, dst.elements)
        if not n:
            return 0
        cost = exchange_cost(self.mc.graph, src.where.ravel()[:n], dst.where.ravel()[:n],
                             np.full(n, src.nbytes), src.ids.ravel()[:n] * 8)
        return int(cost["exchange"].max(initial=0) + cost["on_tile_copy"].max(initial=0))

    def _step(self, size: int, nbytes: int, port: int, local: int = 0) -> int:
        """One cross-replica copy of a chunk of `size` elements (at least the ring's whole
        chunk, all stages', over one link)."""
        mc = self.mc
        target = mc.target
        link = self.walk.hop_cycles(max(size, -(-self.total // self.r)) * nbytes)
        ports = -(-port // target.exchange_bytes_per_cycle) + mc.cost.exchange_setup_cycles
        return mc.far_sync + local + max(link, ports if port else 0)

    def _buffers(self, flat: Placed, name: str):
        """`recv` and `mine`, and the combining map of each reduce-scatter step."""
        mc, r = self.mc, self.r
        n = flat.elements
        size = -(-n // r)
        tiles = flat.where[np.minimum(np.arange(size) * r, n - 1)]
        recv, mine = (mc.addr.new((size,), tiles, flat.dtype) for _ in range(2))
        self.ipu.hold(("ring", name, "recv"), recv, "gradients")
        self.ipu.hold(("ring", name, "mine"), mine, "gradients")
        ops.map_op(self.ipu, f"{name}/combine", E._1 + E._2, [recv, mine], in_place=True)
        self.ipu.repeat_last(r - 1)
        self.ipu.control(2 * (r - 1) * flat.tiles)
        return recv, mine, size

    def _chunks(self, t: Placed, size: int) -> list:
        return [t[c * size:min((c + 1) * size, t.elements)] for c in range(self.r)
                if c * size < t.elements]

    def reduce_scatter(self, flat: Placed, name: str) -> Placed:
        """The ring's first half into `recv` (returned): r − 1 steps."""
        recv, mine, size = self._buffers(flat, name)
        chunks = self._chunks(flat, size)
        own = max(self._local(c, mine) for c in chunks)
        E_ = flat.nbytes
        first = max(self._port(c.where, E_) for c in chunks)
        self.cycles += self._step(size, E_, max(first, self._port(recv.where, E_)), own)
        self.cycles += (self.r - 2) * self._step(size, E_, self._port(recv.where, E_), own)
        self.ipu.free(("ring", name, "mine"))
        self.read()
        return recv

    def all_gather(self, own: Placed, rows: Placed, size: int, times: int = 1) -> None:
        """The ring's second half: `own` into row c of `rows` on every replica, r − 1
        steps (the first also copying it into this replica's own row)."""
        chunks = self._chunks(rows, size)
        E_ = own.nbytes
        port = max(self._port(c.where, E_) for c in chunks)
        local = max(self._local(own, c) for c in chunks)
        step0 = self._step(size, E_, max(port, self._port(own.where, E_)), local)
        self.cycles += times * (step0 + (self.r - 2) * self._step(size, E_, port))

    def all_reduce(self, flat: Placed, out: Placed, name: str, total: int | None = None
                   ) -> None:
        """gcl.all_reduce of flat into out (total: the ring's elements over all stages)."""
        whole, self.total = self.total, total or self.total
        recv = self.reduce_scatter(flat, name)
        self.ipu.hold(("ring", name, "out"), out, "gradients")
        self.all_gather(recv, out.flatten(), recv.elements)
        self.ipu.free(("ring", name, "recv"))
        self.total = whole

    def sharded(self, weights: Placed, grads: Placed, sizes: list, per_tensor: bool):
        """RTS: (the shard, its reduce-scattered gradients, the sizes its optimizer sees)."""
        mc, r = self.mc, self.r
        parts = sizes if per_tensor else [sum(sizes)]
        chunks = [-(-n // r) for n in parts]
        shard = mc.addr.linear((sum(chunks),), FLOAT, mc.graph.num_tiles)
        if per_tensor:             # every tensor padded to r chunks, in the shards' order
            offsets = np.cumsum([0, *parts[:-1]])
            grads = concat([grads[o + i * c:o + min(n, (i + 1) * c)] for i in range(r)
                            for o, n, c in zip(offsets, parts, chunks)
                            if i * c < n])
            weights = concat([weights[o + i * c:o + min(n, (i + 1) * c)] for i in range(r)
                              for o, n, c in zip(offsets, parts, chunks) if i * c < n])
        gathers = 2 if self.walk.m.phased else 1
        self.all_gather(shard, weights, shard.elements, gathers)
        recv = self.reduce_scatter(grads, "grads/reduce_scatter")
        return shard, recv, chunks if per_tensor else [shard.elements]
