"""Independent programs side by side: one superstep where there would be several.

Pipeline stages on different IPUs have nothing to wait for each other: stage 2 works on
micro-batch 3 while stage 1 works on micro-batch 4. In the BSP model that is one superstep
whose compute phase holds the vertices of both stages (and one exchange phase for both
stages' copies). parallel() builds exactly that from ordinary programs: it zips them, so the
k-th compute set of each becomes ONE compute set (named '<name>/<k>') and their k-th tensor
copies ONE copy; each
program keeps its own order, so what it computes is unchanged. The programs must work on
different tensors (the compiler rejects a merged compute set where one part writes what
another reads). The programs are consumed: their compute sets are emptied into the merged
ones, so execute only the Sequence parallel() returns.
"""
from __future__ import annotations

from ..errors import ProgramError
from .program import Copy, Execute, Program, Sequence
from .tensor import Tensor, concat


def _leaves(p: Program):
    if isinstance(p, Sequence):
        for c in p.programs:
            yield from _leaves(c)
    else:
        yield p


def _is_tensor_copy(p: Program) -> bool:
    return isinstance(p, Copy) and isinstance(p.src, Tensor) and isinstance(p.dst, Tensor)


def parallel(graph, programs, name: str = "parallel") -> Sequence:
    """One Sequence running `programs` (Sequences of Execute and Copy) side by side."""
    queues = []
    for p in programs:
        if not isinstance(p, Program):
            raise ProgramError(f"parallel '{name}': expected programs, got {type(p).__name__}")
        queues.append(list(_leaves(p)))
    st = graph._state
    remap: dict[int, int] = {}
    out, step = Sequence(name=name), 0
    while any(queues):
        heads = [q.pop(0) for q in queues if q]
        executes = [p for p in heads if isinstance(p, Execute)]
        copies = [p for p in heads if _is_tensor_copy(p)]
        for p in heads:                    # streams, remote buffers, control: one at a time
            if not isinstance(p, Execute) and not _is_tensor_copy(p):
                out.add(p)
        if executes:         # named after the slot even when alone, to find it in a profile
            cs = graph.add_compute_set(f"{name}/{step}")
            remap.update({p.cs.id: cs.id for p in executes})
            out.add(Execute(cs))
        by_type: dict = {}
        for p in copies:
            by_type.setdefault(p.src.dtype, []).append(p)
        for group in by_type.values():
            if len(group) == 1:
                out.add(group[0])
            else:
                out.add(Copy(concat([p.src.flatten() for p in group]),
                             concat([p.dst.flatten() for p in group]), name=f"{name}/copy {step}"))
        step += 1
    st.vertices.move(remap)
    return out


__all__ = ["parallel"]
