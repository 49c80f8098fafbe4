"""Widgets for a shared Pod: PodAdmin (create and remove partitions, and see the Pod's IPUs
coloured by owner or partition) and ScheduleExplorer (a day of jobs under a chosen policy, as
a Gantt chart with its numbers).

Both act through the public APIs of ipulab.vipu: PodAdmin calls the controllers (one per user
it acts for, so every rule and refusal is the controller's), ScheduleExplorer runs the
Scheduler. Everything they show is recomputed from that state on every change.
"""
from __future__ import annotations

import ipywidgets as W

from .. import viz
from ..errors import VipuError
from ..vipu.scheduler import POLICIES, Scheduler, load_trace
from ._common import bokeh_pane, esc, table, toggle_buttons

ANY = "(any)"


class PodAdmin(W.VBox):
    """The Pod as an administrator sees it, acting for the users of `controllers` (one
    vipu.Controller per user, all on the same state file): pick a user, a name, a size and
    optionally an allocation, then Create; pick one of the user's partitions, then Remove. A
    refusal shows the controller's message. The figure shows every partition these users can
    see."""

    def __init__(self, controllers):
        controllers = [controllers] if hasattr(controllers, "user") else list(controllers)
        if not controllers:
            raise VipuError("PodAdmin needs at least one vipu.Controller")
        self.controllers = {c.user: c for c in controllers}
        self.pod = controllers[0].system
        n = self.pod.num_ipus
        # powers of two up to the Pod, and sizes the controller refuses (12: not a power of
        # two; twice the Pod: too large), so a refusal is one click away
        sizes = sorted({2 ** k for k in range(n.bit_length())} | {3, 6, 12, 2 * n})
        self.user = W.Dropdown(options=list(self.controllers), description="user")
        self.name = W.Text(value="p0", description="name")
        self.size = W.Dropdown(options=sizes, value=4, description="IPUs")
        self.allocation = W.Dropdown(description="allocation")
        self.create = W.Button(description="Create partition", button_style="success")
        self.chosen = W.Dropdown(description="partition")
        self.remove = W.Button(description="Remove partition", button_style="danger")
        self.color_by = toggle_buttons(["user", "partition"], "colour by")
        self.status, self.listing = W.HTML(), W.HTML()
        self.message = ""                         # the status as plain text
        self.figure = self._figure()
        self._pane = bokeh_pane(self.figure)
        self.create.on_click(self._create)
        self.remove.on_click(self._remove)
        self.user.observe(self._new_user, "value")
        self.color_by.observe(lambda _: self.refresh(), "value")
        super().__init__([W.HBox([self.user, self.color_by]),
                          W.HBox([self.name, self.size, self.allocation, self.create]),
                          W.HBox([self.chosen, self.remove]), self.status, self._pane,
                          self.listing])
        self.refresh()

    @property
    def controller(self):
        return self.controllers[self.user.value]

    def partitions(self) -> list:
        """Every partition visible to one of the users, once each."""
        seen = {}
        for c in self.controllers.values():
            for p in c.list_partitions():
                seen.setdefault(p.lease, p)
        return sorted(seen.values(), key=lambda p: p.ipus[0])

    def _figure(self):
        return viz.pod_partitions(self.pod.num_ipus, [p.summary() for p in self.partitions()],
                                  ipus_per_machine=self.pod.ipus_per_machine,
                                  color_by=self.color_by.value,
                                  title=f"{self.pod.description}: partitions")

    def allocations(self) -> list:
        """Every allocation one of the users may see, once each, in the Pod's order: the
        administrator's list, so a request into someone else's is one click away (and
        refused by the controller)."""
        seen = {}
        for c in self.controllers.values():
            for a in c.list_allocations():
                seen.setdefault(a.name, a)
        return sorted(seen.values(), key=lambda a: a.first_machine)

    def refresh(self) -> None:
        """Redraw the Pod and the lists from the controllers' state."""
        mine = self.controller
        allocs = mine.list_allocations()
        self.allocation.options = [(ANY, ANY)] + [
            (f"{a.name} ({a.user or 'everyone'})", a.name) for a in self.allocations()]
        self.chosen.options = [p.name for p in mine.list_partitions() if p.user == mine.user]
        self.remove.disabled = not self.chosen.options
        self.figure = self._figure()
        self._pane.update_from_model(self.figure)
        rows = [(p.name, p.user, p.allocation, p.size, f"{p.ipus[0]}-{p.ipus[-1]}")
                for p in self.partitions()]
        free = "; ".join(f"{a.name}: {len(a.free)} of {a.num_ipus} IPUs free" for a in allocs)
        self.listing.value = (table(["partition", "owner", "allocation", "IPUs", "range"], rows,
                                    empty="no partitions") + f"<div>{esc(free)}</div>")

    def _new_user(self, _=None) -> None:
        self.allocation.value = ANY                # another user: any of theirs, to start
        self.refresh()

    def _say(self, ok: bool, text: str) -> None:
        """Show the outcome of a click (green, or red for a refusal); `message` keeps it as
        plain text."""
        self.message = text
        color = "#2e7d32" if ok else "#c62828"
        self.status.value = f"<span style='color:{color}'>{esc(text)}</span>"

    def _create(self, _=None) -> None:
        alloc = None if self.allocation.value in (None, ANY) else self.allocation.value
        try:
            p = self.controller.create_partition(self.name.value.strip(), self.size.value,
                                                 allocation=alloc)
        except VipuError as e:
            self._say(False, f"refused: {e}")
        else:
            self._say(True, f"created {p.name}: IPUs {p.ipus[0]}-{p.ipus[-1]} for {p.user}")
        self.refresh()

    def _remove(self, _=None) -> None:
        if not self.chosen.value:
            return
        try:
            p = self.controller.remove_partition(self.chosen.value)
        except VipuError as e:
            self._say(False, f"refused: {e}")
        else:
            self._say(True, f"removed {p.name}: IPUs {p.ipus[0]}-{p.ipus[-1]} are free")
        self.refresh()


class ScheduleExplorer(W.VBox):
    """A trace of jobs on a Pod of num_ipus IPUs under the policy picked with the buttons: the
    Gantt chart of IPUs over time, and utilisation, fragmentation and waits per user."""

    def __init__(self, jobs, num_ipus: int = 16, policy: str = "fifo"):
        self.jobs, self.num_ipus = load_trace(jobs), int(num_ipus)
        self.policy = toggle_buttons(list(POLICIES), "policy", value=policy)
        self.summary = W.HTML()
        self.schedule = Scheduler(self.num_ipus, policy).run(self.jobs)
        self.figure = self._figure()
        self._pane = bokeh_pane(self.figure)
        self.policy.observe(lambda _: self.refresh(), "value")
        super().__init__([self.policy, self.summary, self._pane])
        self._tabulate()

    def _figure(self):
        s = self.schedule
        return viz.ipu_gantt(s.gantt(), self.num_ipus, reservations=s.promised(),
                             title=f"{len(self.jobs)} jobs, policy {s.policy}",
                             subtitle=f"utilisation {100 * s.utilisation():.1f} %, mean wait "
                                      f"{s.mean_wait() / 60:.1f} min")

    def _tabulate(self) -> None:
        s = self.schedule
        head = (f"<b>{esc(s.policy)}</b>: utilisation {100 * s.utilisation():.1f} % until the "
                f"last job ends ({s.makespan / 3600:.1f} h), mean wait "
                f"{s.mean_wait() / 60:.1f} min, fragmentation {s.fragmentation():.2f}")
        rows = [(u, f"{w / 60:.1f}") for u, w in s.waits_by_user().items()]
        self.summary.value = head + table(["user", "mean wait (min)"], rows)

    def refresh(self) -> None:
        """Schedule the trace again under the chosen policy and redraw."""
        self.schedule = Scheduler(self.num_ipus, self.policy.value).run(self.jobs)
        self.figure = self._figure()
        self._pane.update_from_model(self.figure)
        self._tabulate()
