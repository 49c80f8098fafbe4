"""What every optimizer of the Trainer shares: the checks of its hyperparameters, the state it
keeps and the gradient it reads.

State lives on chip as a variable with the host handle write/<name> (a fresh start writes
zeros there), or, off chip, in a remote buffer <name> in Streaming Memory (zeros at a fresh
start too), copied into a tile-memory tensor just before the update and back just after it,
so that tensor is live only around the update. <name> is the optimizer's kind and what it
keeps, after the caller's prefix: sgd/velocity, adam/m, phase1/lamb/v, ...

The update is built over ALL the weights it is given at once: the callers join the weights
and the gradients into flat views (poplar.concat, nothing copied) and say where each weight
tensor lies in them (sizes), so a map is one compute set over every weight, run where the
weights live.
"""
from __future__ import annotations

import math

from ...errors import GraphError
from ...poplar import FLOAT
from ...poplar import program as prog
from ...popops.expr import cast


def check_number(owner: str, what: str, value, ok, rule: str) -> float:
    """value as a float if it is a real number (not nan) for which ok(value) holds, else a
    GraphError naming owner and what."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value) or \
            not ok(float(value)):
        raise GraphError(f"{owner}: {what} must be {rule}, not {value!r}")
    return float(value)


class Optimizer:
    """An optimizer the Trainer builds into its training step (one class per kind).

    kind: its TrainConfig(optimizer=...) name and the first part of its state's names;
    state_per_parameter: the float32 state elements it keeps per weight (what the planner
    counts); norms_per_tensor: whether its update needs a norm per weight tensor, so that
    with RTS every replica must keep a slice of every weight tensor (sharding.py).
    """

    kind = ""
    state_per_parameter = 0
    norms_per_tensor = False

    def __init__(self, lr: float, weight_decay: float = 0.0):
        name = type(self).__name__
        self.lr = check_number(name, "lr", lr, lambda v: 0 < v < math.inf, "a positive number")
        self.weight_decay = check_number(name, "weight_decay", weight_decay,
                                         lambda v: 0 <= v < math.inf, "a number >= 0")
        self.state_tensors = {}        # on-chip state: {name: tensor}, host handle write/<name>
        self.state_buffers = []        # off-chip state: the remote buffers

    def build(self, graph, weights, grads, seq, name: str = "", grad_scale: float = 1.0,
              off_chip: bool = False, sizes=None, partial: bool = False) -> None:
        """Add the update of `weights` (a flat FLOAT tensor, e.g. a concat of every weight) by
        grad_scale * `grads` (the same shape, FLOAT or HALF) to seq.

        name: the prefix of the state's names (default: the kind). off_chip: keep the
        per-weight state in remote buffers. sizes: the elements of each weight tensor, in
        order, that `weights` joins (for updates that treat tensors apart). partial: every
        replica holds only a slice of each tensor (RTS), so what is summed over a tensor is
        summed across the replicas too."""
        if weights.shape != grads.shape:
            raise GraphError(f"{type(self).__name__}: weights {list(weights.shape)} and "
                             f"gradients {list(grads.shape)} differ")
        if weights.dtype != FLOAT:
            raise GraphError(f"{type(self).__name__}: the master weights must be FLOAT, not "
                             f"{weights.dtype}")
        self._build(graph, weights, grads, seq, name or self.kind, float(grad_scale),
                    off_chip, sizes, partial)

    def _build(self, graph, weights, grads, seq, name, grad_scale, off_chip, sizes, partial):
        raise NotImplementedError

    # --- for the optimizers ------------------------------------------------------------------
    @staticmethod
    def gradient(placeholder, grads, grad_scale: float):
        """The expression of the gradient the update reads (placeholder stands for grads): as
        it is when FLOAT and unscaled, else as float times grad_scale (fp16: HALF gradients
        that carry the loss scale, taken out here)."""
        if grads.dtype == FLOAT and grad_scale == 1.0:
            return placeholder
        return cast(placeholder, FLOAT) * grad_scale

    def with_l2(self, g, w):
        """g + weight_decay * w: L2 regularisation added to the gradient, as torch.optim.SGD and
        Adam apply weight_decay (g itself without decay)."""
        return g + w * self.weight_decay if self.weight_decay else g

    def state(self, graph, like, name: str, seq, off_chip: bool):
        """A state tensor shaped and mapped like `like`, starting at zero: (tensor, the program
        that stores it back, to add after the update; None on chip). Off chip its remote
        buffer `name` is loaded into it now (in seq)."""
        t = graph.clone(like, name)
        if not off_chip:
            self.keep_on_chip(graph, name, t)
            return t, None
        buffer = graph.add_remote_buffer(name, FLOAT, t.num_elements())
        self.state_buffers.append(buffer)
        seq.add(prog.Copy(buffer, t, name=f"{name}/load"))
        return t, prog.Copy(t, buffer, name=f"{name}/store")

    def keep_on_chip(self, graph, name: str, t) -> None:
        """t is state that stays in tile memory: the host handle write/<name> resets it."""
        self.state_tensors[name] = t
        graph.create_host_write(f"write/{name}", t)


__all__ = ["Optimizer", "check_number"]
