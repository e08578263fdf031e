"""A connection to tessera-coordinator: one channel, a client id, deadlines, and the lease that
keeps this client's tensors alive. ``tessera.connect(address)`` makes one and sets it as the
default that every other call uses, as ``torch.distributed.init_process_group`` does."""

from __future__ import annotations

import atexit
import itertools
import os
import secrets
import threading
import time
from typing import Any, List, Optional

import grpc

from .direct import DIRECT_DATA_MODES, WorkerChannels
from .errors import FailedPrecondition, InvalidArgument, Unavailable
from .transport import Transport

__all__ = ["Session", "connect", "get_session", "set_session", "DEFAULT_TIMEOUT",
           "TRANSFER_TIMEOUT"]

#: The deadline of a plain call, in seconds.
DEFAULT_TIMEOUT = 60.0
#: The deadline of a call that moves tensor bytes (streams, forwards), in seconds.
TRANSFER_TIMEOUT = 600.0
# Messages up to this size (module forwards carry their tensors inline).
_MAX_MESSAGE_BYTES = 1 << 30


class Session:
    """A connection to tessera-coordinator as one client.

    Every call it makes has a deadline (``timeout`` for plain calls, ``transfer_timeout`` for
    those that stream tensors) and raises a :class:`tessera.TesseraError` subclass carrying the
    service's code and message. With ``keep_alive`` it renews a lease in the background; tensors of
    a client that makes no call for the coordinator's grace period (60 s) are reclaimed. With
    ``op_stream`` (the default) DTensor ops and frees go on one ordered stream without waiting
    for their answers (see tessera.dtensor); ``op_stream=False`` makes one unary call each. Use
    it as a context manager, or call :meth:`close`. Thread-safe. ``tls_ca``, ``tls_cert``,
    ``tls_key`` (PEM files) and ``token`` (default $TESSERA_TLS_CA, $TESSERA_TLS_CERT,
    $TESSERA_TLS_KEY, $TESSERA_TOKEN) connect over TLS with a bearer token (docs/security.md).
    ``direct_data`` is how the bytes of distribute_tensor, from_local, full_tensor and to_local
    travel: "auto" (the default) streams each block straight to or from its worker under the
    coordinator's grant when the workers answer within 2 s, else through the coordinator; "on" only straight (an unreachable worker fails the call);
    "off" always through the coordinator. Workers are reached with the same TLS credentials."""

    def __init__(self, address: str, *, client_id: Optional[str] = None,
                 timeout: float = DEFAULT_TIMEOUT, transfer_timeout: float = TRANSFER_TIMEOUT,
                 keep_alive: bool = True, connect_timeout: Optional[float] = None,
                 op_stream: bool = True, tls_ca: Optional[str] = None,
                 tls_cert: Optional[str] = None, tls_key: Optional[str] = None,
                 token: Optional[str] = None, direct_data: str = "auto") -> None:
        if direct_data not in DIRECT_DATA_MODES:
            raise InvalidArgument(f"direct_data {direct_data!r} is not one of "
                                  f"{', '.join(DIRECT_DATA_MODES)}")
        self.address = address
        self.client_id = client_id or f"py-{secrets.token_hex(8)}"
        self.timeout = float(timeout)
        self.transfer_timeout = float(transfer_timeout)
        channel_options = [
            ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ]
        credentials = _channel_credentials(tls_ca, tls_cert, tls_key, token)
        if credentials is None:
            self._channel = grpc.insecure_channel(address, options=channel_options)
        else:
            self._channel = grpc.secure_channel(address, credentials, options=channel_options)
        wait = self.timeout if connect_timeout is None else float(connect_timeout)
        try:
            _await_connected(self._channel, address, credentials is not None, wait)
        except Unavailable:
            self._channel.close()
            raise
        self._workers = WorkerChannels(
            None if credentials is None else _worker_credentials(tls_ca, tls_cert, tls_key),
            channel_options)
        self.transport = Transport(self._channel, self.client_id, self.timeout,
                                   self.transfer_timeout, op_stream=op_stream,
                                   direct_data=direct_data, workers=self._workers)
        # Names of the op outputs this session picks: a random prefix (unique among sessions)
        # and a counter.
        self._tensor_prefix = f"p{secrets.token_hex(6)}-"
        self._tensor_numbers = itertools.count(1)
        self._closed = False
        self._lock = threading.Lock()
        self._owned_meshes: List[str] = []
        self._stop = threading.Event()
        self._keeper: Optional[threading.Thread] = None
        if keep_alive:
            grace_s = self.transport.keep_alive()
            period = max(grace_s / 4.0, 0.02)
            self._keeper = threading.Thread(target=self._keep_alive, args=(period,),
                                            name="tessera-lease", daemon=True)
            self._keeper.start()

    def _keep_alive(self, period: float) -> None:
        while not self._stop.wait(period):
            try:
                self.transport.keep_alive(timeout=period)
            except Exception:  # a missed renewal is tried again next period
                pass

    def next_tensor_name(self) -> str:
        """A fresh name for a tensor this session makes (no '/', not starting with '.')."""
        return f"{self._tensor_prefix}{next(self._tensor_numbers)}"

    @property
    def op_stream(self) -> bool:
        """Whether DTensor ops and frees go on the ordered op stream."""
        return self.transport.op_stream is not None

    @property
    def channel(self) -> grpc.Channel:
        """The gRPC channel (for other services on the coordinator's port, e.g. KServe)."""
        return self._channel

    @property
    def closed(self) -> bool:
        return self._closed

    def own_mesh(self, name: str) -> None:
        """Deletes mesh ``name`` when the session closes (meshes it named itself)."""
        with self._lock:
            self._owned_meshes.append(name)

    def close(self) -> None:
        """Frees what this session made and may free (its unnamed meshes, pending frees), stops
        the lease and closes the channel. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            meshes, self._owned_meshes = self._owned_meshes, []
        self._stop.set()
        self.transport.drain_frees()
        for name in meshes:
            try:
                self.transport.delete_mesh(name)
            except Exception:
                pass
        if self._keeper is not None:
            self._keeper.join(timeout=5)
        self.transport.close()
        self._workers.close()
        self._channel.close()
        global _default
        if _default is self:
            _default = None

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # Workers, meshes and tensors as the coordinator lists them.

    def list_workers(self) -> List[Any]:
        """Every registered worker (``tessera.v1.WorkerInfo`` messages)."""
        return list(self.transport.list_workers())

    def list_meshes(self) -> List[Any]:
        """Every mesh (``tessera.v1.MeshInfo`` messages)."""
        return list(self.transport.list_meshes())

    def list_tensors(self, mesh: str = "") -> List[Any]:
        """Every DTensor, or those on ``mesh`` (``tessera.v1.TensorInfo`` messages)."""
        return list(self.transport.list_tensors(mesh))

    def synchronize(self, timeout: Optional[float] = None) -> None:
        """Waits until every tensor of this client is written; raises the first failure."""
        self.transport.synchronize([], timeout)

    def __repr__(self) -> str:
        return f"tessera.Session({self.address!r}, client_id={self.client_id!r})"


_default: Optional[Session] = None
_default_lock = threading.Lock()


def _read(path: Optional[str]) -> Optional[bytes]:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


def _connect_failure(tls: bool, detail: str) -> Optional[str]:
    """What gRPC's last connection error says about TLS: "speaks_tls" (a plaintext connection
    closed at once), "speaks_plaintext" (no TLS answer), "tls_refused" (the TLS handshake
    failed), or None (not reachable: it may still come up). As client/channel_ready.cc."""
    closed = "Socket closed" in detail or "Connection reset" in detail
    if not tls:
        return "speaks_tls" if closed else None
    if "wrong version number" in detail.lower():
        return "speaks_plaintext"
    if closed or "handshake" in detail.lower():
        return "tls_refused"
    return None


def _await_connected(channel: grpc.Channel, address: str, tls: bool, wait: float) -> None:
    """Returns once `channel` to the coordinator at `address` is connected; raises Unavailable
    at once (two attempts failing alike) when the ends disagree on TLS or the TLS handshake is
    refused, saying so, and after `wait` seconds otherwise (a coordinator not up yet is waited
    for)."""
    deadline = time.monotonic() + wait
    probe = channel.unary_unary("/tessera.v1.MeshService/ListWorkers")
    ready = grpc.channel_ready_future(channel)
    try:
        _probe_until_connected(ready, probe, address, tls, deadline, wait)
    finally:
        ready.cancel()


def _probe_until_connected(ready: grpc.Future, probe: Any, address: str, tls: bool,
                           deadline: float, wait: float) -> None:
    """_await_connected's loop: `ready` is the channel's ready future, `probe` a call that does
    not wait for it."""
    last: Optional[str] = None
    detail = ""
    while True:
        left = deadline - time.monotonic()
        try:
            ready.result(timeout=max(0.0, min(0.2, left)))
            return
        except grpc.FutureTimeoutError:
            pass
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            # A call that does not wait for the channel fails with the connection's last error.
            probe(b"", timeout=min(1.0, left), wait_for_ready=False)
            return
        except grpc.RpcError as e:
            if e.code() not in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
                return  # the coordinator answered
            failure, detail = _connect_failure(tls, e.details() or ""), e.details() or ""
        if failure is not None and failure == last:
            raise Unavailable({
                "speaks_tls": f"tessera-coordinator at {address} closed a plaintext connection at "
                              "once: a coordinator serving TLS refuses plaintext; give its CA "
                              f"(tls_ca or $TESSERA_TLS_CA) [{detail}]",
                "speaks_plaintext": f"tessera-coordinator at {address} does not speak TLS (it "
                                    "serves plaintext): connect without tls_ca, tls_cert and "
                                    f"tls_key ($TESSERA_TLS_*) [{detail}]",
                "tls_refused": f"the handshake with tessera-coordinator at {address} failed over "
                               "TLS: is its certificate signed by the CA given, and does it accept "
                               f"this client's certificate? [{detail}]",
            }[failure])
        last = failure
    raise Unavailable(
        f"cannot reach tessera-coordinator at {address} within {wait:g} s" +
        (" over TLS (is it serving TLS, signed by the CA given, and does it accept this "
         "client's certificate?)" if tls else
         " (a coordinator serving TLS refuses plaintext: give tls_ca or $TESSERA_TLS_CA)") +
        (f" [last error: {detail}]" if detail else ""))


def _channel_credentials(tls_ca: Optional[str], tls_cert: Optional[str], tls_key: Optional[str],
                         token: Optional[str]) -> Optional[grpc.ChannelCredentials]:
    """TLS credentials from the PEM files given (else $TESSERA_TLS_CA, $TESSERA_TLS_CERT,
    $TESSERA_TLS_KEY) with the bearer token (else $TESSERA_TOKEN) on every call; None for
    plaintext (no file and no token). A token needs TLS, as the coordinator's --tokens_file does."""
    tls_ca = tls_ca or os.environ.get("TESSERA_TLS_CA")
    tls_cert = tls_cert or os.environ.get("TESSERA_TLS_CERT")
    tls_key = tls_key or os.environ.get("TESSERA_TLS_KEY")
    token = token or os.environ.get("TESSERA_TOKEN")
    if not (tls_ca or tls_cert or tls_key or token):
        return None
    credentials = grpc.ssl_channel_credentials(root_certificates=_read(tls_ca),
                                               private_key=_read(tls_key),
                                               certificate_chain=_read(tls_cert))
    if token:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    return credentials


def _worker_credentials(tls_ca: Optional[str], tls_cert: Optional[str],
                        tls_key: Optional[str]) -> grpc.ChannelCredentials:
    """The TLS credentials of channels straight to workers: the session's PEM files (else
    $TESSERA_TLS_*), without its bearer token, which is for the coordinator."""
    return grpc.ssl_channel_credentials(
        root_certificates=_read(tls_ca or os.environ.get("TESSERA_TLS_CA")),
        private_key=_read(tls_key or os.environ.get("TESSERA_TLS_KEY")),
        certificate_chain=_read(tls_cert or os.environ.get("TESSERA_TLS_CERT")))


def connect(address: Optional[str] = None, **options: Any) -> Session:
    """Connects to tessera-coordinator at ``address`` (host:port; default
    ``$TESSERA_COORDINATOR``) and makes the session the default one. Usable as a context
    manager: ``with tessera.connect("127.0.0.1:50051") as session: ...``. Options: see
    :class:`Session`."""
    global _default
    address = address or os.environ.get("TESSERA_COORDINATOR")
    if not address:
        raise FailedPrecondition("no coordinator address: pass one to tessera.connect() or set "
                                 "$TESSERA_COORDINATOR")
    session = Session(address, **options)
    with _default_lock:
        _default = session
    return session


def set_session(session: Optional[Session]) -> None:
    """Makes ``session`` the default one."""
    global _default
    with _default_lock:
        _default = session


def get_session(session: Optional[Session] = None) -> Session:
    """``session``, else the default session, connecting to ``$TESSERA_COORDINATOR`` when there
    is none yet."""
    if session is not None:
        return session
    if _default is None or _default.closed:
        if os.environ.get("TESSERA_COORDINATOR"):
            return connect()
        raise FailedPrecondition("not connected: call tessera.connect(address) first")
    return _default


@atexit.register
def _close_default() -> None:
    if _default is not None:
        try:
            _default.close()
        except Exception:
            pass

