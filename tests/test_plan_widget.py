"""widgets.PlannerWidget: the controls make a mapping, the planner answers, the figures follow;
and the report's figures are functions of the planner's plain data."""
from ipulab import plan
from ipulab.viz.planner import mapping_table, memory_bars, planner_report, time_breakdown
from ipulab.widgets import PlannerWidget
from ipulab.widgets.planner import _shards, crosscheck_table


def test_controls_follow_the_published_bert_large_decisions():
    w = PlannerWidget(plan.bert_large(), "pod16", global_batch=65536, optimizer="lamb")
    w.p.value = "4"
    assert w.estimate.mapping.replicas == 4 and not w.estimate.fits
    assert "does not fit" in w.status.value
    w.state.value = "off-chip"
    assert w.estimate.fits and "fits" in w.status.value
    assert len(w.figures.children) == 2
    w.t.value = "2"
    w.p.value = "16"                         # t·p = 32 > 16 IPUs: no mapping
    assert w.estimate is None and "cannot be" in w.status.value
    assert w.figures.children == ()


def test_shard_choices_and_crosscheck_table():
    assert _shards(16) == ["1", "2", "4", "2x2", "8", "4x2", "16", "8x2", "4x4"]
    row = {"model": "cnn", "mapping": "t 1", "plan_bytes": 10, "sim_bytes": 11,
           "bytes_error": -1 / 11, "plan_cycles": 100, "sim_cycles": 90,
           "cycles_error": 1 / 9}
    html = crosscheck_table([row])
    assert "+11.1%" in html and "-9.1%" in html


def test_planner_figures_are_data_in_data_out():
    e = plan.estimate(plan.bert_large(), "pod16",
                      plan.parse_mapping("p=4,layers=3/7/7/7,r=4", optimizer="lamb"), 65536)
    bars = memory_bars([s["kinds"] for s in e.memory], e.sram_bytes)
    assert len(bars.x_range.factors) == 4 and bars.renderers
    assert time_breakdown(e.times).y_range.factors[-1] == "compute"
    doc = {"model": "bert-large", "system": "pod16", "parameters": e.parameters,
           "sram_bytes_per_ipu": e.sram_bytes, "mappings": [e.to_dict()]}
    assert "In-Processor Memory" in mapping_table(doc["mappings"]).text
    assert len(planner_report(doc).children) == 4          # head, memory, time, table


def test_the_numbers_say_what_they_rest_on():
    w = PlannerWidget(plan.bert_large(), "pod16", global_batch=65536, optimizer="lamb")
    w.p.value = "4"
    assert "64 KiB per tile, assumed" in w.status.value
    e = plan.estimate(plan.bert_large(), "pod16",
                      plan.parse_mapping("p=4,layers=3/7/7/7,r=4", optimizer="lamb"), 65536)
    doc = {"model": "bert-large", "system": "pod16", "parameters": e.parameters,
           "sram_bytes_per_ipu": e.sram_bytes, "assumptions": list(e.assumptions),
           "mappings": [e.to_dict()]}
    assert "64 KiB per tile" in planner_report(doc).children[0].text


def test_a_simulated_model_on_the_device_it_ran_on():
    from ipulab import devices, nn
    spec = plan.spec_from_model(nn.default_cnn(), (1, 8, 8), global_batch=256)
    w = PlannerWidget(spec, devices.pod(16, tiles_per_ipu=16), precision="fp32",
                      momentum=False, recompute=False)
    assert all("x" not in t for t in w.t.options)           # nn shards one way
    assert w.estimate.fits and w.estimate.sram_bytes == 16 * 638_976
    assert "checked against the simulator" in w.status.value
    assert "code" in w.estimate.memory[0]["kinds"]
