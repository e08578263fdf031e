"""torch.distributed's collectives through the Python client (tessera.distributed) on a 2x2 mesh,
along each mesh dim and over the whole mesh, against numpy."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

dist = tessera.distributed

REDUCE = {"sum": np.sum, "max": np.max, "min": np.min, "product": np.prod,
          "avg": lambda a, axis: np.mean(a, axis=axis)}


def groups(mesh_shape, group):
    """The ranks of each process group: along "dp" (dim 0), "tp" (dim 1) or the whole mesh."""
    ranks = np.arange(int(np.prod(mesh_shape))).reshape(mesh_shape)
    if group == "dp":
        return [list(ranks[:, j]) for j in range(mesh_shape[1])]
    if group == "tp":
        return [list(ranks[i, :]) for i in range(mesh_shape[0])]
    return [list(ranks.reshape(-1))]


def locals_for(seed, shape=(4, 3), dtype=np.float32):
    rng = np.random.default_rng(seed)
    return [rng.integers(-4, 5, size=shape).astype(dtype) for _ in range(4)]


def group_of(mesh, group):
    return None if group == "world" else mesh[group]


@pytest.mark.parametrize("dtype", [np.float32, np.int64])
@pytest.mark.parametrize("op", list(REDUCE))
@pytest.mark.parametrize("group", ["dp", "tp", "world"])
def test_all_reduce(meshes, group, op, dtype):
    if op == "avg" and dtype == np.int64:
        pytest.skip("avg of integers")
    mesh = meshes["grid"]
    xs = locals_for(1, dtype=dtype)
    t = dist.tensor(xs, mesh)
    assert dist.all_reduce(t, op=op, group=group_of(mesh, group)) is None
    for g in groups(mesh.shape, group):
        expected = REDUCE[op](np.stack([xs[r] for r in g]), axis=0)
        for r in g:
            np.testing.assert_allclose(t.to_local(r), expected.astype(dtype), rtol=1e-6)


@pytest.mark.parametrize("group", ["dp", "tp", "world"])
def test_broadcast_reduce_gather_scatter(meshes, group):
    mesh = meshes["grid"]
    xs = locals_for(2)
    gs = groups(mesh.shape, group)
    pg = group_of(mesh, group)
    b = dist.tensor(xs, mesh)
    dist.broadcast(b, src=1, group=pg)
    r = dist.tensor(xs, mesh)
    dist.reduce(r, dst=1, op=dist.ReduceOp.SUM, group=pg)
    gathered = dist.all_gather_into_tensor(None, dist.tensor(xs, mesh), group=pg)
    assert dist.all_gather is dist.all_gather_into_tensor and dist.all_to_all is dist.all_to_all_single
    g0 = dist.gather(dist.tensor(xs, mesh), dst=0, group=pg)
    big = [np.arange(len(gs[0]) * 6, dtype=np.float32).reshape(-1, 3) + 100 * k for k in range(4)]
    sc = dist.scatter(dist.tensor(big, mesh), src=0, group=pg)
    rs = dist.reduce_scatter_tensor(None, dist.tensor(big, mesh), group=pg)
    a2a = dist.all_to_all_single(None, dist.tensor(big, mesh), group=pg)
    for g in gs:
        n = len(g)
        for i, rank in enumerate(g):
            np.testing.assert_array_equal(b.to_local(rank), xs[g[1]])
            expected_reduce = sum(xs[q] for q in g) if i == 1 else xs[rank]
            np.testing.assert_array_equal(r.to_local(rank), expected_reduce)
            np.testing.assert_array_equal(gathered.to_local(rank), np.concatenate([xs[q] for q in g]))
            np.testing.assert_array_equal(sc.to_local(rank), np.split(big[g[0]], n)[i])
            np.testing.assert_array_equal(rs.to_local(rank),
                                          np.split(sum(big[q] for q in g), n)[i])
            np.testing.assert_array_equal(a2a.to_local(rank),
                                          np.concatenate([np.split(big[q], n)[i] for q in g]))
        np.testing.assert_array_equal(g0.to_local(g[0]), np.concatenate([xs[q] for q in g]))
    assert gathered.local_shapes[0][0] == 4 * len(gs[0])


def test_send_recv_barrier_and_async(meshes):
    mesh = meshes["grid"]
    xs = locals_for(3)
    out = dist.send_recv(dist.tensor(xs, mesh), src=0, dst=1, group=mesh["tp"], output="py-recv")
    for i in range(2):  # group rank 1 of each tp group got group rank 0's tensor
        np.testing.assert_array_equal(out.to_local(2 * i + 1), xs[2 * i])
    out.delete()
    dist.barrier(mesh["dp"])
    dist.barrier(mesh, async_op=True).wait()
    t = dist.tensor(xs, mesh)
    work = dist.all_reduce(t, group=mesh["dp"], async_op=True)
    gathered = dist.all_gather_into_tensor(None, t, group=mesh["tp"], async_op=True)  # after it
    assert work.wait() is None and work.is_completed()
    g = gathered.wait()
    summed = [xs[0] + xs[2], xs[1] + xs[3]]
    np.testing.assert_array_equal(g.to_local(0), np.concatenate(summed))


def test_torch_reduce_op_names_and_bad_ones(meshes):
    t = dist.tensor(locals_for(4), meshes["grid"])
    with pytest.raises(tessera.InvalidArgument, match="premul"):
        dist.all_reduce(t, op="premul_sum")
    with pytest.raises(tessera.InvalidArgument, match="mesh"):
        dist.all_reduce(t, group=meshes["line3"])


def test_collectives_on_one_ordered_stream(meshes):
    """Inside tessera.distributed.stream() the collectives go on one gRPC stream in order; each
    may use the one before's output at once; a failing one fails alone and leaving the block
    raises it."""
    mesh = meshes["grid"]
    xs = locals_for(5)
    t = dist.tensor(xs, mesh)
    with dist.stream():
        for _ in range(20):  # each all_reduce over dp doubles t after the first
            dist.all_reduce(t, group=mesh["dp"])
        g = dist.all_gather_into_tensor(None, t, group=mesh["tp"])
        work = dist.barrier(mesh, async_op=True)
    assert work.is_completed()
    column = [xs[0] + xs[2], xs[1] + xs[3]]
    scale = 2 ** 19
    np.testing.assert_array_equal(g.to_local(3), np.concatenate(column) * scale)
    bad = dist.tensor([np.ones((2, 3), np.float32)] * 3 + [np.ones((3, 3), np.float32)], mesh)
    with pytest.raises(tessera.FailedPrecondition, match="shape"):
        with dist.stream():
            dist.all_reduce(t, group=mesh["dp"])
            dist.all_reduce(bad, group=mesh["tp"])
            after = dist.all_gather_into_tensor(None, t, group=mesh["tp"], async_op=True)
    np.testing.assert_array_equal(after.wait().to_local(0), np.concatenate(column) * scale * 2)
