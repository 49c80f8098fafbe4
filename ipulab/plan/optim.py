"""Optimizer costs, apart from the layers (Calculon bakes Adam into its layers; we do not).

    optimizer_cost("lamb").state_elements        # 2 fp32 moments per weight

Each optimizer says what it keeps per weight (fp32 state elements, Kingma & Ba 2015; You et
al. 2020) and what its update does: at the small scale, the maps nn builds over the weights
(popops, where the weights live; gradients made elsewhere come in through the exchange); at the
full scale, the bytes it touches per weight, read and written at the tiles' SRAM bandwidth.

  sgd          w -= lr·g: no state, one map (w, g read; w written)
  sgd+momentum v = μ·v + g; w -= lr·v: one fp32 velocity; two maps (torch.optim.SGD)
  adam, adamw  two fp32 moments; one map reading w, g, m, v and writing w, m, v (AdamW's
               decoupled weight decay touches nothing more)
  lamb         Adam's moments, then per weight tensor the norms of the weights and of the
               update (two reductions) and the trust-ratio update (You et al. 2020)

Only SGD (with and without momentum) runs on the simulator yet: the others' small-scale maps
follow their arithmetic and are not checked against it.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..options import OPTIMIZERS

STATE_BYTES = 4            # moments and velocities are fp32


@dataclass(frozen=True)
class Optimizer:
    """An optimizer's state per weight and its update's maps: (name, cycles an element,
    vector fields) each, the first reading the gradients (two more cycles an element when
    they are HALF: the cast and the loss scale)."""

    name: str
    state_elements: int
    maps: tuple
    norms: bool = False
    simulated: bool = False

    def state_bytes(self, weights: int) -> int:
        """Bytes of its state for `weights` weights."""
        return STATE_BYTES * self.state_elements * weights

    @property
    def touched(self) -> int:
        """fp32 elements read and written per weight by one update (the full scale's bytes):
        the weights, the gradients and the state, read, and the weights and state written."""
        return 3 + 2 * self.state_elements + 2 * self.norms

    def update(self, ipu, layout) -> None:
        """Its maps over the weights this replica updates (laid out as `layout`, fp32); the
        gradients come from where the all-reduce left them."""
        half = ipu.mc.E == 2
        for i, (name, per_element, fields) in enumerate(self.maps):
            ipu.map(f"{self.name}/{name}", layout, per_element + 2 * (half and i == 0),
                    fields, nbytes=4, remote=ipu.mc.E if i == 0 else 0,
                    codelet=f"{self.name}/{name}")
        if self.norms:
            for name in ("weight_norm", "update_norm"):
                ipu.map(f"{self.name}/{name}", layout, 3, 2, nbytes=4, codelet="norm")


def optimizer_cost(name: str, momentum: bool = True) -> Optimizer:
    """The cost of an optimizer by its name (OPTIMIZERS); momentum: whether SGD keeps a
    velocity (the planner's SGD does unless told not to, as nn's with momentum > 0)."""
    if name == "sgd":
        if momentum:
            return Optimizer("sgd", 1, (("momentum", 5, 2), ("update", 5, 2)), simulated=True)
        return Optimizer("sgd", 0, (("update", 5, 2),), simulated=True)
    if name in ("adam", "adamw"):
        return Optimizer(name, 2, (("update", 24, 4),))
    if name == "lamb":
        return Optimizer(name, 2, (("moments", 16, 4), ("update", 6, 3)), norms=True)
    raise ValueError(f"unknown optimizer {name!r}")
