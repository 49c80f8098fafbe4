"""PodAdmin and ScheduleExplorer: set a control's value or click, assert on the controller's state
and on what the widget then shows (no browser)."""
import pytest

from ipulab import vipu
from ipulab.vipu.scheduler import Scheduler
from ipulab.widgets.vipu import PodAdmin, ScheduleExplorer

from test_vipu_scheduler import CLASSIC


@pytest.fixture
def admin(tmp_path):
    db = tmp_path / "pod.sqlite"
    ada, bob = vipu.connect(db, "ada"), vipu.connect(db, "bob")
    ada.init("pod16", allocations={"lab": (0, 2, None), "ada-only": (2, 2, "ada")})
    return PodAdmin([ada, bob])


def cells(widget):
    return widget.figure.select_one({"name": "ipus"}).data


def test_create_and_remove_partitions_through_the_controller(admin):
    ada, bob = admin.controllers["ada"], admin.controllers["bob"]
    assert list(admin.allocation.options) == [("(any)", "(any)"), ("lab (everyone)", "lab"),
                                              ("ada-only (ada)", "ada-only")]
    admin.name.value, admin.size.value, admin.allocation.value = "big", 8, "ada-only"
    admin.create.click()
    assert [(p.name, p.ipus) for p in ada.list_partitions()] == [("big", tuple(range(8, 16)))]
    assert "created big: IPUs 8-15 for ada" in admin.status.value
    assert list(cells(admin)["partition"][7:]) == [""] + ["big"] * 8
    admin.user.value = "bob"                               # the administrator's list still
    assert [v for _, v in admin.allocation.options] == ["(any)", "lab", "ada-only"]
    assert admin.remove.disabled
    admin.name.value, admin.size.value = "small", 2
    admin.create.click()
    assert bob.partition("small").ipus == (0, 1)           # bob has "lab" only: IPUs 0-7
    data = cells(admin)
    assert data["color"][0] != data["color"][8]             # two owners, two colours
    assert "big" in admin.listing.value and "small" in admin.listing.value
    admin.chosen.value = "small"
    admin.remove.click()
    assert bob.list_partitions() == [] and "IPUs 0-1 are free" in admin.status.value
    assert cells(admin)["partition"][0] == ""


def test_a_refusal_is_shown_and_changes_nothing(admin):
    admin.name.value, admin.size.value = "huge", 16
    admin.create.click()
    assert "refused" in admin.status.value and "cannot span allocations" in admin.status.value
    admin.user.value = "bob"
    admin.name.value, admin.size.value, admin.allocation.value = "x", 2, "lab"
    admin.create.click()
    admin.name.value = "x"
    admin.create.click()
    assert "unique" in admin.status.value
    assert len(admin.partitions()) == 1
    admin.color_by.value = "partition"
    assert cells(admin)["partition"][0] == "x"


def test_schedule_explorer_follows_the_policy():
    ex = ScheduleExplorer(CLASSIC, 16)
    boxes = ex.figure.select_one({"name": "jobs"}).data
    assert ex.schedule.policy == "fifo" and list(boxes["name"]) == [
        r.job.name for r in Scheduler(16, "fifo").run(CLASSIC).runs]
    assert ex.figure.select_one({"name": "reservations"}) is None
    fifo_text = ex.summary.value
    ex.policy.value = "backfill"
    assert ex.schedule.run_of("H").start == 2.1 * 3600
    assert ex.figure.select_one({"name": "reservations"}) is not None
    assert ex.summary.value != fifo_text and "backfill" in ex.summary.value
    assert "cy" in ex.summary.value


def test_the_widget_offers_what_notebook_11_asks_to_try(admin):
    """'Try 12 IPUs, or a partition for Bob in the research allocation': both are choices,
    and both are refused by the controller's rules."""
    assert {3, 12, 32} <= set(admin.size.options) and {1, 2, 4, 8, 16} <= set(admin.size.options)
    admin.name.value, admin.size.value = "twelve", 12
    admin.create.click()
    assert "refused" in admin.status.value and "power of two" in admin.status.value
    admin.size.value = 32
    admin.create.click()
    assert "larger than the pod16" in admin.status.value
    admin.user.value = "bob"
    admin.name.value, admin.size.value, admin.allocation.value = "sneak", 2, "ada-only"
    admin.create.click()
    assert admin.message.startswith("refused: partition 'sneak' of 2 IPUs: no allocation "
                                    "'ada-only' granted to user 'bob'")
    assert admin.partitions() == []


def test_toggle_labels_sit_beside_their_buttons(admin):
    """ipywidgets 8 draws a ToggleButtons' description above its buttons; the widgets lay
    them out as a row (the browser test shows the page)."""
    import ipywidgets as W

    def toggles(w):
        found = [w] if isinstance(w, W.ToggleButtons) else []
        return found + [t for c in getattr(w, "children", ()) for t in toggles(c)]
    found = toggles(admin) + toggles(ScheduleExplorer(CLASSIC, 16))
    assert [t.description for t in found] == ["colour by", "policy"]
    assert all((t.layout.display, t.layout.flex_flow) == ("flex", "row") for t in found)
