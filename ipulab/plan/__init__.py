"""ipulab.plan: how a model maps onto a Pod (t · p · r, RTS, phased execution), and what it
costs: memory per IPU by kind against In-Processor and Streaming Memory, step time by part,
samples/s; a search over every valid mapping. One cost class per layer kind (layers.py,
pooling.py, tokens.py, transformer.py, loss.py) and per optimizer (optim.py) carries memory and
time together, at the small scale (the cycle model: a model the simulator runs, checked
against it by benchmarks/plan_crosscheck.py) and at the full scale (BERT-Large, GPT-3: the
presets, presets.py).

    spec = plan.bert_large()
    plan.estimate(spec, "pod16", plan.parse_mapping("p=8,layers=2/3/3/3/3/3/3/4,r=2",
                                                    optimizer="lamb"))
    plan.search(spec, "pod16", 65536, optimizer="lamb")    # ranked by samples/s
    plan.estimate(plan.spec_from_model(trainer.model, (1, 8, 8)), trainer.device,
                  plan.mapping_from_config(trainer.config), trainer.global_batch_size)
"""
from .estimate import Estimate, estimate, system_of, target_of
from .layers import Block
from .mapping import Mapping, balanced_stages, make_mapping, parse_mapping
from .runs import crosscheck_row, describe_run, mapping_from_config
from .search import search
from .spec import ModelSpec, from_dims, spec_from_model
from .presets import PRESETS, bert_base, bert_large, gpt3_2_7b, gpt3_175b, transformer

__all__ = ["Estimate", "estimate", "system_of", "target_of", "Mapping", "balanced_stages",
           "make_mapping", "parse_mapping", "describe_run", "mapping_from_config",
           "crosscheck_row", "search",
           "small_scale", "PRESETS", "Block", "ModelSpec", "bert_base", "bert_large",
           "from_dims", "gpt3_2_7b", "gpt3_175b", "spec_from_model", "transformer"]


def __getattr__(name: str):
    """small_scale on first use: it plans products with poplin (numba), which `ipulab plan`
    never needs for a transformer."""
    if name == "small_scale":
        from .step import small_scale
        return small_scale
    raise AttributeError(f"module 'ipulab.plan' has no attribute {name!r}")
