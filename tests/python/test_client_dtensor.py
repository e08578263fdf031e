"""The Python client's DTensors against numpy on `tessera up --workers 4`: round trips of every
dtype and placement on 1-D and 2-D meshes (uneven and empty shards included), from_local,
redistribute, the factories and the ops.

Needs Debian's python3-grpcio, python3-numpy and python3-pytest, and the build tree's package
(cmake --build build --target tessera_python tessera); ctest runs it as python_client."""

import math

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import Partial, Replicate, Shard  # noqa: E402
from tessera_testing import as_numbers, local_block, values  # noqa: E402

DTYPES = [d.name for d in tessera.all_dtypes]
SHAPES = [(5, 7), (2, 3)]  # uneven over 2 and 3 ranks; (2, 3) leaves rank 2 of 3 empty on dim 0
LINE_PLACEMENTS = [[Shard(0)], [Shard(1)], [Replicate()], [Partial("sum")], [Partial("max")]]
GRID_PLACEMENTS = [[Shard(0), Shard(1)], [Shard(0), Shard(0)], [Shard(1), Shard(1)],
                   [Replicate(), Shard(0)], [Shard(1), Replicate()], [Replicate(), Replicate()],
                   [Partial("sum"), Shard(0)], [Shard(1), Partial("product")]]


def ids(placements):
    return ",".join(p.to_json() for p in placements)


def check_locals(t, full, mesh_shape, placements, dtype):
    """Every rank's local tensor is its block of `full`; on a Partial dim, Tessera's split:
    coordinate 0 keeps the value and the others the op's identity (sum, product), or every
    coordinate the value (avg, max, min)."""
    for rank in range(int(np.prod(mesh_shape))):
        expected = local_block(full, mesh_shape, placements, rank)
        coord = np.unravel_index(rank, mesh_shape)
        for mesh_dim, p in enumerate(placements):
            if p.is_partial() and coord[mesh_dim] != 0 and p.reduce_op in ("sum", "product"):
                identity = p.reduce_op == "product"
                expected = np.full_like(expected, identity)
        got = as_numbers(t.to_local(rank), dtype)
        assert got.shape == expected.shape, f"rank {rank}"
        np.testing.assert_array_equal(got, expected, err_msg=f"rank {rank}")
        assert tuple(t.local_shapes[rank]) == expected.shape


def round_trip(mesh, placements, dtype, shape, seed):
    full = values(dtype, shape, seed)
    t = tessera.distribute_tensor(full, mesh, placements, dtype=dtype)
    assert t.shape == shape and t.dtype == tessera.dtypes.as_dtype(dtype)
    assert list(t.placements) == placements
    np.testing.assert_array_equal(as_numbers(t.full_tensor(), dtype), full)
    check_locals(t, full, mesh.shape, placements, dtype)
    return t, full


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("placements", LINE_PLACEMENTS, ids=ids)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_line(meshes, dtype, placements, shape):
    round_trip(meshes["line3"], placements, dtype, shape, seed=len(dtype))


@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("placements", GRID_PLACEMENTS, ids=ids)
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_grid(meshes, dtype, placements, shape):
    round_trip(meshes["grid"], placements, dtype, shape, seed=len(dtype) + 1)


def test_compute_local_shape_and_global_offset(meshes):
    """REFERENCE.md's example: [2, 5] on (2, 2) with (S(1), S(1))."""
    t = tessera.zeros(2, 5, device_mesh=meshes["grid"], placements=[Shard(1), Shard(1)])
    assert t.local_shapes == ((2, 2), (2, 1), (2, 1), (2, 1))
    assert t.local_offsets == ((0, 0), (0, 2), (0, 3), (0, 4))


@pytest.mark.parametrize("dtype", ["float32", "int64", "bfloat16", "bool"])
@pytest.mark.parametrize("placements", [[Shard(0), Shard(1)], [Replicate(), Shard(0)],
                                        [Shard(1), Partial("sum")]], ids=ids)
def test_from_local_uneven(meshes, dtype, placements):
    mesh = meshes["grid"]
    full = values(dtype, (5, 7), 3)
    locals_ = [local_block(full, mesh.shape, placements, r) for r in range(4)]
    if placements[1].is_partial():  # rank (i, 1) holds zeros: the sum over tp is the value
        locals_ = [b if r % 2 == 0 else np.zeros_like(b) for r, b in enumerate(locals_)]
    t = tessera.DTensor.from_local(locals_, mesh, placements, shape=(5, 7), dtype=dtype)
    assert t.shape == (5, 7)
    np.testing.assert_array_equal(as_numbers(t.full_tensor(), dtype), full)
    for r in range(4):
        np.testing.assert_array_equal(as_numbers(t.to_local(r), dtype), locals_[r])


def test_from_local_infers_even_shape_and_run_check(meshes):
    mesh = meshes["grid"]
    full = values("float32", (4, 6), 5).astype(np.float32)
    locals_ = [local_block(full, mesh.shape, [Shard(0), Replicate()], r) for r in range(4)]
    wrong = [b if r % 2 == 0 else b + 100 for r, b in enumerate(locals_)]  # tp replicas differ
    t = tessera.DTensor.from_local(wrong, mesh, [Shard(0), Replicate()], run_check=True)
    assert t.shape == (4, 6)
    for r in range(4):  # run_check broadcast coordinate 0's replica along tp
        np.testing.assert_array_equal(t.to_local(r), locals_[r])
    single = tessera.DTensor.from_local(full, mesh["tp"], [Replicate()])
    np.testing.assert_array_equal(single.full_tensor(), full)


def test_scalar_and_view_placements(meshes):
    mesh = meshes["grid"]
    s = tessera.distribute_tensor(np.float64(2.5), mesh)
    assert s.shape == () and s.full_tensor() == 2.5
    v = tessera.distribute_tensor(np.arange(12.0).reshape(3, 4), mesh["tp"], [Shard(1)])
    assert v.placements == (Replicate(), Shard(1))
    assert v.to_local(3).tolist() == [[2.0, 3.0], [6.0, 7.0], [10.0, 11.0]]


REDISTRIBUTE = [[Shard(0), Shard(1)], [Shard(0), Shard(0)], [Shard(1), Shard(0)],
                [Replicate(), Shard(0)], [Shard(1), Replicate()], [Replicate(), Replicate()]]


@pytest.mark.parametrize("dst", REDISTRIBUTE + [[Replicate(), Partial("sum")]], ids=ids)
@pytest.mark.parametrize("src", REDISTRIBUTE + [[Partial("sum"), Shard(1)]], ids=ids)
def test_redistribute(meshes, src, dst):
    mesh = meshes["grid"]
    full = values("float32", (5, 7), 11).astype(np.float32)
    t = tessera.distribute_tensor(full, mesh, src)
    plan = t.explain_redistribute(dst)
    r = t.redistribute(mesh, dst)
    assert list(r.placements) == dst
    assert [str(s) for s in r.plan.steps] == [str(s) for s in plan.steps]
    np.testing.assert_array_equal(r.full_tensor(), full)
    if any(p.is_partial() for p in dst):  # Shard -> Partial embeds each shard in zeros
        check_partial_sums(r, full, mesh.shape, dst)
    else:
        check_locals(r, full, mesh.shape, dst, "float32")
    np.testing.assert_array_equal(t.full_tensor(), full)  # the source is untouched


def check_partial_sums(t, full, mesh_shape, placements):
    """On a Partial(sum) mesh dim, the locals of each group sum to the group's block."""
    (pdim,) = [d for d, p in enumerate(placements) if p.is_partial()]
    locals_ = [t.to_local(r) for r in range(int(np.prod(mesh_shape)))]
    for rank in range(len(locals_)):
        coord = list(np.unravel_index(rank, mesh_shape))
        if coord[pdim] != 0:
            continue
        group = []
        for c in range(mesh_shape[pdim]):
            coord[pdim] = c
            group.append(locals_[int(np.ravel_multi_index(coord, mesh_shape))])
        np.testing.assert_allclose(np.sum(group, axis=0),
                                   local_block(full, mesh_shape, placements, rank), rtol=1e-6)


def test_redistribute_collectives_named(meshes):
    t = tessera.distribute_tensor(np.ones((8, 4), np.float32), meshes["grid"], [Shard(0), Shard(0)])
    greedy = t.explain_redistribute([Replicate(), Shard(0)], planner="greedy")
    min_cost = t.explain_redistribute([Replicate(), Shard(0)])
    assert "all_gather" in [s.collective for s in greedy.steps]  # (S0,S0) must reshard first
    assert min_cost.total_recv_bytes <= greedy.total_recv_bytes
    assert sum(s.recv_bytes for s in greedy.steps) == greedy.total_recv_bytes
    assert t.explain_redistribute([Shard(0), Shard(0)]).steps == ()


def test_redistribute_across_meshes(meshes):
    full = np.arange(35, dtype=np.float64).reshape(5, 7)
    t = tessera.distribute_tensor(full, meshes["grid"], [Shard(0), Shard(1)])
    moved = t.redistribute(meshes["line3"], [Shard(1)])
    assert moved.device_mesh.name == meshes["line3"].name and moved.relayed_bytes > 0
    check_locals(moved, full, (3,), [Shard(1)], "float64")


def test_factories(meshes):
    mesh = meshes["grid"]
    layout = dict(device_mesh=mesh, placements=[Shard(0), Shard(1)])
    np.testing.assert_array_equal(tessera.zeros(5, 7, **layout).full_tensor(), np.zeros((5, 7)))
    np.testing.assert_array_equal(tessera.ones((5, 7), dtype="int64", **layout).full_tensor(),
                                  np.ones((5, 7), np.int64))
    f = tessera.full((5, 7), 2.5, dtype=tessera.float64, **layout)
    assert f.dtype == tessera.float64 and (f.full_tensor() == 2.5).all()
    assert tessera.empty(3, 4, **layout).shape == (3, 4)
    for factory in (tessera.rand, tessera.randn):
        whole = factory(9, 6, device_mesh=mesh, seed=42).full_tensor()
        sharded = factory(9, 6, seed=42, **layout)
        for r in range(4):  # a shard equals that slice of the whole random tensor
            np.testing.assert_array_equal(sharded.to_local(r),
                                          local_block(whole, mesh.shape, layout["placements"], r))
    u = tessera.rand(200, 50, device_mesh=mesh, seed=1).full_tensor()
    assert u.min() >= 0 and u.max() < 1 and abs(u.mean() - 0.5) < 0.02
    n = tessera.randn(200, 50, device_mesh=mesh, seed=2).full_tensor()
    assert abs(n.mean()) < 0.05 and abs(n.std() - 1) < 0.05
    tessera.manual_seed(7)
    a = tessera.rand(4, 4, device_mesh=mesh).full_tensor()
    tessera.manual_seed(7)
    np.testing.assert_array_equal(tessera.rand(4, 4, device_mesh=mesh).full_tensor(), a)


def test_handles_free_their_tensor(session, meshes):
    t = tessera.zeros(4, 4, device_mesh=meshes["grid"])
    name = t.name
    assert name in [i.name for i in session.list_tensors()]
    del t
    session.transport.drain_frees()
    assert name not in [i.name for i in session.list_tensors()]


# -- ops against numpy -------------------------------------------------------------------------

TOL = dict(rtol=1e-5, atol=1e-5)


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


MM_CASES = [  # (placements of a, of b, the output's placement with no redistribution)
    (Shard(0), Replicate(), Shard(0)),
    (Replicate(), Shard(1), Shard(1)),
    (Shard(1), Shard(0), Partial("sum")),
    (Replicate(), Replicate(), Replicate()),
    (Shard(1), Shard(1), None),  # needs a redistribution first
]


@pytest.mark.parametrize("op", ["mm", "matmul", "@"])
@pytest.mark.parametrize("pa,pb,out", MM_CASES, ids=lambda p: p.to_json() if p else "redistributed")
def test_matmul_strategies(meshes, op, pa, pb, out):
    mesh = meshes["world"]
    a_np, b_np = rand((9, 10), 1), rand((10, 7), 2)
    a = tessera.distribute_tensor(a_np, mesh, [pa])
    b = tessera.distribute_tensor(b_np, mesh, [pb])
    y = {"mm": tessera.mm, "matmul": tessera.matmul, "@": lambda x, w: x @ w}[op](a, b)
    if out is not None:
        assert y.placements == (out,) and y.redistributions == ()
    else:
        assert y.redistributions != ()
    np.testing.assert_allclose(y.full_tensor(), a_np @ b_np, **TOL)


@pytest.mark.parametrize("placements", [[Shard(0), Replicate()], [Replicate(), Shard(1)]], ids=ids)
def test_addmm(meshes, placements):
    mesh = meshes["grid"]
    bias_np, a_np, b_np = rand((6,), 3), rand((5, 4), 4), rand((4, 6), 5)
    bias = tessera.distribute_tensor(bias_np, mesh)
    a = tessera.distribute_tensor(a_np, mesh, placements)
    b = tessera.distribute_tensor(b_np, mesh)
    np.testing.assert_allclose(tessera.addmm(bias, a, b).full_tensor(), bias_np + a_np @ b_np, **TOL)
    np.testing.assert_allclose(tessera.addmm(bias, a, b, beta=0.5, alpha=2).full_tensor(),
                               0.5 * bias_np + 2 * (a_np @ b_np), **TOL)


ELEMENTWISE = {
    "add": (lambda a, b: a + b, np.add), "sub": (lambda a, b: a - b, np.subtract),
    "mul": (lambda a, b: a * b, np.multiply), "div": (lambda a, b: a / b, np.divide),
}


@pytest.mark.parametrize("op", list(ELEMENTWISE))
@pytest.mark.parametrize("pa,pb", [(Shard(0), Shard(0)), (Shard(1), Replicate()),
                                   (Replicate(), Shard(0)), (Partial("sum"), Replicate())],
                         ids=lambda p: p.to_json())
def test_elementwise(meshes, op, pa, pb):
    mesh = meshes["line3"]
    a_np, b_np = rand((5, 7), 6), rand((5, 7), 7) + 2
    a = tessera.distribute_tensor(a_np, mesh, [pa])
    b = tessera.distribute_tensor(b_np, mesh, [pb])
    ours, ref = ELEMENTWISE[op]
    np.testing.assert_allclose(ours(a, b).full_tensor(), ref(a_np, b_np), **TOL)


def test_broadcasting_and_scalars(meshes):
    mesh = meshes["grid"]
    x_np, bias_np = rand((5, 7), 8), rand((7,), 9)
    x = tessera.distribute_tensor(x_np, mesh, [Shard(0), Shard(1)])
    bias = tessera.distribute_tensor(bias_np, mesh, [Replicate(), Shard(0)])
    np.testing.assert_allclose((x + bias).full_tensor(), x_np + bias_np, **TOL)
    np.testing.assert_allclose((2 * x - 1).full_tensor(), 2 * x_np - 1, **TOL)
    np.testing.assert_allclose((1 / (x + 3)).full_tensor(), 1 / (x_np + 3), **TOL)
    np.testing.assert_allclose((-x).full_tensor(), -x_np, **TOL)
    np.testing.assert_allclose(tessera.add(x, bias, alpha=2).full_tensor(), x_np + 2 * bias_np, **TOL)
    i = tessera.distribute_tensor(np.arange(6, dtype=np.int64).reshape(2, 3), mesh)
    assert (i * 2).dtype == tessera.int64 and (i * 2).full_tensor().tolist() == [[0, 2, 4], [6, 8, 10]]
    assert (i * 0.5).dtype == tessera.float32  # a float scalar promotes, as in torch


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("placements", [[Shard(0), Shard(1)], [Partial("sum"), Replicate()]], ids=ids)
def test_activations(meshes, placements):
    mesh = meshes["grid"]
    x_np = rand((5, 7), 10) * 3
    x = tessera.distribute_tensor(x_np, mesh, placements)
    np.testing.assert_allclose(x.relu().full_tensor(), np.maximum(x_np, 0), **TOL)
    np.testing.assert_allclose(tessera.gelu(x).full_tensor(), gelu(x_np.astype(np.float64)), **TOL)
    np.testing.assert_allclose(tessera.tanh(x).full_tensor(), np.tanh(x_np), **TOL)


@pytest.mark.parametrize("keepdim", [False, True])
@pytest.mark.parametrize("dim", [None, 0, 1, (0, 1), -1])
@pytest.mark.parametrize("placements", [[Shard(0), Shard(1)], [Shard(1), Shard(1)],
                                        [Replicate(), Shard(0)]], ids=ids)
def test_reductions(meshes, placements, dim, keepdim):
    mesh = meshes["grid"]
    x_np = rand((5, 7), 12)
    x = tessera.distribute_tensor(x_np, mesh, placements)
    axis = dim if not isinstance(dim, list) else tuple(dim)
    for ours, ref in ((tessera.sum, np.sum), (tessera.mean, np.mean), (tessera.max, np.max)):
        got = ours(x, dim, keepdim)
        if isinstance(dim, int) and ours is tessera.max:  # torch.max(x, dim): values and indices
            np.testing.assert_array_equal(
                got.indices.full_tensor(), np.argmax(x_np, axis=dim, keepdims=keepdim))
            got = got.values
        np.testing.assert_allclose(got.full_tensor(),
                                   ref(x_np.astype(np.float64), axis=axis, keepdims=keepdim), **TOL)


def test_transpose_and_cast(meshes):
    mesh = meshes["grid"]
    x_np = rand((5, 7), 13) * 4
    x = tessera.distribute_tensor(x_np, mesh, [Shard(0), Shard(1)])
    xt = x.T
    assert xt.placements == (Shard(1), Shard(0))
    np.testing.assert_array_equal(xt.full_tensor(), x_np.T)
    np.testing.assert_array_equal(tessera.transpose(x, 0, 1).full_tensor(), x_np.T)
    np.testing.assert_array_equal(x.to(tessera.float64).full_tensor(), x_np.astype(np.float64))
    np.testing.assert_array_equal(x.to("int32").full_tensor(), np.trunc(x_np).astype(np.int32))
    h = x.half()
    assert h.dtype == tessera.float16
    np.testing.assert_array_equal(h.full_tensor(), x_np.astype(np.float16))
    bits = tessera.dtypes.float_to_bfloat16_bits(x_np)
    np.testing.assert_array_equal(as_numbers(x.bfloat16().full_tensor(), "bfloat16"),
                                  tessera.dtypes.bfloat16_bits_to_float32(bits))


def test_a_chain_of_ops_runs_pipelined(meshes):
    """Ops return before the workers run them; the result is read once at the end."""
    mesh = meshes["grid"]
    x_np, w1_np, w2_np = rand((8, 16), 20), rand((16, 32), 21), rand((32, 16), 22)
    x = tessera.distribute_tensor(x_np, mesh, [Shard(0), Replicate()])
    w1 = tessera.distribute_tensor(w1_np, mesh, [Replicate(), Shard(1)])
    w2 = tessera.distribute_tensor(w2_np, mesh, [Replicate(), Shard(0)])
    h = tessera.relu(x @ w1)
    assert h.placements == (Shard(0), Shard(1))
    y = h @ w2
    assert y.placements == (Shard(0), Partial("sum"))
    yr = y.redistribute(mesh, [Shard(0), Replicate()]).wait()
    assert yr.state == "ready"
    np.testing.assert_allclose(yr.full_tensor(), np.maximum(x_np @ w1_np, 0) @ w2_np, **TOL)


def test_large_tensors_stream_in_chunks_with_progress(meshes):
    """3 MiB and a bit go in 1 MiB chunks each way; the progress callback sees every chunk."""
    mesh = meshes["grid"]
    full = np.random.default_rng(30).standard_normal((1000, 787)).astype(np.float32)
    sent, received = [], []
    t = tessera.distribute_tensor(full, mesh, [Shard(1), Shard(0)],
                                  progress=lambda done, total: sent.append((done, total)))
    back = t.full_tensor(progress=lambda done, total: received.append((done, total)))
    np.testing.assert_array_equal(back, full)
    for calls in (sent, received):
        assert calls[-1] == (full.nbytes, full.nbytes)
        steps = np.diff([0] + [d for d, _ in calls])
        assert len(calls) >= 4 and steps.max() <= tessera.interop.CHUNK_BYTES
