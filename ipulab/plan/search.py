"""plan.search(spec, system, global_batch): every valid mapping, ranked by samples/s.

Candidates: t (1-D, and 2-D t1 × t2 with t1 ≥ t2 ≥ 2; 1-D for a model the simulator runs,
as nn shards), p and r powers of two with t·p·r = the system's IPUs; RTS on or off (on needs
r ≥ 2); optimizer state on- or off-chip (when there is some); not phased, or one phase per
layer (per layer with weights for an nn model). Layers per stage are balanced
(ModelSpec.balanced_stages). A candidate that breaks a rule of the model (heads per shard, GA ≥ 2p − 1, the batch algebra)
is kept, not fitting, with the rule as its reason. Feasible mappings come first, fastest
first; then the others, fastest first.
"""
from __future__ import annotations

from itertools import product

from ..errors import PlanError
from .estimate import Estimate, estimate, target_of
from .mapping import make_mapping
from .optim import optimizer_cost


def _powers(n: int) -> list[int]:
    return [1 << k for k in range(n.bit_length()) if n % (1 << k) == 0]


def shard_shapes(t: int) -> list[tuple]:
    """(t1, t2) of t shards: 1-D, and 2-D with t1 ≥ t2 ≥ 2."""
    return [(t, 1)] + [(t // t2, t2) for t2 in _powers(t) if 2 <= t2 and t2 * t2 <= t]


def candidates(spec, num_ipus: int, **options):
    """Every mapping of spec on num_ipus IPUs (before the model's rules are checked); an
    optimizer without state has no state to place."""
    stateful = optimizer_cost(options.get("optimizer", "sgd"),
                              options.get("momentum", True)).state_elements
    states = ("on-chip", "off-chip") if stateful else ("on-chip",)
    for t, p in product(_powers(num_ipus), repeat=2):
        if num_ipus % (t * p) or p > spec.num_layers:
            continue
        r = num_ipus // (t * p)
        shapes = shard_shapes(t)[:1] if spec.simulated else shard_shapes(t)   # nn: 1-D
        finest = spec.phase_count() if spec.simulated else spec.num_layers
        for shape, rts, state, phases in product(shapes, (False, True), states, (1, finest)):
            if (rts and r < 2) or (phases > 1 and state == "on-chip" and stateful):
                continue          # phased execution keeps the optimizer state off-chip
            yield make_mapping(tensor_parallel=shape, pipeline=p, replicas=r, rts=rts,
                               optimizer_state=state, phases=phases, **options)


def _broken(spec, system, m, global_batch, error: PlanError) -> Estimate:
    """An Estimate that does not fit because the mapping breaks a rule of the model."""
    return Estimate(spec.name, system.name, spec.parameters, m, [], 0, 0, 0, 0, 0.0, False,
                    str(error).removeprefix("mapping: "), {}, 0.0, global_batch or 0)


def search(spec, system, global_batch: int | None = None, **options) -> list[Estimate]:
    """Estimates of every candidate mapping: those that fit first, each group ranked by
    samples/s (options: Mapping fields for all, e.g. optimizer="lamb", micro_batch_size=8).
    system: a name, an arch.System, or a device or target (its tiles per IPU)."""
    target = target_of(system)
    out = []
    for m in candidates(spec, target.num_ipus, **options):
        try:
            out.append(estimate(spec, target, m, global_batch))
        except PlanError as e:
            out.append(_broken(spec, target.system, m, global_batch, e))
    return sorted(out, key=lambda e: (not e.fits, -e.samples_per_second, e.mapping.label()))
