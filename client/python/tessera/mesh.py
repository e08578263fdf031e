"""DeviceMesh on the service: ``init_device_mesh`` creates a mesh of workers on the coordinator
(its communicators set up before it returns); ``mesh["tp"]`` is the view of one mesh dim, whose
process groups collectives run on and whose dim ``parallelize_module`` shards along."""

from __future__ import annotations

import secrets
from typing import Any, Optional, Sequence, Tuple, Union

import numpy as np

from .errors import InvalidArgument
from .session import Session, get_session

__all__ = ["DeviceMesh", "init_device_mesh", "get_device_mesh"]


class DeviceMesh:
    """A mesh on the service, as torch's DeviceMesh: ``name`` on the coordinator, device type,
    shape, dim names, and the worker ids as ranks (``mesh.mesh``, row-major).

    ``mesh["tp"]`` (or ``mesh["dp", "tp"]``) is a view of some of its dims: collectives on it run
    on every process group of those dims at once, and a DTensor distributed onto it is laid out
    on the whole mesh, Replicate on the other dims (what every group of an SPMD program would
    hold). Meshes stay on the coordinator until :meth:`destroy`; those made without a ``name``
    are destroyed when their session closes."""

    def __init__(self, session: Session, name: str, device_type: str, shape: Sequence[int],
                 mesh_dim_names: Optional[Sequence[str]], ranks: Sequence[int],
                 dims: Optional[Sequence[int]] = None) -> None:
        self.session = session
        self.name = name
        self.device_type = device_type
        self._full_shape = tuple(int(s) for s in shape)
        self._full_names = tuple(mesh_dim_names) if mesh_dim_names else None
        self._ranks = np.asarray(list(ranks), dtype=np.int64).reshape(self._full_shape)
        self._dims: Tuple[int, ...] = tuple(range(len(self._full_shape))) if dims is None \
            else tuple(dims)

    @classmethod
    def _from_proto(cls, session: Session, info: Any) -> "DeviceMesh":
        spec = info.mesh
        shape = list(spec.shape)
        ranks = list(spec.ranks) or list(range(int(np.prod(shape, dtype=np.int64))))
        return cls(session, info.name, spec.device_type, shape, list(spec.dim_names) or None,
                   ranks)

    # -- torch's DeviceMesh ----------------------------------------------------------------------

    @property
    def is_view(self) -> bool:
        """Whether this is some dims of a mesh (``mesh["tp"]``) rather than the whole."""
        return self._dims != tuple(range(len(self._full_shape)))

    @property
    def root_mesh(self) -> "DeviceMesh":
        """The whole mesh this view is part of (itself when it is whole)."""
        if not self.is_view:
            return self
        return DeviceMesh(self.session, self.name, self.device_type, self._full_shape,
                          self._full_names, self._ranks.reshape(-1))

    @property
    def shape(self) -> Tuple[int, ...]:
        return tuple(self._full_shape[d] for d in self._dims)

    @property
    def ndim(self) -> int:
        return len(self._dims)

    @property
    def mesh_dim_names(self) -> Optional[Tuple[str, ...]]:
        if self._full_names is None:
            return None
        return tuple(self._full_names[d] for d in self._dims)

    @property
    def mesh(self) -> np.ndarray:
        """Worker ids as ranks, shaped as the whole mesh (torch's ``mesh.mesh``)."""
        return self._ranks.copy()

    @property
    def dims(self) -> Tuple[int, ...]:
        """The dims of the whole mesh this view covers."""
        return self._dims

    def size(self, mesh_dim: Optional[Union[int, str]] = None) -> int:
        """Ranks in the mesh (view), or along one of its dims."""
        if mesh_dim is None:
            return int(np.prod(self.shape, dtype=np.int64))
        return self.shape[self._local_dim(mesh_dim)]

    def __getitem__(self, names: Union[str, Sequence[str]]) -> "DeviceMesh":
        """The view of the named dims, ascending, as torch's ``mesh["dp", "tp"]``."""
        if isinstance(names, str):
            names = (names,)
        dims = [self._dims[self._local_dim(n)] for n in names]
        if len(set(dims)) != len(dims) or dims != sorted(dims):
            raise InvalidArgument(f"mesh dims {tuple(names)} must be distinct and in the mesh's "
                                  f"order {self.mesh_dim_names}")
        return DeviceMesh(self.session, self.name, self.device_type, self._full_shape,
                          self._full_names, self._ranks.reshape(-1), dims)

    def _local_dim(self, mesh_dim: Union[int, str]) -> int:
        if isinstance(mesh_dim, str):
            names = self.mesh_dim_names or ()
            if mesh_dim not in names:
                raise InvalidArgument(f"mesh '{self.name}' has no dim named '{mesh_dim}'; its dims "
                                      f"are {names or 'unnamed'}")
            return names.index(mesh_dim)
        if not -self.ndim <= int(mesh_dim) < self.ndim:
            raise InvalidArgument(f"mesh dim {mesh_dim} of a {self.ndim}-D mesh")
        return int(mesh_dim) % self.ndim

    def group_dim(self) -> str:
        """The CollectiveRequest.mesh_dim of this view: "" for the whole mesh, a dim's name or
        index for one dim."""
        if not self.is_view or len(self._full_shape) == 1:
            return ""
        if len(self._dims) != 1:
            from .errors import Unimplemented

            raise Unimplemented(f"collectives run on one mesh dim or the whole mesh, not on dims "
                                f"{self.mesh_dim_names} of mesh '{self.name}'")
        d = self._dims[0]
        return self._full_names[d] if self._full_names else str(d)

    def get_coordinate(self, rank: int) -> Tuple[int, ...]:
        """Mesh coordinate of row-major position ``rank`` of the whole mesh."""
        return tuple(int(c) for c in np.unravel_index(int(rank), self._full_shape))

    def get_local_rank(self, mesh_dim: Union[int, str], rank: int) -> int:
        """Position of ``rank`` (row-major on the whole mesh) within its group along
        ``mesh_dim``."""
        return self.get_coordinate(rank)[self._dims[self._local_dim(mesh_dim)]]

    # -- the service -----------------------------------------------------------------------------

    def info(self) -> Any:
        """The coordinator's ``MeshInfo``: ready, broken_reason, tensors, timeout."""
        return self.session.transport.get_mesh(self.name)

    def destroy(self) -> None:
        """Deletes the mesh on the coordinator, with its communicators and tensors."""
        self.session.transport.delete_mesh(self.name)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, DeviceMesh) and other.name == self.name
                and other._dims == self._dims and other.session is self.session)

    def __hash__(self) -> int:
        return hash((self.name, self._dims))

    def __repr__(self) -> str:
        names = f", mesh_dim_names={self.mesh_dim_names}" if self.mesh_dim_names else ""
        view = f"[{', '.join(map(repr, self.mesh_dim_names or self._dims))}]" if self.is_view else ""
        return (f"DeviceMesh('{self.device_type}', {self._ranks.tolist()}{names}, "
                f"name='{self.name}'){view}")


def init_device_mesh(device_type: str, mesh_shape: Union[int, Sequence[int]], *,
                     mesh_dim_names: Optional[Sequence[str]] = None, name: Optional[str] = None,
                     worker_ids: Optional[Sequence[int]] = None, timeout: float = 30.0,
                     session: Optional[Session] = None) -> DeviceMesh:
    """torch's ``init_device_mesh(device_type, mesh_shape, mesh_dim_names=...)`` on the service:
    a mesh of live workers (the first ones, or ``worker_ids`` row-major) named ``name`` (unique on
    the coordinator; by default a fresh name, the mesh then deleted when the session closes),
    ready once this returns. ``timeout``: how long a collective on it may wait for its peers."""
    s = get_session(session)
    if isinstance(mesh_shape, int):
        mesh_shape = (mesh_shape,)
    if mesh_dim_names is not None and len(mesh_dim_names) != len(mesh_shape):
        raise InvalidArgument(f"{len(mesh_dim_names)} mesh_dim_names {tuple(mesh_dim_names)} for "
                              f"a {len(mesh_shape)}-D mesh shape {tuple(mesh_shape)}")
    owned = name is None
    name = name or f"mesh-{secrets.token_hex(4)}"
    info = s.transport.create_mesh(name, device_type, mesh_shape, mesh_dim_names or (),
                                   worker_ids or (), timeout)
    if owned:
        s.own_mesh(name)
    return DeviceMesh._from_proto(s, info)


def get_device_mesh(name: str, session: Optional[Session] = None) -> DeviceMesh:
    """An existing mesh of the coordinator by name (``"world"`` of ``tessera up``);
    NotFound if there is none."""
    s = get_session(session)
    return DeviceMesh._from_proto(s, s.transport.get_mesh(name))


