"""Optimizer costs, apart from the layers (Calculon bakes Adam into its layers; we do not).

    optimizer_cost("lamb").state_elements        # 2 fp32 moments per weight

Each optimizer says what it keeps per weight (fp32 state elements, Kingma & Ba 2015; You et
al. 2020) and what its update does, as nn/optim builds it: its maps, each the very expression
nn gives popops (the gradient read as float times 1/S in fp16, torch's lerp for Adam's first
moment, AdamW's decoupled decay), side by side where nn runs them side by side. At the small
scale their cost is the generated codelets' (popops.mapcodelet) over the placed weights,
gradients and state (ops.map_op, update.py); at the full scale, the bytes the update touches
per weight, read and written at the tiles' SRAM bandwidth.

  sgd          w += -lr·g: no state, one map
  sgd+momentum v = μ·v + g; w += -lr·v: one fp32 velocity; two maps (torch.optim.SGD)
  adam, adamw  two fp32 moments and the step count: m, v and t side by side; the two bias
               corrections side by side (one tile); w -= size·m/(√v/root + eps)
  lamb         Adam's moments; u = m^/(√v^ + eps); per weight tensor the sums of squares of w
               and u (one reduction each, side by side); the trust ratios; one update map per
               tensor, side by side (You et al. 2020; PopART's Lamb mode)
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..options import OPTIMIZERS
from .layers import later

E, types = later("..popops.expr"), later("..poplar.types")

STATE_BYTES = 4            # moments and velocities are fp32
GROUPS = {"m": "moments", "step_size": "bias_correction", "bias_correction1": "bias_correction"}
ADAM = dict(betas=(0.9, 0.999), eps=1e-8, lr=1e-3)   # torch's defaults: the forms nn picks


@dataclass(frozen=True)
class Step:
    """One map of an update: expr over `inputs` (names: w weights, g gradients, v velocity,
    m and v2 Adam's moments, t the step count, size and root its bias corrections, c1 c2
    LAMB's, u LAMB's update), written in place into inputs[0] or (out) into a new tensor."""

    name: str
    expr: object
    inputs: tuple
    out: str | None = None


@dataclass(frozen=True)
class Optimizer:
    """An optimizer's state per weight, and its update: groups of Steps run side by side
    (one superstep each, made when the small scale asks: the full scale needs only the
    counts); norms: LAMB's per-tensor sums of squares after its `u`."""

    name: str
    state_elements: int
    norms: bool = False
    momentum: bool = True
    half: bool = False
    decay: bool = False

    @property
    def groups(self) -> tuple:
        return _groups(self.name, self.momentum, self.half, self.decay)

    def state_bytes(self, weights: int) -> int:
        """Bytes of its state for `weights` weights."""
        return STATE_BYTES * self.state_elements * weights

    @property
    def touched(self) -> int:
        """fp32 elements read and written per weight by one update (the full scale's bytes):
        the weights, the gradients and the state, read, and the weights and state written."""
        return 3 + 2 * self.state_elements + 2 * self.norms

    # --- placed tensors (a transformer's small scale) -----------------------------------------
    def update_placed(self, ipu, weights, grads, sizes, ring=None,
                      off_chip: bool = False) -> None:
        """Its maps as nn builds them over the flat weights (FLOAT) and gradients (placed
        tensors), state tensors mapped like the weights, the step count on the first
        weight's tile; LAMB's norms one reduction per tensor (with RTS a shard's: their sums
        all-reduced over the replicas by `ring`, update.Ring); off_chip: the state loaded from Streaming
        Memory for the update (all of it live until it is stored back after it)."""
        from . import ops
        mc = ipu.mc
        t = {"w": weights, "g": grads}
        state = (("v",) if self.name == "sgd" else ("m", "v2"))[:self.state_elements]
        for name in state:
            t[name] = mc.addr.like(weights)
            if off_chip:
                ipu.hold(("state", name), t[name], "optimizer_state")
        if any("t" in s.inputs for g in self.groups for s in g):
            t["t"] = mc.addr.new((1,), weights.where.ravel()[:1], types.FLOAT)
        for group in self.groups:
            def side(step):
                def build():
                    ins = [t[n] for n in step.inputs]
                    out = ops.map_op(ipu, f"{self.name}/{step.name}", step.expr, ins,
                                     in_place=step.out is None)
                    if step.out:
                        t[step.out] = out
                return build
            if len(group) == 1:
                side(group[0])()
            else:
                ipu.side_by_side(f"{self.name}/{GROUPS.get(group[0].name, group[0].name)}",
                                 [side(s) for s in group])
            if self.norms and group[0].name == "u":
                self._norms(ipu, t, sizes, ring)
        for name in state:
            ipu.free(("state", name))

    def _norms(self, ipu, t, sizes, ring) -> None:
        """LAMB: per tensor the sums of squares of w and u (side by side), the trust ratios,
        the update of each tensor (side by side)."""
        from . import ops, reductions
        from .placed import concat
        offsets = np.cumsum([0, *sizes[:-1]])
        w, u = t["w"], t["u"]
        sums = []
        ipu.side_by_side(f"{self.name}/norms", [
            (lambda o=o, n=n: sums.append(reductions.reduce_inner(
                ipu, f"{self.name}/norms", concat([w[o:o + n].reshape((1, n)),
                                                   u[o:o + n].reshape((1, n))]), square=True)))
            for o, n in zip(offsets, sizes)])
        both = concat([x.reshape((1, 2)) for x in sums])
        if ring is not None:
            out = ipu.mc.addr.like(both)
            ring.all_reduce(both.flatten(), out, f"{self.name}/norms/all_reduce", both.elements)
            both = out
        scale = ops.map_op(ipu, f"{self.name}/trust_ratio", _trust_ratio(), [both[:, 0], both[:, 1]])
        ipu.side_by_side(f"{self.name}/update", [
            (lambda o=o, n=n, k=k: ops.map_op(ipu, f"{self.name}/update/{k}", E._1 - E._3 * E._2,
                                              [w[o:o + n], u[o:o + n], scale[k:k + 1]],
                                              in_place=True))
            for k, (o, n) in enumerate(zip(offsets, sizes))])


def _trust_ratio():
    """LAMB's lr times ||w|| / ||u|| from the sums of squares (1 where either is 0)."""
    return E.select(E.sqrt(E._1) / E.sqrt(E.select(E._2, 1.0, E._2 > 0)), 1.0,
                    (E._1 > 0) & (E._2 > 0)) * 1e-3


def _gradient(half: bool):
    """The gradient as the update reads it (_2): fp16's HALF times 1/S as float."""
    return E.cast(E._2, types.FLOAT) * 0.5 if half else E._2


def optimizer_cost(name: str, momentum: bool = True, half: bool = False,
                   decay: bool | None = None) -> Optimizer:
    """The cost of an optimizer by its name (OPTIMIZERS); momentum: whether SGD keeps a
    velocity (the planner's SGD does unless told not to, as nn's with momentum > 0); half:
    fp16 gradients; decay: whether weight decay is on (None: the optimizer's default, AdamW's
    0.01, the others' 0)."""
    if name not in OPTIMIZERS:
        raise ValueError(f"unknown optimizer {name!r}")
    decay = (name == "adamw") if decay is None else decay
    state = (1 if momentum else 0) if name == "sgd" else 2
    return Optimizer(name, state, name == "lamb", momentum and name == "sgd", half, decay)


@functools.lru_cache(maxsize=None)
def _groups(name: str, momentum: bool, half: bool, decay: bool) -> tuple:
    """The maps of an update, as nn/optim builds them (see the module)."""
    g = _gradient(half)
    if name == "sgd":
        grad = g + E._3 * 1e-4 if decay else g
        if momentum:
            return ((Step("momentum", E._1 * 0.9 + grad, ("v", "g") + ("w",) * decay),),
                    (Step("update", E._1 + E._2 * E.const(-0.1), ("w", "v")),))
        upd = E._1 + E._2 * E.const(-0.1) if not half and not decay else \
            E._1 + (g + E._1 * 1e-4 if decay else g) * -0.1
        return ((Step("update", upd, ("w", "g")),),)
    b1, b2 = ADAM["betas"]
    a = 1.0 - b1
    moment_g = g + E._3 * 0.01 if name == "adam" and decay else g
    extra = ("w",) if name == "adam" and decay else ()
    moments = (Step("m", E._1 + a * (moment_g - E._1), ("m", "g") + extra),
               Step("v", E._1 * b2 + (1.0 - b2) * moment_g * moment_g, ("v2", "g") + extra),
               Step("step", E._1 + 1, ("t",)))
    if name in ("adam", "adamw"):
        w = E._1 * (1.0 - 1e-5) if name == "adamw" and decay else E._1
        return (moments,
                (Step("step_size", 1e-3 / (1.0 - E.pow(b1, E._1)), ("t",), "size"),
                 Step("bias_correction2_sqrt", E.sqrt(1.0 - E.pow(b2, E._1)), ("t",), "root")),
                (Step("update", w - E._4 * (E._2 / (E.sqrt(E._3) / E._5 + 1e-8)),
                      ("w", "m", "v2", "size", "root")),))
    u = E._1 / E._4 / (E.sqrt(E._2 / E._5) + 1e-6)
    if decay:
        u = u + E._3 * 0.01
    return (moments,
            (Step("bias_correction1", 1.0 - E.pow(b1, E._1), ("t",), "c1"),
             Step("bias_correction2", 1.0 - E.pow(b2, E._1), ("t",), "c2")),
            (Step("u", u, ("m", "v2", "w", "c1", "c2"), "u"),))
