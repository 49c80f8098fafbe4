"""PopLibs' poputil: tile-mapping helpers."""
from .tile_mapping import calc_linear_tile_mapping, map_tensor_linearly

__all__ = ["calc_linear_tile_mapping", "map_tensor_linearly"]
