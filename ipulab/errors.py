"""The exception hierarchy: every misuse raises one of these, naming what and where."""
from __future__ import annotations


class IpuLabError(Exception):
    """Base of every error ipulab raises on purpose."""


class GraphError(IpuLabError):
    """A malformed graph: bad mapping, shape, dtype, unknown field or codelet, write hazard."""


class ConfigError(GraphError):
    """A training option out of its range: names the option, the rule and the value, so a
    front end can say it in its own words (`ipulab train` names the flag)."""

    def __init__(self, option: str, rule: str, value):
        self.option, self.rule, self.value = option, rule, value
        super().__init__(f"TrainConfig: {option} {rule}, not {value!r}")


class TileMemoryError(IpuLabError):
    """A tile's allocations do not fit its SRAM."""

    def __init__(self, tile: int, needed: int, available: int, largest: list[tuple[str, int]],
                 message: str | None = None):
        """message replaces the default text (e.g. a planner explaining what did not fit)."""
        self.tile, self.needed, self.available, self.largest = tile, needed, available, largest
        self.profile = None   # set by the compiler: a memory-only Profile, to see the overflow
        top = ", ".join(f"{name} ({nbytes:,} B)" for name, nbytes in largest[:5])
        super().__init__(message or (
            f"Out of memory on tile {tile}: needs {needed:,} bytes but only {available:,} are "
            f"available ({needed - available:,} over). Largest there: {top or 'nothing'}. "
            "Spread the biggest tensors over more tiles (e.g. poputil.map_tensor_linearly)."))


class CodeletError(IpuLabError):
    """A codelet failed to compile, or failed while running (e.g. an out-of-bounds access)."""


class ProgramError(IpuLabError):
    """A malformed program: wrong copy sizes or types, a bad predicate, an unknown program."""


class EngineError(IpuLabError):
    """Misuse of an Engine: not loaded, unknown handle or stream, wrong host array."""


class DataError(IpuLabError, ValueError):
    """Data handed in from the host is missing or malformed: a dataset file, a batch of
    images or labels, a dict of weights."""


class SandboxError(IpuLabError):
    """Untrusted code cannot be isolated here (no bubblewrap, no user namespaces, no way to cap
    its processes): says what is missing and how to get it."""


class WorkspaceError(IpuLabError):
    """A learner's workspace cannot be made or refreshed as asked (a file in the way, a file
    that is not the course's, the course not found): says which and what to do."""


class VipuError(IpuLabError):
    """The V-IPU controller refused a request (ipulab.vipu): the subclass names the rule broken,
    the message the request and what is free."""


class PartitionSizeError(VipuError, ValueError):
    """A partition's size is not a power of two, or is larger than any allocation or the Pod."""


class PartitionNameError(VipuError):
    """A partition name is empty, malformed, or already taken (names are unique in a cluster)."""


class UnknownPartitionError(VipuError, KeyError):
    """No partition of that name is visible to the user (visible: their own and shared ones)."""

    def __str__(self) -> str:          # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class PartitionOwnerError(VipuError):
    """Only a partition's creator may remove or share it."""


class AllocationError(VipuError):
    """An allocation unknown, not granted to the user, malformed, or too small: a partition is
    made from the IPUs of ONE allocation."""


class NoFreeIpusError(VipuError):
    """The allocation has no free block of IPUs of the requested size joined by IPU-Links."""


class SyncTypeError(VipuError):
    """An unknown sync type, or a reconfigurable partition without the c2-compatible one."""


class StateError(VipuError):
    """The controller's state file is missing, corrupt, of another schema, or locked; it is
    left as it was."""


class AdminOnlyError(VipuError):
    """On a shared Pod (`ipulab vipu serve`), a request only its administrator may make: init,
    or a partition created for another user."""


class VipuServerError(VipuError):
    """The V-IPU server cannot be reached, cannot start (its socket is live, or not a
    socket), or broke its protocol; or a request to it was malformed."""


class PartitionError(VipuError, GraphError):
    """Isolation: a program or device of one partition touched another partition's IPUs,
    streams or buffers, or ran on a partition that has been removed."""


class PlanError(IpuLabError):
    """A planner input that cannot be (ipulab.plan): a mapping whose t·p·r is not the system's
    IPUs or whose sizes are not powers of two, gradient accumulation below the pipeline rule,
    more phases than layers, a model spec with inconsistent dimensions; names the rule."""
