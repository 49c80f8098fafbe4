"""PopLibs' poputil: tile-mapping helpers, and shared constants."""
from .constants import shared_constant
from .tile_mapping import calc_linear_tile_mapping, map_tensor_linearly

__all__ = ["calc_linear_tile_mapping", "map_tensor_linearly", "shared_constant"]
