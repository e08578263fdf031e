"""The Python client's op calls without a service: how Python arguments become an OpCall of the
registry (tessera.op_args), torch's decompositions of indexing and the pieces of chunk and split
(tessera.indexing) run on numpy against numpy's own indexing, the ATen name and arguments every
DTensor method, operator and function sends (recorded by a fake transport), the outputs an op
with several of them names and returns, and __torch_function__'s mapping of torch's functions
(on a stand-in torch module, so it runs without torch).

Needs python3-numpy and python3-pytest and the build tree's package (its generated protos); no
cluster."""

import sys
import types

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera.dtensor import DTensor  # noqa: E402
from tessera.indexing import Step, chunk_ranges, plan_index, split_ranges  # noqa: E402
from tessera.op_args import encode_call, output_count, qualified_name  # noqa: E402
from tessera.transport import pb  # noqa: E402


# -- a fake transport that records the op calls ---------------------------------------------------


class Answered:
    """An op stream outcome already answered with ``reply``."""

    done, failed, code, message, inputs = True, False, 0, "", ()

    def __init__(self, reply):
        self.reply = reply

    def wait(self, timeout):
        return True

    def error(self):
        return None


def op_reply(name, shape, dtype=tessera.float32, outputs=()):
    """An OpReply of ``name``; with ``outputs``, an op's several outputs, each of ``shape``."""
    meta = pb.types.DTensorMeta(shape=pb.types.Shape(dims=list(shape)), dtype=dtype.number)
    reply = pb.tensor.OpReply(output=pb.tensor.TensorInfo(name=name, meta=meta))
    for n in outputs:
        reply.outputs.add(name=n, meta=meta)
    return reply


#: The registry's schemas the fake lists (ListOps), for the tessera.ops path.
SCHEMAS = {
    "aten::max.dim": "max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, "
                     "Tensor indices)",
    "aten::native_layer_norm": "native_layer_norm(Tensor input, SymInt[] normalized_shape, "
                               "Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, "
                               "Tensor)",
    "aten::split.Tensor": "split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> "
                          "Tensor(a)[]",
    "aten::softmax.int": "softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor",
}


class RecordingTransport:
    """Records every op sent on the "op stream" and the outputs it names; each output is
    answered (2, 3) float32."""

    op_stream = True

    def __init__(self):
        self.calls = []
        self.outputs = []

    def run_op_on_stream(self, op, inputs, output, pending_inputs, outputs=()):
        self.calls.append((op, list(inputs)))
        self.outputs.append((output, list(outputs)))
        return Answered(op_reply(output or outputs[0], (2, 3), outputs=outputs))

    def list_ops(self, filter=""):
        return [pb.tensor.OpInfo(name=n, schema=s) for n, s in SCHEMAS.items() if filter in n]

    def await_outcome(self, outcome, what):
        pass

    def free_tensor_later(self, name, made=None):
        pass


class FakeSession:
    def __init__(self):
        self.transport = RecordingTransport()
        self.count = 0

    def next_tensor_name(self):
        self.count += 1
        return f"out{self.count}"


@pytest.fixture
def fake():
    """(session, make) where make(name, shape, dtype) is an input DTensor whose metadata is
    known only once read (as an op's output on the stream)."""
    session = FakeSession()

    def make(name, shape=(4, 6), dtype=tessera.float32):
        return DTensor._on_stream(session, name, None, "numpy", Answered(op_reply(name, shape, dtype)))

    return session, make


def describe(op, inputs):
    """An OpCall as text: "aten::add.Tensor(x, 2, alpha=3)", tensors by their input's name."""
    parts = []
    for a in op.args:
        kind = a.WhichOneof("value")
        value = getattr(a, kind)
        if kind == "tensor":
            text = inputs[value]
        elif kind == "tensors":
            text = "[" + ", ".join("None" if i < 0 else inputs[i] for i in value.indices) + "]"
        elif kind == "ints":
            text = str(list(value.values))
        elif kind == "none":
            text = "None"
        elif kind == "dtype":
            text = tessera.dtypes.from_number(value).name
        elif kind == "string_value":
            text = repr(value)
        else:
            text = repr(value)
        parts.append(f"{a.name}={text}" if a.name else text)
    return f"{op.name}({', '.join(parts)})"


def sent(session, since=0):
    return [describe(op, inputs) for op, inputs in session.transport.calls[since:]]


# -- encoding -------------------------------------------------------------------------------------


class Ref:
    """Stands for a DTensor in encode_call."""

    def __init__(self, name):
        self.name = name


def test_qualified_names():
    assert qualified_name("softmax.int") == "aten::softmax.int"
    assert qualified_name("softmax") == "aten::softmax"
    assert qualified_name("aten::softmax.int") == "aten::softmax.int"


def test_encoding_every_kind_of_value():
    x, y = Ref("x"), Ref("y")
    op, inputs = encode_call("f.overload", [x, y, x, 2, 2.5, True, np.float32(0.5), np.int64(3),
                                            np.bool_(False), None, "tanh", [1, -1], (np.int32(2),),
                                            [x, None, y], [], np.array(4.0)],
                             {"dtype": tessera.int32, "np_dtype": np.float64, "py_dtype": bool,
                              "keepdim": False}, Ref)
    assert inputs == [x, y]  # each tensor once, in order of first appearance
    assert op.name == "aten::f.overload"
    kinds = [(a.name, a.WhichOneof("value")) for a in op.args]
    assert kinds == [("", "tensor"), ("", "tensor"), ("", "tensor"), ("", "int_value"),
                     ("", "float_value"), ("", "bool_value"), ("", "float_value"),
                     ("", "int_value"), ("", "bool_value"), ("", "none"), ("", "string_value"),
                     ("", "ints"), ("", "ints"), ("", "tensors"), ("", "ints"), ("", "float_value"),
                     ("dtype", "dtype"), ("np_dtype", "dtype"), ("py_dtype", "dtype"),
                     ("keepdim", "bool_value")]
    a = op.args
    assert [a[0].tensor, a[1].tensor, a[2].tensor] == [0, 1, 0]
    assert a[3].int_value == 2 and a[4].float_value == 2.5 and a[5].bool_value is True
    assert a[6].float_value == 0.5 and a[7].int_value == 3 and a[8].bool_value is False
    assert a[10].string_value == "tanh" and list(a[11].ints.values) == [1, -1]
    assert list(a[12].ints.values) == [2] and list(a[13].tensors.indices) == [0, -1, 1]
    assert list(a[14].ints.values) == [] and a[15].float_value == 4.0
    assert a[16].dtype == pb.types.INT32 and a[17].dtype == pb.types.FLOAT64
    assert a[18].dtype == pb.types.BOOL
    # A list of bools (a bool[N] such as output_mask) goes as 0s and 1s.
    mask, _ = encode_call("native_layer_norm_backward", [[True, False, np.bool_(True)]], {}, Ref)
    assert list(mask.args[0].ints.values) == [1, 0, 1]
    # The same message comes back from the wire (a oneof set to its default stays set).
    back = pb.tensor.OpCall.FromString(op.SerializeToString())
    assert [(b.name, b.WhichOneof("value")) for b in back.args] == kinds


@pytest.mark.parametrize("value,named", [
    (np.zeros(3), "distribute it first"), (1 + 2j, "complex"), ([1, "a"], "str"),
    ([1, 2.5], "float"), ([Ref("x"), 1], "DTensors and None"), (object(), "object"),
    (np.complex64, "complex"),
], ids=["ndarray", "complex", "ints-and-str", "ints-and-float", "tensors-and-int", "object",
        "complex-dtype"])
def test_encoding_refuses_what_has_no_wire_form(value, named):
    with pytest.raises(tessera.InvalidArgument) as e:
        encode_call("softmax.int", [Ref("x")], {"dim": value}, Ref)
    assert "aten::softmax.int" in e.value.message and "'dim'" in e.value.message
    assert named in e.value.message
    with pytest.raises(tessera.InvalidArgument, match="argument 1"):
        encode_call("softmax.int", [Ref("x"), value], {}, Ref)


# -- indexing, chunk and split plans, run on numpy ---------------------------------------------------


def run_on_numpy(array, steps):
    """What the ops of a plan do, in numpy."""
    for s in steps:
        if s.op == "select.int":
            dim, index = s.args
            array = np.take(array, index, axis=dim)
        elif s.op == "slice.Tensor":
            dim, start, end, step = s.args
            index = [slice(None)] * array.ndim
            index[dim] = slice(start, end, step)
            array = array[tuple(index)]
        elif s.op == "unsqueeze":
            array = np.expand_dims(array, s.args[0])
        elif s.op == "index.Tensor":
            array = array[tuple(slice(None) if i is None else np.asarray(i) for i in s.args[0])]
        else:
            assert s.op == "alias"
    return array


E = Ellipsis
BASIC = [0, -1, (1, 2), slice(1, 3), (slice(None, None, 2), 1), None, (None, 0, None), (E, 0),
         (E, None), (0, E, 1), (slice(1, None), E, slice(None, None, 3)), E, slice(None),
         (None, E, None), (1, None, E, None, 2), slice(-2, None), (slice(None, -1), -2),
         (slice(2, 100),), (slice(5, 1),), True, False, (0, True), (E, False), (slice(0, None),)]
TENSOR = [[0, 2], (slice(None), [1, 3]), ([0, 1], [2, 3]), (E, [0, 5]), (0, [1, 2]),
          [[0, 1], [2, 3]], np.array([True, False, True, False]), (E, [1, 0], slice(None)),
          (None, [3, 0]), ([0, 1], slice(None), [1, 2]), (slice(1, 3), E, [2]),
          (np.array([[True, False, True, False, True]] * 4), E), (slice(None), (1, 3)),
          (range(1, 3), 0)]


@pytest.mark.parametrize("index", BASIC + TENSOR,
                         ids=lambda i: " ".join(repr(i).split())[:40])
def test_index_plans_match_numpy(index):
    a = np.arange(120).reshape(4, 5, 6)
    asked = []

    def ndim():
        asked.append(True)
        return a.ndim

    def index_dims(item):
        item = np.asarray(item)
        return item.ndim if item.dtype == bool else 1

    steps = plan_index(index, ndim, index_dims)
    got = run_on_numpy(a, steps)
    np.testing.assert_array_equal(got, a[index])
    items = index if isinstance(index, tuple) else (index,)
    has_tensor = any(isinstance(i, (list, tuple, range, np.ndarray)) for i in items)
    assert not asked or (any(i is E for i in items) and has_tensor)  # needed only then
    assert (steps[-1].op == "index.Tensor") == has_tensor


def test_index_plans_by_hand():
    assert plan_index(0, lambda: 2) == [Step("select.int", (0, 0))]
    assert plan_index((E, None, 0), lambda: 2) == [Step("select.int", (-1, 0)),
                                                   Step("unsqueeze", (-1,))]
    assert plan_index(slice(None), lambda: 2) == [Step("alias", ())]
    assert plan_index((slice(1, None, 2),), lambda: 2) == [Step("slice.Tensor", (0, 1, None, 2))]


@pytest.mark.parametrize("index,message", [
    (slice(None, None, -1), "step must be greater than zero"), ((E, E), "single ellipsis"),
    ((slice(0, 2, 0),), "step must be greater than zero"), (1.5, "integer"), ("a", "integer"),
])
def test_bad_indexes(index, message):
    with pytest.raises(tessera.InvalidArgument, match=message):
        plan_index(index, lambda: 2)


@pytest.mark.parametrize("schema,count", [
    ("softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor", 1),
    (SCHEMAS["aten::max.dim"], 2), (SCHEMAS["aten::native_layer_norm"], 3),
    ("var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool "
     "keepdim=False) -> (Tensor, Tensor)", 2),
    (SCHEMAS["aten::split.Tensor"], None), ("unbind.int(Tensor(a -> *) self, int dim=0) -> "
                                            "Tensor(a)[]", None),
])
def test_output_count_reads_the_schemas_returns(schema, count):
    assert output_count(schema) == count


@pytest.mark.parametrize("size,chunks,pieces", [
    (5, 4, [(0, 2), (2, 4), (4, 5)]), (3, 4, [(0, 1), (1, 2), (2, 3)]), (0, 4, [(0, 0)] * 4),
    (6, 4, [(0, 2), (2, 4), (4, 6)]), (1, 4, [(0, 1)]), (8, 4, [(0, 2), (2, 4), (4, 6), (6, 8)]),
])
def test_chunk_ranges_are_torchs(size, chunks, pieces):
    assert chunk_ranges(size, chunks) == pieces


def test_split_ranges_are_torchs():
    assert split_ranges(5, 2) == [(0, 2), (2, 4), (4, 5)]
    assert split_ranges(0, 2) == [(0, 0)] and split_ranges(0, 0) == [(0, 0)]
    assert split_ranges(3, 7) == [(0, 3)]
    for bad in (lambda: split_ranges(3, 0), lambda: split_ranges(3, -1),
                lambda: chunk_ranges(3, 0)):
        with pytest.raises(tessera.InvalidArgument):
            bad()


# -- what the methods, operators and functions send ---------------------------------------------------

F = tessera.nn.functional
aten = tessera.ops.aten

CALLS = [  # (what, the call it sends)
    (lambda x, y, i: x + y, "aten::add.Tensor(x, y)"),
    (lambda x, y, i: x + 2, "aten::add.Tensor(x, 2)"),
    (lambda x, y, i: 2 + x, "aten::add.Tensor(x, 2)"),
    (lambda x, y, i: x.add(y, alpha=3), "aten::add.Tensor(x, y, alpha=3)"),
    (lambda x, y, i: x - 2.5, "aten::sub.Tensor(x, 2.5)"),
    (lambda x, y, i: 2 - x, "aten::rsub.Scalar(x, 2)"),
    (lambda x, y, i: x * x, "aten::mul.Tensor(x, x)"),
    (lambda x, y, i: np.float32(2) * x, "aten::mul.Tensor(x, 2.0)"),
    (lambda x, y, i: x / y, "aten::div.Tensor(x, y)"),
    (lambda x, y, i: x.div(y, rounding_mode="floor"),
     "aten::div.Tensor_mode(x, y, rounding_mode='floor')"),
    (lambda x, y, i: x // 2, "aten::floor_divide(x, 2)"),
    (lambda x, y, i: 7 // x, "aten::floor_divide(7, x)"),
    (lambda x, y, i: x % y, "aten::remainder.Tensor(x, y)"),
    (lambda x, y, i: x ** 2, "aten::pow.Tensor_Scalar(x, 2)"),
    (lambda x, y, i: x ** y, "aten::pow.Tensor_Tensor(x, y)"),
    (lambda x, y, i: 2 ** x, "aten::pow.Tensor_Tensor(2, x)"),
    (lambda x, y, i: x @ y, "aten::matmul(x, y)"),
    (lambda x, y, i: -x, "aten::neg(x)"),
    (lambda x, y, i: abs(x), "aten::abs(x)"),
    (lambda x, y, i: ~i, "aten::bitwise_not(i)"),
    (lambda x, y, i: i & 3, "aten::bitwise_and.Tensor(i, 3)"),
    (lambda x, y, i: i | i, "aten::bitwise_or.Tensor(i, i)"),
    (lambda x, y, i: True ^ i, "aten::bitwise_xor.Tensor(i, True)"),
    (lambda x, y, i: x == 2, "aten::eq.Scalar(x, 2)"),
    (lambda x, y, i: x != y, "aten::ne.Tensor(x, y)"),
    (lambda x, y, i: x < y, "aten::lt.Tensor(x, y)"),
    (lambda x, y, i: 2 < x, "aten::gt.Scalar(x, 2)"),
    (lambda x, y, i: x >= 0.5, "aten::ge.Scalar(x, 0.5)"),
    (lambda x, y, i: x.le(y), "aten::le.Tensor(x, y)"),
    (lambda x, y, i: x.exp(), "aten::exp(x)"),
    (lambda x, y, i: tessera.sigmoid(x), "aten::sigmoid(x)"),
    (lambda x, y, i: x.round(), "aten::round(x)"),
    (lambda x, y, i: x.square(), "aten::pow.Tensor_Scalar(x, 2)"),
    (lambda x, y, i: x.gelu(), "aten::gelu(x)"),
    (lambda x, y, i: F.gelu(x, approximate="tanh"), "aten::gelu(x, approximate='tanh')"),
    (lambda x, y, i: F.silu(x), "aten::silu(x)"),
    (lambda x, y, i: F.relu(x), "aten::relu(x)"),
    (lambda x, y, i: x.maximum(y), "aten::maximum(x, y)"),
    (lambda x, y, i: tessera.minimum(x, y), "aten::minimum(x, y)"),
    (lambda x, y, i: x.logical_and(y), "aten::logical_and(x, y)"),
    (lambda x, y, i: x.clamp(min=0), "aten::clamp(x, 0, None)"),
    (lambda x, y, i: x.clamp(-1, 1.5), "aten::clamp(x, -1, 1.5)"),
    (lambda x, y, i: x.clamp_min(0.5), "aten::clamp_min(x, 0.5)"),
    (lambda x, y, i: x.masked_fill(y, 0.5), "aten::masked_fill.Scalar(x, y, 0.5)"),
    (lambda x, y, i: tessera.where(y, x, 0.0), "aten::where.self(y, x, 0.0)"),
    (lambda x, y, i: x.where(y, 1), "aten::where.self(y, x, 1)"),
    (lambda x, y, i: x.sum(), "aten::sum(x)"),
    (lambda x, y, i: x.sum(1, True, dtype=tessera.float64),
     "aten::sum.dim_IntList(x, [1], True, dtype=float64)"),
    (lambda x, y, i: tessera.sum(x, dim=(0, 1)), "aten::sum.dim_IntList(x, [0, 1], False)"),
    (lambda x, y, i: x.sum(keepdim=True), "aten::sum.dim_IntList(x, None, True)"),
    (lambda x, y, i: x.mean(-1), "aten::mean.dim(x, [-1], False)"),
    (lambda x, y, i: x.mean(dtype=tessera.float64), "aten::mean(x, dtype=float64)"),
    (lambda x, y, i: x.amax(), "aten::amax(x, [], False)"),
    (lambda x, y, i: x.max(), "aten::amax(x, [], False)"),
    (lambda x, y, i: x.max((0, 1)), "aten::amax(x, [0, 1], False)"),
    (lambda x, y, i: x.max(y), "aten::maximum(x, y)"),
    (lambda x, y, i: x.min(), "aten::amin(x, [], False)"),
    (lambda x, y, i: x.prod(), "aten::prod(x)"),
    (lambda x, y, i: x.prod(1), "aten::prod.dim_int(x, 1, False)"),
    (lambda x, y, i: x.any(), "aten::any(x)"),
    (lambda x, y, i: x.all(0, True), "aten::all.dim(x, 0, True)"),
    (lambda x, y, i: x.argmax(), "aten::argmax(x, None, False)"),
    (lambda x, y, i: x.argmin(1, keepdim=True), "aten::argmin(x, 1, True)"),
    (lambda x, y, i: x.var(), "aten::var.correction(x, None, correction=1, keepdim=False)"),
    (lambda x, y, i: x.var(0, correction=0), "aten::var.correction(x, [0], correction=0, keepdim=False)"),
    (lambda x, y, i: x.var(False), "aten::var.correction(x, None, correction=0, keepdim=False)"),
    (lambda x, y, i: x.std(1, True, True), "aten::std.correction(x, [1], correction=1, keepdim=True)"),
    (lambda x, y, i: x.std(unbiased=False), "aten::std.correction(x, None, correction=0, keepdim=False)"),
    (lambda x, y, i: x.logsumexp(1), "aten::logsumexp(x, [1], False)"),
    (lambda x, y, i: x.cumsum(0), "aten::cumsum(x, 0)"),
    (lambda x, y, i: x.softmax(-1), "aten::softmax.int(x, -1)"),
    (lambda x, y, i: F.softmax(x, dim=1, dtype=tessera.float64), "aten::softmax.int(x, 1, float64)"),
    (lambda x, y, i: tessera.log_softmax(x, 0), "aten::log_softmax.int(x, 0)"),
    (lambda x, y, i: x.mm(y), "aten::mm(x, y)"),
    (lambda x, y, i: tessera.bmm(x, y), "aten::bmm(x, y)"),
    (lambda x, y, i: tessera.addmm(x, x, y, beta=0.5), "aten::addmm(x, x, y, beta=0.5)"),
    (lambda x, y, i: F.linear(x, y), "aten::linear(x, y, None)"),
    (lambda x, y, i: x.view(4, -1), "aten::view(x, [4, -1])"),
    (lambda x, y, i: x.view((4, -1)), "aten::view(x, [4, -1])"),
    (lambda x, y, i: x.reshape([24]), "aten::reshape(x, [24])"),
    (lambda x, y, i: x.flatten(), "aten::flatten.using_ints(x, 0, -1)"),
    (lambda x, y, i: x.unflatten(1, (2, 3)), "aten::unflatten.int(x, 1, [2, 3])"),
    (lambda x, y, i: x.unsqueeze(0), "aten::unsqueeze(x, 0)"),
    (lambda x, y, i: x.squeeze(), "aten::squeeze(x)"),
    (lambda x, y, i: x.squeeze(0), "aten::squeeze.dim(x, 0)"),
    (lambda x, y, i: x.permute(1, 0), "aten::permute(x, [1, 0])"),
    (lambda x, y, i: tessera.permute(x, (1, 0)), "aten::permute(x, [1, 0])"),
    (lambda x, y, i: x.transpose(0, 1), "aten::transpose.int(x, 0, 1)"),
    (lambda x, y, i: x.t(), "aten::t(x)"),
    (lambda x, y, i: x.expand(2, 4, 6), "aten::expand(x, [2, 4, 6])"),
    (lambda x, y, i: x.contiguous(), "aten::contiguous(x)"),
    (lambda x, y, i: x.clone(), "aten::clone(x)"),
    (lambda x, y, i: x.detach(), "aten::detach(x)"),
    (lambda x, y, i: x.to(tessera.float64), "aten::_to_copy(x, dtype=float64)"),
    (lambda x, y, i: x.to("int32"), "aten::_to_copy(x, dtype=int32)"),
    (lambda x, y, i: x.to(np.float16), "aten::_to_copy(x, dtype=float16)"),
    (lambda x, y, i: x.bool(), "aten::_to_copy(x, dtype=bool)"),
    (lambda x, y, i: x.narrow(1, 2, 3), "aten::narrow(x, 1, 2, 3)"),
    (lambda x, y, i: x.index_select(0, i), "aten::index_select(x, 0, i)"),
    (lambda x, y, i: x.tril(), "aten::tril(x, 0)"),
    (lambda x, y, i: tessera.triu(x, 1), "aten::triu(x, 1)"),
    (lambda x, y, i: tessera.cat([x, y, x], 1), "aten::cat([x, y, x], 1)"),
    (lambda x, y, i: tessera.stack((x, y)), "aten::stack([x, y], 0)"),
    (lambda x, y, i: tessera.zeros_like(x), "aten::zeros_like(x)"),
    (lambda x, y, i: tessera.full_like(x, 3, dtype=bool), "aten::full_like(x, 3, dtype=bool)"),
    (lambda x, y, i: x[0], "aten::select.int(x, 0, 0)"),
    (lambda x, y, i: x[1:3], "aten::slice.Tensor(x, 0, 1, 3, 1)"),
    (lambda x, y, i: x[:, None], "aten::unsqueeze(x, 1)"),
    (lambda x, y, i: x[...], "aten::alias(x)"),
    (lambda x, y, i: x[i], "aten::index.Tensor(x, [i])"),
    (lambda x, y, i: x[:, i], "aten::index.Tensor(x, [None, i])"),
    (lambda x, y, i: aten.add.Tensor(x, y, alpha=2), "aten::add.Tensor(x, y, alpha=2)"),
    (lambda x, y, i: aten.sum(x), "aten::sum(x)"),
    (lambda x, y, i: aten.sum.default(x, dtype=tessera.int64), "aten::sum(x, dtype=int64)"),
    (lambda x, y, i: aten._softmax(x, 1, False), "aten::_softmax(x, 1, False)"),
    (lambda x, y, i: aten.tanh_backward(y, x), "aten::tanh_backward(y, x)"),
    (lambda x, y, i: tessera.ops.call("softmax.int", x, dim=-1), "aten::softmax.int(x, dim=-1)"),
]


@pytest.mark.parametrize("what,expected", CALLS, ids=[c[1] for c in CALLS])
def test_each_method_sends_its_op_without_waiting(fake, what, expected):
    session, make = fake
    x, y, i = make("x"), make("y"), make("i", dtype=tessera.int64)
    out = what(x, y, i)
    assert sent(session)[-1] == expected
    assert isinstance(out, DTensor) and out._made is not None  # not waited for
    assert x._made is not None and y._made is not None  # nothing read the inputs' metadata


MULTI = [  # (what, the call it sends, its named tuple's type or None for a plain tuple, outputs)
    (lambda x: x.max(1), "aten::max.dim(x, 1, False)", tessera.return_types.max, 2),
    (lambda x: x.max(dim=-1, keepdim=True), "aten::max.dim(x, -1, True)",
     tessera.return_types.max, 2),
    (lambda x: tessera.min(x, 0), "aten::min.dim(x, 0, False)", tessera.return_types.min, 2),
    (lambda x: x.sort(), "aten::sort(x, -1, False)", tessera.return_types.sort, 2),
    (lambda x: tessera.sort(x, 0, True), "aten::sort(x, 0, True)", tessera.return_types.sort, 2),
    (lambda x: x.sort(stable=True, descending=True),
     "aten::sort.stable(x, stable=True, dim=-1, descending=True)", tessera.return_types.sort, 2),
    (lambda x: x.topk(2), "aten::topk(x, 2, -1, True, True)", tessera.return_types.topk, 2),
    (lambda x: tessera.topk(x, 1, 0, largest=False), "aten::topk(x, 1, 0, False, True)",
     tessera.return_types.topk, 2),
    (lambda x: tessera.var_mean(x), "aten::var_mean.correction(x, None, correction=1, keepdim=False)",
     None, 2),
    (lambda x: tessera.var_mean(x, 1, correction=0, keepdim=True),
     "aten::var_mean.correction(x, [1], correction=0, keepdim=True)", None, 2),
    (lambda x: tessera.std_mean(x, (0, 1), False),
     "aten::std_mean.correction(x, [0, 1], correction=0, keepdim=False)", None, 2),
    (lambda x: aten.max.dim(x, 1), "aten::max.dim(x, 1)", None, 2),
    (lambda x: aten.native_layer_norm(x, [6], None, None, 1e-5),
     "aten::native_layer_norm(x, [6], None, None, 1e-05)", None, 3),
    (lambda x: tessera.ops.call_outputs("max.dim", x, 0), "aten::max.dim(x, 0)", None, 2),
]


@pytest.mark.parametrize("what,expected,kind,count", MULTI, ids=[m[1] for m in MULTI])
def test_an_op_of_several_outputs_is_one_call_naming_each(fake, what, expected, kind, count):
    session, make = fake
    x = make("x")
    out = what(x)
    assert sent(session) == [expected]
    assert type(out) is (kind or tuple) and len(out) == count
    output, outputs = session.transport.outputs[-1]
    assert output == "" and outputs == [t.name for t in out]  # the client names every output
    assert all(t._made is out[0]._made and t._made is not None for t in out)  # one answer
    assert [t.shape for t in out] == [(2, 3)] * count  # each from its own of reply.outputs
    if kind is not None:
        assert out.values is out[0] and out.indices is out[1]


def test_argsort_is_sorts_indices(fake):
    session, make = fake
    x = make("x")
    indices = x.argsort(0, descending=True)
    assert sent(session) == ["aten::sort(x, 0, True)"]
    assert indices.name == session.transport.outputs[-1][1][1]


def test_a_call_of_one_output_through_the_registry_is_one_dtensor(fake):
    session, make = fake
    x = make("x")
    out = aten.softmax.int(x, -1)
    assert isinstance(out, DTensor) and session.transport.outputs[-1] == (out.name, [])
    assert isinstance(aten.no_such_op(x), DTensor)  # not listed: one output, refused on touch


def test_pieces_are_one_call_counted_from_the_size(fake):
    session, make = fake
    x = make("x", (5, 3))
    assert len(x.chunk(4)) == 3 and len(x.split(2, 0)) == 3 and len(x.split([1, 0, 4])) == 3
    assert len(x.unbind(1)) == 3 and len(list(x)) == 5 and len(tessera.chunk(x, 2, 1)) == 2
    assert sent(session) == ["aten::chunk(x, 4, 0)", "aten::split.Tensor(x, 2, 0)",
                             "aten::split_with_sizes(x, [1, 0, 4], 0)", "aten::unbind.int(x, 1)",
                             "aten::unbind.int(x, 0)", "aten::chunk(x, 2, 1)"]
    assert [len(o) for _, o in session.transport.outputs] == [3, 3, 3, 3, 5, 2]
    empty = make("empty", (0, 3))
    assert len(empty.chunk(3)) == 3 and len(empty.split(2)) == 1  # torch's pieces of empty dims
    assert empty.unbind() == () and len(sent(session)) == 8  # unbind of an empty dim: no call
    one = make("one", (1, 3))
    (piece,) = one.split(4)  # one piece: named by `output`, as an op of one output
    assert session.transport.outputs[-1] == (piece.name, [])
    x3 = make("x3", (2, 3, 4))
    x3.T
    assert sent(session)[-1] == "aten::permute(x3, [2, 1, 0])"
    x2 = make("x2", (2, 3))
    x2.T
    assert sent(session)[-1] == "aten::t(x2)"


def test_to_its_own_known_dtype_is_the_tensor(fake):
    session, make = fake
    x = make("x")
    x.dtype  # known now
    assert x.to(tessera.float32) is x and x.float() is x
    assert x.to(tessera.float32, copy=True) is not x
    with pytest.raises(tessera.Unimplemented, match="cuda"):
        x.to("cuda")


def test_a_list_index_is_distributed_replicated(fake, monkeypatch):
    session, make = fake
    x = make("x")
    made = []

    def replicated(self, array):
        made.append(array)
        return make(f"index{len(made)}", array.shape, tessera.int64)

    monkeypatch.setattr(DTensor, "_replicated", replicated)
    x[[0, 2], 1:]
    assert made[0].dtype == np.int64 and made[0].tolist() == [0, 2]
    assert sent(session) == ["aten::slice.Tensor(x, 1, 1, None, 1)",
                             "aten::index.Tensor(out1, [index1])"]
    with pytest.raises(tessera.InvalidArgument, match="index"):
        x[[0.5]]


def test_operators_refuse_other_types(fake):
    session, make = fake
    x = make("x")
    assert (x == None) is False and (x != "a") is True  # noqa: E711 - identity, as Python's
    for bad in (lambda: x + "a", lambda: x * [1], lambda: x < object()):
        with pytest.raises(TypeError):
            bad()
    with pytest.raises(tessera.InvalidArgument, match="distribute"):
        tessera.add(x, np.ones(3))
    with pytest.raises(tessera.InvalidArgument, match="takes a DTensor"):
        tessera.exp(np.ones(3))
    with pytest.raises(tessera.Unimplemented, match="assigned in place"):
        x[0] = 1
    with pytest.raises(tessera.Unimplemented, match="truth value"):
        bool(x == x)
    assert len({x, x}) == 1  # a handle hashes by identity
    assert sent(session) == ["aten::eq.Tensor(x, x)"]


def test_torch_names_without_an_op_raise_unsupported(fake):
    session, make = fake
    x = make("x")
    for owner, where in ((tessera, "tessera.kthvalue"), (x, "DTensor.kthvalue")):
        with pytest.raises(tessera.UnsupportedOp, match=f"'{where}' is not an op") as e:
            owner.kthvalue
        assert "tessera.ops.aten" in e.value.message
        assert not hasattr(owner, "einsum")


def test_the_aten_namespace():
    assert aten.softmax.int.name == "aten::softmax.int" and aten.softmax.name == "aten::softmax"
    assert aten.softmax.default.name == "aten::softmax" and repr(aten.add.Tensor) == "tessera.ops.aten.add.Tensor"
    with pytest.raises(AttributeError):
        aten.__wrapped__
    with pytest.raises(AttributeError):
        aten.add.__wrapped__
    import tessera.nn.functional as functional

    assert functional is tessera.nn.functional and functional.relu is tessera.nn_functional.relu


# -- __torch_function__ on a stand-in torch ----------------------------------------------------


@pytest.fixture
def stand_in_torch(monkeypatch):
    """A module named torch with functions, a Tensor class and nn.functional, enough for the
    mapping (real torch: test_client_ops.py)."""
    torch = types.ModuleType("torch")
    nn = types.ModuleType("torch.nn")
    functional = types.ModuleType("torch.nn.functional")

    def function(name):
        def f(*args, **kwargs):
            raise AssertionError("torch's own function ran")

        f.__name__ = name
        return f

    for name in ("exp", "softmax", "cat", "where", "sort", "kthvalue", "add"):
        setattr(torch, name, function(name))
    for name in ("relu", "gelu", "dropout", "softplus"):
        setattr(functional, name, function(name))
    torch.Tensor = type("Tensor", (), {"add": function("add"), "__add__": function("__add__")})
    torch.nn, nn.functional = nn, functional
    for name, module in (("torch", torch), ("torch.nn", nn), ("torch.nn.functional", functional)):
        monkeypatch.setitem(sys.modules, name, module)
    return torch


def test_torch_functions_map_to_their_ops(fake, stand_in_torch):
    session, make = fake
    torch, x, y = stand_in_torch, make("x"), make("y")
    tf = DTensor.__torch_function__
    tf(torch.exp, (DTensor,), (x,))
    tf(torch.softmax, (DTensor,), (x, -1))
    tf(torch.cat, (DTensor,), ([x, y],), {"dim": 1})
    tf(torch.where, (DTensor,), (y, x, 0.0))
    tf(torch.nn.functional.relu, (DTensor,), (x,), {"inplace": False})
    tf(torch.nn.functional.gelu, (DTensor,), (x,), {"approximate": "tanh"})
    tf(torch.Tensor.add, (DTensor,), (x, y), {"alpha": 2})
    tf(torch.Tensor.__add__, (DTensor,), (x, 1))
    assert sent(session) == ["aten::exp(x)", "aten::softmax.int(x, -1)", "aten::cat([x, y], 1)",
                             "aten::where.self(y, x, 0.0)", "aten::relu(x)",
                             "aten::gelu(x, approximate='tanh')", "aten::add.Tensor(x, y, alpha=2)",
                             "aten::add.Tensor(x, 1)"]
    other = type("OtherTensorLike", (), {})
    assert tf(torch.exp, (DTensor, other), (x,)) is NotImplemented
    for func, name in ((torch.kthvalue, "torch.kthvalue"), (torch.nn.functional.softplus,
                                                            "torch.nn.functional.softplus")):
        with pytest.raises(tessera.UnsupportedOp, match=f"'{name}'"):
            tf(func, (DTensor,), (x,))
    with pytest.raises(tessera.InvalidArgument, match="distribute the torch tensor"):
        tf(torch.Tensor.__add__, (DTensor,), (object(), x))
