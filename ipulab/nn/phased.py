"""Phased execution (TrainConfig(phases=k)): the model cut into k phases whose weights and
optimizer state live in Streaming Memory, so tile memory holds one phase's at a time.

The layers are cut into k contiguous phases of about equal numbers of weights (balanced_cuts
by parameter count). Phase i's weights are ONE remote buffer `phase{i}/weights` per replica
(the master copy); its optimizer state others (SGD's velocity `phase{i}/sgd/velocity`, with
momentum; Adam's moments `phase{i}/adam/m` and `phase{i}/adam/v`, ...). A step:

  forward    for i = 0 .. k-1: load phase i's weights into its forward working copies (a
             remote-buffer copy), run its layers;
  loss
  backward   for i = k-1 .. 0: load phase i's weights into its backward working copies, run
             its layers' backward (recomputing the forward first with recompute=True), all-
             reduce its gradients over the replicas, load its optimizer state, update the
             working copies, store weights and state back.

Forward and backward copies are different variables, each live only within its own phase of
its own pass (liveness.py lets variables that are never live together share addresses), so
the peak holds about one phase's weights, gradients and state, plus the activations kept for
the backward pass. The gradients of a phase are applied as soon as they exist.

Cost: each remote-buffer copy is a step of its own in the cycle model (an external sync and
the transfer at the machine's Streaming Memory bandwidth, lower_copies.remote_copy), and the
BSP model runs steps one after another: loading phase i+1 is NOT overlapped with phase i's
compute (Poplar overlaps it on I/O tiles; this simulator has no such mechanism). The step time
shown is therefore an upper bound; Profile.streaming_cycles says how much of it streaming is,
the part an overlapping runtime could hide.
"""
from __future__ import annotations

import numpy as np

from .. import popops, poputil
from ..poplar import FLOAT, HALF
from ..poplar import program as prog
from .build import all_reduce_gradients, build_backward, build_forward, flat, split
from .sharding import ShardedWeights


class Phases:
    """The phases of a model on graph g: their spans, remote buffers and working copies.

    spans: [(lo, hi)] layer ranges, each with weights; dtype: HALF to run the layers on half
    copies; tp: tensor parallelism (tensor_parallel.scheme: each weight mapped on its shards'
    IPUs as the scheme splits it); rts:
    each replica's buffer holds its shard of the phase's weights (sharding.py), all-gathered
    into the working copies after loading, the gradients reduce-scattered for the update;
    per_tensor: shard each weight tensor on its own (for LAMB)."""

    def __init__(self, g, model, spans, dtype, tp=None, rts: bool = False,
                 per_tensor: bool = False):
        self.g, self.spans, self.dtype, self.tp = g, spans, dtype, tp
        self.shapes = shapes = model.param_shapes()
        self.keys = [[k for k in shapes if lo <= int(k.split(".")[0]) < hi] for lo, hi in spans]
        self.buffers, self.copies, self.sharded = [], {}, {}
        for i, keys in enumerate(self.keys):
            for side in ("forward", "backward"):
                for k in keys:
                    v = g.add_variable(FLOAT, list(shapes[k]), f"phase{i}/{side}/{k}")
                    if tp is not None:
                        index, name = k.split(".", 1)
                        tp.map_weight(g, model[int(index)], name, v)
                    else:
                        poputil.map_tensor_linearly(g, v)
                    self.copies[side, k] = v
                if rts:
                    prefix = f"phase{i}/" + ("forward/" if side == "forward" else "")
                    self.sharded[i, side] = ShardedWeights(
                        g, {k: self.copies[side, k] for k in keys}, prefix, host=False,
                        per_tensor=per_tensor)
            n = self.sharded[i, "backward"].m if rts else \
                sum(int(np.prod(shapes[k])) for k in keys)
            self.buffers.append(g.add_remote_buffer(f"phase{i}/weights", FLOAT, n))

    def _master(self, i: int, side: str):
        """What phase i's buffer fills: its `side` shard (RTS) or its working copies."""
        if (i, side) in self.sharded:
            return self.sharded[i, side].shard
        return flat([self.copies[side, k] for k in self.keys[i]])

    def _load(self, i: int, side: str, seq) -> dict:
        """Phase i's weights into its `side` working copies: {layer index: {name: tensor}}
        (HALF casts of them in fp16)."""
        keys = self.keys[i]
        tensors = [self.copies[side, k] for k in keys]
        seq.add(prog.Copy(self.buffers[i], self._master(i, side), name=f"phase{i}/{side}/load"))
        if (i, side) in self.sharded:
            self.sharded[i, side].gather(seq)
        if self.dtype == HALF:
            half = popops.cast(self.g, flat(tensors), HALF, seq, f"phase{i}/{side}/to_half")
            tensors = split(half, [self.shapes[k] for k in keys])
        params: dict = {}
        for k, t in zip(keys, tensors):
            index, name = k.split(".", 1)
            params.setdefault(int(index), {})[name] = t
        return params

    def forward(self, model, x, seq, train: bool, seed=None, prefix: str = ""):
        """Phase by phase, each loaded before it runs: (output, [builds per phase])."""
        phases = []
        for i, span in enumerate(self.spans):
            params = self._load(i, "forward", seq)
            x, builds = build_forward(self.g, model, x, params, seq, train, seed, prefix, span,
                                      tp=self.tp)
            phases.append(builds)
        return x, phases

    def backward(self, phases, dy, seq, optimizer, config) -> None:
        """Last phase first: load, backward, reduce over the replicas, update and store each
        phase."""
        for i in reversed(range(len(self.spans))):
            params = self._load(i, "backward", seq)
            for b in phases[i]:
                b.params = params.get(b.index, {})
            grads, dy = build_backward(self.g, phases[i], dy, seq, need_input_grad=i > 0,
                                       recompute=config.recompute)
            grads = flat([grads[k] for k in self.keys[i]])
            scale, off_chip = 1.0 / config.scale, config.state_off_chip
            if (i, "backward") in self.sharded:
                self.sharded[i, "backward"].update(grads, optimizer, seq, scale, off_chip)
            else:
                optimizer.build(self.g, self._master(i, "backward"),
                                all_reduce_gradients(self.g, grads, seq, config.replicas), seq,
                                f"phase{i}/{optimizer.kind}", grad_scale=scale,
                                off_chip=off_chip, sizes=[int(np.prod(self.shapes[k]))
                                                          for k in self.keys[i]])
            seq.add(prog.Copy(self._master(i, "backward"), self.buffers[i],
                              name=f"phase{i}/store"))

    # --- the host's view ----------------------------------------------------------------------
    def to_buffers(self, weights: dict, replicas: int) -> dict:
        """{remote buffer name: its contents on every replica}: the phase's weights joined,
        the same on each replica, or replica i's shard of them with RTS."""
        out = {}
        for i, (b, keys) in enumerate(zip(self.buffers, self.keys)):
            if (i, "backward") in self.sharded:
                out[b.name] = self.sharded[i, "backward"].to_shards(weights)
            else:
                joined = np.concatenate([np.ravel(weights[k]) for k in keys])
                out[b.name] = np.tile(joined.astype(np.float32), replicas)
        return out

    def from_buffers(self, read) -> dict:
        """The weights ({key: array}) from read(buffer name) (every replica's contents)."""
        out = {}
        for i, (b, keys) in enumerate(zip(self.buffers, self.keys)):
            rows = read(b.name).reshape(-1, b.num_elements)
            if (i, "backward") in self.sharded:
                out.update(self.sharded[i, "backward"].from_shards(rows))
                continue
            start = 0
            for k in keys:
                size = int(np.prod(self.shapes[k]))
                out[k] = rows[0, start:start + size].reshape(self.shapes[k]).copy()
                start += size
        return {k: out[k] for k in self.shapes}


__all__ = ["Phases"]
