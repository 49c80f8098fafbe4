"""ipulab.plan: the published mapping decisions follow from the memory model, parameter counts
agree with IPU_FACTS, the batch algebra and every rule's error, the search's order."""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from ipulab import plan
from ipulab.errors import PlanError

LAMB = dict(optimizer="lamb")


def est(spec, system, text, global_batch=None, **options):
    return plan.estimate(spec, system, plan.parse_mapping(text, **{**LAMB, **options}),
                         global_batch)


def test_parameter_counts_agree_with_ipu_facts():
    bert = plan.bert_large()
    assert bert.blocks[0].params == 12_596_224
    assert round(bert.parameters / 1e6, 1) == 335.1
    gpt = plan.gpt3_175b()
    h = 12288
    assert gpt.blocks[0].params == 12 * h * h + 13 * h
    assert round(gpt.parameters / 1e9, 1) == 174.6
    assert 105e6 < plan.bert_base().parameters < 115e6
    assert 2.6e9 < plan.gpt3_2_7b().parameters < 2.8e9


def test_bert_large_pod16_published_decisions():
    bert = plan.bert_large()
    on = est(bert, "pod16", "p=4,layers=3/7/7/7,r=4", 65536)
    off = est(bert, "pod16", "p=4,layers=3/7/7/7,r=4,state=off-chip", 65536)
    p8 = est(bert, "pod16", "p=8,layers=2/3/3/3/3/3/3/4,r=2", 65536)
    assert not on.fits and "In-Processor Memory" in on.reason
    assert off.fits and p8.fits
    m = off.mapping
    assert m.micro_batch_size * m.replicas * m.micro_batches == 65536
    assert m.micro_batches == 2048           # 8 x 4 x 2048 (IPU_FACTS)
    # what makes the difference is the optimizer state: the rest is the same
    assert on.memory[1]["kinds"]["weights"] == off.memory[1]["kinds"]["weights"]
    assert on.memory[1]["kinds"]["optimizer_state"] > off.memory[1]["kinds"]["optimizer_state"]


def test_gpt3_175b_needs_phased_execution_and_rts():
    gpt = plan.gpt3_175b()
    found = plan.search(gpt, "pod256", optimizer="adam")
    assert not any(e.fits and not e.mapping.phased for e in found)
    assert any(e.fits for e in found)
    assert [e.fits for e in found] == sorted((e.fits for e in found), reverse=True)
    blog = est(gpt, "pod256", "t=8,p=8,r=4,rts,phases=96")
    published = est(gpt, "pod256", "t=8x8,r=4,rts,phases=96")
    assert blog.fits and published.fits, (blog.reason, published.reason)
    assert not est(gpt, "pod256", "t=8,p=8,r=4,phases=96").fits       # without RTS
    assert not est(gpt, "pod256", "t=8,p=8,r=4,rts,state=off-chip").fits   # not phased


def test_search_every_mapping_uses_all_ipus_in_powers_of_two():
    found = plan.search(plan.bert_large(), "pod16", 65536, **LAMB)
    assert found and found[0].fits
    for e in found:
        m = e.mapping
        assert m.t * m.pipeline * m.replicas == 16
        assert all(x & (x - 1) == 0 for x in (*m.tensor_parallel, m.pipeline, m.replicas))
    fits = [e.samples_per_second for e in found if e.fits]
    assert fits == sorted(fits, reverse=True)
    assert all(e.reason for e in found if not e.fits)


@pytest.mark.parametrize("text, system, global_batch, rule", [
    ("p=4,r=2", "pod16", 65536, "t·p·r"),
    ("t=3,p=1,r=16", "pod16", 65536, "power of two"),
    ("p=4,r=4,micro=8", "pod16", 96, "2p − 1"),
    ("p=4,r=4,ga=7,micro=8", "pod16", 65536, "micro × r × GA"),
    ("p=4,r=4,micro=8", "pod16", 100, "micro × r × GA"),
    ("r=16,phases=25", "pod16", 65536, "phases ≤ layers"),
    ("t=32,r=1", "pod32", 65536, "heads"),
    ("p=4,layers=3/7/7,r=4", "pod16", 65536, "stages"),
    ("p=4,layers=3/7/7/6,r=4", "pod16", 65536, "adding up"),
])
def test_broken_rules_raise_plan_error_naming_the_rule(text, system, global_batch, rule):
    with pytest.raises(PlanError, match=rule):
        est(plan.bert_large(), system, text, global_batch)


@pytest.mark.parametrize("call, rule", [
    (lambda: plan.transformer("x", 2, 100, 3, 16, 10), "divisible by heads"),
    (lambda: plan.transformer("x", 0, 96, 3, 16, 10), "positive"),
    (lambda: plan.from_dims({"layers": 2}), "missing"),
    (lambda: plan.parse_mapping("q=1"), "unknown key"),
    (lambda: plan.parse_mapping("t=8x8x2"), "t1xt2"),
    (lambda: plan.parse_mapping("state=cloud"), "on-chip or off-chip"),
    (lambda: plan.parse_mapping("r=two"), "whole number"),
    (lambda: plan.system_of("pod12"), "power of two"),
    (lambda: plan.system_of("pod24"), "power of two"),
    (lambda: plan.parse_mapping("r=1,rts").resolve(plan.bert_large(), 1), "r ≥ 2"),
])
def test_bad_input_errors(call, rule):
    with pytest.raises(PlanError, match=rule):
        call()


def test_parse_mapping_keys():
    m = plan.parse_mapping("t=8x8,r=4,rts,phases=96,state=off-chip,micro=1,ga=32")
    assert (m.tensor_parallel, m.replicas, m.rts, m.phases, m.micro_batch_size,
            m.micro_batches) == \
        ((8, 8), 4, True, 96, 1, 32)
    assert plan.parse_mapping("layers=3/7/7/7").pipeline == 4
    assert plan.parse_mapping("rts=off").rts is False


def test_balanced_stages_put_the_embeddings_on_stage_0():
    assert plan.balanced_stages(plan.bert_large(), 4) == [3, 7, 7, 7]
    assert sum(plan.balanced_stages(plan.gpt3_175b(), 8)) == 96


def test_spec_from_an_nn_model():
    from ipulab import nn
    spec = plan.spec_from_model(nn.default_cnn(), (1, 8, 8))
    assert spec.parameters == nn.default_cnn().num_parameters()
    assert spec.num_layers == 8 and spec.blocks[0].flops == 2 * 10 * 16 * 64


@settings(max_examples=25, deadline=None)
@given(t=st.sampled_from([1, 2, 4, 8]), state=st.sampled_from(["on-chip", "off-chip"]),
       rts=st.booleans())
def test_memory_per_ipu_falls_as_t_grows(t, state, rts):
    """More shards of each layer never need more bytes per IPU."""
    gpt = plan.gpt3_2_7b()

    def peak(tt):
        m = plan.make_mapping(tensor_parallel=(tt, 1), replicas=64 // tt, rts=rts,
                              optimizer_state=state, optimizer="adam")
        return plan.estimate(gpt, "pod64", m, 512).peak_bytes_per_ipu
    assert peak(2 * t) <= peak(t)


@settings(max_examples=20, deadline=None)
@given(k=st.integers(0, 4))
def test_samples_per_second_is_global_batch_over_step(k):
    e = est(plan.bert_large(), "pod16", "p=4,r=4,state=off-chip", 65536 >> k)
    assert e.samples_per_second == pytest.approx(e.global_batch / e.step_seconds)
    assert e.step_seconds == pytest.approx(sum(e.times.values()))
