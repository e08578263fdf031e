"""The op calls test_client_ops_torch.py runs on Tessera and torch_op_reference.py on torch's own
DTensor: each an ATen op by its overload, its arguments (In(i) names input i), and its inputs'
shapes, placements and kind on a mesh of 4 ("world") or 2x2 ("grid"). Shapes include dims the
mesh does not divide (5 rows on 4 ranks) and dims smaller than it (3 on 4: an empty shard)."""

from collections import namedtuple

import numpy as np

In = namedtuple("In", "index")
# One input: its shape, its placements by mesh dim ("S0", "S1", "R", "P": a Partial(sum) made from
# Shard(0)), what it holds ("values",
# "positive", "mask" (bool), or "index:N" (int64 in [0, N))) and its dtype.
Input = namedtuple("Input", "shape placements kind dtype", defaults=("values", "float32"))
Case = namedtuple("Case", "name op args kwargs inputs mesh", defaults=({}, (), "world"))

MESHES = {"world": (4,), "grid": (2, 2)}


def data(inp, seed):
    """The values of input `inp` (numpy), the same in both runs."""
    rng = np.random.default_rng(seed)
    if inp.kind == "mask":
        return rng.uniform(size=inp.shape) < 0.5
    if inp.kind.startswith("index:"):
        return rng.integers(0, int(inp.kind.split(":")[1]), size=inp.shape).astype(np.int64)
    low = 0.5 if inp.kind == "positive" else -1.0
    return rng.uniform(low, 1.5, inp.shape).astype(inp.dtype)


def arguments(case, inputs):
    """The case's positional and keyword arguments with In(i) replaced by inputs[i]."""

    def resolve(a):
        if isinstance(a, In):
            return inputs[a.index]
        if isinstance(a, list):
            return [resolve(x) for x in a]
        return a

    return [resolve(a) for a in case.args], {k: resolve(v) for k, v in case.kwargs.items()}


def V(shape, *placements, kind="values", dtype="float32"):
    return Input(tuple(shape), tuple(placements), kind, dtype)


CASES = [
    # Pointwise: shards kept, broadcasting, a mask.
    Case("add_bcast", "add.Tensor", (In(0), In(1)), {}, (V((5, 6), "S0"), V((6,), "R"))),
    Case("add_alpha_grid", "add.Tensor", (In(0), In(1)), {"alpha": 2},
         (V((4, 6), "S0", "S1"), V((4, 6), "S0", "S1")), "grid"),
    Case("mul_shards_differ", "mul.Tensor", (In(0), In(1)), {}, (V((4, 6), "S0"), V((4, 6), "S1"))),
    Case("exp", "exp", (In(0),), {}, (V((5, 3), "S1"),)),
    Case("gelu_tanh", "gelu", (In(0),), {"approximate": "tanh"}, (V((5, 6), "S0"),)),
    Case("where", "where.self", (In(0), In(1), In(2)), {},
         (V((4, 6), "S1", kind="mask"), V((4, 6), "S1"), V((6,), "R"))),
    Case("masked_fill", "masked_fill.Scalar", (In(0), In(1), -3.0), {},
         (V((5, 6), "S0"), V((5, 6), "S0", kind="mask"))),
    # Reductions: a reduced sharded dim becomes Partial.
    Case("sum_sharded_dim", "sum.dim_IntList", (In(0), [1]), {}, (V((4, 6), "S1"),)),
    Case("sum_other_dim", "sum.dim_IntList", (In(0), [1], True), {}, (V((5, 6), "S0"),)),
    Case("mean_sharded_dim", "mean.dim", (In(0), [0]), {}, (V((8, 6), "S0"),)),
    Case("amax_sharded_dim", "amax", (In(0), [1]), {}, (V((4, 8), "S1"),)),
    Case("sum_all_grid", "sum", (In(0),), {}, (V((4, 6), "S0", "S1"),), "grid"),
    Case("var", "var.correction", (In(0), [1]), {}, (V((5, 6), "S0"),)),
    Case("argmax", "argmax", (In(0), 1), {}, (V((5, 6), "S0"),)),
    Case("cumsum_sharded_dim", "cumsum", (In(0), 1), {}, (V((4, 6), "S1"),)),
    Case("softmax_other_dim", "_softmax", (In(0), 1, False), {}, (V((5, 6), "S0"),)),
    Case("softmax_sharded_dim", "_softmax", (In(0), 1, False), {}, (V((4, 8), "S1"),)),
    Case("log_softmax", "_log_softmax", (In(0), 0, False), {}, (V((4, 6), "S1"),)),
    Case("logsumexp", "logsumexp", (In(0), [1]), {}, (V((5, 6), "S0"),)),
    # The matmul family.
    Case("mm_rows", "mm", (In(0), In(1)), {}, (V((5, 6), "S0"), V((6, 4), "R"))),
    Case("mm_cols", "mm", (In(0), In(1)), {}, (V((5, 6), "R"), V((6, 4), "S1"))),
    Case("mm_inner", "mm", (In(0), In(1)), {}, (V((5, 8), "S1"), V((8, 4), "S0"))),
    Case("mm_grid", "mm", (In(0), In(1)), {}, (V((4, 6), "S0", "R"), V((6, 8), "R", "S1")), "grid"),
    Case("bmm_batch", "bmm", (In(0), In(1)), {}, (V((4, 3, 6), "S0"), V((4, 6, 2), "S0"))),
    Case("addmm", "addmm", (In(0), In(1), In(2)), {},
         (V((4,), "R"), V((5, 6), "S0"), V((6, 4), "R"))),
    # Views and reshapes.
    Case("view_flatten_first_sharded", "view", (In(0), [24]), {}, (V((4, 6), "S0"),)),
    Case("view_split_dim", "view", (In(0), [2, 2, 6]), {}, (V((4, 6), "S0"),)),
    Case("view_split_sharded_last", "view", (In(0), [4, 2, 4]), {}, (V((4, 8), "S1"),)),
    Case("view_merge_second_sharded", "view", (In(0), [24]), {}, (V((4, 6), "S1"),)),
    Case("transpose", "transpose.int", (In(0), 0, 1), {}, (V((5, 6), "S0"),)),
    Case("permute_grid", "permute", (In(0), [2, 0, 1]), {}, (V((4, 2, 6), "S0", "S2"),), "grid"),
    Case("unsqueeze", "unsqueeze", (In(0), 0), {}, (V((5, 6), "S1"),)),
    Case("expand", "expand", (In(0), [4, 5, 6]), {}, (V((5, 6), "S0"),)),
    Case("slice_other_dim", "slice.Tensor", (In(0), 1, 1, 5), {}, (V((5, 6), "S0"),)),
    Case("slice_sharded_dim", "slice.Tensor", (In(0), 0, 1, 7, 2), {}, (V((8, 6), "S0"),)),
    Case("select_other_dim", "select.int", (In(0), 1, 2), {}, (V((5, 6), "S0"),)),
    # Tensor ops: shards kept on the dims they do not touch.
    Case("cat_other_dim", "cat", ([In(0), In(1)], 1), {}, (V((5, 3), "S0"), V((5, 2), "S0"))),
    Case("cat_sharded_dim", "cat", ([In(0), In(1)], 0), {}, (V((4, 3), "S0"), V((2, 3), "S0"))),
    Case("stack", "stack", ([In(0), In(1)], 0), {}, (V((5, 3), "S0"), V((5, 3), "S0"))),
    Case("index_select", "index_select", (In(0), 0, In(1)), {},
         (V((5, 8), "S1"), V((3,), "R", kind="index:5"))),
    Case("gather", "gather", (In(0), 1, In(1)), {},
         (V((8, 6), "S0"), V((8, 2), "S0", kind="index:6"))),
    Case("embedding_colwise", "embedding", (In(0), In(1)), {},
         (V((10, 8), "S1"), V((3, 4), "R", kind="index:10"))),
    Case("embedding_rowwise", "embedding", (In(0), In(1)), {},
         (V((12, 8), "S0"), V((3, 4), "R", kind="index:12"))),
    Case("tril", "tril", (In(0),), {}, (V((6, 6), "S0"),)),
    # torch.export's graphs: diff (a decomposition here) and the & operator on masks.
    Case("diff_other_dim_sharded", "diff", (In(0),), {}, (V((5, 6), "S0"),)),
    Case("diff_twice_prepend", "diff", (In(0), 2, 1, In(1)), {},
         (V((5, 6), "S0"), V((5, 2), "S0"))),
    Case("and_masks", "__and__.Tensor", (In(0), In(1)), {},
         (V((4, 6), "S0", kind="mask"), V((4, 6), "S0", kind="mask"))),
    Case("constant_pad", "constant_pad_nd", (In(0), [1, 2], 0.5), {}, (V((5, 6), "S0"),)),
    Case("constant_pad_crop_partial", "constant_pad_nd", (In(0), [0, 0, -1, 1]), {},
         (V((5, 6), "P"),)),
    # Norms and attention.
    Case("native_layer_norm", "native_layer_norm", (In(0), [6], In(1), In(2), 1e-5), {},
         (V((5, 6), "S0"), V((6,), "R"), V((6,), "R"))),
    Case("fused_rms_norm", "_fused_rms_norm", (In(0), [6], In(1), 1e-6), {},
         (V((5, 6), "S0"), V((6,), "R"))),
    Case("flash_attention_heads", "_scaled_dot_product_flash_attention_for_cpu",
         (In(0), In(1), In(2)), {},
         (V((2, 4, 3, 8), "S1"), V((2, 4, 5, 8), "S1"), V((2, 4, 5, 8), "S1"))),
    Case("flash_attention_batch_causal", "_scaled_dot_product_flash_attention_for_cpu",
         (In(0), In(1), In(2)), {"is_causal": True},
         (V((4, 2, 3, 8), "S0"), V((4, 2, 3, 8), "S0"), V((4, 2, 3, 8), "S0"))),
    # More pointwise and reductions.
    Case("clamp", "clamp", (In(0), -0.5, 0.5), {}, (V((5, 6), "S1"),)),
    Case("pow_scalar", "pow.Tensor_Scalar", (In(0), 3), {}, (V((5, 6), "S0", "S1"),), "grid"),
    Case("logical_and", "logical_and", (In(0), In(1)), {},
         (V((4, 6), "S0", kind="mask"), V((4, 6), "S0", kind="mask"))),
    Case("any_sharded_dim", "any.dim", (In(0), 1), {}, (V((4, 8), "S1", kind="mask"),)),
    Case("prod_sharded_dim", "prod.dim_int", (In(0), 1), {}, (V((4, 8), "S1"),)),
    Case("vector_norm_sharded_dim", "linalg_vector_norm", (In(0), 2, [1]), {}, (V((4, 8), "S1"),)),
    Case("norm_all", "norm.Scalar", (In(0), 3), {}, (V((5, 6), "S0"),)),
    Case("norm_dim", "norm.ScalarOpt_dim", (In(0), None, [0]), {}, (V((5, 6), "S1"),)),
    Case("var_mean", "var_mean.correction", (In(0), [1]), {}, (V((5, 6), "S0"),)),
    Case("full_like", "full_like", (In(0), 2.5), {}, (V((5, 6), "S0"),)),
    # More of the matmul family and views.
    Case("bmm_inner", "bmm", (In(0), In(1)), {}, (V((2, 3, 8), "S2"), V((2, 8, 4), "S1"))),
    Case("matmul_batched", "matmul", (In(0), In(1)), {}, (V((2, 5, 6), "S0"), V((6, 4), "R"))),
    Case("unflatten", "unflatten.int", (In(0), 1, [2, 3]), {}, (V((5, 6), "S0"),)),
    Case("squeeze_dim", "squeeze.dim", (In(0), 1), {}, (V((5, 1, 6), "S2"),)),
    Case("index", "index.Tensor", (In(0), [In(1)]), {},
         (V((5, 6), "S1"), V((3,), "R", kind="index:5"))),
    Case("scatter_add", "scatter_add", (In(0), 1, In(1), In(2)), {},
         (V((8, 6), "S0"), V((8, 3), "S0", kind="index:6"), V((8, 3), "S0"))),
    # Backward ops of training graphs.
    Case("native_layer_norm_backward", "native_layer_norm_backward",
         (In(0), In(1), [6], In(2), In(3), In(4), In(5), [True, True, True]), {},
         (V((8, 6), "S0"), V((8, 6), "S0"), V((8, 1), "S0"), V((8, 1), "S0", kind="positive"),
          V((6,), "R"), V((6,), "R"))),
    Case("gelu_backward", "gelu_backward", (In(0), In(1)), {}, (V((5, 6), "S0"), V((5, 6), "S0"))),
    Case("tanh_backward", "tanh_backward", (In(0), In(1)), {}, (V((5, 6), "S1"), V((5, 6), "S1"))),
    Case("embedding_dense_backward", "embedding_dense_backward", (In(0), In(1), 10, -1, False), {},
         (V((4, 3, 8), "S0"), V((4, 3), "S0", kind="index:10"))),
    # nll_loss's autograd records: the loss with its total_weight, and the gradient (targets of
    # 6 classes; -100, the default ignore_index, is not among them, 2 is ignored where named).
    Case("nll_forward_none", "nll_loss_forward", (In(0), In(1), None, 0, -100), {},
         (V((5, 6), "S0"), V((5,), "S0", kind="index:6"))),
    Case("nll_forward_sum_weight", "nll_loss_forward", (In(0), In(1), In(2), 2, 2), {},
         (V((5, 6), "S0"), V((5,), "S0", kind="index:6"), V((6,), "R", kind="positive"))),
    Case("nll_forward_mean", "nll_loss_forward", (In(0), In(1), None, 1, -100), {},
         (V((8, 6), "R"), V((8,), "R", kind="index:6"))),
    Case("nll_forward_mean_batch", "nll_loss_forward", (In(0), In(1), None, 1, 2), {},
         (V((8, 6), "S0"), V((8,), "S0", kind="index:6"))),
    Case("nll_forward_sum_classes", "nll_loss_forward", (In(0), In(1), None, 2, -100), {},
         (V((5, 6), "S1"), V((5,), "R", kind="index:6"))),
    Case("nll_backward_mean", "nll_loss_backward", (In(0), In(1), In(2), None, 1, -100, In(3)), {},
         (V((), "R"), V((8, 6), "S0"), V((8,), "S0", kind="index:6"), V((), "R", kind="positive"))),
    Case("nll_backward_none_weight", "nll_loss_backward",
         (In(0), In(1), In(2), In(3), 0, 2, In(4)), {},
         (V((5,), "S0"), V((5, 6), "S0"), V((5,), "S0", kind="index:6"), V((6,), "R", kind="positive"),
          V((), "R", kind="positive"))),
    Case("nll_backward_sum_classes", "nll_loss_backward",
         (In(0), In(1), In(2), None, 2, -100, In(3)), {},
         (V((), "R"), V((5, 6), "S1"), V((5,), "R", kind="index:6"), V((), "R", kind="positive"))),
    Case("slice_backward", "slice_backward", (In(0), [5, 6], 1, 1, 5, 1), {}, (V((5, 4), "S0"),)),
    Case("select_backward", "select_backward", (In(0), [5, 6], 1, 2), {}, (V((5,), "S0"),)),
    # The 2x2 mesh: a shard on each mesh dim, uneven ones among them.
    Case("grid_softmax", "_softmax", (In(0), 1, False), {}, (V((5, 6), "S0", "R"),), "grid"),
    Case("grid_softmax_sharded_dim", "_softmax", (In(0), 0, False), {}, (V((5, 6), "S0", "S1"),),
         "grid"),
    Case("grid_sum_one_dim", "sum.dim_IntList", (In(0), [0]), {}, (V((5, 6), "S0", "S1"),), "grid"),
    Case("grid_transpose", "transpose.int", (In(0), 0, 1), {}, (V((5, 3), "S0", "S1"),), "grid"),
    Case("grid_view_flatten", "view", (In(0), [30]), {}, (V((5, 6), "R", "S0"),), "grid"),
    Case("grid_reshape_split_last", "view", (In(0), [4, 2, 3]), {}, (V((4, 6), "S0", "R"),), "grid"),
    Case("grid_cat", "cat", ([In(0), In(1)], 1), {}, (V((4, 3), "S0", "R"), V((4, 5), "S0", "R")),
         "grid"),
    Case("grid_mm_both", "mm", (In(0), In(1)), {}, (V((4, 6), "S0", "S1"), V((6, 8), "R", "R")),
         "grid"),
    Case("grid_mm_inner", "mm", (In(0), In(1)), {}, (V((4, 6), "R", "S1"), V((6, 8), "R", "S0")),
         "grid"),
    Case("grid_bmm", "bmm", (In(0), In(1)), {}, (V((2, 3, 4), "S0", "S2"), V((2, 4, 5), "S0", "S1")),
         "grid"),
    Case("grid_layer_norm", "native_layer_norm", (In(0), [6], In(1), In(2), 1e-5), {},
         (V((2, 5, 6), "S0", "S1"), V((6,), "R", "R"), V((6,), "R", "R")), "grid"),
    Case("grid_embedding", "embedding", (In(0), In(1)), {},
         (V((10, 8), "R", "S1"), V((3, 4), "S0", "R", kind="index:10")), "grid"),
    Case("grid_topk", "topk", (In(0), 2), {}, (V((5, 6), "S0", "R"),), "grid"),
    Case("grid_index_select", "index_select", (In(0), 1, In(1)), {},
         (V((4, 6), "S0", "R"), V((4,), "R", "R", kind="index:6")), "grid"),
    Case("grid_where", "where.self", (In(0), In(1), In(2)), {},
         (V((4, 6), "S0", "S1", kind="mask"), V((4, 6), "S0", "S1"), V((4, 6), "R", "R")), "grid"),
    Case("grid_flash_attention", "_scaled_dot_product_flash_attention_for_cpu",
         (In(0), In(1), In(2)), {},
         (V((2, 4, 3, 8), "S0", "S1"), V((2, 4, 5, 8), "S0", "S1"), V((2, 4, 5, 8), "S0", "S1")),
         "grid"),
    # Partial inputs: they pass where the op is linear in them, else they are reduced first.
    Case("partial_add", "add.Tensor", (In(0), In(1)), {}, (V((4, 6), "P"), V((4, 6), "P"))),
    Case("partial_add_number", "add.Tensor", (In(0), 2.0), {}, (V((4, 6), "P"),)),
    Case("partial_mul_replicate", "mul.Tensor", (In(0), In(1)), {}, (V((4, 6), "P"), V((6,), "R"))),
    Case("partial_mul_partial", "mul.Tensor", (In(0), In(1)), {}, (V((4, 6), "P"), V((4, 6), "P"))),
    Case("partial_div_number", "div.Tensor", (In(0), 3.0), {}, (V((4, 6), "P"),)),
    Case("partial_neg", "neg", (In(0),), {}, (V((4, 6), "P"),)),
    Case("partial_exp", "exp", (In(0),), {}, (V((4, 6), "P"),)),
    Case("partial_sum_dim", "sum.dim_IntList", (In(0), [1]), {}, (V((4, 6), "P"),)),
    Case("partial_mean_dim", "mean.dim", (In(0), [0]), {}, (V((4, 6), "P"),)),
    Case("partial_mm", "mm", (In(0), In(1)), {}, (V((4, 6), "P"), V((6, 3), "R"))),
    Case("partial_transpose", "transpose.int", (In(0), 0, 1), {}, (V((4, 6), "P"),)),
    Case("partial_view", "view", (In(0), [24]), {}, (V((4, 6), "P"),)),
    Case("partial_cat", "cat", ([In(0), In(1)], 0), {}, (V((4, 6), "P"), V((2, 6), "P"))),
    Case("partial_softmax", "_softmax", (In(0), 1, False), {}, (V((4, 6), "P"),)),
    Case("partial_grid_mm", "mm", (In(0), In(1)), {}, (V((4, 6), "S0", "P"), V((6, 3), "R", "R")),
         "grid"),
    # Several outputs.
    Case("topk", "topk", (In(0), 2), {}, (V((5, 6), "S0"),)),
    Case("sort_sharded_dim", "sort", (In(0), 0), {}, (V((8, 3), "S0"),)),
    Case("max_dim", "max.dim", (In(0), 0), {}, (V((5, 6), "S1"),)),
    Case("split", "split.Tensor", (In(0), 2, 1), {}, (V((5, 6), "S0"),)),
    Case("split_with_sizes", "split_with_sizes", (In(0), [1, 3]), {}, (V((4, 6), "S1"),)),
]
