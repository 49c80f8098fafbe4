"""V-IPU: a Pod shared by many users. A controller over a simulated Pod of Bow-2000s keeps
allocations (machines granted to users) and partitions (power-of-two blocks of IPUs joined by
IPU-Links, isolated from each other) in one SQLite file; a partition is a device.

    from ipulab import vipu
    ctl = vipu.connect(db="class.sqlite", user="alice")     # local mode: names are labels
    ctl.init("pod16")
    dev = ctl.create_partition("mine", 4).device(tiles_per_ipu=16)

For a class on one machine, `ipulab vipu serve` (Server) holds the state and every user
connects with vipu.connect(server=SOCKET) (RemoteController), as who the kernel says they are.
"""
from .controller import SYNC_TYPES, Controller, connect, default_user, pod_system, spans
from .partition import EVERYONE, Allocation, Partition, PartitionDevice, PartitionSystem
from .state import SCHEMA_VERSION, Store, default_path
from .client import RemoteController
from .server import Server
from .hosts import HostPool, input_plan
from .scheduler import POLICIES, Job, Schedule, Scheduler, generate_jobs, load_trace

__all__ = ["Controller", "connect", "default_user", "pod_system", "spans", "SYNC_TYPES",
           "EVERYONE", "Allocation", "Partition", "PartitionDevice", "PartitionSystem",
           "SCHEMA_VERSION", "Store", "default_path", "RemoteController", "Server",
           "Scheduler", "Schedule", "Job", "POLICIES", "generate_jobs", "load_trace",
           "HostPool", "input_plan"]
