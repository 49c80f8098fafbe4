"""Phased execution (TrainConfig(phases=k)): the model cut into k phases whose weights and
optimizer state live in Streaming Memory, so tile memory holds one phase's at a time.

The layers are cut into k contiguous phases of about equal numbers of weights (balanced_cuts
by parameter count). Phase i's weights are ONE remote buffer `phase{i}/weights` per replica
(the master copy); its velocity, with momentum, another (`phase{i}/sgd/velocity`). A step:

  forward    for i = 0 .. k-1: load phase i's weights into its forward working copies (a
             remote-buffer copy), run its layers;
  loss
  backward   for i = k-1 .. 0: load phase i's weights into its backward working copies, run
             its layers' backward (recomputing the forward first with recompute=True), all-
             reduce its gradients over the replicas, load its velocity, update the working
             copies, store weights and velocity back.

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
from . import tensor_parallel
from .build import all_reduce_gradients, build_backward, build_forward, flat, split


class Phases:
    """The phases of a model on graph g: their spans, remote buffers and working copies.

    spans: [(lo, hi)] layer ranges; dtype: HALF to run the layers on half copies; shards:
    tensor parallelism (each layer's rows mapped on its shards' IPUs)."""

    def __init__(self, g, model, spans, dtype, shards: int = 1):
        self.g, self.spans, self.dtype, self.shards = g, spans, dtype, shards
        shapes = model.param_shapes()
        self.keys = [[k for k in shapes if lo <= int(k.split(".")[0]) < hi] for lo, hi in spans]
        self.shapes = shapes
        self.buffers, self.copies = [], {}
        for i, keys in enumerate(self.keys):
            n = sum(int(np.prod(shapes[k])) for k in keys)
            self.buffers.append(g.add_remote_buffer(f"phase{i}/weights", FLOAT, n) if n else None)
            for side in ("forward", "backward"):
                for k in keys:
                    v = g.add_variable(FLOAT, list(shapes[k]), f"phase{i}/{side}/{k}")
                    if shards > 1:
                        tensor_parallel.map_weight(g, v, shards)
                    else:
                        poputil.map_tensor_linearly(g, v)
                    self.copies[side, k] = v

    def _load(self, i: int, side: str, seq) -> dict:
        """Phase i's weights into its `side` working copies: {layer index: {name: tensor}}
        (HALF casts of them in fp16)."""
        keys = self.keys[i]
        params: dict = {}
        if not keys:
            return params
        tensors = [self.copies[side, k] for k in keys]
        seq.add(prog.Copy(self.buffers[i], flat(tensors), name=f"phase{i}/{side}/load"))
        if self.dtype == HALF:
            half = popops.cast(self.g, flat(tensors), HALF, seq, f"phase{i}/{side}/to_half")
            tensors = split(half, [self.shapes[k] for k in keys])
        for k, t in zip(keys, tensors):
            index, name = k.split(".")
            params.setdefault(int(index), {})[name] = t
        return params

    def forward(self, model, x, seq, train: bool, seed=None, prefix: str = ""):
        """Phase by phase, each loaded before it runs: (output, [builds per phase])."""
        phases = []
        for i, span in enumerate(self.spans):
            params = self._load(i, "forward", seq)
            x, builds = build_forward(self.g, model, x, params, seq, train, seed, prefix, span,
                                      shards=self.shards)
            phases.append(builds)
        return x, phases

    def backward(self, phases, dy, seq, optimizer, config) -> None:
        """Last phase first: load, backward, all-reduce, update and store each phase."""
        for i in reversed(range(len(self.spans))):
            params = self._load(i, "backward", seq)
            for b in phases[i]:
                b.params = params.get(b.index, {})
            grads, dy = build_backward(self.g, phases[i], dy, seq, need_input_grad=i > 0,
                                       recompute=config.recompute)
            if not self.keys[i]:
                continue
            weights = flat([self.copies["backward", k] for k in self.keys[i]])
            reduced = all_reduce_gradients(self.g, flat([grads[k] for k in self.keys[i]]), seq,
                                           config.replicas)
            optimizer.build(self.g, weights, reduced, seq, f"phase{i}/sgd",
                            grad_scale=1.0 / config.scale, off_chip=config.state_off_chip)
            seq.add(prog.Copy(weights, self.buffers[i], name=f"phase{i}/store"))

    # --- the host's view ----------------------------------------------------------------------
    def to_buffers(self, weights: dict) -> dict:
        """{remote buffer name: phase's weights joined (float32)}."""
        return {b.name: np.concatenate([np.ravel(weights[k]) for k in keys]).astype(np.float32)
                for b, keys in zip(self.buffers, self.keys) if b is not None}

    def from_buffers(self, rows: dict) -> dict:
        """The weights ({key: array}) from {buffer name: the buffer's row}."""
        out = {}
        for b, keys in zip(self.buffers, self.keys):
            if b is None:
                continue
            start = 0
            for k in keys:
                size = int(np.prod(self.shapes[k]))
                out[k] = np.ravel(rows[b.name])[start:start + size].reshape(self.shapes[k])
                start += size
        return {k: out[k].copy() for k in self.shapes}


__all__ = ["Phases"]
