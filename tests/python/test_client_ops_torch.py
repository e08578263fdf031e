"""The op registry against torch's own DTensor: every case of op_peer_cases.py (pointwise,
reductions, the matmul family, views, tensor ops, norms, attention, ops of several outputs, on a
mesh of 4 and a 2x2 one, uneven and empty shards among them) run on Tessera and, by
torch_op_reference.py, on torch's DTensor (LocalTensorMode, 4 simulated ranks) and on whole
tensors in one process. Each output must equal the single-process result and be laid out as
torch's DTensor lays it out, or as DIFFERENT documents (a case where Tessera chooses otherwise, or
torch's DTensor refuses the call). Skips without torch."""

import os
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")
pytest.importorskip("torch", reason="torch is not installed")

from tessera import Partial, Replicate, Shard  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from op_peer_cases import CASES, arguments, data  # noqa: E402

# Where Tessera's output placements differ from torch's DTensor's, or torch's DTensor refuses the
# call, and why. Each entry is checked: Tessera's placements must be the ones given here.
DIFFERENT = {
    # A Partial input the op is not linear in: torch all_reduces it (every rank then holds the
    # whole); Tessera reduce_scatters it (about half the bytes) and the output stays sharded.
    "partial_add_number": ("(Shard(dim=0),)", "reduce_scatter, not all_reduce"),
    "partial_exp": ("(Shard(dim=0),)", "reduce_scatter, not all_reduce"),
    "partial_softmax": ("(Shard(dim=0),)", "reduce_scatter, not all_reduce"),
    # P(sum) * P(sum): torch all_reduces one and keeps the product Partial; Tessera reduce_scatters
    # both (as many bytes) and the product is a reduced shard.
    "partial_mul_partial": ("(Shard(dim=0),)", "both reduce_scattered: the product is reduced"),
    # mean is linear: the mean of each rank's part sums to the mean; torch all_reduces first.
    "partial_mean_dim": ("(Partial(sum),)", "mean is linear in a Partial(sum): no reduction"),
    # An op along its input's sharded dim: torch gathers the input (all_gather, every rank holding
    # the whole); Tessera moves the shard to another dim (all_to_all, about 1/N of those bytes)
    # and the output stays sharded.
    "cumsum_sharded_dim": ("(Shard(dim=0),)", "the shard moved to dim 0, not gathered"),
    "softmax_sharded_dim": ("(Shard(dim=0),)", "the shard moved to dim 0, not gathered"),
    "slice_sharded_dim": ("(Shard(dim=1),)", "the shard moved to dim 1, not gathered"),
    "cat_sharded_dim": ("(Shard(dim=1),)", "the shards moved to dim 1, not gathered"),
    "sort_sharded_dim": ("(Shard(dim=1),)", "the shard moved to dim 1, not gathered"),
    # A mean over a sharded dim: torch's Partial(avg) of local means is the mean only when every
    # shard has as many rows; Tessera divides each rank's sum by the whole dim's size, a
    # Partial(sum) that is right for uneven shards too.
    "mean_sharded_dim": ("(Partial(sum),)", "local sums over the global count: exact when uneven"),
    # any over a sharded dim: a logical or of each rank's part, Partial(max) on bool; torch gathers.
    "any_sharded_dim": ("(Partial(max),)", "each rank's any, or-ed when read; no gather"),
    # The 2-norm over a sharded dim: torch keeps a _NormPartial (each rank's norm, combined when
    # read); Tessera has no norm Partial and moves the shard to dim 0 (an all_to_all).
    "vector_norm_sharded_dim": ("(Shard(dim=0),)", "no _NormPartial: the shard moved to dim 0"),
    "norm_all": ("(Replicate(),)", "no _NormPartial: the 3-norm of every element gathers first"),
    # torch refuses to flatten the batch (2 on 4 ranks) into the rows of the product; Tessera's
    # matmul keeps the batch shard as bmm does.
    "matmul_batched": ("(Shard(dim=0),)", "torch refuses the uneven flatten; the batch stays sharded"),
    # torch keeps the merged dim sharded as a _StridedShard (every 4th block of 6); Tessera has no
    # strided shard and gathers the sharded dim before the merge.
    "view_merge_second_sharded": ("(Replicate(),)",
                                  "no _StridedShard: the sharded dim is gathered before the merge"),
    # torch refuses to unflatten an unevenly sharded dim; Tessera redistributes first.
    "view_split_dim": ("(Replicate(),)", "torch refuses the uneven unflatten; Tessera gathers first"),
    "view_split_sharded_last": ("(Replicate(),)",
                                "torch refuses the uneven unflatten; Tessera gathers first"),
    # torch's DTensor has no strategy for the CPU flash attention (it refuses the call, or
    # replicates everything); Tessera keeps the batch or head shards, as its SDPA strategy does.
    "flash_attention_heads": ("(Shard(dim=1),)", "heads stay sharded: no gather of q, k, v"),
    "flash_attention_batch_causal": ("(Shard(dim=0),)",
                                     "torch has no strategy for it; the batch stays sharded"),
    "grid_flash_attention": ("(Shard(dim=0), Shard(dim=1))", "batch and heads stay sharded"),
    "grid_view_flatten": ("(Replicate(), Replicate())",
                          "torch refuses the uneven flatten; Tessera gathers first"),
    # torch's row-wise embedding gives a _MaskPartial (a sum whose parts are masked lookups), a
    # Partial(sum) by any other name.
    "embedding_rowwise": ("(Partial(sum),)", "torch's _MaskPartial is a sum of masked lookups"),
    # nll_loss's mean over a sharded batch: torch has no strategy and gathers both; Tessera's
    # ranks divide their rows' loss by the whole target's weight (the target gathered, a number
    # per row), a Partial(sum), and total_weight is that whole weight (R). One entry per output.
    "nll_forward_mean_batch": (("(Partial(sum),)", "(Replicate(),)"),
                               "each rank's rows over the whole weight: no gather of self"),
    # Log-probabilities sharded by class (DTensor's loss_parallel): torch's strategy wants the
    # classes whole and gathers them; Tessera's ranks pick the targets in their classes, a
    # Partial(sum) loss, and every rank counts every target's weight (R); the gradient stays
    # sharded by class.
    "nll_forward_sum_classes": (("(Partial(sum),)", "(Replicate(),)"),
                                "loss_parallel: the classes stay sharded"),
    "nll_backward_sum_classes": ("(Shard(dim=1),)", "loss_parallel: the gradient by class"),
}


@pytest.fixture(scope="module")
def torch_results(tmp_path_factory):
    """What torch_op_reference.py wrote: placements and values by key."""
    out = tmp_path_factory.mktemp("torch_ops") / "ops.npz"
    result = subprocess.run([sys.executable, os.path.join(HERE, "torch_op_reference.py"), str(out)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-4000:]
    return dict(np.load(out))


def placement(p):
    return Replicate() if p == "R" else Partial() if p == "P" else Shard(int(p[1:]))


def distribute(x, mesh, placements):
    """x laid out as `placements`; a Partial made from Shard(0), as the reference makes it."""
    first = [Shard(0) if p == "P" else placement(p) for p in placements]
    t = tessera.distribute_tensor(x, mesh, first)
    return t.redistribute(mesh, [placement(p) for p in placements]) if "P" in placements else t


def run_on_tessera(case, mesh):
    inputs = [distribute(data(inp, 100 * i + 1), mesh, inp.placements) for i, inp in enumerate(case.inputs)]
    args, kwargs = arguments(case, inputs)
    outs = tessera.ops.call(f"aten::{case.op}", *args, **kwargs)
    return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_op_as_torch_dtensor(meshes, torch_results, case):
    outs = run_on_tessera(case, meshes[case.mesh])
    singles = sorted(k for k in torch_results if k.startswith(f"{case.name}/") and k.endswith("/single"))
    assert len(outs) == len(singles), f"{len(outs)} outputs, torch gives {len(singles)}"
    torch_error = torch_results.get(f"{case.name}/error")
    for k, out in enumerate(outs):
        want = torch_results[f"{case.name}/{k}/single"]
        got = np.asarray(out.full_tensor(kind="numpy"))
        assert got.shape == want.shape and got.dtype == want.dtype, (got.shape, got.dtype, want.shape, want.dtype)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"output {k}")
        if torch_error is None:
            # torch's DTensor computed it: the same values, sharded or not.
            np.testing.assert_allclose(got, torch_results[f"{case.name}/{k}"], rtol=1e-5, atol=1e-5)
        placements = repr(tuple(out.placements))
        if case.name in DIFFERENT:
            expected = DIFFERENT[case.name][0]
            expected = expected[k] if isinstance(expected, tuple) else expected
            assert placements == expected, (placements, DIFFERENT[case.name])
        else:
            assert torch_error is None, f"torch's DTensor refused it: {torch_error}"
            assert placements == str(torch_results[f"{case.name}/{k}/placements"]), f"output {k}"
