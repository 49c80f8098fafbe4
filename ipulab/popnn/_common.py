"""What popnn's operations share: their inputs must be floating point, and row-wise work
(rows of the last dimension, each on the tile holding its middle element)."""
from __future__ import annotations

from ..errors import GraphError
from ..poplar import Regions
from ..poputil import map_rows, row_owners, row_pieces


def check_float(t, what: str) -> None:
    """t must be FLOAT or HALF."""
    if t.dtype.name not in ("FLOAT", "HALF"):
        raise GraphError(f"{what}: '{t.name}' is {t.dtype}; this operation takes FLOAT or "
                         "HALF tensors (popops.cast first)")


class Rows:
    """A row-wise operation's layout: t seen as rows of `width` elements, each row's owner
    tile, and the vertices (pieces of each tile's rows, at most one per worker context)."""

    def __init__(self, graph, t, width: int, what: str):
        self.graph, self.width = graph, width
        self.owners = row_owners(graph, t.flatten(), width, what)
        self.work = row_pieces(graph, self.owners)

    def new(self, dtype, shape, name: str, width: int | None = None):
        """A new tensor of `shape`, mapped row by row to the owners (rows of `width`)."""
        t = self.graph.add_variable(dtype, list(shape), name)
        map_rows(self.graph, t, self.owners, self.width if width is None else width)
        return t

    def regions(self, t, width: int | None = None) -> Regions:
        """Each vertex's runs of rows of t (rows of `width`, default the operation's)."""
        w = self.width if width is None else width
        return Regions(t.flatten(), self.work.begins * w, self.work.ends * w, self.work.counts)
