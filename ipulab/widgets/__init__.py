"""ipywidgets apps over a run's Profile, composing the ipulab.viz figures (via jupyter_bokeh).

Each takes an Engine that has run (or a Profile) and shows its most recent run:
TileExplorer (one tile's memory, vertices and exchange partners), BSPPlayer (step through the
supersteps), GraphInspector (compute sets -> vertices -> tensors -> tiles) and ProfileDashboard
(all of them in tabs). TrainingDashboard(trainer) trains live. For a shared Pod (ipulab.vipu):
PodAdmin(controllers) creates and removes partitions on a picture of the Pod's IPUs, and
ScheduleExplorer(jobs) shows a day of jobs under a chosen scheduling policy. PlannerWidget(spec,
system) maps a model onto a Pod with ipulab.plan (t, p, r, RTS, phases); MappingExplorer(...)
trains one on the simulator under the t, p, RTS and phases picked, profiles side by side.
"""
from .bsp_player import BSPPlayer
from .dashboard import ProfileDashboard
from .graph_inspector import GraphInspector
from .mapping_explorer import MappingExplorer
from .planner import PlannerWidget
from .tile_explorer import TileExplorer
from .training import TrainingDashboard
from .vipu import PodAdmin, ScheduleExplorer

__all__ = ["TileExplorer", "BSPPlayer", "GraphInspector", "ProfileDashboard", "TrainingDashboard",
           "PodAdmin", "ScheduleExplorer", "PlannerWidget", "MappingExplorer"]
