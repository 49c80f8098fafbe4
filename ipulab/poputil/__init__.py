"""PopLibs' poputil: tile mapping and placement helpers, shared constants, codelet variants
and sliding-window arithmetic: what the operation libraries above it share."""
from .constants import shared_constant
from .placement import (Pieces, TileConstant, element_tiles, grain_of, map_rows, new_like,
                        per_tile_runs, pieces, require_mapped, row_owners, row_pieces, runs,
                        split_even, tile_constant, tile_intervals, tile_pieces,
                        vertex_constants)
from .tile_mapping import calc_linear_tile_mapping, map_tensor_linearly
from .variants import typed_variant
from .windows import pair, window_output

__all__ = ["calc_linear_tile_mapping", "map_tensor_linearly", "shared_constant", "pair",
           "window_output", "typed_variant", "element_tiles", "grain_of", "map_rows",
           "new_like", "per_tile_runs", "require_mapped", "row_owners", "row_pieces",
           "TileConstant", "runs", "split_even", "tile_constant", "tile_intervals",
           "vertex_constants", "Pieces", "pieces", "tile_pieces"]
