"""The Python client's op stream (tessera.op_stream) on `tessera up --workers 4`: ops on the stream
give the metadata and values of one unary RunOp each (checked against numpy), a long chain of
dropped handles leaves only the live tensors, and what the coordinator refuses shows on the output
with RunOp's exception class. Shape errors on the stream raise on the output's first touch (a
metadata access, a read, or an op on it once the refusal is known), never later than that; with
op_stream=False they raise at the call. The stream's own order checks run against a fake call.

Needs Debian's python3-grpcio, python3-numpy and python3-pytest, and the build tree's package
(cmake --build build --target tessera_python tessera); ctest runs it as python_client."""

import threading

import pytest

np = pytest.importorskip("numpy")
grpc = pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import Partial, Replicate, Shard  # noqa: E402
from tessera.op_stream import OpStream  # noqa: E402
from tessera.v1 import dtensor_pb2  # noqa: E402

TOL = dict(rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def unary_session(tessera_address):
    """A session that makes one unary call per op."""
    with tessera.Session(tessera_address, op_stream=False) as s:
        yield s


def rand(shape, seed):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype(np.float32)


# (name, number of inputs, the op, numpy's)
OPS = [
    ("add", 2, lambda a, b: a + b, np.add),
    ("mul", 2, lambda a, b: tessera.mul(a, b), np.multiply),
    ("mm", 2, lambda a, b: tessera.mm(a, b.T), lambda a, b: a @ b.T),
    ("relu", 1, tessera.relu, lambda a: np.maximum(a, 0)),
    ("sum0", 1, lambda a: tessera.sum(a, 0), lambda a: a.astype(np.float64).sum(0)),
    ("transpose", 1, lambda a: a.transpose(0, 1), lambda a: a.T),
]
PLACEMENTS = [[Shard(0)], [Shard(1)], [Replicate()], [Partial("sum")]]


def metadata(t):
    """What a handle says about its tensor, without its name (the sessions name outputs
    differently)."""
    return (t.shape, t.dtype, t.placements, t.local_shapes, t.local_offsets, t.nbytes,
            tuple((r.from_placements, r.to_placements, str(r.plan)) for r in t.redistributions))


@pytest.mark.parametrize("placements", PLACEMENTS, ids=lambda p: p[0].to_json())
@pytest.mark.parametrize("name,arity,op,ref", OPS, ids=[o[0] for o in OPS])
def test_stream_matches_unary(session, unary_session, placements, name, arity, op, ref):
    arrays = [rand((9, 6), 40 + i) for i in range(arity)]
    got = {}
    for s in (session, unary_session):
        mesh = tessera.get_device_mesh("world", session=s)
        inputs = [tessera.distribute_tensor(a, mesh, placements if i == 0 else [Shard(0)])
                  for i, a in enumerate(arrays)]
        out = op(*inputs)
        assert (out._made is not None) == s.op_stream  # the stream's handle is not answered yet
        got[s.op_stream] = (metadata(out), out.full_tensor())
    assert got[True][0] == got[False][0]
    np.testing.assert_allclose(got[True][1], ref(*arrays), **TOL)
    np.testing.assert_allclose(got[False][1], ref(*arrays), **TOL)


def test_a_chain_of_dropped_handles_leaves_only_live_tensors(tessera_address):
    with tessera.Session(tessera_address) as s:
        mesh = tessera.get_device_mesh("world", session=s)
        a_np, b_np = rand((4, 6), 50), rand((4, 6), 51)
        a = tessera.distribute_tensor(a_np, mesh, [Shard(0)])
        b = tessera.distribute_tensor(b_np, mesh, [Shard(1)])
        x = a
        for _ in range(1000):
            x = x + b  # every intermediate handle is dropped at once, its free queued
        np.testing.assert_allclose(x.full_tensor(), a_np + 1000 * b_np, rtol=1e-4, atol=1e-3)
        s.transport.drain_frees()
        mine = {t.name for t in s.list_tensors() if t.owner == s.client_id}
        assert mine == {a.name, b.name, x.name}


def test_an_input_freed_through_another_handle_shows_on_the_output(session, unary_session):
    for s in (session, unary_session):
        mesh = tessera.get_device_mesh("world", session=s)
        a = tessera.distribute_tensor(rand((4, 4), 52), mesh, [Shard(0)])
        tessera.get_tensor(a.name, session=s).free()  # the handle `a` still names it
        if s.op_stream:
            y = a + a  # no wait: the coordinator's refusal comes later
            with pytest.raises(tessera.NotFound) as e:
                y.shape
            assert f"the op that makes '{y.name}' failed" in e.value.message
            with pytest.raises(tessera.NotFound):  # and an op on it, now that it is known
                y + y
        else:
            with pytest.raises(tessera.NotFound) as e:
                a + a
        assert a.name in e.value.message
        a.detach_handle()


def test_a_taken_output_name_shows_on_the_output(session, meshes, monkeypatch):
    mesh = meshes["world"]
    taken = tessera.zeros(4, device_mesh=mesh, name="py-op-stream-taken")
    x = tessera.ones(4, device_mesh=mesh)
    monkeypatch.setattr(session, "next_tensor_name", lambda: "py-op-stream-taken")
    y = x + x
    monkeypatch.undo()
    with pytest.raises(tessera.AlreadyExists) as e:
        y.full_tensor()
    assert "py-op-stream-taken" in e.value.message
    del y  # the failed output frees nothing: the name is another tensor's
    session.transport.drain_frees()
    assert taken.full_tensor().tolist() == [0.0] * 4
    taken.free()


@pytest.mark.parametrize("stream", [True, False], ids=["stream", "unary"])
def test_shape_errors_raise_at_the_call_or_on_first_touch(session, unary_session, stream):
    s = session if stream else unary_session
    mesh = tessera.get_device_mesh("world", session=s)
    a = tessera.zeros(3, 4, device_mesh=mesh)
    b = tessera.zeros(5, 6, device_mesh=mesh)
    if not stream:
        with pytest.raises(tessera.InvalidArgument, match="cannot be multiplied"):
            tessera.mm(a, b)
        return
    y = tessera.mm(a, b)  # returns at once
    with pytest.raises(tessera.InvalidArgument, match="cannot be multiplied") as e:
        z = y + y  # raises here if y's refusal is known already, else on z's first touch
        z.dtype
    assert y.name in e.value.message
    with pytest.raises(tessera.InvalidArgument, match="cannot be multiplied"):
        y.shape
    with pytest.raises(tessera.InvalidArgument, match="cannot be multiplied"):
        y.relu()  # known now: raises at the call
    for touch in (lambda: y.full_tensor(), lambda: y.wait(), lambda: y.free()):
        with pytest.raises(tessera.InvalidArgument, match="cannot be multiplied"):
            touch()


# -- the stream against a fake call ---------------------------------------------------------------


class FakeCall:
    """An OpStream call answered by `answer(calls) -> [(id, code)]` per message, or broken after
    `break_after` messages."""

    def __init__(self, requests, answer, break_after=None):
        self.requests, self.answer, self.break_after = requests, answer, break_after
        self.cancelled = threading.Event()

    def cancel(self):
        self.cancelled.set()

    def __iter__(self):
        for n, message in enumerate(self.requests):
            if self.break_after is not None and n >= self.break_after:
                raise RuntimeError("connection reset")
            yield dtensor_pb2.StreamResults(results=[
                dtensor_pb2.StreamResult(id=i, code=c) for i, c in self.answer(message.calls)])
            if self.cancelled.is_set():
                return


def fake_stream(answer, break_after=None):
    calls = []

    def open_call(requests, timeout):
        calls.append(FakeCall(requests, answer, break_after))
        return calls[-1]

    return OpStream(open_call, lambda c: dtensor_pb2.StreamCalls(calls=c)), calls


def free(name):
    return dtensor_pb2.StreamCall(free={"name": name})


def test_fake_stream_answers_in_order_and_fails_alone():
    stream, _ = fake_stream(lambda calls: [(c.id, 5 if c.free.name == "bad" else 0) for c in calls])
    outcomes = [stream.send(free(n), n) for n in ("a", "bad", "c")]
    assert stream.flush(5)
    assert [o.code for o in outcomes] == [0, 5, 0]
    assert isinstance(outcomes[1].error(), tessera.NotFound)
    stream.close()


def test_fake_stream_out_of_order_ids_fail_the_calls():
    stream, _ = fake_stream(lambda calls: [(c.id + 1, 0) for c in calls])
    o = stream.send(free("a"), "a")
    assert o.wait(5) and isinstance(o.error(), tessera.DataLoss)
    stream.close()


def test_fake_stream_broken_fails_unanswered_and_reopens():
    stream, calls = fake_stream(lambda calls: [(c.id, 0) for c in calls], break_after=0)
    o = stream.send(free("a"), "a")
    assert o.wait(5) and isinstance(o.error(), tessera.Unavailable)
    assert "connection reset" in o.error().message
    calls_before = len(calls)
    o2 = stream.send(free("b"), "b")
    o2.wait(5)
    assert len(calls) == calls_before + 1  # a new call was opened
    stream.close()


def test_fake_stream_bounds_unanswered_calls(monkeypatch):
    release = threading.Event()

    def answer(calls):
        release.wait(10)
        return [(c.id, 0) for c in calls]

    stream, _ = fake_stream(answer)
    monkeypatch.setattr(OpStream, "MAX_UNANSWERED", 3)
    for n in range(3):
        stream.send(free(str(n)), str(n))
    blocked = threading.Thread(target=lambda: stream.send(free("x"), "x"))
    blocked.start()
    blocked.join(0.3)
    assert blocked.is_alive()  # waits for room
    release.set()
    blocked.join(5)
    assert not blocked.is_alive()
    assert stream.flush(5)
    stream.close()
