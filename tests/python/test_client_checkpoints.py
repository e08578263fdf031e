"""The Python client's checkpoints on `tessera up --workers 4`: a DTensor saved from the 2x2 mesh
(each worker writing its own blocks) and loaded onto a line of 3 and the 4-rank world under other
placements, compared exactly with the numpy array it came from; bad paths raise InvalidArgument.

Needs Debian's python3-grpcio, python3-numpy and python3-pytest, and the build tree's package
(cmake --build build --target tessera_python tessera); ctest runs it as python_client."""

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

from tessera import Partial, Replicate, Shard  # noqa: E402
from tessera_testing import values  # noqa: E402

SAVED = [[Shard(0), Shard(1)], [Partial("sum"), Shard(0)], [Replicate(), Shard(1)]]
LOADED = [("line3", [Shard(1)]), ("line3", [Replicate()]), ("world", [Shard(0)])]


@pytest.mark.parametrize("dtype", ["float32", "int32"])
@pytest.mark.parametrize("target", LOADED, ids=lambda t: f"{t[0]}-{t[1][0].to_json()}")
@pytest.mark.parametrize("saved", SAVED, ids=lambda p: ",".join(x.to_json() for x in p))
def test_save_then_load_elsewhere_is_exact(meshes, tmp_path, saved, target, dtype):
    full = values(dtype, (7, 6), 3).astype(dtype)
    t = tessera.distribute_tensor(full, meshes["grid"], saved)
    path = str(tmp_path / "ckpt")
    reply = tessera.save(t, path)
    assert reply.path == path
    mesh, placements = target
    back = tessera.load(path, meshes[mesh], placements)
    np.testing.assert_array_equal(back.full_tensor(kind="numpy"), full)
    t.free()
    back.free()


def test_bad_paths_raise_invalid_argument(meshes, tmp_path):
    t = tessera.distribute_tensor(np.ones((4, 4), np.float32), meshes["grid"],
                                  [Shard(0), Shard(1)])
    with pytest.raises(tessera.InvalidArgument):
        t.save("relative/ckpt")
    with pytest.raises(tessera.InvalidArgument):
        t.save(str(tmp_path / "no" / "parent"))
    with pytest.raises(tessera.NotFound):
        tessera.load(str(tmp_path / "missing"), meshes["line3"], [Shard(0)])
    t.free()
