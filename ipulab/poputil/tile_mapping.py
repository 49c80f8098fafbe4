"""Linear tile mapping with Poplar's algorithm (poputil::mapTensorLinearly)."""
from __future__ import annotations

import numpy as np

from ..errors import GraphError

MIN_BYTES_PER_TILE = 128   # Poplar's default: keep >= 128 bytes per tile to limit exchange cost
VECTOR_BYTES = 8           # 64-bit vectors: 2 floats, 4 halves


def _partition_sizes(num_elements: int, num_tiles: int, min_elements: int, grain: int):
    """Elements per tile for tiles 0, 1, ... (only the tiles used)."""
    if num_elements == 0:
        return np.zeros(0, np.int64)
    grains = -(-num_elements // grain)
    per_part = -(-grains // num_tiles)
    if min_elements:
        min_grains = -(-min_elements // grain)
        most_parts = max(1, grains // min_grains)
        per_part = max(per_part, -(-grains // most_parts))
    parts = -(-grains // per_part)
    bounds = np.minimum((np.arange(parts + 1) * grains // parts) * grain, num_elements)
    return np.diff(bounds)


def _linear_sizes(graph, tensor, min_elements_per_tile, grain_size) -> np.ndarray:
    """Elements on tiles 0, 1, ... (only the tiles used) of map_tensor_linearly."""
    size = tensor.dtype.size
    grain = max(1, VECTOR_BYTES // size) if grain_size is None else int(grain_size)
    if min_elements_per_tile is None:
        min_elements_per_tile = -(-MIN_BYTES_PER_TILE // size) if grain_size is None else 0
    if grain < 1 or min_elements_per_tile < 0:
        raise GraphError(f"map_tensor_linearly('{tensor.name}'): grain_size must be >= 1 and "
                         f"min_elements_per_tile >= 0")
    return _partition_sizes(tensor.num_elements(), graph.target.num_tiles,
                            int(min_elements_per_tile), grain)


def calc_linear_tile_mapping(graph, tensor, min_elements_per_tile=None, grain_size=None):
    """The mapping map_tensor_linearly would set: per tile, [begin, end) of flattened elements."""
    sizes = _linear_sizes(graph, tensor, min_elements_per_tile, grain_size)
    ends = np.cumsum(sizes)
    mapping = [[] for _ in range(graph.target.num_tiles)]
    for tile, (b, e) in enumerate(zip((ends - sizes).tolist(), ends.tolist())):
        mapping[tile].append((b, e))
    return mapping


def map_tensor_linearly(graph, tensor, min_elements_per_tile=None, grain_size=None) -> None:
    """Spread a tensor's flattened elements evenly over tiles 0, 1, ... in grains.

    With no options, as Poplar: grains of one 64-bit vector and at least 128 bytes per tile
    (2,000 floats on 1,472 tiles use 59 tiles). Pass min_elements_per_tile / grain_size to
    choose, as in Poplar's four-argument form.
    """
    sizes = _linear_sizes(graph, tensor, min_elements_per_tile, grain_size)
    graph.set_tile_mapping(tensor, np.repeat(np.arange(sizes.size, dtype=np.int64), sizes))
