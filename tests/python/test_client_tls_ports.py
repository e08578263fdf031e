"""The Python client meeting a port that disagrees with it on TLS: a plaintext client at a TLS
port and a TLS client at a plaintext port are refused within a second or two (long before the
connect timeout) with a message saying which side speaks TLS; a port where nothing listens is
waited for until the timeout (a coordinator restarting). The servers are local gRPC servers
with a certificate made by openssl at test time."""

import shutil
import subprocess
import time
from concurrent import futures

import pytest

grpc = pytest.importorskip("grpc", reason="grpcio is not importable (apt-get install python3-grpcio)")
tessera = pytest.importorskip("tessera", reason="build the tessera_python target")

CONNECT_TIMEOUT = 10.0  # as long as a session waits for a coordinator by default


@pytest.fixture(scope="module")
def certificate(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1: (certificate path, key path)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem"),
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
                   check=True, capture_output=True)
    return d / "cert.pem", d / "key.pem"


@pytest.fixture(scope="module")
def ports(certificate):
    """Ports by kind: "tls" and "plaintext" of a running server, "nothing" where none listens."""
    cert, key = certificate
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    credentials = grpc.ssl_server_credentials([(key.read_bytes(), cert.read_bytes())])
    found = {"tls": server.add_secure_port("127.0.0.1:0", credentials),
             "plaintext": server.add_insecure_port("127.0.0.1:0")}
    never_started = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
    found["nothing"] = never_started.add_insecure_port("127.0.0.1:0")
    server.start()
    yield found
    server.stop(0)


@pytest.mark.parametrize("port,tls,fast,message", [
    ("tls", False, True, "serving TLS refuses plaintext"),
    ("plaintext", True, True, "does not speak TLS"),
    ("nothing", True, False, "cannot reach"),
    ("nothing", False, False, "cannot reach"),
])
def test_tls_disagreement_is_refused_fast(ports, certificate, port, tls, fast, message):
    options = {"tls_ca": str(certificate[0])} if tls else {}
    timeout = CONNECT_TIMEOUT if fast else 2.0
    start = time.monotonic()
    with pytest.raises(tessera.Unavailable) as raised:
        tessera.Session(f"127.0.0.1:{ports[port]}", timeout=timeout, **options)
    took = time.monotonic() - start
    assert message in str(raised.value)
    if fast:
        assert took < 2.0, f"refused after {took:.1f} s"
    else:
        assert took >= timeout
