"""Reading deploy/k8s as Kubernetes would: rendered overlays, container env and $(VAR)
expansion, and the daemon processes each container runs (deploy/tessera-workers included)."""

import re
import subprocess

import yaml

# The daemon binaries the manifests may run, and the launcher of several workers in one container.
DAEMONS = ("tessera-coordinator", "tessera-worker")
LAUNCHER = "tessera-workers"


def render(overlay):
    """The objects `kubectl kustomize OVERLAY` renders (it raises with kubectl's error)."""
    out = subprocess.run(["kubectl", "kustomize", overlay], check=True, capture_output=True,
                         text=True).stdout
    return [o for o in yaml.safe_load_all(out) if o]


def find(objects, kind, name):
    """The rendered object of `kind` named `name`, or None."""
    for o in objects:
        if o["kind"] == kind and o["metadata"]["name"] == name:
            return o
    return None


def workloads(objects):
    """(object, pod template) of every Deployment and StatefulSet."""
    return [(o, o["spec"]["template"]) for o in objects
            if o["kind"] in ("Deployment", "StatefulSet")]


def container_env(objects, container, downward):
    """The container's environment as Kubernetes sets it: values, ConfigMap and Secret keys read
    from the rendered objects, and fieldRefs from `downward` (fieldPath -> value). Raises
    KeyError naming what a reference misses."""
    env = {}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = expand(str(e["value"]), env)
            continue
        ref = e["valueFrom"]
        if "fieldRef" in ref:
            env[e["name"]] = downward[ref["fieldRef"]["fieldPath"]]
            continue
        kind, sel = (("ConfigMap", ref["configMapKeyRef"]) if "configMapKeyRef" in ref
                     else ("Secret", ref["secretKeyRef"]))
        obj = find(objects, kind, sel["name"])
        if obj is None:
            raise KeyError(f"env {e['name']}: no {kind} '{sel['name']}'")
        data = dict(obj.get("data", {}))
        data.update(obj.get("stringData", {}))
        if sel["key"] not in data:
            raise KeyError(f"env {e['name']}: {kind} '{sel['name']}' has no key '{sel['key']}'")
        env[e["name"]] = data[sel["key"]]
    return env


def expand(text, env):
    """`text` with $(NAME) replaced from `env` as Kubernetes does ($$ is a literal $); an unknown
    name stays as written."""
    return re.sub(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)",
                  lambda m: "$" if m.group(0) == "$$" else env.get(m.group(1), m.group(0)), text)


def command_line(container, env):
    """The container's command and args with $(NAME) expanded."""
    return [expand(a, env) for a in container.get("command", []) + container.get("args", [])]


def daemon_processes(argv):
    """The daemon processes a container's command line starts: a list of (binary, args) --
    one for a daemon, N for `tessera-workers N tessera-worker ARGS` with {i} and {B+i} expanded for
    each i as deploy/tessera-workers does. Raises ValueError for anything else."""
    binary = argv[0].rsplit("/", 1)[-1]
    if binary in DAEMONS:
        return [(binary, argv[1:])]
    if binary != LAUNCHER or len(argv) < 3 or not argv[1].isdigit():
        raise ValueError(f"container runs {argv!r}, not a tessera daemon or {LAUNCHER} N DAEMON")
    processes = []
    for i in range(int(argv[1])):
        expanded = [re.sub(r"\{(?:(\d+)\+)?i\}", lambda m: str(int(m.group(1) or 0) + i), a)
                    for a in argv[2:]]
        processes.extend(daemon_processes(expanded))
    return processes


def flag_values(args):
    """{name: value} of --name=value and --name value flags (a bare --flag maps to "")."""
    flags = {}
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("--"):
            raise ValueError(f"argument {a!r} is not a --flag")
        if "=" in a:
            name, value = a[2:].split("=", 1)
        elif i + 1 < len(args) and not args[i + 1].startswith("--"):
            name, value = a[2:], args[i + 1]
            i += 1
        else:
            name, value = a[2:], ""
        if name in flags:
            raise ValueError(f"--{name} given twice")
        flags[name] = value
        i += 1
    return flags


def daemon_help(binary_path):
    """The flags `BINARY --help` lists: {name: environment variable it reads, or None}."""
    text = subprocess.run([binary_path, "--help"], check=True, capture_output=True,
                          text=True).stdout
    flags = {}
    for line in text.splitlines():
        m = re.match(r"^  (?:-\w,)?--([a-z_0-9]+)\b(.*)$", line)
        if m:
            env = re.search(r"\(Env:([A-Z_0-9]+)\)", m.group(2))
            flags[m.group(1)] = env.group(1) if env else None
    if "help" not in flags or len(flags) < 3:
        raise ValueError(f"could not read the flags of {binary_path} --help:\n{text}")
    return flags


def host_port(address):
    """(host, port) of host:port."""
    host, _, port = address.rpartition(":")
    return host, int(port)
