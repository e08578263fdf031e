#!/usr/bin/env python3
"""Renders every overlay of deploy/k8s with `kubectl kustomize` and checks the objects against
the daemons: every flag a container passes is one the daemon's --help lists; ports, probe ports,
Service ports and addresses agree with the flags; selectors match the pod labels; resources and
GPU limits are set; the Secrets and ConfigMaps the flags read exist and are mounted as env; every
file a flag reads (TLS certificates, keys and CAs, the tokens file) lies in a mounted Secret that
holds it; TLS is on for both daemons or neither, identities come with mutual TLS, a daemon without
an identity has the secret, every TESSERA_ variable is one the daemon reads, and no gRPC probe
checks a TLS port (the kubelet's speak plaintext). Then breaks the rendered objects in known ways
and checks that each break is found, so that the checks cannot pass by finding nothing.

usage: check_manifests.py K8S_DIR COORDINATOR_BINARY WORKER_BINARY
Exit 0 when all hold, 1 listing every problem, 77 when kubectl is not installed."""

import copy
import os
import shutil
import sys

import manifests as m

# Placeholders for the downward API: any values do for checking.
DOWNWARD = {"metadata.name": "tessera-worker-0", "status.podIP": "10.0.0.1"}


def ports_of(container):
    """{name: number} and the set of numbers of the container's ports."""
    ports = container.get("ports", [])
    return {p.get("name"): p["containerPort"] for p in ports}, {p["containerPort"] for p in ports}


def probe_port(probe, named):
    """The port a probe checks (a name resolved against the container's ports)."""
    for kind in ("grpc", "tcpSocket", "httpGet"):
        if kind in probe:
            port = probe[kind]["port"]
            return named.get(port) if isinstance(port, str) else port
    return None


def matches(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check(objects, helps):
    """Every problem found in the rendered `objects`, as sentences; `helps` maps a daemon to its
    flags (manifests.daemon_help)."""
    problems = []
    tls_of = {}  # daemon binary -> set of whether each of its processes uses TLS
    services = [o for o in objects if o["kind"] == "Service"]
    # Where the coordinator's Service sends: (service name, port) -> (pod labels, target port).
    for obj, template in m.workloads(objects):
        where = f"{obj['kind']}/{obj['metadata']['name']}"
        labels = template["metadata"].get("labels", {})
        if not matches(obj["spec"]["selector"].get("matchLabels"), labels):
            problems.append(f"{where}: selector {obj['spec']['selector']} does not match its pod "
                            f"labels {labels}")
        spec = template["spec"]
        account = spec.get("serviceAccountName")
        if account and m.find(objects, "ServiceAccount", account) is None:
            problems.append(f"{where}: no ServiceAccount '{account}'")
        if obj["kind"] == "StatefulSet":
            svc = m.find(objects, "Service", obj["spec"].get("serviceName", ""))
            if svc is None or svc["spec"].get("clusterIP") != "None":
                problems.append(f"{where}: serviceName '{obj['spec'].get('serviceName')}' is not "
                                f"a headless Service")
        annotations = template["metadata"].get("annotations", {})
        for c in spec["containers"]:
            problems += check_container(objects, helps, f"{where} container {c['name']}", obj, c,
                                        annotations, tls_of)
    if len({on for daemon in tls_of.values() for on in daemon}) > 1:
        problems.append(f"TLS is on for some daemons and off for others: "
                        f"{ {d: sorted(v) for d, v in tls_of.items()} } (each dials the other)")
    for svc in services:
        selected = [t for _, t in m.workloads(objects)
                    if matches(svc["spec"].get("selector"), t["metadata"].get("labels", {}))]
        if not selected:
            problems.append(f"Service/{svc['metadata']['name']}: selector "
                            f"{svc['spec'].get('selector')} matches no pod template")
        for p in svc["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            for t in selected:
                named = {q.get("name"): q["containerPort"]
                         for c in t["spec"]["containers"] for q in c.get("ports", [])}
                number = named.get(target) if isinstance(target, str) else target
                if number not in named.values():
                    problems.append(f"Service/{svc['metadata']['name']}: port {p['port']} targets "
                                    f"{target}, which its pods do not declare")
    for pdb in (o for o in objects if o["kind"] == "PodDisruptionBudget"):
        if not any(matches(pdb["spec"]["selector"].get("matchLabels"),
                           t["metadata"].get("labels", {})) for _, t in m.workloads(objects)):
            problems.append(f"PodDisruptionBudget/{pdb['metadata']['name']}: selects no pods")
    return problems


# The identity flag with which a daemon knows its peer daemon by certificate instead of the secret.
IDENTITY_FLAG = {"tessera-coordinator": "worker_identity", "tessera-worker": "coordinator_identity"}
# Flags whose value is a file the daemon reads.
FILE_FLAGS = ("tls_cert", "tls_key", "tls_ca", "tokens_file")


def mount_problem(objects, spec, container, path):
    """Why `path` is not a file of a Secret or ConfigMap mounted in `container` (of pod `spec`),
    or None when it is."""
    for mount in container.get("volumeMounts", []):
        root = mount["mountPath"].rstrip("/") + "/"
        if not path.startswith(root):
            continue
        key = path[len(root):]
        volume = next((v for v in spec.get("volumes", []) if v["name"] == mount["name"]), None)
        if volume is None:
            return f"its mount names volume '{mount['name']}', which the pod lacks"
        kind, source = (("Secret", volume["secret"]) if "secret" in volume else
                        ("ConfigMap", volume["configMap"]) if "configMap" in volume else
                        (None, None))
        if kind is None:
            return None  # another kind of volume: its files are not known here
        name = source.get("secretName", source.get("name"))
        obj = m.find(objects, kind, name)
        if obj is None:
            return f"volume '{mount['name']}' is {kind} '{name}', which is not there"
        keys = set(obj.get("data", {})) | set(obj.get("stringData", {}))
        if "items" in source:
            keys = {i["path"] for i in source["items"] if i["key"] in keys}
        if key not in keys:
            return f"{kind} '{name}' mounted at {mount['mountPath']} holds no '{key}' ({sorted(keys)})"
        return None
    return "no volume is mounted there"


def check_container(objects, helps, where, workload, c, annotations, tls_of):
    problems = []
    spec = workload["spec"]["template"]["spec"]
    tls_ports = set()
    try:
        env = m.container_env(objects, c, DOWNWARD)
        processes = m.daemon_processes(m.command_line(c, env))
    except (KeyError, ValueError) as e:
        return [f"{where}: {e}"]
    named, numbers = ports_of(c)
    listens, metrics, devices = [], [], []
    for binary, args in processes:
        try:
            flags = m.flag_values(args)
        except ValueError as e:
            problems.append(f"{where}: {binary}: {e}")
            continue
        accepted = helps[binary]
        for name, value in flags.items():
            if name not in accepted:
                problems.append(f"{where}: {binary} has no flag --{name}")
            if "$(" in value:
                problems.append(f"{where}: --{name}={value} names a variable the container lacks")
        # What a flag is set to: on the command line, else from its environment variable.
        def setting(name):
            return flags.get(name) or (env.get(accepted[name]) if accepted.get(name) else None)

        # The cluster's credential reads the environment and is set there from a Secret, never on
        # the command line (which the pod spec and ps show); it is required unless the daemon
        # knows its peer by certificate (mutual TLS with an identity).
        for name, var in accepted.items():
            if var is not None and "secret" in name and name in flags:
                problems.append(f"{where}: --{name} on the command line; set ${var} from a Secret")
        identity = IDENTITY_FLAG.get(binary)
        if "secret" in accepted and not (identity and setting(identity)):
            var = accepted["secret"]
            source = next((e for e in c.get("env", []) if e["name"] == var), None)
            if "secret" not in flags and source is None:
                problems.append(f"{where}: {binary} has neither --{identity} nor --secret (${var})")
            elif source is not None and "secretKeyRef" not in source.get("valueFrom", {}):
                problems.append(f"{where}: ${var} (--secret) does not come from a Secret")
        # Files the daemon reads: in a mounted Secret (or ConfigMap) that holds them.
        for name in FILE_FLAGS:
            path = setting(name) if name in accepted else None
            if path:
                why = mount_problem(objects, spec, c, path)
                if why:
                    problems.append(f"{where}: {binary} --{name}={path}: {why}")
        tls = bool(setting("tls_cert") or setting("tls_key") or setting("tls_ca"))
        tls_of.setdefault(binary, set()).add(tls)
        if tls and not (setting("tls_cert") and setting("tls_key")):
            problems.append(f"{where}: {binary} has TLS files but not both --tls_cert and --tls_key")
        if identity and setting(identity) and not setting("tls_ca"):
            problems.append(f"{where}: {binary} --{identity} needs mutual TLS (--tls_ca)")
        if "tokens_file" in accepted and setting("tokens_file") and not tls:
            problems.append(f"{where}: {binary} --tokens_file needs TLS (--tls_cert, --tls_key)")
        listen = m.host_port(flags.get("listen", ":-1"))[1]
        listens.append(listen)
        if tls:
            tls_ports.add(listen)
        if listen not in numbers:
            problems.append(f"{where}: {binary} listens on {listen}, not a declared port")
        if "advertise" in flags:
            host, port = m.host_port(flags["advertise"])
            want = f"{DOWNWARD['metadata.name']}.{workload['spec'].get('serviceName')}"
            if port != listen or host != want:
                problems.append(f"{where}: --advertise={flags['advertise']} is not {want}:{listen}"
                                f" (the pod's stable name and its listen port)")
        if "coordinator" in flags:
            host, port = m.host_port(flags["coordinator"])
            svc = m.find(objects, "Service", host)
            if svc is None or port not in [p["port"] for p in svc["spec"].get("ports", [])]:
                problems.append(f"{where}: --coordinator={flags['coordinator']} is no Service port")
        if "metrics_port" in flags:
            metrics.append(int(flags["metrics_port"]))
            if metrics[-1] not in numbers:
                problems.append(f"{where}: --metrics_port={metrics[-1]} is not a declared port")
        if "device" in flags:
            devices.append(flags["device"])
    # Every TESSERA_ variable is one a daemon here reads, or one the command line expands.
    read = {v for binary, _ in processes for v in helps[binary].values() if v}
    used = " ".join(c.get("command", []) + c.get("args", []))
    for e in c.get("env", []):
        if e["name"].startswith("TESSERA_") and e["name"] not in read and \
                f"$({e['name']})" not in used:
            problems.append(f"{where}: ${e['name']} is read by no flag of {sorted(helps)}")
    # Readiness: a gRPC health check on a plaintext listen port, or GET /ready on a metrics port
    # (the kubelet's gRPC probes cannot speak TLS).
    readiness = c.get("readinessProbe", {})
    ready = probe_port(readiness, named)
    if "grpc" in readiness:
        if ready not in listens:
            problems.append(f"{where}: readiness is not a gRPC health probe on a listen port "
                            f"{listens}")
    elif "httpGet" in readiness:
        if readiness["httpGet"].get("path") != "/ready" or ready not in metrics:
            problems.append(f"{where}: readiness is not GET /ready on a --metrics_port {metrics}")
    else:
        problems.append(f"{where}: readiness is neither a gRPC health probe nor GET /ready")
    for kind in ("readinessProbe", "livenessProbe"):
        probe = c.get(kind, {})
        if "grpc" in probe and probe_port(probe, named) in tls_ports:
            problems.append(f"{where}: {kind} is a gRPC probe on TLS port "
                            f"{probe_port(probe, named)}, which the kubelet cannot speak")
    if probe_port(c.get("livenessProbe", {}), named) not in listens:
        problems.append(f"{where}: liveness does not probe a listen port {listens}")
    scrape_port = annotations.get("prometheus.io/port")
    if scrape_port is not None and int(scrape_port) not in metrics:
        problems.append(f"{where}: prometheus.io/port {scrape_port} is no --metrics_port {metrics}")
    if annotations.get("prometheus.io/scrape") == "true" and not metrics:
        problems.append(f"{where}: scraped, but serves no --metrics_port")
    resources = c.get("resources", {})
    for kind, key in (("requests", "cpu"), ("requests", "memory"), ("limits", "memory")):
        if key not in resources.get(kind, {}):
            problems.append(f"{where}: no resources.{kind}.{key}")
    gpus = int(resources.get("limits", {}).get("nvidia.com/gpu", 0))
    cuda = [d for d in devices if d.startswith("cuda:")]
    if cuda and sorted(cuda) != [f"cuda:{i}" for i in range(gpus)]:
        problems.append(f"{where}: devices {cuda} are not one per GPU of nvidia.com/gpu {gpus}")
    if gpus and len(cuda) != len(devices):
        problems.append(f"{where}: asks for {gpus} GPUs but serves {devices}")
    return problems


# Breaks that check() must find: (what, function changing the rendered objects in place).
def _worker(objects):
    return m.find(objects, "StatefulSet", "tessera-worker")["spec"]["template"]["spec"][
        "containers"][0]


def _coordinator(objects):
    return m.find(objects, "Deployment", "tessera-coordinator")["spec"]["template"]["spec"][
        "containers"][0]


BREAKS = [
    ("a flag the worker lacks", lambda o: _worker(o)["args"].append("--memory_budgett=1")),
    ("a flag the coordinator lacks", lambda o: _coordinator(o)["args"].append("--advertise=x:1")),
    ("a readiness probe on another port",
     lambda o: next(v for k, v in _worker(o)["readinessProbe"].items()
                    if k in ("grpc", "httpGet")).update(port=50099)),
    ("a listen port not declared",
     lambda o: _coordinator(o)["args"].__setitem__(0, "--listen=0.0.0.0:50061")),
    ("a selector that misses its pods",
     lambda o: m.find(o, "Service", "tessera-coordinator")["spec"]["selector"].update(
         {"app.kubernetes.io/component": "coordinatr"})),
    ("a StatefulSet selector that misses its labels",
     lambda o: m.find(o, "StatefulSet", "tessera-worker")["spec"]["selector"]["matchLabels"]
     .update(extra="x")),
    ("no memory limit", lambda o: _worker(o)["resources"].get("limits", {}).pop("memory")),
    ("the secret on the command line",
     lambda o: _coordinator(o)["args"].append("--secret=change-me")),
    ("a ConfigMap key that is not there",
     lambda o: m.find(o, "ConfigMap", "tessera-flags")["data"].pop("TESSERA_MEMORY_BUDGET")),
    ("--advertise not the stable name",
     lambda o: _worker(o)["args"].__setitem__(
         _worker(o)["args"].index(next(a for a in _worker(o)["args"] if "advertise" in a)),
         "--advertise=$(POD_IP):50052")),
    ("a scrape annotation on a port without metrics",
     lambda o: m.find(o, "Deployment", "tessera-coordinator")["spec"]["template"]["metadata"]
     ["annotations"].update({"prometheus.io/port": "9999"})),
]

def _without_env(container, *names):
    container["env"] = [e for e in container["env"] if e["name"] not in names]


def _set_env(container, name, value):
    next(e for e in container["env"] if e["name"] == name)["value"] = value


# Breaks of a deployment that knows its daemons by the shared secret.
PLAINTEXT_BREAKS = [
    ("the secret not mounted", lambda o: _without_env(_worker(o), "TESSERA_SECRET")),
    ("a Secret that is not there", lambda o: o.remove(m.find(o, "Secret", "tessera-secret"))),
]

# Breaks of the TLS wiring (components/tls).
TLS_BREAKS = [
    ("the workers' TLS Secret not mounted", lambda o: _worker(o).pop("volumeMounts")),
    ("the certificate read outside its mount",
     lambda o: _set_env(_coordinator(o), "TESSERA_TLS_CERT", "/etc/tessera/certs/tls.crt")),
    ("a file the TLS Secret lacks",
     lambda o: m.find(o, "Secret", "tessera-worker-tls")["stringData"].pop("ca.crt")),
    ("a misspelt TLS variable",
     lambda o: next(e for e in _coordinator(o)["env"] if e["name"] == "TESSERA_TLS_CA").update(
         name="TESSERA_TLS_CA_FILE")),
    ("a gRPC readiness probe on the TLS port",
     lambda o: _worker(o).update(readinessProbe={"grpc": {"port": 50052}})),
    ("a gRPC liveness probe on the TLS port",
     lambda o: _coordinator(o).update(livenessProbe={"grpc": {"port": 50051}})),
    ("the tokens Secret missing", lambda o: o.remove(m.find(o, "Secret", "tessera-client-tokens"))),
    ("workers without TLS beside a TLS coordinator",
     lambda o: _without_env(_worker(o), "TESSERA_TLS_CERT", "TESSERA_TLS_KEY", "TESSERA_TLS_CA",
                            "TESSERA_COORDINATOR_IDENTITY")),
    ("a worker identity without the CA",
     lambda o: _without_env(_coordinator(o), "TESSERA_TLS_CA")),
    ("neither the coordinator's identity nor the secret",
     lambda o: _without_env(_worker(o), "TESSERA_COORDINATOR_IDENTITY")),
    ("a mounted volume the pod lacks",
     lambda o: m.find(o, "StatefulSet", "tessera-worker")["spec"]["template"]["spec"].pop(
         "volumes")),
]

GPU_BREAKS = [
    ("fewer GPUs than workers",
     lambda o: _worker(o)["resources"]["limits"].update({"nvidia.com/gpu": 4})),
    ("a variable the container lacks",
     lambda o: _worker(o)["env"].pop(0)),
]


def main():
    if shutil.which("kubectl") is None:
        print("kubectl is not installed (Debian: kubernetes-client): skipped")
        return 77
    k8s_dir, coordinator, worker = sys.argv[1:4]
    helps = {"tessera-coordinator": m.daemon_help(coordinator),
             "tessera-worker": m.daemon_help(worker)}
    overlays = sorted(os.listdir(os.path.join(k8s_dir, "overlays")))
    if not {"cpu", "gpu"} <= set(overlays):
        print(f"overlays {overlays}: cpu and gpu expected")
        return 1
    failed = False
    for overlay in overlays:
        objects = m.render(os.path.join(k8s_dir, "overlays", overlay))
        kinds = sorted({o["kind"] for o in objects})
        problems = list(dict.fromkeys(check(objects, helps)))
        for p in problems:
            print(f"{overlay}: {p}")
        failed |= bool(problems)
        print(f"{overlay}: {len(objects)} objects ({', '.join(kinds)}): "
              f"{'ok' if not problems else f'{len(problems)} problem(s)'}")
        tls = any(e["name"] == "TESSERA_TLS_CERT" for e in _coordinator(objects).get("env", []))
        breaks = BREAKS + (TLS_BREAKS if tls else PLAINTEXT_BREAKS)
        if overlay.startswith("gpu"):
            breaks += GPU_BREAKS
        for what, apply in breaks:
            broken = copy.deepcopy(objects)
            apply(broken)
            if not check(broken, helps):
                print(f"{overlay}: {what}: not found by the checks")
                failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
