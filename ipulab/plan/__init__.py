"""ipulab.plan: how a model maps onto a Pod (t · p · r, RTS, phased execution), and what it
costs: memory per IPU by kind against In-Processor and Streaming Memory, step time by part,
samples/s; a search over every valid mapping; checked against the simulator at small scale
(benchmarks/plan_crosscheck.py).

    spec = plan.bert_large()
    plan.estimate(spec, "pod16", plan.parse_mapping("p=8,layers=2/3/3/3/3/3/3/4,r=2",
                                                    optimizer="lamb"))
    plan.search(spec, "pod16", 65536, optimizer="lamb")    # ranked by samples/s
"""
from .estimate import Estimate, estimate, system_of
from .mapping import Mapping, balanced_stages, make_mapping, parse_mapping
from .search import search
from .spec import (PRESETS, Block, ModelSpec, bert_base, bert_large, from_dims, gpt3_2_7b,
                   gpt3_175b, spec_from_model, transformer)

__all__ = ["Estimate", "estimate", "system_of", "Mapping", "balanced_stages", "make_mapping",
           "parse_mapping", "search", "small_scale", "PRESETS", "Block", "ModelSpec", "bert_base",
           "bert_large", "from_dims", "gpt3_2_7b", "gpt3_175b", "spec_from_model",
           "transformer"]


def __getattr__(name: str):
    """small_scale on first use: it builds graphs (numba), which `ipulab plan` never needs."""
    if name == "small_scale":
        from .smallscale import small_scale
        return small_scale
    raise AttributeError(f"module 'ipulab.plan' has no attribute {name!r}")
