#!/usr/bin/env python3
"""Renders every overlay of deploy/k8s and validates what comes out, offline.

    check_manifests.py --k8s-dir deploy/k8s --server-metrics server/server_metrics.cc \
        [--kubernetes-version 1.30.0] [--kubectl PATH]

Needs PyYAML and kubernetes-validate (deploy/setup_venv.sh makes a venv with both).
1. Render: a small kustomize subset (resources, components, secretGenerator with files,
   images, JSON 6902 patches with a target, `$patch: delete`); anything else in a
   kustomization is refused. Where kubectl is on PATH, `kubectl kustomize` renders each overlay
   too and the two renderings must be the same objects.
2. Schema: every object against the Kubernetes OpenAPI schemas of --kubernetes-version with
   kubernetes-validate --strict; the pod templates inside an MPIJob (a CRD) as v1 PodTemplates;
   PodMonitor (a CRD) by the checks below.
3. What the issue asks of each pod: startup, readiness and liveness probes on every container,
   probes on ports that exist, the gateway's readiness not /live, the server's liveness its
   /live, preStop on server and gateway,
   a grace period above preStop + drain, a gateway's drain timeout above its pod's server's
   (else at the gateway's deadline it ends streams the server is still finishing), non-root pod and locked-down containers, /dev/shm from
   memory for the server, volumes that reference a PVC and a Secret defined in the same render,
   nvidia.com/gpu equal to the tensor-parallel ranks, --metrics-host=0.0.0.0 where the metrics
   port is probed or scraped; Services, the PDB, the PodMonitor select pods with the named
   ports; the HPA scales an object of the render on metrics the server exports; every --flag a
   container passes is defined by its program (ABSL_FLAG in its source, launch_tp.sh's options).
4. Exposure (the security review; exposure_checks.py): no pod mounts a service-account token (unless allow-listed
   in AUTOMOUNT_TOKEN_ALLOWED with its reason); the server passes --host=127.0.0.1 explicitly
   (the gateway beside it is its only client) and no probe aims at a loopback-bound port; the
   gateway passes --host and a loopback --backend that a server of its pod listens on; a
   Service publishes gateway ports only; a container mounts a Secret only if it passes a file
   under it, and such a file is one of the Secret volume's items; Prometheus's scrape key is
   the gateway's --metrics-api-keys-file and not a line of its API keys file; NetworkPolicies
   isolate every pod's ingress and egress, admit from anywhere only the gateway's port, admit
   other ports only from named pods of a named namespace (Prometheus: the metrics port) or from
   the pod's own workload, let Prometheus reach the scraped metrics port, let an MPIJob's pods
   reach each other on every port, and let DNS out; no MPIJob shares its name with a Service
   (the MPI Operator's own headless Service).
Prints one line per finding and exits 1 if there is any. check_manifests_test.py plants each
error these checks exist for in a copy of the tree and expects its finding.
"""
import argparse
import base64
import copy
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

from exposure_checks import (  # noqa: E402  (beside this script)
    AUTOMOUNT_TOKEN_ALLOWED, LOOPBACK, check_exposure, check_network_policies, flag, key)

OVERLAYS = {
    "cpu": {"Deployment", "Service", "PodDisruptionBudget", "PersistentVolumeClaim", "Secret",
            "HorizontalPodAutoscaler", "PodMonitor", "NetworkPolicy"},
    "gpu-1": {"Deployment", "Service", "PodDisruptionBudget", "PersistentVolumeClaim", "Secret",
              "HorizontalPodAutoscaler", "PodMonitor", "NetworkPolicy"},
    "gpu-tp8": {"Deployment", "Service", "PodDisruptionBudget", "PersistentVolumeClaim", "Secret",
                "HorizontalPodAutoscaler", "PodMonitor", "NetworkPolicy"},
    "multinode-mpi": {"MPIJob", "Service", "PodDisruptionBudget", "PersistentVolumeClaim",
                      "Secret", "PodMonitor", "NetworkPolicy"},
}
BINARIES = {"blossom-server", "blossom-gateway", "blossom", "launch_tp.sh", "/usr/sbin/sshd"}
# Where each program's flags are defined (ABSL_FLAG, or launch_tp.sh's case labels).
FLAG_SOURCES = {"blossom-server": ["server/blossom_server_main.cc", "engine/model/cuda_kernel_flags.cc",
                                   "engine/speculative/speculative_flags.cc"],
                "blossom-gateway": ["clients/gateway/gateway_main.cc"],
                "launch_tp.sh": ["deploy/launch_tp.sh"]}
KNOWN_KUSTOMIZATION_FIELDS = {"apiVersion", "kind", "resources", "components", "secretGenerator",
                              "images", "patches"}
# What the render check writes where the git-ignored key files are missing: clients' keys, and
# Prometheus's key (no newline), which must not be one of them.
STAND_IN_KEYS = (("api-keys.txt", "render-check-key\n"), ("scrape-key.txt", "render-scrape-key"))


class RenderError(Exception):
    pass


def load_all(path):
    with open(path, encoding="utf-8") as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def kustomization(directory):
    path = os.path.join(directory, "kustomization.yaml")
    if not os.path.exists(path):
        raise RenderError(f"{directory}: no kustomization.yaml")
    k = load_all(path)[0]
    unknown = set(k) - KNOWN_KUSTOMIZATION_FIELDS
    if unknown:
        raise RenderError(f"{path}: fields this renderer does not implement: {sorted(unknown)}")
    return k


def json_pointer(doc, path):
    parts = [p.replace("~1", "/").replace("~0", "~") for p in path.lstrip("/").split("/")]
    parent = doc
    for p in parts[:-1]:
        parent = parent[int(p)] if isinstance(parent, list) else parent[p]
    return parent, parts[-1]


def apply_json6902(obj, ops, where):
    for op in ops:
        parent, key = json_pointer(obj, op["path"])
        kind = op["op"]
        try:
            if isinstance(parent, list):
                index = len(parent) if key == "-" else int(key)
                if kind == "add":
                    parent.insert(index, copy.deepcopy(op["value"]))
                elif kind == "replace":
                    parent[index] = copy.deepcopy(op["value"])
                elif kind == "remove":
                    del parent[index]
                else:
                    raise RenderError(f"{where}: unsupported op {kind}")
            else:
                if kind in ("replace", "remove") and key not in parent:
                    raise RenderError(f"{where}: {kind} {op['path']}: no such field")
                if kind in ("add", "replace"):
                    parent[key] = copy.deepcopy(op["value"])
                elif kind == "remove":
                    del parent[key]
                else:
                    raise RenderError(f"{where}: unsupported op {kind}")
        except (IndexError, KeyError, ValueError) as e:
            raise RenderError(f"{where}: {kind} {op['path']}: {e}")


def matches(obj, target):
    group, _, version = obj["apiVersion"].rpartition("/")
    return (target.get("kind", obj["kind"]) == obj["kind"]
            and target.get("name", obj["metadata"]["name"]) == obj["metadata"]["name"]
            and target.get("group", group) == group
            and target.get("version", version) == version)


def set_images(node, images):
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("containers", "initContainers") and isinstance(value, list):
                for c in value:
                    name, _, tag = c.get("image", "").partition(":")
                    for img in images:
                        if img["name"] == name:
                            c["image"] = f"{img.get('newName', name)}:{img.get('newTag', tag)}"
            set_images(value, images)
    elif isinstance(node, list):
        for v in node:
            set_images(v, images)


def render(directory, component=False):
    k = kustomization(directory)
    expected = "Component" if component else "Kustomization"
    if k.get("kind", "Kustomization") != expected:
        raise RenderError(f"{directory}: kind {k.get('kind')} where {expected} was expected")
    objs = []
    for r in k.get("resources", []):
        path = os.path.normpath(os.path.join(directory, r))
        objs += render(path) if os.path.isdir(path) else load_all(path)
    for gen in k.get("secretGenerator", []):
        data = {}
        for f in gen.get("files", []):
            key, _, name = f.partition("=")
            with open(os.path.join(directory, name or key), "rb") as fh:
                data[key] = base64.b64encode(fh.read()).decode()
        if not gen.get("options", {}).get("disableNameSuffixHash"):
            raise RenderError(f"{directory}: secretGenerator without disableNameSuffixHash")
        objs.append({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": gen["name"]},
                     "type": "Opaque", "data": data})
    for c in k.get("components", []):
        objs += render(os.path.normpath(os.path.join(directory, c)), component=True)
    for p in k.get("patches", []):
        docs = load_all(os.path.join(directory, p["path"]))
        where = os.path.join(directory, p["path"])
        if len(docs) == 1 and isinstance(docs[0], list):
            hit = [o for o in objs if matches(o, p.get("target", {}))]
            if not hit:
                raise RenderError(f"{where}: the target matches nothing")
            for o in hit:
                apply_json6902(o, docs[0], where)
        elif len(docs) == 1 and docs[0].get("$patch") == "delete":
            d = docs[0]
            before = len(objs)
            objs = [o for o in objs if not (o["kind"] == d["kind"] and o["apiVersion"] == d["apiVersion"]
                                            and o["metadata"]["name"] == d["metadata"]["name"])]
            if len(objs) == before:
                raise RenderError(f"{where}: deletes nothing")
        else:
            raise RenderError(f"{where}: only JSON 6902 patches and $patch: delete are supported")
    if k.get("images"):
        set_images(objs, k["images"])
    return objs


def strip_empty(node):
    """kustomize drops empty maps and nulls in places; compare without them."""
    if isinstance(node, dict):
        return {k: strip_empty(v) for k, v in node.items() if v not in (None, {}, [])}
    if isinstance(node, list):
        return [strip_empty(v) for v in node]
    return node


def pod_templates(objs):
    """(where, pod template, owner object) for every workload in the render."""
    out = []
    for o in objs:
        if o["kind"] in ("Deployment", "StatefulSet", "DaemonSet", "Job"):
            out.append((f"{o['kind']}/{o['metadata']['name']}", o["spec"]["template"], o))
        elif o["kind"] == "MPIJob":
            for role, spec in o["spec"]["mpiReplicaSpecs"].items():
                out.append((f"MPIJob/{o['metadata']['name']}/{role}", spec["template"], o))
    return out


def check(overlay, objs, metric_names, version, findings):
    import kubernetes_validate

    def bad(text):
        findings.append(f"{overlay}: {text}")

    kinds = {o["kind"] for o in objs}
    if kinds != OVERLAYS[overlay]:
        bad(f"renders kinds {sorted(kinds)}, expected {sorted(OVERLAYS[overlay])}")
    by_key = {key(o): o for o in objs}

    def schema(obj, where):
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as e:
            bad(f"{where}: {e.message} at {'/'.join(str(p) for p in e.path)}")
        except kubernetes_validate.SchemaNotFoundError as e:
            bad(f"{where}: no schema: {e}")

    for o in objs:
        if o["kind"] in ("MPIJob", "PodMonitor"):
            continue
        schema(o, f"{o['kind']}/{o['metadata']['name']}")

    templates = pod_templates(objs)
    for where, tpl, owner in templates:
        if owner["kind"] == "MPIJob":
            schema({"apiVersion": "v1", "kind": "PodTemplate",
                    "metadata": {"name": where.replace("/", "-").lower()}, "template": tpl}, where)
        spec = tpl["spec"]
        psc = spec.get("securityContext", {})
        if psc.get("runAsNonRoot") is not True:
            bad(f"{where}: pod securityContext.runAsNonRoot is not true")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        for v in volumes.values():
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"]["claimName"]
                if ("PersistentVolumeClaim", claim) not in by_key:
                    bad(f"{where}: volume {v['name']} uses PVC {claim}, which the render does not define")
            if "secret" in v:
                name = v["secret"]["secretName"]
                secret = by_key.get(("Secret", name))
                if secret is None:
                    bad(f"{where}: volume {v['name']} uses Secret {name}, which the render does not define")
                else:
                    for item in v["secret"].get("items", []):
                        if item["key"] not in secret.get("data", {}):
                            bad(f"{where}: Secret {name} has no key {item['key']}")
        pod_ports = {}
        for c in spec["containers"]:
            for p in c.get("ports", []):
                pod_ports[p.get("name")] = p["containerPort"]
        grace = spec.get("terminationGracePeriodSeconds", 30)
        drains = {True: [], False: []}  # --drain-timeout of the pod's servers (True), gateways
        for c in spec["containers"]:
            cw = f"{where}/{c['name']}"
            argv = c.get("command", []) + c.get("args", [])
            if not argv or argv[0] not in BINARIES:
                bad(f"{cw}: runs {argv[:1]}, not one of the image's programs {sorted(BINARIES)}")
            program = argv[0] if argv else ""
            inner = argv[argv.index("--") + 1:] if "--" in argv else argv
            runs_server = "blossom-server" in inner[:1]
            runs_gateway = program == "blossom-gateway"
            csc = c.get("securityContext", {})
            if (csc.get("allowPrivilegeEscalation") is not False
                    or csc.get("readOnlyRootFilesystem") is not True
                    or "ALL" not in csc.get("capabilities", {}).get("drop", [])):
                bad(f"{cw}: securityContext must set allowPrivilegeEscalation false, "
                    "readOnlyRootFilesystem true and drop ALL capabilities")
            own_ports = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                pr = c.get(probe)
                if not pr:
                    bad(f"{cw}: no {probe}")
                    continue
                for handler in ("httpGet", "tcpSocket", "grpc"):
                    if handler in pr:
                        port = pr[handler]["port"]
                        if isinstance(port, str) and port not in own_ports:
                            bad(f"{cw}: {probe} uses port {port}, which the container does not name")
                        if isinstance(port, int) and port not in pod_ports.values():
                            bad(f"{cw}: {probe} uses port {port}, which no container of the pod opens")
            if runs_server:
                live = c.get("livenessProbe", {})
                if live.get("httpGet", {}).get("path") != "/live":
                    bad(f"{cw}: the server's liveness probe is not its /live (only /live goes false "
                        "when the engine failed for good, which a restart cures)")
            if runs_gateway:
                ready = c.get("readinessProbe", {})
                if ready.get("httpGet", {}).get("path") != "/health":
                    bad(f"{cw}: the gateway's readiness probe is not its /health (only /health "
                        "goes false while the gateway drains or the server is not serving)")
            if runs_server or runs_gateway:
                pre = c.get("lifecycle", {}).get("preStop")
                if not pre:
                    bad(f"{cw}: no preStop (a rollout would cut streams before endpoints update)")
                sleep = 0
                if pre and "exec" in pre and pre["exec"]["command"][:1] == ["sleep"]:
                    sleep = int(pre["exec"]["command"][1])
                elif pre and "sleep" in pre:
                    sleep = int(pre["sleep"]["seconds"])
                drain = float(flag(inner if runs_server else argv, "drain-timeout") or 30)
                drains[runs_server].append((cw, drain))
                if grace < sleep + drain + 10:
                    bad(f"{cw}: terminationGracePeriodSeconds {grace} < preStop {sleep} s + "
                        f"drain {drain:g} s + 10 s")
            if runs_server:
                mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
                shm = volumes.get(mounts.get("/dev/shm", ""), {})
                if shm.get("emptyDir", {}).get("medium") != "Memory":
                    bad(f"{cw}: /dev/shm is not an emptyDir in memory")
                if flag(inner, "metrics-host") != "0.0.0.0":
                    bad(f"{cw}: --metrics-host=0.0.0.0 missing (the liveness probe and "
                        "Prometheus reach the metrics port from outside the pod)")
                if flag(inner, "api-keys-file") and "/etc/blossom" not in mounts:
                    bad(f"{cw}: --api-keys-file without the api-keys volume")
                tp = int(flag(inner, "tp") or 1)
                gpus = int(c.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
                if flag(inner, "backend") == "cuda":
                    if gpus == 0:
                        bad(f"{cw}: --backend=cuda without an nvidia.com/gpu limit")
                    elif flag(inner, "launcher") == "mpi":
                        total = gpus
                        for role, rs in owner["spec"]["mpiReplicaSpecs"].items():
                            if role != "Launcher":
                                for wc in rs["template"]["spec"]["containers"]:
                                    total += rs.get("replicas", 1) * int(
                                        wc.get("resources", {}).get("limits", {}).get("nvidia.com/gpu", 0))
                        np_ = int(flag(argv, "np") or 0)
                        if not (tp == np_ == total):
                            bad(f"{cw}: --tp {tp}, --np {np_} and the GPUs of the job ({total}) differ")
                        if owner["spec"].get("slotsPerWorker") != gpus:
                            bad(f"{cw}: slotsPerWorker is not the GPUs per pod ({gpus})")
                    elif gpus != tp:
                        bad(f"{cw}: nvidia.com/gpu {gpus} != --tp {tp}")
                elif gpus:
                    bad(f"{cw}: requests GPUs without --backend=cuda")
                else:
                    # The CPU backend's default is every core it may run on: with no CPU limit
                    # that is the whole node, spinning at the pod's CPU share.
                    cpu = str(c.get("resources", {}).get("requests", {}).get("cpu", "0"))
                    cpus = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
                    threads = int(flag(inner, "threads") or 0)
                    if threads < 1 or threads * tp > cpus:
                        bad(f"{cw}: the CPU backend needs --threads (per rank) x --tp within the "
                            f"CPU request ({cpu}), got --threads={threads or 'unset'}")
            for m in c.get("volumeMounts", []):
                if m["name"] not in volumes:
                    bad(f"{cw}: mounts {m['name']}, which is not a volume of the pod")
        for gateway, gateway_drain in drains[False]:
            for server, server_drain in drains[True]:
                if gateway_drain <= server_drain:
                    bad(f"{gateway}: --drain-timeout {gateway_drain:g} s is not above {server}'s "
                        f"{server_drain:g} s (the gateway would end streams the server is still "
                        "finishing; give it the server's + 5 s)")

    def selected(selector):
        labels = selector.get("matchLabels", selector) if selector else {}
        return [(w, t) for w, t, _ in templates
                if labels and all(t["metadata"].get("labels", {}).get(k) == v
                                  for k, v in labels.items())]

    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Service":
            pods = selected(o["spec"]["selector"])
            if not pods:
                bad(f"{name}: selects no pod")
            for p in o["spec"]["ports"]:
                tp_ = p.get("targetPort", p["port"])
                for w, t in pods:
                    names = {q.get("name") for c in t["spec"]["containers"] for q in c.get("ports", [])}
                    if isinstance(tp_, str) and tp_ not in names:
                        bad(f"{name}: targetPort {tp_} is not a port of {w}")
        elif o["kind"] == "PodDisruptionBudget":
            if not selected(o["spec"]["selector"]):
                bad(f"{name}: selects no pod")
        elif o["kind"] == "PodMonitor":
            spec = o.get("spec", {})
            pods = selected(spec.get("selector", {}))
            if not pods:
                bad(f"{name}: selects no pod")
            endpoints = spec.get("podMetricsEndpoints", [])
            if not endpoints:
                bad(f"{name}: no podMetricsEndpoints")
            scraped = set()
            for ep in endpoints:
                for w, t in pods:
                    containers = [c for c in t["spec"]["containers"]
                                  if ep.get("port") in {q.get("name") for q in c.get("ports", [])}]
                    if not containers:
                        bad(f"{name}: port {ep.get('port')} is no container port of {w}")
                    scraped |= {c["name"] for c in containers}
                cred = ep.get("authorization", {}).get("credentials")
                if cred and ("Secret", cred["name"]) not in by_key:
                    bad(f"{name}: credentials Secret {cred['name']} is not defined")
                elif cred:
                    secret = by_key[("Secret", cred["name"])]
                    value = {**secret.get("data", {}), **secret.get("stringData", {})}.get(cred["key"])
                    if value is None:
                        bad(f"{name}: credentials key {cred['key']} is not in Secret {cred['name']}")
                    elif cred["key"] == "keys":
                        # Sent verbatim as the Bearer token: a keys file (one per line, a final
                        # newline) is refused by Prometheus's HTTP client.
                        bad(f"{name}: credentials are the whole keys file; use a single-key entry")
            if not {"server", "gateway"} <= scraped:
                bad(f"{name}: scrapes {sorted(scraped)}, not both server and gateway")
        elif o["kind"] == "HorizontalPodAutoscaler":
            ref = o["spec"]["scaleTargetRef"]
            if (ref["kind"], ref["name"]) not in by_key:
                bad(f"{name}: scales {ref['kind']}/{ref['name']}, which the render does not define")
            for m in o["spec"].get("metrics", []):
                metric = m.get(m["type"][0].lower() + m["type"][1:], {}).get("metric", {}).get("name")
                if m["type"] in ("Pods", "Object") and metric not in metric_names:
                    bad(f"{name}: scales on {metric}, which blossom-server does not export")
        elif o["kind"] == "MPIJob":
            rs = o["spec"].get("mpiReplicaSpecs", {})
            if set(rs) != {"Launcher", "Worker"}:
                bad(f"{name}: mpiReplicaSpecs must be Launcher and Worker")
            worker = rs.get("Worker", {}).get("template", {})
            labels = worker.get("metadata", {}).get("labels", {})
            for c in worker.get("spec", {}).get("containers", []):
                command = " ".join(c.get("lifecycle", {}).get("preStop", {})
                                   .get("exec", {}).get("command", []))
                # The worker's ranks must outlive its sshd's SIGTERM until rank 0 has drained.
                if "blossom-serve[r]" not in command:
                    bad(f"{name}: worker container {c['name']} has no preStop that waits for its "
                        "ranks (sshd's exit at SIGTERM would end the job undrained)")
            protected = any(
                p["kind"] == "PodDisruptionBudget"
                and p["spec"].get("maxUnavailable") == 0
                and all(labels.get(k) == v
                        for k, v in p["spec"]["selector"].get("matchLabels", {}).items())
                for p in objs)
            if not protected:
                bad(f"{name}: no PodDisruptionBudget with maxUnavailable 0 selects the worker "
                    "(evicting it alone ends the job undrained)")

    check_exposure(objs, templates, bad)
    check_network_policies(objs, templates, bad)


def defined_flags(root):
    """{program: set of flag names, dashes as underscores} from the programs' sources."""
    flags = {}
    for program, paths in FLAG_SOURCES.items():
        names = []
        for path in paths:
            with open(os.path.join(root, path), encoding="utf-8") as f:
                text = f.read()
            if path.endswith(".sh"):
                names += re.findall(r"^\s*--([a-z][a-z0-9-]*)\)", text, re.M)
            else:
                names += re.findall(r"ABSL_FLAG\(\s*[\w:<>]+\s*,\s*(\w+)\s*,", text)
        flags[program] = {n.replace("-", "_") for n in names}
        if not flags[program]:
            raise RenderError(f"{', '.join(paths)}: no flag definitions found")
    return flags


def check_flags(overlay, objs, flags, findings, notes):
    """Every --flag a container passes is one its program defines."""
    for where, tpl, _ in pod_templates(objs):
        for c in tpl["spec"]["containers"]:
            argv = c.get("command", []) + c.get("args", [])
            segments = [argv]
            if argv[:1] == ["launch_tp.sh"] and "--" in argv:
                i = argv.index("--")
                segments = [argv[:i], argv[i + 1:]]
            for seg in segments:
                program = seg[0] if seg else ""
                if program not in flags:
                    continue
                for a in seg[1:]:
                    if not a.startswith("--") or a == "--":
                        continue
                    name = a[2:].split("=", 1)[0].replace("-", "_")
                    if name in flags[program]:
                        continue
                    findings.append(f"{overlay}: {where}/{c['name']}: {program} has no flag "
                                    f"--{name} ({', '.join(FLAG_SOURCES[program])})")


def kubectl_render(kubectl, overlay_dir):
    r = subprocess.run([kubectl, "kustomize", overlay_dir], capture_output=True, text=True)
    if r.returncode != 0:
        raise RenderError(f"kubectl kustomize {overlay_dir}: {r.stderr.strip()}")
    return [d for d in yaml.safe_load_all(r.stdout) if d is not None]


def run(k8s_dir, server_metrics, version="1.30.0", kubectl=None, source_root=".", out=print):
    """Renders and checks every overlay of k8s_dir; returns (findings, notes)."""
    flags = defined_flags(source_root)
    notes = set()
    with open(server_metrics, encoding="utf-8") as f:
        metric_names = set(re.findall(r'"(blossom_[a-z_]+)"', f.read()))

    # A copy with stand-in key files (the real ones are git-ignored and never in CI).
    tmp = tempfile.mkdtemp(prefix="blossom-k8s-")
    try:
        tree = os.path.join(tmp, "k8s")
        shutil.copytree(k8s_dir, tree)
        for name, text in STAND_IN_KEYS:
            path = os.path.join(tree, "base", name)
            if not os.path.exists(path):
                with open(path, "w") as f:
                    f.write(text)

        findings = []
        overlays = sorted(os.listdir(os.path.join(tree, "overlays")))
        if set(overlays) != set(OVERLAYS):
            findings.append(f"overlays {overlays}, expected {sorted(OVERLAYS)}")
        for overlay in sorted(OVERLAYS):
            directory = os.path.join(tree, "overlays", overlay)
            try:
                objs = render(directory)
            except (RenderError, OSError, KeyError) as e:
                findings.append(f"{overlay}: render: {e}")
                continue
            if kubectl:
                try:
                    theirs = {key(o): strip_empty(o) for o in kubectl_render(kubectl, directory)}
                    ours = {key(o): strip_empty(o) for o in objs}
                    if set(theirs) != set(ours):
                        findings.append(f"{overlay}: kubectl kustomize renders {sorted(theirs)}, "
                                        f"this renderer {sorted(ours)}")
                    for k in sorted(set(theirs) & set(ours)):
                        if theirs[k] != ours[k]:
                            findings.append(f"{overlay}: {k[0]}/{k[1]} differs between kubectl "
                                            "kustomize and this renderer")
                except RenderError as e:
                    findings.append(f"{overlay}: {e}")
            check(overlay, objs, metric_names, version, findings)
            check_flags(overlay, objs, flags, findings, notes)
            out(f"{overlay}: {len(objs)} objects rendered and checked")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return findings, notes


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--k8s-dir", required=True)
    parser.add_argument("--server-metrics", required=True,
                        help="server/server_metrics.cc: the metric names the server exports")
    parser.add_argument("--kubernetes-version", default="1.30.0")
    parser.add_argument("--kubectl", default=shutil.which("kubectl"))
    parser.add_argument("--source-root", default=".",
                        help="where server/, clients/ and deploy/launch_tp.sh are (flag names)")
    args = parser.parse_args()
    findings, notes = run(args.k8s_dir, args.server_metrics, args.kubernetes_version,
                          args.kubectl, args.source_root)
    for n in sorted(notes):
        print(n)
    for f in findings:
        print("FAIL:", f)
    print(f"check_manifests: {len(OVERLAYS)} overlays, Kubernetes {args.kubernetes_version}, "
          f"kubectl kustomize {'compared' if args.kubectl else 'not found (built-in renderer only)'}"
          f", {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
