"""The direct path from the Python client on `tessera up --workers 4` (distribute_tensor and
from_local up, full_tensor and to_local down): round trips of every dtype and placement on 1-D and
2-D meshes with direct_data "on" (a failure of the direct path fails the call) and "off"
(relayed), against numpy, from_local read back in the other mode; "auto" relaying around a worker
it cannot reach and "on" failing there, both ways; a bad mode refused.

Needs Debian's python3-grpcio, python3-numpy and python3-pytest, and the build tree's package
(cmake --build build --target tessera_python tessera); ctest runs it as python_client."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import Partial, Replicate, Shard  # noqa: E402
from tessera_testing import as_numbers, local_block, values  # noqa: E402

DTYPES = [d.name for d in tessera.all_dtypes]
PLACEMENTS = {
    "line": [[Shard(0)], [Shard(1)], [Replicate()], [Partial("max")]],
    "grid": [[Shard(0), Shard(1)], [Replicate(), Shard(0)], [Shard(1), Replicate()],
             [Shard(1), Shard(1)], [Partial("max"), Shard(0)]],
}


@pytest.fixture(scope="module", params=["on", "off"])
def mode_meshes(request, tessera_address):
    """A session with direct_data on or off, and its meshes: 'world' (4 ranks) and a 2x2 grid."""
    s = tessera.Session(tessera_address, direct_data=request.param, keep_alive=False)
    meshes = {"line": tessera.get_device_mesh("world", session=s),
              "grid": tessera.init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"),
                                               session=s)}
    yield request.param, meshes
    s.close()


@pytest.mark.parametrize("mesh_name", ["line", "grid"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_round_trip_every_placement(mode_meshes, mesh_name, dtype):
    _, meshes = mode_meshes
    mesh = meshes[mesh_name]
    for shape in [(7, 5), (0, 3)]:
        full = values(dtype, shape, 4)
        for placements in PLACEMENTS[mesh_name]:
            t = tessera.distribute_tensor(full, mesh, placements, dtype=dtype)
            np.testing.assert_array_equal(as_numbers(t.full_tensor(), dtype), full)
            for rank in range(int(np.prod(mesh.shape))):
                # Partial("max"): every coordinate keeps the value, as local_block gives it.
                expected = local_block(full, mesh.shape, placements, rank)
                np.testing.assert_array_equal(as_numbers(t.to_local(rank), dtype), expected,
                                              err_msg=f"rank {rank} of {placements}")


@pytest.fixture(scope="module")
def other_session(tessera_address):
    """Sessions of either mode, to read what the other one wrote."""
    sessions = {m: tessera.Session(tessera_address, direct_data=m, keep_alive=False)
                for m in ("on", "off")}
    yield sessions
    for s in sessions.values():
        s.close()


@pytest.mark.parametrize("mesh_name", ["line", "grid"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_from_local_every_placement_read_back_the_other_way(mode_meshes, other_session,
                                                              mesh_name, dtype):
    mode, meshes = mode_meshes
    reader = other_session["off" if mode == "on" else "on"]
    mesh = meshes[mesh_name]
    n = int(np.prod(mesh.shape))
    full = values(dtype, (6, 4), 5)
    for placements in PLACEMENTS[mesh_name]:
        if any(isinstance(p, Partial) for p in placements):
            continue  # from_local's Partial holds what each rank gives: checked below
        locals_ = [local_block(full, mesh.shape, placements, r) for r in range(n)]
        t = tessera.DTensor.from_local(locals_, mesh, placements, shape=full.shape, dtype=dtype)
        seen = tessera.get_tensor(t.name, session=reader)
        for handle in (t, seen):
            np.testing.assert_array_equal(as_numbers(handle.full_tensor(), dtype), full)
            for rank in range(n):
                np.testing.assert_array_equal(as_numbers(handle.to_local(rank), dtype),
                                              locals_[rank],
                                              err_msg=f"rank {rank} of {placements}")


def test_from_local_partial_sums_on_the_workers(mode_meshes):
    _, meshes = mode_meshes
    world = meshes["line"]
    locals_ = [np.full((3, 2), r + 1, dtype=np.float32) for r in range(4)]
    t = tessera.DTensor.from_local(locals_, world, [Partial()])
    np.testing.assert_array_equal(t.full_tensor(), np.full((3, 2), 10, dtype=np.float32))
    for r in range(4):
        np.testing.assert_array_equal(t.to_local(r), locals_[r])


def test_auto_relays_around_an_unreachable_worker_and_on_fails(tessera_address):
    full = np.arange(40, dtype=np.float32).reshape(8, 5)
    for mode in ("auto", "on"):
        s = tessera.Session(tessera_address, direct_data=mode, keep_alive=False)
        try:
            world = tessera.get_device_mesh("world", session=s)
            for worker in s.list_workers():
                if worker.worker_id == 2:
                    s._workers.mark_unreachable(worker.address)
            if mode == "auto":
                t = tessera.distribute_tensor(full, world, [Shard(0)])
                np.testing.assert_array_equal(t.full_tensor(), full)
                np.testing.assert_array_equal(t.to_local(2), full[4:6])
                locals_ = [full[2 * r:2 * r + 2] for r in range(4)]
                t = tessera.DTensor.from_local(locals_, world, [Shard(0)])
                np.testing.assert_array_equal(t.full_tensor(), full)
            else:
                with pytest.raises(tessera.Unavailable):
                    tessera.distribute_tensor(full, world, [Shard(0)])
                with pytest.raises(tessera.Unavailable):
                    tessera.DTensor.from_local([full[2 * r:2 * r + 2] for r in range(4)], world,
                                               [Shard(0)])
                relayed = tessera.Session(tessera_address, direct_data="off", keep_alive=False)
                try:
                    t = tessera.distribute_tensor(
                        full, tessera.get_device_mesh("world", session=relayed), [Shard(0)])
                    mine = tessera.get_tensor(t.name, session=s)
                    with pytest.raises(tessera.Unavailable):
                        mine.full_tensor()
                    with pytest.raises(tessera.Unavailable):
                        mine.to_local(2)
                    np.testing.assert_array_equal(mine.to_local(0), full[0:2])
                finally:
                    relayed.close()
        finally:
            s.close()
    # The abandoned plan released its sequences: later work on those workers runs at once.
    s = tessera.Session(tessera_address, direct_data="off", keep_alive=False)
    try:
        t = tessera.distribute_tensor(full, tessera.get_device_mesh("world", session=s),
                                      [Shard(1)])
        np.testing.assert_array_equal(t.full_tensor(), full)
    finally:
        s.close()


def test_a_bad_mode_is_refused(tessera_address):
    with pytest.raises(tessera.InvalidArgument, match="direct_data 'sometimes'"):
        tessera.Session(tessera_address, direct_data="sometimes", keep_alive=False)
