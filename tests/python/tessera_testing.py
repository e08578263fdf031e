"""References for the Python client's tests, in numpy: torch.chunk's shards, DTensor's nested
layouts, and values every dtype holds exactly."""

import numpy as np


def chunk(n, k, i):
    """torch.chunk's piece i of n over k: [begin, end)."""
    c = -(-n // k) if n else 0
    begin = min(n, i * c)
    return begin, min(n, begin + c)


def local_block(full, mesh_shape, placements, rank):
    """Rank `rank`'s shard of `full` (row-major mesh position) under Shard/Replicate placements,
    several mesh dims sharding one tensor dim nesting left to right; Partial dims hold the whole
    value here (the caller checks Partial's split)."""
    coord = np.unravel_index(rank, mesh_shape)
    index = [slice(0, s) for s in full.shape]
    for mesh_dim, p in enumerate(placements):
        if p.is_shard():
            d = p.dim % full.ndim
            start, stop = index[d].start, index[d].stop
            b, e = chunk(stop - start, mesh_shape[mesh_dim], coord[mesh_dim])
            index[d] = slice(start + b, start + e)
    return full[tuple(index)]


def values(dtype_name, shape, seed):
    """Values exact in `dtype_name` (small integers; bools), as float64 or bool numpy."""
    rng = np.random.default_rng(seed)
    if dtype_name == "bool":
        return rng.random(shape) > 0.5
    low = 0 if dtype_name == "uint8" else -8
    return rng.integers(low, 9, size=shape).astype(np.float64)


def as_numbers(array, dtype_name):
    """What the client returned, as float64 (or bool) for comparing: bfloat16 may come back as
    ml_dtypes' type, or as raw uint16 bits without ml_dtypes."""
    array = np.asarray(array)
    if dtype_name == "bool":
        return array.astype(bool)
    if dtype_name == "bfloat16" and array.dtype == np.uint16:
        return (array.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return array.astype(np.float64)
