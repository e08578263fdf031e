"""Every error class of the Python client raised with the service's code and message (or the
client's, for what it refuses before sending), each a subclass of the built-in exception a
caller would catch; the cluster keeps working after each."""

import pickle

import pytest

np = pytest.importorskip("numpy")
grpc = pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import Replicate, Shard  # noqa: E402


def expect(error_class, builtin, code, *named):
    """A context manager: the block raises `error_class` (a `builtin`) with `code`, and its
    message names each of `named`."""
    class Check:
        def __enter__(self):
            self.raises = pytest.raises(error_class)
            self.info = self.raises.__enter__()
            return self.info

        def __exit__(self, *exc):
            handled = self.raises.__exit__(*exc)
            e = self.info.value
            assert isinstance(e, tessera.TesseraError) and isinstance(e, builtin)
            assert e.code == code
            for n in named:
                assert n in e.message, f"{n!r} not in {e.message!r}"
            assert str(e).startswith(code.name + ": ")
            return handled

    return Check()


def test_invalid_argument(meshes):
    mesh = meshes["grid"]
    with expect(tessera.InvalidArgument, ValueError, grpc.StatusCode.INVALID_ARGUMENT, "S(2)"):
        tessera.distribute_tensor(np.zeros((4, 4), np.float32), mesh, [Shard(2), Replicate()])
    with expect(tessera.InvalidArgument, ValueError, grpc.StatusCode.INVALID_ARGUMENT, "mm"):
        # On the op stream the refusal raises on the output's first touch (test_client_op_stream).
        tessera.mm(tessera.zeros(3, 4, device_mesh=mesh), tessera.zeros(5, 6, device_mesh=mesh)).shape
    with expect(tessera.InvalidArgument, ValueError, grpc.StatusCode.INVALID_ARGUMENT, "1 placements"):
        tessera.zeros(2, 2, device_mesh=mesh, placements=[Shard(0)])  # refused by the client
    with expect(tessera.InvalidArgument, ValueError, grpc.StatusCode.INVALID_ARGUMENT, "complex"):
        tessera.distribute_tensor(np.zeros(3, np.complex64), mesh)


def test_not_found(session, meshes):
    with expect(tessera.NotFound, KeyError, grpc.StatusCode.NOT_FOUND, "'no-such-tensor'"):
        tessera.get_tensor("no-such-tensor")
    with expect(tessera.NotFound, KeyError, grpc.StatusCode.NOT_FOUND, "'no-such-mesh'"):
        tessera.get_device_mesh("no-such-mesh")
    with expect(tessera.NotFound, KeyError, grpc.StatusCode.NOT_FOUND, "'no-such-module'"):
        tessera.get_module("no-such-module")


def test_already_exists(meshes):
    t = tessera.zeros(2, device_mesh=meshes["grid"], name="py-dup")
    with expect(tessera.AlreadyExists, Exception, grpc.StatusCode.ALREADY_EXISTS, "'py-dup'"):
        tessera.zeros(2, device_mesh=meshes["grid"], name="py-dup")
    t.free()


def test_permission_denied(tessera_address, meshes):
    t = tessera.zeros(2, device_mesh=meshes["grid"])
    with tessera.Session(tessera_address) as other:
        with expect(tessera.PermissionDenied, PermissionError, grpc.StatusCode.PERMISSION_DENIED,
                    t.name):
            tessera.get_tensor(t.name, session=other).free()
    assert t.full_tensor().tolist() == [0.0, 0.0]


def test_failed_precondition(meshes):
    mesh = meshes["grid"]
    x = tessera.distributed.tensor([np.ones((2, 3), np.float32), np.ones((3, 3), np.float32),
                                    np.ones((2, 3), np.float32), np.ones((2, 3), np.float32)],
                                   mesh)
    with expect(tessera.FailedPrecondition, RuntimeError, grpc.StatusCode.FAILED_PRECONDITION,
                "shape"):
        tessera.distributed.all_reduce(x, group=mesh["tp"])


def test_resource_exhausted(meshes):
    with expect(tessera.ResourceExhausted, Exception, grpc.StatusCode.RESOURCE_EXHAUSTED, "worker"):
        tessera.zeros(1 << 20, 1 << 14, device_mesh=meshes["grid"], dtype="float64")


def test_unavailable():
    with expect(tessera.Unavailable, ConnectionError, grpc.StatusCode.UNAVAILABLE, "127.0.0.1:1"):
        tessera.Session("127.0.0.1:1", connect_timeout=0.5)


def test_deadline_exceeded(meshes):
    """Waiting 5 ms for a chain of [768, 768] matmuls (several GFLOP on the workers)."""
    w = tessera.randn(768, 768, device_mesh=meshes["grid"], seed=1)
    t = w
    for _ in range(6):
        t = t @ w
    with expect(tessera.DeadlineExceeded, TimeoutError, grpc.StatusCode.DEADLINE_EXCEEDED) as e:
        t.wait(timeout=0.005)
    # The coordinator's message names the tensor; gRPC's own, when the deadline passes first,
    # says so.
    assert f"tensor '{t.name}' is still being written" in e.value.message or \
        e.value.message == "Deadline Exceeded"
    assert t.wait().state == "ready"


def test_unimplemented(meshes):
    t = tessera.zeros(2, 2, device_mesh=meshes["grid"])
    with expect(tessera.Unimplemented, NotImplementedError, grpc.StatusCode.UNIMPLEMENTED,
                "assigned in place"):
        t[0] = 1
    with expect(tessera.Unimplemented, NotImplementedError, grpc.StatusCode.UNIMPLEMENTED, "cuda"):
        t.to("cuda")
    # An op the registry does not have: the service's refusal, on the output's first touch.
    with expect(tessera.Unimplemented, NotImplementedError, grpc.StatusCode.UNIMPLEMENTED,
                "no_such_op"):
        tessera.ops.aten.no_such_op(t).shape


def test_failed_precondition_without_a_session(monkeypatch):
    monkeypatch.delenv("TESSERA_COORDINATOR", raising=False)
    with expect(tessera.FailedPrecondition, RuntimeError, grpc.StatusCode.FAILED_PRECONDITION,
                "address"):
        tessera.connect()


@pytest.mark.parametrize("code", list(grpc.StatusCode)[1:])
def test_every_code_has_its_class(code):
    e = tessera.errors.error_for(code.value[0], "a message")
    assert e.code == code and e.message == "a message"
    assert type(e) is not tessera.TesseraError or code == grpc.StatusCode.UNKNOWN
    back = pickle.loads(pickle.dumps(e))
    assert type(back) is type(e) and back.code == code and back.message == "a message"


@pytest.mark.parametrize("name", ["median", "einsum", "kthvalue", "mode"])
def test_torch_names_without_an_op_say_so(meshes, name):
    t = tessera.zeros(2, 2, device_mesh=meshes["grid"])
    for owner, where in ((tessera, f"tessera.{name}"), (t, f"DTensor.{name}")):
        with expect(tessera.UnsupportedOp, NotImplementedError, grpc.StatusCode.UNIMPLEMENTED,
                    f"'{where}'", "tessera.ops.aten"):
            getattr(owner, name)
        assert not hasattr(owner, name)
    with pytest.raises(AttributeError) as error:
        tessera.no_such_name
    assert not isinstance(error.value, tessera.TesseraError)
