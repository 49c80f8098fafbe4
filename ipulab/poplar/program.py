"""Programs: the control tree an Engine compiles (Sequence, Execute, Copy, Repeat, If, ...)."""
from __future__ import annotations

import enum

from ..errors import ProgramError
from .state import ComputeSet, DataStream, RemoteBuffer
from .tensor import Tensor


class SyncType(enum.Enum):
    INTERNAL = "internal"   # all tiles of one IPU
    EXTERNAL = "external"   # all tiles of all IPUs
    GLOBAL = "global"       # all IPUs and the host


class Program:
    """Base of every program. children(): the programs it contains; parts(): the tensors,
    streams, remote buffers and compute sets it names itself."""

    def children(self) -> tuple:
        return ()

    def parts(self) -> tuple:
        return ()


class Sequence(Program):
    """Run programs one after another."""

    def __init__(self, programs=(), name: str = ""):
        self.programs, self.name = [], name
        for p in programs:
            self.add(p)

    def add(self, program: Program) -> "Sequence":
        if not isinstance(program, Program):
            raise ProgramError(f"Sequence.add takes a program, not {type(program).__name__}")
        self.programs.append(program)
        return self

    def children(self) -> tuple:
        return tuple(self.programs)


class Execute(Program):
    """Run the vertices of a compute set: one BSP superstep."""

    def __init__(self, cs: ComputeSet, name: str = ""):
        if not isinstance(cs, ComputeSet):
            raise ProgramError(f"Execute takes a compute set, not {type(cs).__name__}")
        self.cs, self.name = cs, name or cs.name

    def parts(self) -> tuple:
        return (self.cs,)


class Copy(Program):
    """Copy tensor -> tensor, stream -> tensor, tensor -> stream (elements in flattened order),
    or between a tensor and a remote buffer: Copy(tensor, buffer, offset) writes rows of the
    buffer, Copy(buffer, tensor, offset) reads them. `offset` is an INT / UNSIGNED_INT tensor
    of k elements choosing the rows (the tensor then has k * buffer.num_elements elements);
    without it the copy moves row 0."""

    def __init__(self, src, dst, offset=None, name: str = ""):
        if isinstance(offset, str) and not name:   # Copy(src, dst, "name") still works
            offset, name = None, offset
        remote = [x for x in (src, dst) if isinstance(x, RemoteBuffer)]
        if remote:
            self._remote(src, dst, offset, name)
            return
        if offset is not None:
            raise ProgramError("Copy takes an offset only between a tensor and a remote buffer")
        for side, x in (("source", src), ("destination", dst)):
            if not isinstance(x, (Tensor, DataStream)):
                raise ProgramError(f"Copy {side} must be a tensor, a stream or a remote "
                                   f"buffer, not {type(x).__name__}")
        if isinstance(src, DataStream) and isinstance(dst, DataStream):
            raise ProgramError("Copy cannot connect two streams")
        for s in (src, dst):
            if isinstance(s, DataStream):
                want = "host_to_device" if s is src else "device_to_host"
                if s.direction != want:
                    raise ProgramError(f"stream '{s.name}' is {s.direction}; it cannot be a "
                                       f"Copy {'source' if s is src else 'destination'}")
        n_src = src.num_elements if isinstance(src, DataStream) else src.num_elements()
        n_dst = dst.num_elements if isinstance(dst, DataStream) else dst.num_elements()
        if n_src != n_dst:
            raise ProgramError(f"Copy from '{src.name}' ({n_src} elements) to '{dst.name}' "
                               f"({n_dst} elements): element counts differ")
        if src.dtype is not dst.dtype:
            raise ProgramError(f"Copy from '{src.name}' ({src.dtype}) to '{dst.name}' "
                               f"({dst.dtype}): types differ; cast first")
        self.src, self.dst, self.offset = src, dst, None
        self.name = name or f"Copy {src.name} -> {dst.name}"

    def parts(self) -> tuple:
        return (self.src, self.dst) + (() if self.offset is None else (self.offset,))

    def _remote(self, src, dst, offset, name: str) -> None:
        to_buffer = isinstance(dst, RemoteBuffer)
        buf, t = (dst, src) if to_buffer else (src, dst)
        if not isinstance(t, Tensor):
            raise ProgramError(f"Copy to or from remote buffer '{buf.name}' needs a tensor on "
                               f"the other side, not {type(t).__name__}")
        if offset is not None:
            if not isinstance(offset, Tensor) or offset.dtype.host.kind not in "iu" or \
                    offset.rank > 1:
                raise ProgramError(f"Copy with remote buffer '{buf.name}': the offset must be "
                                   f"an INT or UNSIGNED_INT tensor of rank 0 or 1, got {offset!r}")
            if t._graph is not offset._graph:
                raise ProgramError(f"offset '{offset.name}' belongs to another graph")
        rows = 1 if offset is None else offset.num_elements()
        if t.num_elements() != rows * buf.num_elements:
            raise ProgramError(
                f"Copy between tensor '{t.name}' ({t.num_elements()} elements) and remote buffer "
                f"'{buf.name}' ({buf.num_elements} elements a row): the tensor needs "
                f"{rows} x {buf.num_elements} = {rows * buf.num_elements} elements "
                f"(one row per offset)")
        if t.dtype is not buf.dtype:
            raise ProgramError(f"Copy between tensor '{t.name}' ({t.dtype}) and remote buffer "
                               f"'{buf.name}' ({buf.dtype}): types differ; cast first")
        self.src, self.dst, self.offset = src, dst, offset
        arrow = f"{src.name} -> {dst.name}"
        self.name = name or f"Copy {arrow}" + (f" [{offset.name}]" if offset is not None else "")


class CrossReplicaCopy(Program):
    """Internal (ipulab.gcl builds it): copies between the replicas of a replicated graph.

    moves: [(src_replica, src tensor, dst_replica, dst tensor)]: the src tensor's elements on
    replica src_replica go to the dst tensor's elements on replica dst_replica. All moves run
    as ONE exchange (over IPU-Links where the replicas sit on different IPUs)."""

    def __init__(self, moves, name: str = "cross-replica copy"):
        self.moves, self.name = [], name
        for m in moves:
            try:
                a, src, b, dst = m
            except (TypeError, ValueError):
                raise ProgramError(f"{name}: a move is (src_replica, src, dst_replica, dst), "
                                   f"not {m!r}") from None
            if not isinstance(src, Tensor) or not isinstance(dst, Tensor):
                raise ProgramError(f"{name}: moves copy tensors, got {src!r} and {dst!r}")
            if src.num_elements() != dst.num_elements() or src.dtype is not dst.dtype:
                raise ProgramError(f"{name}: '{src.name}' and '{dst.name}' differ in size "
                                   "or type")
            self.moves.append((int(a), src, int(b), dst))
        types = {s.dtype.name for _, s, _, _ in self.moves}
        if len(types) > 1:
            raise ProgramError(f"{name}: all moves must have one element type, got {types}")

    def parts(self) -> tuple:
        return tuple(t for _, src, _, dst in self.moves for t in (src, dst))


class RingAllReduce(Sequence):
    """Internal (ipulab.gcl builds it): a ring all-reduce as the Sequence of its copies and
    combines, each a step of the profile, together with what they amount to, so that the
    engine may do it in one go: flat (n elements per replica) reduced with `combine` ("add",
    ...) across the replicas in ring order into out, through the m-element buffers recv and
    mine; chunk c is flat[c*m : c*m + size[c]]."""

    def __init__(self, programs, flat: Tensor, out: Tensor, recv: Tensor, mine: Tensor,
                 combine: str, size: list, name: str = ""):
        super().__init__(programs, name)
        self.flat, self.out, self.recv, self.mine = flat, out, recv, mine
        self.combine, self.size = combine, [int(k) for k in size]

    def parts(self) -> tuple:
        return (self.flat, self.out, self.recv, self.mine)


def _check_predicate(pred, what: str) -> Tensor:
    if not isinstance(pred, Tensor) or pred.num_elements() != 1:
        raise ProgramError(f"{what} needs a one-element predicate tensor, got {pred!r}")
    if pred.dtype.host.kind == "f":
        raise ProgramError(f"{what}: predicate '{pred.name}' must be BOOL, INT or UNSIGNED_INT, "
                           f"not {pred.dtype}")
    return pred


def _program(p, what: str) -> Program:
    if p is None:
        return Sequence()
    if not isinstance(p, Program):
        raise ProgramError(f"{what} must be a program, not {type(p).__name__}")
    return p


class Repeat(Program):
    """Run body count times."""

    def __init__(self, count: int, body: Program, name: str = ""):
        if int(count) < 0:
            raise ProgramError(f"Repeat count must be >= 0, not {count}")
        self.count, self.body, self.name = int(count), _program(body, "Repeat body"), name

    def children(self) -> tuple:
        return (self.body,)


class RepeatWhileTrue(Program):
    """Run cond; while pred is true run body, then cond again."""

    def __init__(self, cond: Program, pred: Tensor, body: Program, name: str = ""):
        self.cond, self.body = _program(cond, "condition"), _program(body, "body")
        self.pred, self.negate, self.name = _check_predicate(pred, "RepeatWhileTrue"), False, name

    def children(self) -> tuple:
        return (self.cond, self.body)

    def parts(self) -> tuple:
        return (self.pred,)


class RepeatWhileFalse(RepeatWhileTrue):
    """Run cond; while pred is false run body, then cond again."""

    def __init__(self, cond: Program, pred: Tensor, body: Program, name: str = ""):
        super().__init__(cond, pred, body, name)
        self.negate = True


class If(Program):
    """Run then_ if pred is non-zero, else else_."""

    def __init__(self, pred: Tensor, then: Program, else_: Program | None = None, name: str = ""):
        self.pred = _check_predicate(pred, "If")
        self.then, self.else_ = _program(then, "If branch"), _program(else_, "else branch")
        self.name = name

    def children(self) -> tuple:
        return (self.then, self.else_)

    def parts(self) -> tuple:
        return (self.pred,)


class Sync(Program):
    """A barrier across tiles: INTERNAL (one IPU), EXTERNAL (all IPUs) or GLOBAL (with host)."""

    def __init__(self, sync_type: SyncType = SyncType.INTERNAL, name: str = ""):
        if not isinstance(sync_type, SyncType):
            raise ProgramError(f"Sync takes a poplar.SyncType, not {sync_type!r}")
        self.sync_type, self.name = sync_type, name or f"Sync {sync_type.value}"


class PrintTensor(Program):
    """Print a tensor's values as Poplar does: `title: [1.0000000 2.0000000]`."""

    def __init__(self, title, tensor: Tensor | None = None):
        if tensor is None:
            title, tensor = getattr(title, "name", ""), title
        if not isinstance(tensor, Tensor):
            raise ProgramError(f"PrintTensor takes a tensor, not {type(tensor).__name__}")
        self.title, self.tensor, self.name = str(title), tensor, f"PrintTensor {title}"

    def parts(self) -> tuple:
        return (self.tensor,)
