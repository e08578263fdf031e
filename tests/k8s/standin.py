#!/usr/bin/env python3
"""The local stand-in for a Kubernetes deployment: runs the exact commands, arguments and
environment of the rendered deploy/k8s manifests as local processes on loopback, one process
group per container, and runs a workload through them with the `tessera` CLI.

The pods: the coordinator (overlays/cpu's Deployment), two CPU worker pods tessera-worker-0 and -1
(overlays/cpu's StatefulSet) and one GPU-style pod tessera-worker-2 (overlays/gpu's StatefulSet:
deploy/tessera-workers starting its workers). What is substituted, and nothing else:
  - the downward API: metadata.name -> the pod's StatefulSet name (tessera-worker-K, unchanged),
    status.podIP -> 127.0.0.1;
  - names: the Service tessera-coordinator and each pod's stable name (tessera-worker-K.tessera-
    worker) -> 127.0.0.1;
  - ports: every container port of a pod -> a free loopback port, runs of consecutive ports to runs
    of consecutive free ports (so "{50052+i}" becomes "{F+i}"), a Service port -> its target's;
  - the GPU-style pod: TESSERA_GPUS_PER_POD 8 -> 2 and --device=cuda:{i} -> --device=cpu (no GPU).
The environment is the container's own (values, ConfigMap and Secret keys, downward API) plus
PATH, which finds the built daemons and deploy/tessera-workers by the names the manifests use.

With --tls it runs overlays/cpu-tls and gpu-tls (components/tls) instead, as an operator would
deploy them: a CA and the coordinator's, the workers' and a client's certificates made with
openssl at test time (the coordinator's naming tessera-coordinator, the workers' *.tessera-worker,
both also 127.0.0.1, the address they are dialed at here) and a tokens file replace the placeholder
Secrets, and each Secret volume becomes a directory of its keys' files and each emptyDir volume
(the workers' checkpoint root) an empty directory, paths under its mount path pointing there (one
more substitution). The CLI connects with the client certificate and token;
readiness is then GET /ready on the metrics ports, as the probes say.

Checked: workers answer grpc.health.v1 NOT_SERVING until the coordinator is up and SERVING once
registered (the readiness probes), liveness ports accept connections, every --metrics_port serves
tessera_ metrics, a mesh over all four workers shards a tensor and gathers it back equal to the
original; the GPU-style pod exits when one of its workers dies and comes back under the same
worker ids, after which the sharded tensor it held reads as DATA_LOSS, a replicated one as
UNAVAILABLE, and the mesh runs again once created again.

usage: standin.py [--tls] K8S_DIR DEPLOY_DIR BIN_DIR... WORKDIR   (77: kubectl missing, skipped)"""

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import grpc
import numpy as np

import manifests as m

GPU_WORKERS = 2  # workers of the GPU-style pod (TESSERA_GPUS_PER_POD)
TOKEN = "standin-client-token-0123456789abcdef"

# The certificates of the TLS variant: (file, common name, subject alternative names).
LEAVES = [("coordinator", "tessera-coordinator", "DNS:tessera-coordinator,IP:127.0.0.1"),
          ("worker", "tessera-worker", "DNS:tessera-worker,DNS:*.tessera-worker,IP:127.0.0.1"),
          ("client", "alice", "DNS:alice")]


def make_certificates(directory):
    """A CA and the LEAVES it signs, made with openssl in `directory`: {name: PEM text} for
    ca.pem and each leaf's .pem and .key."""
    os.makedirs(directory)

    def run(*args):
        subprocess.run(["openssl", *args], cwd=directory, check=True, capture_output=True)
    run("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-days", "1", "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=standin CA",
        "-addext", "basicConstraints=critical,CA:TRUE",
        "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    for name, cn, sans in LEAVES:
        run("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}")
        with open(os.path.join(directory, f"{name}.ext"), "w") as f:
            f.write(f"subjectAltName={sans}\nextendedKeyUsage=serverAuth,clientAuth\n")
        run("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-days", "1", "-extfile", f"{name}.ext", "-out", f"{name}.pem")
    files = {}
    for f in ["ca.pem"] + [f"{n}.{e}" for n, _, _ in LEAVES for e in ("pem", "key")]:
        with open(os.path.join(directory, f)) as text:
            files[f] = text.read()
    return files


def fill_secrets(objects, pem):
    """Replaces the placeholder Secrets of components/tls with real certificates and tokens."""
    for o in objects:
        if o["kind"] != "Secret":
            continue
        name = o["metadata"]["name"]
        side = {"tessera-coordinator-tls": "coordinator", "tessera-worker-tls": "worker"}.get(name)
        if side:
            o["stringData"] = {"tls.crt": pem[f"{side}.pem"], "tls.key": pem[f"{side}.key"],
                               "ca.crt": pem["ca.pem"]}
        elif name == "tessera-client-tokens":
            o["stringData"] = {"tokens": f"alice {TOKEN}\n"}


def free_run(length):
    """The first of `length` consecutive free loopback ports."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + length > 65535:
            continue
        try:
            held = []
            for p in range(base, base + length):
                s = socket.socket()
                held.append(s)
                s.bind(("127.0.0.1", p))
            return base
        except OSError:
            continue
        finally:
            for s in held:
                s.close()


def local_ports(container):
    """{container port: local port} for a container, consecutive runs kept consecutive."""
    ports = sorted(p["containerPort"] for p in container.get("ports", []))
    mapping, i = {}, 0
    while i < len(ports):
        j = i
        while j + 1 < len(ports) and ports[j + 1] == ports[j] + 1:
            j += 1
        base = free_run(j - i + 1)
        for k in range(i, j + 1):
            mapping[ports[k]] = base + (k - i)
        i = j + 1
    return mapping


class Pod:
    """One pod of the rendered manifests, run as one local process group."""

    def __init__(self, name, objects, template, workdir, path):
        self.name = name
        self.objects = objects
        self.container = template["spec"]["containers"][0]
        self.ports = local_ports(self.container)
        self.log = os.path.join(workdir, f"{name}.log")
        self.path = path
        self.proc = None
        self.mounts = self.write_volumes(template["spec"], os.path.join(workdir, name))

    def write_volumes(self, spec, root):
        """Writes each Secret volume the container mounts as a directory of its keys' files,
        and makes each emptyDir volume an empty directory, under `root`: {mount path: local
        directory}."""
        mounts = {}
        for mount in self.container.get("volumeMounts", []):
            volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
            local = os.path.join(root, mount["name"])
            os.makedirs(local, exist_ok=True)
            if "secret" in volume:
                secret = m.find(self.objects, "Secret", volume["secret"]["secretName"])
                for key, value in dict(secret.get("stringData", {})).items():
                    with open(os.path.join(local, key), "w") as f:
                        f.write(value)
            elif "emptyDir" not in volume:
                raise ValueError(f"volume {volume['name']} is neither a Secret nor an emptyDir")
            mounts[mount["mountPath"].rstrip("/")] = local
        return mounts

    def local_path(self, text):
        """`text` with a mounted path replaced by its local directory."""
        for mount, local in self.mounts.items():
            text = re.sub(re.escape(mount) + r"(?=/|$)", local, text)
        return text

    def port(self, container_port):
        return self.ports[container_port]

    def argv_env(self, resolve):
        """The command line and environment, substituted as the module's docstring says;
        `resolve(host, port)` gives the local port of another pod's address."""
        env = m.container_env(self.objects, self.container,
                              {"metadata.name": self.name, "status.podIP": "127.0.0.1"})
        env = {k: self.local_path(v) for k, v in env.items()}
        argv = [self.local_path(a) for a in m.command_line(self.container, env)]
        local = []
        for a in argv:
            if a.startswith("--device=cuda:"):
                local.append("--device=cpu")
                continue
            # host:port and host:{B+i} of another pod (a Service or a stable pod name).
            a = re.sub(r"([A-Za-z][A-Za-z0-9.-]*):(\{?)(\d+)",
                       lambda x: f"127.0.0.1:{x.group(2)}{resolve(x.group(1), int(x.group(3)))}",
                       a)
            # This pod's own ports: --listen=HOST:P or HOST:{P+i}, --metrics_port=P or {P+i}.
            a = re.sub(r"^(--listen=[^:]*:|--metrics_port=)(\{?)(\d+)",
                       lambda x: f"{x.group(1)}{x.group(2)}{self.ports[int(x.group(3))]}", a)
            local.append(a)
        env["PATH"] = self.path
        return local, env

    def start(self, resolve):
        argv, env = self.argv_env(resolve)
        with open(self.log, "a") as log:
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            self.proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def stop(self, sig=signal.SIGTERM):
        if self.proc and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass

    def probe(self, kind):
        """The local port of the container's readiness or liveness probe."""
        probe = self.container[kind]
        port = next(probe[k]["port"] for k in ("grpc", "tcpSocket", "httpGet") if k in probe)
        if isinstance(port, str):
            port = next(p["containerPort"] for p in self.container["ports"] if p["name"] == port)
        return self.port(port)

    def readiness(self, i=0):
        """What the readiness probe finds of the pod's worker `i` (its port + i): 'SERVING',
        'NOT_SERVING' or None when nothing answers; a gRPC health check or GET /ready."""
        port = self.probe("readinessProbe") + i
        if "grpc" in self.container["readinessProbe"]:
            return health(port)
        path = self.container["readinessProbe"]["httpGet"]["path"]
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=1) as r:
                return "SERVING" if r.status == 200 else "UNKNOWN"
        except urllib.error.HTTPError as e:
            return "NOT_SERVING" if e.code == 503 else "UNKNOWN"
        except OSError:
            return None


def health(port):
    """grpc.health.v1 Check on 127.0.0.1:port: 'SERVING', 'NOT_SERVING', 'UNKNOWN' or None when
    nothing answers."""
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        try:
            reply = check(b"", timeout=1)
        except grpc.RpcError:
            return None
    return {b"\x08\x01": "SERVING", b"\x08\x02": "NOT_SERVING"}.get(reply, "UNKNOWN")


def children(pid):
    """Pids of the processes whose parent is `pid` (from /proc), ascending."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[1] == str(pid):
            found.append(int(entry))
    return sorted(found)


def wait_for(what, predicate, pods, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        for p in pods:
            if p.proc and p.proc.poll() is not None:
                raise AssertionError(f"{what}: pod {p.name} exited {p.proc.returncode}:\n"
                                     + open(p.log).read()[-3000:])
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def main():
    if shutil.which("kubectl") is None:
        print("kubectl is not installed (Debian: kubernetes-client): skipped")
        return 77
    args = sys.argv[1:]
    tls = args[0] == "--tls"
    if tls:
        args = args[1:]
    k8s_dir, deploy_dir, *bin_dirs, workdir = args
    shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(workdir)
    path = os.pathsep.join([deploy_dir, *bin_dirs, "/usr/bin", "/bin"])
    suffix = "-tls" if tls else ""
    cpu = m.render(os.path.join(k8s_dir, "overlays", "cpu" + suffix))
    gpu = m.render(os.path.join(k8s_dir, "overlays", "gpu" + suffix))
    pki = os.path.join(workdir, "pki")
    if tls:
        pem = make_certificates(pki)
        fill_secrets(cpu, pem)
        fill_secrets(gpu, pem)
    for o in gpu:  # the GPU-style pod's worker count
        if o["kind"] == "StatefulSet":
            for e in o["spec"]["template"]["spec"]["containers"][0]["env"]:
                if e["name"] == "TESSERA_GPUS_PER_POD":
                    e["value"] = str(GPU_WORKERS)
    coordinator = Pod("tessera-coordinator", cpu,
                      m.find(cpu, "Deployment", "tessera-coordinator")["spec"]["template"],
                      workdir, path)
    workers = [Pod(f"tessera-worker-{k}", cpu,
                   m.find(cpu, "StatefulSet", "tessera-worker")["spec"]["template"], workdir, path)
               for k in range(2)]
    gpu_pod = Pod("tessera-worker-2", gpu,
                  m.find(gpu, "StatefulSet", "tessera-worker")["spec"]["template"], workdir, path)
    workers.append(gpu_pod)
    pods = [coordinator] + workers
    service = m.find(cpu, "Service", "tessera-coordinator")
    coordinator_target = {p["port"]: p["targetPort"] for p in service["spec"]["ports"]}
    coordinator_named = {p["name"]: p["containerPort"] for p in coordinator.container["ports"]}

    def resolve(host, port):
        if host == "tessera-coordinator":
            target = coordinator_target[port]
            return coordinator.port(coordinator_named.get(target, target))
        pod = next((p for p in workers if host == f"{p.name}.tessera-worker"), None)
        if pod is None:
            raise AssertionError(f"no pod answers to {host}")
        return pod.port(port)  # a headless Service: the container port itself

    # Every worker port of a pod (the GPU-style pod serves one per worker).
    def worker_ports(pod):
        return [pod.port(pod.container["ports"][0]["containerPort"]) + i
                for i in range(GPU_WORKERS if pod is gpu_pod else 1)]

    cli = shutil.which("tessera", path=path)
    env = dict(os.environ, TESSERA_COORDINATOR=f"127.0.0.1:{coordinator.port(50051)}")
    if tls:  # the client's certificate and token
        env.update(TESSERA_TLS_CA=os.path.join(pki, "ca.pem"),
                   TESSERA_TLS_CERT=os.path.join(pki, "client.pem"),
                   TESSERA_TLS_KEY=os.path.join(pki, "client.key"), TESSERA_TOKEN=TOKEN)

    def tessera(*args, check=True):
        r = subprocess.run([cli, *args], env=env, capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError(f"tessera {' '.join(args)}: {r.returncode}\n{r.stderr}")
        return r

    def worker_ids():
        """{address: worker id} of the live workers `tessera status` lists."""
        out = tessera("status").stdout
        return {m_.group(2): int(m_.group(1)) for m_ in
                re.finditer(r"^\s*(\d+)\s.*?(127\.0\.0\.1:\d+).*\balive\b", out, re.M)}

    try:
        for p in workers:
            p.start(resolve)
        # No coordinator yet: the workers serve, but are not ready.
        for p in workers:
            for i in range(len(worker_ports(p))):
                wait_for(f"{p.name} worker {i} answering readiness", lambda: p.readiness(i),
                         pods)
                got = p.readiness(i)
                assert got == "NOT_SERVING", f"{p.name} worker {i} unregistered but {got}"
        coordinator.start(resolve)
        wait_for("the coordinator ready", lambda: coordinator.readiness() == "SERVING", pods)
        with socket.create_connection(("127.0.0.1", coordinator.probe("livenessProbe")),
                                      timeout=2):
            pass
        for p in workers:
            for i in range(len(worker_ports(p))):
                wait_for(f"{p.name} worker {i} ready", lambda: p.readiness(i) == "SERVING", pods)
            with socket.create_connection(("127.0.0.1", p.probe("livenessProbe")), timeout=2):
                pass
        print("ready: the coordinator and", sum(len(worker_ports(p)) for p in workers),
              "workers in", len(workers), "worker pods", "over mutual TLS" if tls else "")
        if tls:  # a client without the CA (plaintext) is refused at once, saying TLS
            plain = {k: v for k, v in env.items() if not k.startswith("TESSERA_TLS_")}
            r = subprocess.run([cli, "status"], env=plain, capture_output=True, text=True,
                               timeout=60)
            assert r.returncode != 0 and "serving TLS refuses plaintext" in r.stderr, \
                f"a plaintext client: {r.returncode} {r.stderr}"

        # What Prometheus scrapes: each daemon's --metrics_port (the annotated port, and the GPU-
        # style pod's metrics-N ports).
        for p in pods:
            first = p.port(next(q["containerPort"] for q in p.container["ports"]
                                if q["name"] == "metrics"))
            for i in range(GPU_WORKERS if p is gpu_pod else 1):
                with urllib.request.urlopen(f"http://127.0.0.1:{first + i}/metrics",
                                            timeout=5) as r:
                    text = r.read().decode()
                assert "\ntessera_" in text, f"{p.name} metrics on {first + i}:\n{text[:500]}"

        ids = worker_ids()
        assert len(ids) == 4, f"4 workers expected:\n{tessera('status').stdout}"
        tessera("mesh", "create", "pool", "--shape", "2,2", "--names", "dp,tp")
        original = np.arange(8 * 12, dtype=np.float32).reshape(8, 12) * 0.5 - 3
        np.save(os.path.join(workdir, "x.npy"), original)
        tessera("tensor", "put", os.path.join(workdir, "x.npy"), "--mesh", "pool", "--placements",
                "S(0),S(1)", "--name", "x")
        tessera("tensor", "redistribute", "x", "--to", "R,R", "--name", "y")
        tessera("tensor", "get", "y", "--out", os.path.join(workdir, "y.npy"))
        back = np.load(os.path.join(workdir, "y.npy"))
        assert np.array_equal(back, original), f"gathered back:\n{back}"
        print("workload: a 2x2 mesh over every pod, S(0),S(1) -> R,R gathered back equal")

        # One worker of the GPU-style pod dies: the pod's process ends, taking its other worker.
        victim = children(gpu_pod.proc.pid)
        assert len(victim) == GPU_WORKERS, f"{gpu_pod.name} runs {victim}"
        os.kill(victim[0], signal.SIGKILL)
        status = gpu_pod.proc.wait(timeout=30)
        assert status == 128 + signal.SIGKILL, f"{gpu_pod.name} exited {status}"
        for pid in victim[1:]:
            wait_for(f"worker {pid} stopped", lambda: not os.path.exists(f"/proc/{pid}")
                     or open(f"/proc/{pid}/stat").read().split()[2] == "Z", [])
        # Restarted as Kubernetes would (same command, same ports): the same worker ids.
        gpu_pod.start(resolve)
        for i in range(len(worker_ports(gpu_pod))):
            wait_for(f"{gpu_pod.name} worker {i} ready again",
                     lambda: gpu_pod.readiness(i) == "SERVING", pods)
        again = worker_ids()
        assert again == ids, f"worker ids before {ids}, after the restart {again}"
        lost = tessera("tensor", "get", "x", "--out", os.path.join(workdir, "lost.npy"),
                       check=False)
        assert lost.returncode == 1 and "DATA_LOSS" in lost.stderr, \
            f"reading a tensor the restarted pod held: {lost.returncode} {lost.stderr}"
        # A replicated tensor survives on the other pods: once the mesh took the restarted workers
        # back (UNAVAILABLE until then) it is repaired from a replica, whichever two ranks of the
        # 2x2 mesh the pod held (diagonal ones too: each group broadcasts from a rank of its own).
        deadline = time.monotonic() + 30
        while True:
            kept = tessera("tensor", "get", "y", "--out", os.path.join(workdir, "kept.npy"),
                           check=False)
            if kept.returncode == 0 or "UNAVAILABLE" not in kept.stderr \
                    or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert kept.returncode == 0, \
            f"reading a tensor replicated beyond the restarted pod: {kept.returncode} {kept.stderr}"
        assert np.array_equal(np.load(os.path.join(workdir, "kept.npy")), original), \
            "a repaired tensor read back different"
        # The mesh, taken back, runs again.
        tessera("tensor", "put", os.path.join(workdir, "x.npy"), "--mesh", "pool", "--placements",
                "R,R", "--name", "x1")
        tessera("tensor", "get", "x1", "--out", os.path.join(workdir, "x1.npy"))
        assert np.array_equal(np.load(os.path.join(workdir, "x1.npy")), original)
        tessera("mesh", "delete", "pool")
        tessera("mesh", "create", "pool", "--shape", "2,2", "--names", "dp,tp")
        tessera("tensor", "put", os.path.join(workdir, "x.npy"), "--mesh", "pool", "--placements",
                "S(1),S(0)", "--name", "x2")
        tessera("tensor", "get", "x2", "--out", os.path.join(workdir, "x2.npy"))
        assert np.array_equal(np.load(os.path.join(workdir, "x2.npy")), original)
        print("restart: the GPU-style pod ended with its worker, came back under worker ids",
              sorted(again.values()), "with its shards lost; the mesh took it back and runs, and runs created again")
        return 0
    finally:
        for p in pods:
            p.stop()
        deadline = time.monotonic() + 10
        for p in pods:
            if p.proc:
                try:
                    p.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.stop(signal.SIGKILL)
                    p.proc.wait()


if __name__ == "__main__":
    sys.exit(main())
