"""The placement rule of V-IPU as a pure function: aligned power-of-two blocks of free IPUs."""
from ipulab.vipu.blocks import find_block, largest_free_block


def test_blocks_are_aligned_powers_of_two():
    busy = [True, False, False, False, True, False, False, False]
    assert find_block(busy, 1) == 1 and find_block(busy, 2) == 2 and find_block(busy, 4) is None
    assert largest_free_block(busy) == 2 and largest_free_block([True] * 4) == 0
    assert find_block([False] * 4, 8) is None
    assert find_block([False] * 4, 0) is None
