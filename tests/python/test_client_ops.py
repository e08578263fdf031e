"""The registry's ops through the Python client on `tessera up --workers 4`: every torch-named
method, operator and function against numpy (and against torch on the same values where torch
is importable) over Shard and Replicate placements on the 4-rank mesh and the 2x2 mesh, with
uneven and empty shards (a dim of 3 or 1 over 4 ranks); matmuls, views, cat/stack, pieces
(chunk, split, unbind), basic indexing as torch decomposes it, the tessera.ops.aten path and
ListOps, __torch_function__, and the errors of an unknown op and of a bad argument.

Needs Debian's python3-grpcio, python3-numpy and python3-pytest, and the build tree's package
(cmake --build build --target tessera_python tessera); ctest runs it as python_client."""

import math
from types import SimpleNamespace

import pytest

np = pytest.importorskip("numpy")
grpc = pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import Replicate, Shard  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)
LAYOUTS = {  # mesh, placements; dims of 3 and 1 leave ranks of 4 with empty shards
    "world-S0": ("world", [Shard(0)]), "world-S1": ("world", [Shard(1)]),
    "world-R": ("world", [Replicate()]), "grid-S1S0": ("grid", [Shard(1), Shard(0)]),
}
SHAPES = [(5, 3), (1, 6)]


def arrays(shape, seed):
    """The inputs of the tables, numpy: x, y in [-2, 2), p in [0.5, 2) (float32), i in
    [-6, 6], j in [1, 5] (int32), b and c bool."""
    rng = np.random.default_rng(seed)
    f = lambda lo, hi: rng.uniform(lo, hi, shape).astype(np.float32)  # noqa: E731
    return dict(x=f(-2, 2), y=f(-2, 2), p=f(0.5, 2), i=rng.integers(-6, 7, shape).astype(np.int32),
                j=rng.integers(1, 6, shape).astype(np.int32), b=rng.random(shape) > 0.5,
                c=rng.random(shape) > 0.5)


@pytest.fixture(scope="module")
def inputs(meshes):
    """inputs(layout, shape): (numpy namespace, DTensor namespace), distributed once."""
    cache = {}

    def get(layout, shape):
        if (layout, shape) not in cache:
            mesh_name, placements = LAYOUTS[layout]
            mesh = meshes[mesh_name]
            n = arrays(shape, seed=len(cache))
            t = {k: tessera.distribute_tensor(v, mesh, placements) for k, v in n.items()}
            cache[layout, shape] = SimpleNamespace(**n), SimpleNamespace(**t)
        return cache[layout, shape]

    return get


def erf(a):
    return np.vectorize(math.erf, otypes=[np.float64])(a)


def sigmoid(a):
    return 1 / (1 + np.exp(-a.astype(np.float64)))


def gelu_tanh(a):
    a = a.astype(np.float64)
    return 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3)))


def softmax(a, axis):
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def check(got, expected, **tol):
    expected = np.asarray(expected)
    got = np.asarray(got)
    assert got.shape == expected.shape, (got.shape, expected.shape)
    if expected.dtype == bool or np.issubdtype(expected.dtype, np.integer):
        np.testing.assert_array_equal(got, expected)
    else:
        np.testing.assert_allclose(got.astype(np.float64), expected.astype(np.float64),
                                   **(tol or TOL))


# (id, op(m, t) with m tessera or torch and t the inputs, numpy's(n)); the ops use torch's names
POINTWISE = [
    ("neg", lambda m, t: -t.x, lambda n: -n.x),
    ("abs", lambda m, t: abs(t.x), lambda n: np.abs(n.x)),
    ("sign", lambda m, t: t.x.sign(), lambda n: np.sign(n.x)),
    ("exp", lambda m, t: m.exp(t.x), lambda n: np.exp(n.x)),
    ("expm1", lambda m, t: t.x.expm1(), lambda n: np.expm1(n.x)),
    ("log", lambda m, t: t.p.log(), lambda n: np.log(n.p)),
    ("log1p", lambda m, t: t.p.log1p(), lambda n: np.log1p(n.p)),
    ("log2", lambda m, t: t.p.log2(), lambda n: np.log2(n.p)),
    ("sqrt", lambda m, t: t.p.sqrt(), lambda n: np.sqrt(n.p)),
    ("rsqrt", lambda m, t: t.p.rsqrt(), lambda n: 1 / np.sqrt(n.p)),
    ("reciprocal", lambda m, t: t.p.reciprocal(), lambda n: 1 / n.p),
    ("sin", lambda m, t: t.x.sin(), lambda n: np.sin(n.x)),
    ("cos", lambda m, t: t.x.cos(), lambda n: np.cos(n.x)),
    ("tanh", lambda m, t: m.tanh(t.x), lambda n: np.tanh(n.x)),
    ("sigmoid", lambda m, t: t.x.sigmoid(), lambda n: sigmoid(n.x)),
    ("silu", lambda m, t: m.nn.functional.silu(t.x), lambda n: n.x * sigmoid(n.x)),
    ("relu", lambda m, t: t.x.relu(), lambda n: np.maximum(n.x, 0)),
    ("gelu", lambda m, t: m.nn.functional.gelu(t.x), lambda n: 0.5 * n.x * (1 + erf(n.x / math.sqrt(2)))),
    ("gelu-tanh", lambda m, t: m.nn.functional.gelu(t.x, approximate="tanh"), lambda n: gelu_tanh(n.x)),
    ("erf", lambda m, t: t.x.erf(), lambda n: erf(n.x)),
    ("floor", lambda m, t: t.x.floor(), lambda n: np.floor(n.x)),
    ("ceil", lambda m, t: t.x.ceil(), lambda n: np.ceil(n.x)),
    ("round", lambda m, t: (t.x * 3).round(), lambda n: np.round(n.x * 3)),
    ("trunc", lambda m, t: t.x.trunc(), lambda n: np.trunc(n.x)),
    ("square", lambda m, t: t.x.square(), lambda n: n.x ** 2),
    ("logical_not", lambda m, t: t.x.logical_not(), lambda n: n.x == 0),
    ("isnan", lambda m, t: (t.x.log()).isnan(), lambda n: np.isnan(np.log(np.where(n.x == 0, 1, n.x)))),
    ("isinf", lambda m, t: (t.p / 0).isinf(), lambda n: np.ones(n.p.shape, bool)),
    ("isfinite", lambda m, t: t.x.isfinite(), lambda n: np.ones(n.x.shape, bool)),
    ("bitwise_not", lambda m, t: ~t.i, lambda n: ~n.i),
    ("invert-bool", lambda m, t: ~t.b, lambda n: ~n.b),
    # binary, with tensors and wrapped numbers
    ("add", lambda m, t: t.x + t.y, lambda n: n.x + n.y),
    ("add-int", lambda m, t: t.x + 2, lambda n: n.x + 2),
    ("radd-float", lambda m, t: 2.5 + t.x, lambda n: n.x + 2.5),
    ("add-alpha", lambda m, t: m.add(t.x, t.y, alpha=2), lambda n: n.x + 2 * n.y),
    ("add-int-tensors", lambda m, t: t.i + t.j, lambda n: n.i + n.j),
    ("add-int-float", lambda m, t: t.i + 2.5, lambda n: n.i + np.float32(2.5)),
    ("sub", lambda m, t: t.x - t.y, lambda n: n.x - n.y),
    ("rsub", lambda m, t: 2 - t.x, lambda n: 2 - n.x),
    ("mul", lambda m, t: t.x * t.y, lambda n: n.x * n.y),
    ("mul-int", lambda m, t: t.i * 3, lambda n: n.i * 3),
    ("div", lambda m, t: t.x / t.p, lambda n: n.x / n.p),
    ("rdiv", lambda m, t: 1 / t.p, lambda n: 1 / n.p),
    ("div-ints", lambda m, t: t.i / t.j, lambda n: n.i.astype(np.float32) / n.j),
    ("div-floor", lambda m, t: t.x.div(t.p, rounding_mode="floor"), lambda n: np.floor(n.x / n.p)),
    ("div-trunc", lambda m, t: t.i.div(t.j, rounding_mode="trunc"), lambda n: np.trunc(n.i / n.j).astype(np.int32)),
    ("floor_divide", lambda m, t: t.i // t.j, lambda n: n.i // n.j),
    ("remainder", lambda m, t: t.x % t.p, lambda n: np.remainder(n.x, n.p)),
    ("remainder-int", lambda m, t: t.i % 4, lambda n: n.i % 4),
    ("pow-scalar", lambda m, t: t.p ** 2.5, lambda n: n.p ** 2.5),
    ("pow-tensor", lambda m, t: t.p ** t.x, lambda n: n.p ** n.x),
    ("rpow", lambda m, t: 2 ** t.x, lambda n: 2.0 ** n.x),
    ("maximum", lambda m, t: m.maximum(t.x, t.y), lambda n: np.maximum(n.x, n.y)),
    ("minimum", lambda m, t: t.x.minimum(t.y), lambda n: np.minimum(n.x, n.y)),
    ("eq", lambda m, t: t.i == t.j, lambda n: n.i == n.j),
    ("eq-scalar", lambda m, t: t.i == 2, lambda n: n.i == 2),
    ("ne", lambda m, t: t.i != t.j, lambda n: n.i != n.j),
    ("lt", lambda m, t: t.x < t.y, lambda n: n.x < n.y),
    ("le-scalar", lambda m, t: t.x <= 0.5, lambda n: n.x <= 0.5),
    ("gt-reflected", lambda m, t: 0 < t.x, lambda n: n.x > 0),
    ("ge", lambda m, t: t.x.ge(t.y), lambda n: n.x >= n.y),
    ("logical_and", lambda m, t: t.b.logical_and(t.c), lambda n: n.b & n.c),
    ("logical_or", lambda m, t: m.logical_or(t.b, t.c), lambda n: n.b | n.c),
    ("logical_xor", lambda m, t: t.x.logical_xor(t.b), lambda n: (n.x != 0) ^ n.b),
    ("and-bool", lambda m, t: t.b & t.c, lambda n: n.b & n.c),
    ("or-bool", lambda m, t: t.b | t.c, lambda n: n.b | n.c),
    ("xor-bool", lambda m, t: t.b ^ t.c, lambda n: n.b ^ n.c),
    ("bitwise_and", lambda m, t: t.i & t.j, lambda n: n.i & n.j),
    ("bitwise_or-scalar", lambda m, t: t.i | 8, lambda n: n.i | 8),
    ("bitwise_xor", lambda m, t: t.i ^ t.j, lambda n: n.i ^ n.j),
    ("where", lambda m, t: m.where(t.b, t.x, t.y), lambda n: np.where(n.b, n.x, n.y)),
    ("where-scalar", lambda m, t: m.where(t.x > 0, t.x, 0.0), lambda n: np.where(n.x > 0, n.x, 0)),
    ("masked_fill", lambda m, t: t.x.masked_fill(t.b, 0.5), lambda n: np.where(n.b, 0.5, n.x)),
    ("clamp", lambda m, t: t.x.clamp(-0.5, 0.5), lambda n: np.clip(n.x, -0.5, 0.5)),
    ("clamp-min", lambda m, t: t.x.clamp(min=0), lambda n: np.maximum(n.x, 0)),
    ("clamp_min", lambda m, t: t.x.clamp_min(0.25), lambda n: np.maximum(n.x, 0.25)),
    ("clamp_max", lambda m, t: m.clamp_max(t.x, 0.25), lambda n: np.minimum(n.x, 0.25)),
]

REDUCTIONS = [
    ("sum", lambda m, t: t.x.sum(), lambda n: n.x.sum()),
    ("sum0", lambda m, t: t.x.sum(0), lambda n: n.x.sum(0)),
    ("sum1-keepdim", lambda m, t: m.sum(t.x, 1, keepdim=True), lambda n: n.x.sum(1, keepdims=True)),
    ("sum01", lambda m, t: t.x.sum((0, 1)), lambda n: n.x.sum((0, 1))),
    ("sum-keepdim", lambda m, t: t.x.sum(dim=None, keepdim=True), lambda n: n.x.sum(keepdims=True)),
    ("sum-ints", lambda m, t: t.i.sum(0), lambda n: n.i.astype(np.int64).sum(0)),
    ("sum-float64", lambda m, t: t.x.sum(1, dtype=m.float64), lambda n: n.x.astype(np.float64).sum(1)),
    ("mean", lambda m, t: t.x.mean(), lambda n: n.x.mean()),
    ("mean0", lambda m, t: t.x.mean(0), lambda n: n.x.mean(0)),
    ("mean1-keepdim", lambda m, t: m.mean(t.x, -1, True), lambda n: n.x.mean(-1, keepdims=True)),
    ("amax", lambda m, t: t.x.amax(), lambda n: n.x.max()),
    ("amax0", lambda m, t: t.x.amax(0), lambda n: n.x.max(0)),
    ("amin1", lambda m, t: m.amin(t.x, 1), lambda n: n.x.min(1)),
    ("max", lambda m, t: t.x.max(), lambda n: n.x.max()),
    ("min", lambda m, t: m.min(t.x), lambda n: n.x.min()),
    ("prod", lambda m, t: t.p.prod(), lambda n: n.p.astype(np.float64).prod()),
    ("prod-ints", lambda m, t: t.j.prod(), lambda n: n.j.astype(np.int64).prod()),
    ("any", lambda m, t: t.b.any(), lambda n: n.b.any()),
    ("any0", lambda m, t: t.b.any(0), lambda n: n.b.any(0)),
    ("all", lambda m, t: m.all(t.b), lambda n: n.b.all()),
    ("all1-keepdim", lambda m, t: t.b.all(1, keepdim=True), lambda n: n.b.all(1, keepdims=True)),
    ("argmax", lambda m, t: t.x.argmax(), lambda n: np.argmax(n.x)),
    ("argmax0", lambda m, t: t.x.argmax(0), lambda n: np.argmax(n.x, 0)),
    ("argmin1-keepdim", lambda m, t: m.argmin(t.x, 1, keepdim=True), lambda n: np.argmin(n.x, 1)[:, None]),
    ("var", lambda m, t: t.x.var(), lambda n: n.x.astype(np.float64).var(ddof=1)),
    ("var1", lambda m, t: t.x.var(1), lambda n: n.x.astype(np.float64).var(1, ddof=1)),
    ("var0-correction0", lambda m, t: t.x.var(0, correction=0), lambda n: n.x.var(0)),
    ("var-unbiased-false", lambda m, t: m.var(t.x, 1, False, True), lambda n: n.x.var(1, keepdims=True)),
    ("std", lambda m, t: t.x.std(), lambda n: n.x.astype(np.float64).std(ddof=1)),
    ("std0-unbiased-false", lambda m, t: t.x.std(0, unbiased=False), lambda n: n.x.std(0)),
    ("logsumexp1", lambda m, t: t.x.logsumexp(1), lambda n: np.log(np.exp(n.x.astype(np.float64)).sum(1))),
    ("logsumexp0-keepdim", lambda m, t: m.logsumexp(t.x, 0, True),
     lambda n: np.log(np.exp(n.x.astype(np.float64)).sum(0, keepdims=True))),
    ("cumsum0", lambda m, t: t.x.cumsum(0), lambda n: n.x.cumsum(0)),
    ("cumsum1", lambda m, t: m.cumsum(t.x, 1), lambda n: n.x.cumsum(1)),
    ("cumsum-ints", lambda m, t: t.i.cumsum(1), lambda n: n.i.astype(np.int64).cumsum(1)),
    ("cumprod1", lambda m, t: t.p.cumprod(1), lambda n: n.p.cumprod(1)),
    ("softmax-1", lambda m, t: t.x.softmax(-1), lambda n: softmax(n.x, -1)),
    ("softmax0", lambda m, t: m.softmax(t.x, 0), lambda n: softmax(n.x, 0)),
    ("F.softmax", lambda m, t: m.nn.functional.softmax(t.x, dim=1), lambda n: softmax(n.x, 1)),
    ("log_softmax1", lambda m, t: t.x.log_softmax(1), lambda n: np.log(softmax(n.x.astype(np.float64), 1))),
    ("F.log_softmax0", lambda m, t: m.nn.functional.log_softmax(t.x, 0),
     lambda n: np.log(softmax(n.x.astype(np.float64), 0))),
]

TABLE = {name: (op, ref) for name, op, ref in POINTWISE + REDUCTIONS}


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name", list(TABLE))
def test_op_against_numpy(inputs, name, layout, shape):
    n, t = inputs(layout, shape)
    op, ref = TABLE[name]
    out = op(tessera, t)
    with np.errstate(all="ignore"):  # log of negatives, var of one element: NaN, as torch
        check(out.full_tensor(), ref(n), rtol=1e-4, atol=1e-5)
    assert out.shape == np.shape(ref(n))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("name", list(TABLE))
def test_op_against_torch(inputs, name, shape):
    """The same call on torch's tensors: the values and the dtype (type promotion included)."""
    torch = pytest.importorskip("torch", reason="torch is not installed")
    n, t = inputs("grid-S1S0", shape)
    op, _ = TABLE[name]
    tt = SimpleNamespace(**{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in vars(n).items()})
    expected = op(torch, tt)
    out = op(tessera, t)
    assert out.dtype == tessera.dtypes.as_dtype(expected.dtype)
    got = out.full_tensor(kind="numpy")
    check(got, expected.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("op,dtype", [
    (lambda t: t.x < t.y, "bool"), (lambda t: t.x.isnan(), "bool"), (lambda t: t.x.argmax(), "int64"),
    (lambda t: t.i + 2, "int32"), (lambda t: t.i + 2.5, "float32"), (lambda t: t.i / t.j, "float32"),
    (lambda t: t.i.sum(), "int64"), (lambda t: t.x.mean(dtype=tessera.float64), "float64"),
    (lambda t: t.b & t.c, "bool"), (lambda t: t.i & 3, "int32"), (lambda t: t.i.cumsum(0), "int64"),
    (lambda t: t.x.to(tessera.int32), "int32"), (lambda t: t.x.half(), "float16"),
    (lambda t: t.x.softmax(1, tessera.float64), "float64"), (lambda t: t.j.prod(), "int64"),
    (lambda t: t.x * True, "float32"), (lambda t: t.i * 2.0, "float32"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_result_dtypes_follow_torchs_promotion(inputs, op, dtype):
    _, t = inputs("world-S0", (5, 3))
    assert op(t).dtype == tessera.dtypes.as_dtype(dtype)


# -- matmul -------------------------------------------------------------------------------------


def data(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_matmuls(meshes, layout):
    mesh_name, placements = LAYOUTS[layout]
    mesh = meshes[mesh_name]
    replicate = [Replicate()] * mesh.ndim
    a, b, c3 = data((5, 3), 1), data((3, 4), 2), data((3, 5, 3), 3)
    w, bias, bias2 = data((4, 3), 4), data((4,), 5), data((5, 4), 6)
    da = tessera.distribute_tensor(a, mesh, placements)
    db = tessera.distribute_tensor(b, mesh, replicate)
    d3 = tessera.distribute_tensor(c3, mesh, placements)
    dw = tessera.distribute_tensor(w, mesh, placements)
    dbias = tessera.distribute_tensor(bias, mesh, replicate)
    dbias2 = tessera.distribute_tensor(bias2, mesh, placements)
    b3 = np.stack([b, b * 2, b - 1])
    db3 = tessera.distribute_tensor(b3, mesh, replicate)
    check(tessera.mm(da, db).full_tensor(), a @ b)
    check((da @ db).full_tensor(), a @ b)
    check(tessera.matmul(d3, db).full_tensor(), c3 @ b)  # batched by 2-D: broadcasting
    check(d3.bmm(db3).full_tensor(), c3 @ b3)
    check(tessera.addmm(dbias2, da, db, beta=0.5, alpha=2).full_tensor(), 0.5 * bias2 + 2 * (a @ b))
    F = tessera.nn.functional
    check(F.linear(da, dw).full_tensor(), a @ w.T)
    check(F.linear(da, dw, dbias).full_tensor(), a @ w.T + bias)


# -- views, casts, cat and stack, pieces -----------------------------------------------------------

VIEWS = [
    ("view", lambda x: x.view(15), lambda a: a.reshape(15)),
    ("view-tuple", lambda x: x.view((3, -1)), lambda a: a.reshape(3, 5)),
    ("reshape", lambda x: x.reshape(-1, 5), lambda a: a.reshape(-1, 5)),
    ("flatten", lambda x: x.flatten(), lambda a: a.reshape(-1)),
    ("unflatten", lambda x: x.unflatten(0, (5, 1)), lambda a: a.reshape(5, 1, 3)),
    ("unsqueeze0", lambda x: x.unsqueeze(0), lambda a: a[None]),
    ("unsqueeze-1", lambda x: tessera.unsqueeze(x, -1), lambda a: a[..., None]),
    ("squeeze", lambda x: x.unsqueeze(1).squeeze(), lambda a: a),
    ("squeeze-dim", lambda x: x.unsqueeze(0).squeeze(0), lambda a: a),
    ("permute", lambda x: x.permute(1, 0), lambda a: a.T),
    ("transpose", lambda x: x.transpose(0, 1), lambda a: a.T),
    ("t", lambda x: x.t(), lambda a: a.T),
    ("T", lambda x: x.T, lambda a: a.T),
    ("expand", lambda x: x.unsqueeze(0).expand(2, 5, 3), lambda a: np.broadcast_to(a, (2, 5, 3))),
    ("expand-keep", lambda x: x[:, :1].expand(-1, 4), lambda a: np.broadcast_to(a[:, :1], (5, 4))),
    ("contiguous", lambda x: x.t().contiguous(), lambda a: a.T),
    ("clone", lambda x: x.clone(), lambda a: a),
    ("detach", lambda x: x.detach(), lambda a: a),
    ("to-float64", lambda x: x.to(tessera.float64), lambda a: a.astype(np.float64)),
    ("to-int32", lambda x: (x * 4).int(), lambda a: np.trunc(a * 4).astype(np.int32)),
    ("narrow0", lambda x: x.narrow(0, 1, 3), lambda a: a[1:4]),
    ("narrow1", lambda x: tessera.narrow(x, 1, 1, 2), lambda a: a[:, 1:3]),
    ("tril", lambda x: x.tril(), lambda a: np.tril(a)),
    ("triu1", lambda x: x.triu(1), lambda a: np.triu(a, 1)),
    ("tril-1", lambda x: tessera.tril(x, -1), lambda a: np.tril(a, -1)),
    ("cat0", lambda x: tessera.cat([x, x * 2], 0), lambda a: np.concatenate([a, a * 2], 0)),
    ("cat1", lambda x: tessera.cat([x, x[:, :1]], dim=1), lambda a: np.concatenate([a, a[:, :1]], 1)),
    ("stack", lambda x: tessera.stack([x, -x]), lambda a: np.stack([a, -a])),
    ("stack1", lambda x: tessera.stack([x, -x], 1), lambda a: np.stack([a, -a], 1)),
    ("zeros_like", lambda x: tessera.zeros_like(x), lambda a: np.zeros_like(a)),
    ("ones_like", lambda x: tessera.ones_like(x, dtype=tessera.int64), lambda a: np.ones(a.shape, np.int64)),
    ("full_like", lambda x: tessera.full_like(x, 2.5), lambda a: np.full_like(a, 2.5)),
]


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("name,op,ref", VIEWS, ids=[v[0] for v in VIEWS])
def test_views_and_tensor_ops(meshes, layout, name, op, ref):
    mesh_name, placements = LAYOUTS[layout]
    a = data((5, 3), 7)
    x = tessera.distribute_tensor(a, meshes[mesh_name], placements)
    out = op(x)
    check(out.full_tensor(), ref(a))
    assert out.dtype == tessera.dtypes.as_dtype(ref(a).dtype)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_views_of_three_dims(meshes, layout):
    mesh_name, placements = LAYOUTS[layout]
    a = data((2, 5, 3), 8)
    x = tessera.distribute_tensor(a, meshes[mesh_name], placements)
    check(x.flatten(0, 1).full_tensor(), a.reshape(10, 3))
    check(x.permute(2, 0, 1).full_tensor(), a.transpose(2, 0, 1))
    check(x.view(2, 15).full_tensor(), a.reshape(2, 15))
    check(x.T.full_tensor(), a.transpose(2, 1, 0))
    check(x.unflatten(-1, (3, 1)).full_tensor(), a.reshape(2, 5, 3, 1))
    check(x.transpose(0, 2).reshape(3, 10).full_tensor(), a.transpose(2, 1, 0).reshape(3, 10))


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_index_select(meshes, layout):
    mesh_name, placements = LAYOUTS[layout]
    mesh = meshes[mesh_name]
    a = data((5, 3), 9)
    x = tessera.distribute_tensor(a, mesh, placements)
    rows = tessera.distribute_tensor(np.array([4, 0, 2, 2]), mesh)
    cols = tessera.distribute_tensor(np.array([2, 0]), mesh)
    check(x.index_select(0, rows).full_tensor(), a[[4, 0, 2, 2]])
    check(tessera.index_select(x, 1, cols).full_tensor(), a[:, [2, 0]])


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_chunk_split_unbind(meshes, layout):
    mesh_name, placements = LAYOUTS[layout]
    a = data((5, 3), 10)
    x = tessera.distribute_tensor(a, meshes[mesh_name], placements)
    cases = [
        (x.chunk(4), [a[0:2], a[2:4], a[4:5]]),  # torch: ceil(5 / 4) = 2 a piece, so 3 pieces
        (x.chunk(4, dim=1), [a[:, i:i + 1] for i in range(3)]),
        (tessera.chunk(x, 2, 1), [a[:, 0:2], a[:, 2:3]]),
        (x.split(2), [a[0:2], a[2:4], a[4:5]]),
        (x.split([1, 0, 4]), [a[0:1], a[1:1], a[1:5]]),
        (tessera.split(x, 2, dim=1), [a[:, 0:2], a[:, 2:3]]),
        (x.unbind(), list(a)),
        (tessera.unbind(x, 1), [a[:, i] for i in range(3)]),
        (list(x), list(a)),
    ]
    for pieces, expected in cases:
        assert len(pieces) == len(expected)
        for p, e in zip(pieces, expected):
            check(p.full_tensor(), e)
    assert [p.shape for p in x[:0].chunk(2)] == [(0, 3), (0, 3)]  # torch: chunks empty pieces


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_ops_of_several_outputs(meshes, layout, shape):
    """max/min along a dim, sort, argsort, topk, var_mean, std_mean and native_layer_norm: one
    call each, every output a DTensor of its own, against numpy (ties cannot occur: the values
    are distinct floats)."""
    mesh_name, placements = LAYOUTS[layout]
    a = data(shape, 13)
    x = tessera.distribute_tensor(a, meshes[mesh_name], placements)
    k = min(2, shape[0])
    a64 = a.astype(np.float64)
    mean = a64.mean(1, keepdims=True)
    rstd = 1 / np.sqrt(a64.var(1, keepdims=True) + 1e-5)
    cases = [
        (x.max(0), [a.max(0), a.argmax(0)]),
        (tessera.max(x, 1, keepdim=True), [a.max(1, keepdims=True), a.argmax(1)[:, None]]),
        (x.min(dim=-1), [a.min(1), a.argmin(1)]),
        (x.sort(0), [np.sort(a, 0), np.argsort(a, 0, kind="stable")]),
        (x.sort(1, descending=True), [-np.sort(-a, 1), np.argsort(-a, 1, kind="stable")]),
        (x.sort(stable=True), [np.sort(a, 1), np.argsort(a, 1, kind="stable")]),
        ((x.argsort(0, descending=True),), [np.argsort(-a, 0, kind="stable")]),
        (x.topk(k, 0), [-np.sort(-a, 0)[:k], np.argsort(-a, 0, kind="stable")[:k]]),
        (tessera.topk(x, 1, largest=False), [a.min(1, keepdims=True), a.argmin(1)[:, None]]),
        (tessera.var_mean(x, 1), [a64.var(1, ddof=1), a64.mean(1)]),
        (tessera.var_mean(x, 0, correction=0, keepdim=True),
         [a64.var(0, keepdims=True), a64.mean(0, keepdims=True)]),
        (tessera.std_mean(x, correction=0), [a64.std(), a64.mean()]),
        (tessera.ops.aten.native_layer_norm(x, [shape[1]], None, None, 1e-5),
         [(a64 - mean) * rstd, mean, rstd]),
    ]
    for outputs, expected in cases:
        assert len(outputs) == len(expected)
        for out, e in zip(outputs, expected):
            assert isinstance(out, tessera.DTensor)
            check(out.full_tensor(), np.asarray(e, dtype=out.dtype.numpy), rtol=1e-4, atol=1e-5)
    values, indices = x.max(0)  # unpacks as torch's named tuple
    assert values.dtype == tessera.float32 and indices.dtype == tessera.int64
    with pytest.raises(tessera.InvalidArgument, match="'k'"):
        x.topk(shape[0] + 1, 0).indices.shape  # on the op stream: on an output's first touch
    with pytest.raises(tessera.InvalidArgument, match="aten::max.dim"):
        x[:0].max(0).values.shape  # torch: max of an empty dim has no value
    check(x.full_tensor(), a)  # the input is intact


# -- indexing ---------------------------------------------------------------------------------------

E = Ellipsis
INDEXES = [0, -1, 2, (1, 2), (0, 1, 2), slice(1, 3), slice(1, None, 2), (slice(None), 4),
           (slice(None), slice(3, 1)), (slice(None, None, 2), 1, slice(1, None)), None, (None, 0),
           (E, 0), (E, None), (0, E, 1), (slice(1, None), E, slice(None, None, 3)), E,
           slice(None), (None, E, None), (1, None, E, None, 2), slice(-2, None), (slice(2, 100),),
           True, (E, False)]


@pytest.mark.parametrize("layout", ["world-S0", "world-R", "grid-S1S0"])
@pytest.mark.parametrize("index", INDEXES, ids=lambda i: " ".join(repr(i).split()))
def test_indexing_as_torch_decomposes_it(meshes, layout, index):
    mesh_name, placements = LAYOUTS[layout]
    a = np.arange(60, dtype=np.float32).reshape(3, 5, 4)  # 3 over 4 ranks: one is empty
    x = tessera.distribute_tensor(a, meshes[mesh_name], placements)
    out = x[index]
    assert out.shape == a[index].shape
    check(out.full_tensor(), a[index])


def test_indexing_by_a_tensor_goes_to_index_tensor(meshes):
    mesh = meshes["world"]
    a = np.arange(60, dtype=np.float32).reshape(3, 5, 4)
    x = tessera.distribute_tensor(a, mesh, [Shard(1)])
    index = tessera.distribute_tensor(np.array([2, 0]), mesh)
    rows = tessera.distribute_tensor(np.array([[0, 1], [-1, 0]]), mesh, [Shard(0)])
    cases = [(x[index], a[[2, 0]]), (x[:, [4, 1]], a[:, [4, 1]]),
             (x[1:, E, [0, 3]], a[1:, ..., [0, 3]]), (x[rows], a[[[0, 1], [-1, 0]]]),
             (x[[0, 2], :, [1, 3]], a[[0, 2], :, [1, 3]]), (x[:, [0, -1], [3, 0]], a[:, [0, -1], [3, 0]]),
             (x[None, [1], 2:], a[None, [1], 2:])]
    for got, expected in cases:
        assert got.shape == expected.shape
        check(got.full_tensor(), expected)
    # A bool mask has a data-dependent shape: refused, naming the argument; x intact.
    with pytest.raises(tessera.InvalidArgument, match="indices"):
        x[a[:, 0, 0] > 10].full_tensor()
    with pytest.raises(tessera.InvalidArgument, match="out of range|index"):
        x[:, [7]].full_tensor()
    check(x.full_tensor(), a)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_gather_scatter_and_index_put(meshes, layout):
    mesh_name, placements = LAYOUTS[layout]
    mesh = meshes[mesh_name]
    a = data((5, 3), 13)
    x = tessera.distribute_tensor(a, mesh, placements)
    rng = np.random.default_rng(3)
    i0 = rng.integers(0, 5, (4, 3))
    i1 = rng.integers(0, 3, (5, 2))
    s0 = data((4, 3), 14)
    src = tessera.distribute_tensor(s0, mesh, placements)
    index0 = tessera.distribute_tensor(i0, mesh, placements)
    check(x.gather(1, i1).full_tensor(), np.take_along_axis(a, i1, 1))
    check(tessera.gather(x, 0, index0).full_tensor(), np.take_along_axis(a, i0, 0))
    # scatter: distinct positions per column, so the result does not depend on write order.
    perm = np.stack([rng.permutation(5)[:4] for _ in range(3)], 1)
    expected = a.copy()
    np.put_along_axis(expected, perm, s0, 0)
    check(x.scatter(0, perm, src).full_tensor(), expected)
    expected = a.copy()
    np.put_along_axis(expected, i1, 2.5, 1)
    check(x.scatter(1, i1, 2.5).full_tensor(), expected)
    expected = a.copy()
    for r in range(4):
        for c in range(3):
            expected[i0[r, c], c] += s0[r, c]
    check(tessera.scatter_add(x, 0, i0, src).full_tensor(), expected)
    v = data((2, 3), 15)
    values = tessera.distribute_tensor(v, mesh)
    expected = a.copy()
    expected[[4, 1]] = v
    check(x.index_put(([4, 1],), values).full_tensor(), expected)
    expected = a.copy()
    np.add.at(expected, ([0, 0, 2], [1, 1, 2]), 1.5)
    check(x.index_put(([0, 0, 2], [1, 1, 2]), 1.5, accumulate=True).full_tensor(), expected)
    with pytest.raises(tessera.Unimplemented, match="reduce"):
        x.scatter(0, i0, src, reduce="multiply")
    check(x.full_tensor(), a)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_norms_embedding_and_attention(meshes, layout):
    F = tessera.nn.functional
    mesh_name, placements = LAYOUTS[layout]
    mesh = meshes[mesh_name]
    a = data((5, 3), 16)
    x = tessera.distribute_tensor(a, mesh, placements)
    check(x.norm().full_tensor(), np.linalg.norm(a), rtol=1e-4)
    check(x.norm(1, dim=1).full_tensor(), np.abs(a).sum(1), rtol=1e-4)
    check(tessera.norm(x, float("inf"), 0, keepdim=True).full_tensor(),
          np.abs(a).max(0, keepdims=True))
    w, b = data((3,), 17), data((3,), 18)
    dw, db = tessera.distribute_tensor(w, mesh), tessera.distribute_tensor(b, mesh)
    mu, var = a.mean(1, keepdims=True), a.var(1, keepdims=True)
    check(F.layer_norm(x, 3, dw, db).full_tensor(), (a - mu) / np.sqrt(var + 1e-5) * w + b,
          rtol=1e-4, atol=1e-4)
    check(F.rms_norm(x, [3], dw, eps=1e-6).full_tensor(),
          a / np.sqrt((a * a).mean(1, keepdims=True) + 1e-6) * w, rtol=1e-4, atol=1e-4)
    table = data((7, 4), 19)
    weight = tessera.distribute_tensor(table, mesh, placements if layout == "world-S0" else
                                       [Replicate()] * mesh.ndim)
    ids = np.array([[6, 0, 3], [1, 1, 5]])
    dids = tessera.distribute_tensor(ids, mesh)
    check(F.embedding(dids, weight).full_tensor(), table[ids])
    check(F.embedding(dids, weight, padding_idx=-1).full_tensor(), table[ids])
    q, k, v = data((2, 4, 3, 8), 20), data((2, 4, 5, 8), 21), data((2, 4, 5, 6), 22)
    heads = [Shard(1)] if mesh.ndim == 1 else [Shard(1), Replicate()]
    dq, dk, dv = (tessera.distribute_tensor(t, mesh, heads) for t in (q, k, v))
    scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(8)
    check(F.scaled_dot_product_attention(dq, dk, dv).full_tensor(), softmax(scores, -1) @ v,
          rtol=1e-4, atol=1e-5)
    causal = np.where(np.tril(np.ones((3, 5), bool)), scores, -np.inf)
    check(F.scaled_dot_product_attention(dq, dk, dv, is_causal=True).full_tensor(),
          softmax(causal, -1) @ v, rtol=1e-4, atol=1e-5)


def log_softmax(a, axis):
    m = a.max(axis=axis, keepdims=True)
    return a - m - np.log(np.exp(a - m).sum(axis=axis, keepdims=True))


def cross_entropy_reference(a, t, w=None, ignore=-100, reduction="mean", eps=0.0):
    """torch's F.cross_entropy with class indices on [N, C], in float64."""
    lp = log_softmax(a.astype(np.float64), 1)
    n, c = a.shape
    w = np.ones(c) if w is None else w.astype(np.float64)
    valid = t != ignore
    safe = np.where(valid, t, 0)
    nll = np.where(valid, -w[safe] * lp[np.arange(n), safe], 0)
    smooth = np.where(valid, -(lp * w).sum(1), 0)
    if reduction == "none":
        return (1 - eps) * nll + eps / c * smooth
    if reduction == "sum":
        return (1 - eps) * nll.sum() + eps / c * smooth.sum()
    total = np.where(valid, w[safe], 0).sum()
    return (1 - eps) * nll.sum() / total + eps / c * smooth.sum() / total


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_losses(meshes, layout):
    F = tessera.nn.functional
    mesh_name, placements = LAYOUTS[layout]
    mesh = meshes[mesh_name]
    a = data((5, 3), 23)
    t = np.array([2, 0, 1, 1, 2])
    x = tessera.distribute_tensor(a, mesh, placements)
    dt = tessera.distribute_tensor(t, mesh)
    w = np.array([0.5, 2.0, 1.5], dtype=np.float32)
    dw = tessera.distribute_tensor(w, mesh)
    for reduction in ("mean", "sum", "none"):
        check(F.cross_entropy(x, dt, reduction=reduction).full_tensor(),
              cross_entropy_reference(a, t, reduction=reduction), rtol=1e-4, atol=1e-5)
        check(F.cross_entropy(x, t, dw, ignore_index=1, reduction=reduction,
                              label_smoothing=0.1).full_tensor(),
              cross_entropy_reference(a, t, w, 1, reduction, 0.1), rtol=1e-4, atol=1e-5)
        check(F.nll_loss(tessera.distribute_tensor(log_softmax(a, 1).astype(np.float32), mesh,
                                                   placements), dt, dw,
                         reduction=reduction).full_tensor(),
              cross_entropy_reference(a, t, w, reduction=reduction), rtol=1e-4, atol=1e-5)
    probs = softmax(data((5, 3), 24), 1).astype(np.float32)
    check(F.cross_entropy(x, tessera.distribute_tensor(probs, mesh, placements)).full_tensor(),
          -(probs * log_softmax(a, 1)).sum(1).mean(), rtol=1e-4, atol=1e-5)
    b = data((5, 3), 25)
    y = tessera.distribute_tensor(b, mesh, placements)
    check(F.mse_loss(x, y).full_tensor(), ((a - b) ** 2).mean(), rtol=1e-4)
    check(F.l1_loss(x, y, reduction="sum").full_tensor(), np.abs(a - b).sum(), rtol=1e-4)
    with pytest.raises(tessera.InvalidArgument, match="out of bounds"):
        F.cross_entropy(x, np.array([0, 3, 1, 1, 2])).full_tensor()
    with pytest.raises(tessera.InvalidArgument, match="'target'"):
        F.nll_loss(x, tessera.distribute_tensor(t.astype(np.int32), mesh)).full_tensor()
    check(x.full_tensor(), a)


def test_loss_parallel_keeps_the_logits_sharded(meshes):
    """DTensor's loss_parallel: class-sharded logits give a Partial(sum) loss; what moves is a
    number per row (the max and the sum of exps), never the logits."""
    F = tessera.nn.functional
    mesh = meshes["world"]
    a = data((6, 40), 26)
    t = np.array([0, 39, 7, 12, 20, 33])
    x = tessera.distribute_tensor(a, mesh, [Shard(1)])
    with tessera.loss_parallel():
        loss = F.cross_entropy(x, t)
        check(loss.full_tensor(), cross_entropy_reference(a, t), rtol=1e-4, atol=1e-5)
        assert loss.placements == (tessera.Partial(),)
        moved = [r for r in loss.redistributions if "node" not in r.input]
        assert moved == [], moved  # the logits themselves never move
        with pytest.raises(tessera.InvalidArgument, match="class dim"):
            F.cross_entropy(tessera.distribute_tensor(a, mesh, [Shard(0)]), t)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_factories(meshes, layout):
    mesh_name, placements = LAYOUTS[layout]
    mesh = meshes[mesh_name]
    one = [Shard(0) if p.is_shard() else p for p in placements]  # a 1-D result's layout
    check(tessera.arange(7, device_mesh=mesh, placements=one).full_tensor(), np.arange(7))
    r = tessera.arange(1, 2.5, 0.5, device_mesh=mesh, placements=one)
    assert r.dtype == tessera.float32
    check(r.full_tensor(), np.arange(1, 2.5, 0.5, dtype=np.float32))
    check(tessera.eye(3, 5, device_mesh=mesh, placements=placements).full_tensor(),
          np.eye(3, 5, dtype=np.float32))
    x = tessera.distribute_tensor(data((5, 3), 27), mesh, placements)
    z = x.new_zeros(2, 3)
    assert z.shape == (2, 3) and z.placements == tuple([Replicate()] * mesh.ndim)
    check(z.full_tensor(), np.zeros((2, 3), np.float32))
    check(x.new_full((3, 1), 2.5, placements=placements).full_tensor(), np.full((3, 1), 2.5))
    check(x.new_ones(4, dtype=tessera.int64).full_tensor(), np.ones(4, np.int64))
    with pytest.raises(tessera.InvalidArgument, match="step"):
        tessera.arange(0, 4, 0, device_mesh=mesh).full_tensor()


def test_random_ops_are_placement_invariant_and_reproducible(meshes):
    mesh = meshes["world"]
    a = data((5, 3), 28)
    session = meshes["world"].session
    draws = []
    for placements in ([Replicate()], [Shard(0)], [Shard(1)]):
        x = tessera.distribute_tensor(a, mesh, placements)
        tessera.manual_seed(1234, session=session)
        draws.append((tessera.rand_like(x).full_tensor(), tessera.randn_like(x).full_tensor(),
                      tessera.randint(0, 10, (5, 3), device_mesh=mesh,
                                      placements=placements).full_tensor()))
    for got in draws[1:]:
        for g, w in zip(got, draws[0]):
            assert np.array_equal(g, w)
    u, n, i = draws[0]
    assert (u >= 0).all() and (u < 1).all() and not np.array_equal(u, n)
    assert i.dtype == np.int64 and (i >= 0).all() and (i < 10).all()
    tessera.manual_seed(1234, session=session)
    x = tessera.distribute_tensor(a, mesh, [Shard(0)])
    assert np.array_equal(tessera.rand_like(x).full_tensor(), u)
    assert not np.array_equal(tessera.rand_like(x).full_tensor(), u)  # the offset moved on
    F = tessera.nn.functional
    check(F.dropout(x, 0.0).full_tensor(), a)
    check(F.dropout(x, 0.5, training=False).full_tensor(), a)
    big = tessera.distribute_tensor(np.ones((64, 64), np.float32), mesh, [Shard(1)])
    kept = F.dropout(big, 0.25).full_tensor()
    assert set(np.unique(kept)) <= {0.0, np.float32(1 / 0.75)}
    assert 0.70 < (kept != 0).mean() < 0.80


# -- tessera.ops.aten and ListOps -------------------------------------------------------------------


def test_the_aten_path(meshes):
    aten = tessera.ops.aten
    mesh = meshes["world"]
    a, g = data((5, 3), 11), data((5, 3), 12)
    x = tessera.distribute_tensor(a, mesh, [Shard(0)])
    dg = tessera.distribute_tensor(g, mesh, [Shard(1)])
    y = np.tanh(a)
    s = sigmoid(a)
    sm = softmax(a, 1)
    dsm = tessera.distribute_tensor(sm.astype(np.float32), mesh, [Shard(0)])
    cases = [
        (aten.softmax.int(x, -1), softmax(a, -1)), (aten.softmax(x, 1), softmax(a, 1)),
        (aten._softmax(x, 1, False), softmax(a, 1)), (aten._log_softmax(x, 0, False), np.log(softmax(a, 0))),
        (aten._safe_softmax(x, -1), softmax(a, -1)), (aten.add.Scalar(x, 2), a + 2),
        (aten.add.Tensor(x, dg, alpha=2), a + 2 * g), (aten.mul.Scalar(x, 0.5), a * 0.5),
        (aten.tanh_backward(dg, aten.tanh(x)), g * (1 - y ** 2)),
        (aten.sigmoid_backward(dg, aten.sigmoid(x)), g * s * (1 - s)),
        (aten.silu_backward(dg, x), g * s * (1 + a * (1 - s))),
        (aten.threshold_backward(dg, x, 0), np.where(a > 0, g, 0)),
        (aten._softmax_backward_data(dg, dsm, 1, tessera.float32), sm * (g - (g * sm).sum(1, keepdims=True))),
        (aten._unsafe_view(x, [15]), a.reshape(15)), (aten.alias(x), a), (aten.sum.default(x), a.sum()),
        (aten.sum.dim_IntList(x, [0], True), a.sum(0, keepdims=True)),
        (aten.select.int(x, 1, -1), a[:, -1]), (aten.slice.Tensor(x, 0, 1, None, 2), a[1::2]),
        (tessera.ops.call("aten::clamp", x, None, 0.5), np.minimum(a, 0.5)),
    ]
    for out, expected in cases:
        check(out.full_tensor(), expected, rtol=1e-4, atol=1e-5)


def test_list_ops(session):
    ops = tessera.ops.list_ops()
    names = {o.name for o in ops}
    for name in ("aten::softmax.int", "aten::add.Tensor", "aten::view", "aten::cat", "aten::mm",
                 "aten::slice.Tensor", "aten::var.correction", "aten::_to_copy"):
        assert name in names
    by_name = {o.name: o for o in ops}
    assert "softmax.int(Tensor self, int dim" in by_name["aten::softmax.int"].schema
    assert all(o.schema for o in ops)
    some = {o.name for o in tessera.ops.list_ops("softmax")}
    assert "aten::softmax.int" in some and some <= {n for n in names if "softmax" in n}
    assert "softmax" in dir(tessera.ops.aten) and "int" in tessera.ops.aten.softmax.overloads()
    assert tessera.ops.aten.softmax.int.schema == by_name["aten::softmax.int"].schema


# -- errors ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def unary_session(tessera_address):
    """A session that makes one unary call per op."""
    with tessera.Session(tessera_address, op_stream=False) as s:
        yield s


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_errors_name_the_op_and_the_argument(session, unary_session, stream):
    s = session if stream else unary_session
    mesh = tessera.get_device_mesh("world", session=s)
    x = tessera.distribute_tensor(data((5, 3), 13), mesh, [Shard(0)])
    aten = tessera.ops.aten
    with pytest.raises(tessera.Unimplemented) as e:
        aten.no_such_op(x).shape  # on the op stream: on the output's first touch
    assert "no_such_op" in e.value.message
    with pytest.raises(tessera.InvalidArgument) as e:
        aten.softmax.int(x, "not a dim").shape
    assert "softmax" in e.value.message and "dim" in e.value.message
    with pytest.raises(tessera.InvalidArgument) as e:
        x.softmax(dim=5).shape
    assert "softmax" in e.value.message
    with pytest.raises(tessera.InvalidArgument, match="'dim'"):  # refused by the client
        aten.softmax.int(x, dim=np.zeros(2))
    with pytest.raises(tessera.InvalidArgument, match="step"):
        x[::-1]
    with pytest.raises(tessera.Unimplemented, match="in place"):
        x[0] = 1.0
    np.testing.assert_allclose(x.softmax(1).full_tensor(), softmax(x.full_tensor(), 1), **TOL)


def test_the_unary_session_runs_the_same_calls(unary_session):
    mesh = tessera.get_device_mesh("world", session=unary_session)
    a = data((5, 3), 14)
    x = tessera.distribute_tensor(a, mesh, [Shard(1)])
    check((x[1:, None] * 2 + x.sum(0)).full_tensor(), a[1:, None] * 2 + a.sum(0))
    check(tessera.cat(x.chunk(2, 1)[::-1], 1).full_tensor(), np.concatenate([a[:, 2:], a[:, :2]], 1))
    check(tessera.ops.aten.softmax(x, 0).full_tensor(), softmax(a, 0))
    values, indices = x.sort(0, descending=True)  # several outputs: the reply names them all
    check(values.full_tensor(), -np.sort(-a, 0))
    check(indices.full_tensor(), np.argsort(-a, 0, kind="stable"))
    check([p.full_tensor() for p in x.unbind(1)], [a[:, i] for i in range(3)])


# -- __torch_function__ -----------------------------------------------------------------------------


def test_torch_functions_on_dtensors(meshes):
    torch = pytest.importorskip("torch", reason="torch is not installed")
    mesh = meshes["grid"]
    a, b = data((5, 3), 15), data((5, 3), 16)
    x = tessera.distribute_tensor(a, mesh, [Shard(0), Shard(1)])
    y = tessera.distribute_tensor(b, mesh, [Replicate(), Shard(0)])
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    cases = [
        (torch.softmax(x, -1), torch.softmax(ta, -1)), (torch.cat([x, y]), torch.cat([ta, tb])),
        (torch.cat((x, y), dim=1), torch.cat((ta, tb), dim=1)),
        (torch.nn.functional.relu(x), torch.nn.functional.relu(ta)), (torch.exp(x), torch.exp(ta)),
        (torch.where(x > 0, x, y), torch.where(ta > 0, ta, tb)),
        (torch.nn.functional.gelu(x, approximate="tanh"), torch.nn.functional.gelu(ta, approximate="tanh")),
        (torch.nn.functional.softmax(x, dim=0), torch.nn.functional.softmax(ta, dim=0)),
        (torch.sum(x, 1), torch.sum(ta, 1)), (torch.maximum(x, y), torch.maximum(ta, tb)),
        (torch.add(x, y, alpha=2), torch.add(ta, tb, alpha=2)), (torch.stack([x, y], 1), torch.stack([ta, tb], 1)),
        (torch.reshape(x, (3, 5)), torch.reshape(ta, (3, 5))), (torch.transpose(x, 0, 1), torch.transpose(ta, 0, 1)),
    ]
    for ours, expected in cases:
        assert isinstance(ours, tessera.DTensor)
        np.testing.assert_allclose(ours.full_tensor(kind="numpy"), expected.numpy(), rtol=1e-5, atol=1e-6)
    values, indices = torch.sort(x, 1)
    np.testing.assert_allclose(values.full_tensor(kind="numpy"), torch.sort(ta, 1).values.numpy())
    np.testing.assert_array_equal(indices.full_tensor(kind="numpy"), torch.sort(ta, 1).indices.numpy())
    with pytest.raises(tessera.UnsupportedOp, match="'torch.inverse'"):
        torch.inverse(x)
