"""viz.pod_partitions and viz.ipu_gantt: plain data in, bokeh out; their columns are the data."""
import pytest

from ipulab import viz
from ipulab.viz.base import subtitle
from ipulab.viz.palette import EMPTY_COLOR

PARTS = [{"name": "p-ada", "ipus": [0, 1, 2, 3], "user": "ada"},
         {"name": "p-bob", "ipus": [8, 9], "user": "bob"},
         {"name": "p-ada2", "ipus": [12, 13], "user": "ada"}]
JOBS = {"name": ["A", "B"], "user": ["ada", "bob"], "first_ipu": [0, 8], "ipus": [8, 4],
        "start": [0.0, 1800.0], "end": [3600.0, 9000.0], "wait": [0.0, 600.0]}


def test_pod_view_colours_ipus_by_owner_or_partition():
    fig = viz.pod_partitions(16, PARTS)
    data = fig.select_one({"name": "ipus"}).data
    assert list(data["partition"][:4]) == ["p-ada"] * 4 and data["partition"][4] == ""
    assert data["color"][0] == data["color"][12] != data["color"][8]       # by user
    assert data["color"][4] == EMPTY_COLOR and list(data["machine"][:5]) == [0, 0, 0, 0, 1]
    by_part = viz.pod_partitions(16, PARTS, color_by="partition").select_one({"name": "ipus"})
    assert by_part.data["color"][0] != by_part.data["color"][12]
    assert subtitle(fig).startswith("3 partitions, 8 of 16 IPUs free")
    assert fig.frame_width <= 1200
    with pytest.raises(ValueError, match="color_by"):
        viz.pod_partitions(16, PARTS, color_by="size")


def test_gantt_boxes_span_each_jobs_ipus_and_hours():
    fig = viz.ipu_gantt(JOBS, 16, reservations={"C": (9000.0, 0, 16)})
    data = fig.select_one({"name": "jobs"}).data
    assert list(data["left"]) == [0, 0.5] and list(data["right"]) == [1, 2.5]
    assert list(data["bottom"]) == [-0.5, 7.5] and list(data["top"]) == [7.5, 11.5]
    assert list(data["wait"]) == [0, 10] and data["color"][0] != data["color"][1]
    assert fig.select_one({"name": "reservations"}) is not None
    assert fig.sizing_mode == "stretch_width"
    empty = viz.ipu_gantt({k: [] for k in JOBS}, 4)
    assert empty.select_one({"name": "jobs"}).data["name"].size == 0


def test_the_pod_figures_and_widgets_fit_a_cell(tmp_path):
    from test_figure_widths import check_fits

    from ipulab import vipu, widgets
    from ipulab.vipu.scheduler import Scheduler, generate_jobs

    check_fits(viz.pod_partitions(16, PARTS), "pod_partitions, Pod16")
    check_fits(viz.pod_partitions(64, PARTS, title="Bow Pod64: 16 x Bow-2000: partitions"),
               "pod_partitions, Pod64")
    day = Scheduler(16, "backfill").run(generate_jobs(45, seed=11))
    check_fits(viz.ipu_gantt(day.gantt(), 16, reservations=day.promised(),
                             subtitle="utilisation 58.6 %, mean wait 107.0 min"), "ipu_gantt")
    ctl = vipu.connect(tmp_path / "pod.sqlite", "ada")
    ctl.init("pod16")
    check_fits(widgets.PodAdmin([ctl]), "PodAdmin")
    check_fits(widgets.ScheduleExplorer(generate_jobs(45, seed=11)), "ScheduleExplorer")


def test_legends_beside_and_ticks_on_whole_numbers():
    """Issue 22: no legend over a job or a bar, no IPU 0.5 on an axis, and the subtitle names
    what the colours stand for."""
    from bokeh.models import BasicTicker, Legend

    from ipulab.viz.planner import memory_bars, planner_report

    gantt = viz.ipu_gantt(JOBS, 16, reservations={"C": (9000.0, 0, 16)})
    assert [r for r in gantt.right if isinstance(r, Legend)]
    assert not [r for r in gantt.center if isinstance(r, Legend)]
    bars = memory_bars([{"weights": 2**20, "activations": 2**21}], 2**22)
    assert [r for r in bars.right if isinstance(r, Legend)]
    assert not [r for r in bars.center if isinstance(r, Legend)]
    grid = viz.pod_partitions(16, PARTS)
    for axis in (*grid.xaxis, *grid.yaxis, *gantt.yaxis):
        assert isinstance(axis.ticker, BasicTicker) and axis.ticker.min_interval == 1
    assert subtitle(grid).endswith("colour = user")
    stages = viz.pod_partitions(16, PARTS, color_name="stage")
    assert subtitle(stages).endswith("colour = stage")
    doc = {"model": "m", "system": "pod16", "parameters": 10, "sram_bytes_per_ipu": 2**22,
           "mappings": [{"fits": True, "reason": "fits: 92 of 897 MiB per IPU (10%)",
                         "tensor_parallel": [1, 1], "pipeline": 1, "layers_per_stage": [],
                         "replicas": 16, "rts": False, "phases": 1, "optimizer_state": "on-chip",
                         "peak_bytes_per_ipu": 92 * 2**20, "samples_per_second": 1.0}]}
    head = planner_report(doc).children[0].text
    assert head.count("fits") == 1 and "first mapping: fits: 92 of 897 MiB" in head
    doc["mappings"][0].update(fits=False, reason="needs 1,177 MiB per IPU")
    assert "first mapping: does not fit: needs 1,177" in planner_report(doc).children[0].text
