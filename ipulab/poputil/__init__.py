"""PopLibs' poputil: tile-mapping helpers, shared constants and sliding-window arithmetic."""
from .constants import shared_constant
from .tile_mapping import calc_linear_tile_mapping, map_tensor_linearly
from .windows import pair, window_output

__all__ = ["calc_linear_tile_mapping", "map_tensor_linearly", "shared_constant", "pair",
           "window_output"]
