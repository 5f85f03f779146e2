"""What the manifests expose, checked for check_manifests.py (its part 4): service-account
tokens, bind addresses, Secret mounts, Service ports, the scrape key, NetworkPolicies.

Split from check_manifests.py, which imports these; `bad(message)` records a finding.
"""
import base64

# Pod templates ("Kind/name[/role]") that may mount a service-account token, each with the
# reason. None: no Blossom pod talks to the Kubernetes API (the MPI Operator's v2beta1 launcher
# starts the remote ranks over ssh, not `kubectl exec`).
AUTOMOUNT_TOKEN_ALLOWED = {}
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


def key(o):
    return (o["kind"], o["metadata"]["name"])


def flag(args, name):
    for a in args:
        if a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    for i, a in enumerate(args[:-1]):
        if a == f"--{name}":
            return args[i + 1]
    return None


def argv_of(c):
    """(argv, the command after launch_tp.sh's `--` or argv itself) of a container."""
    argv = c.get("command", []) + c.get("args", [])
    return argv, (argv[argv.index("--") + 1:] if "--" in argv else argv)


def is_server(c):
    return argv_of(c)[1][:1] == ["blossom-server"]


def is_gateway(c):
    return argv_of(c)[0][:1] == ["blossom-gateway"]


def label_match(selector, labels):
    """metav1.LabelSelector semantics: an empty selector selects every pod."""
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        k, op, values = e["key"], e["operator"], e.get("values", [])
        if ((op == "In" and labels.get(k) not in values)
                or (op == "NotIn" and k in labels and labels[k] in values)
                or (op == "Exists" and k not in labels)
                or (op == "DoesNotExist" and k in labels)):
            return False
    return True


def pod_labels(tpl):
    return tpl.get("metadata", {}).get("labels", {}) or {}


def policy_types(np):
    spec = np.get("spec", {})
    if "policyTypes" in spec:
        return set(spec["policyTypes"])
    return {"Ingress"} | ({"Egress"} if "egress" in spec else set())


def port_table(spec):
    """[(container, port name, number, protocol)] of a pod."""
    return [(c["name"], p.get("name"), p["containerPort"], p.get("protocol", "TCP"))
            for c in spec["containers"] for p in c.get("ports", [])]


def resolve_ports(ports, table):
    """(set of table entries a NetworkPolicy rule's ports admit, or None for every port;
    the port specs that name no port of the pod)."""
    if not ports:
        return None, []
    hit, unknown = set(), []
    for spec in ports:
        proto, port, end = spec.get("protocol", "TCP"), spec.get("port"), spec.get("endPort")
        found = {e for e in table if e[3] == proto and (
            port is None or (isinstance(port, str) and e[1] == port)
            or (isinstance(port, int) and (e[2] == port or (end and port <= e[2] <= end))))}
        if not found:
            unknown.append(f"{port}/{proto}")
        hit |= found
    return hit, unknown


def classify_peer(peer):
    """(kind, words) of a NetworkPolicy peer: anywhere, namespace (every pod of namespaces),
    every-namespace (matching pods of every namespace), pods-elsewhere (matching pods of
    matching namespaces) or same-namespace (matching pods of the policy's namespace)."""
    if "ipBlock" in peer:
        return "anywhere", f"ipBlock {peer['ipBlock'].get('cidr')}"
    ns, pod = peer.get("namespaceSelector"), peer.get("podSelector")
    ns_all = ns is not None and not (ns.get("matchLabels") or ns.get("matchExpressions"))
    pod_all = pod is None or not (pod.get("matchLabels") or pod.get("matchExpressions"))
    if ns is None:
        return ("namespace" if pod_all else "same-namespace"), f"pods {pod} of its namespace"
    if ns_all and pod_all:
        return "anywhere", "every pod of every namespace"
    if pod_all:
        return "namespace", f"every pod of namespaces {ns}"
    if ns_all:
        return "every-namespace", f"pods {pod} of every namespace"
    return "pods-elsewhere", f"pods {pod} of namespaces {ns}"


def secret_value(by_key, name, item):
    secret = by_key.get(("Secret", name), {})
    if item in secret.get("stringData", {}):
        return secret["stringData"][item]
    data = secret.get("data", {}).get(item)
    return None if data is None else base64.b64decode(data).decode("utf-8", "replace")


def secret_file(tpl, c, path):
    """(Secret name, key) that the file `path` of container c holds, or None."""
    volumes = {v["name"]: v for v in tpl["spec"].get("volumes", [])}
    for m in c.get("volumeMounts", []):
        root = m["mountPath"].rstrip("/") + "/"
        v = volumes.get(m["name"], {})
        if path and path.startswith(root) and "secret" in v:
            rel = path[len(root):]
            items = v["secret"].get("items")
            if not items:
                return v["secret"]["secretName"], rel
            for i in items:
                if i["path"] == rel:
                    return v["secret"]["secretName"], i["key"]
    return None


def check_exposure(objs, templates, bad):
    """Tokens, bind addresses, Secret mounts, what Services publish, the scrape key."""
    by_key = {key(o): o for o in objs}
    for where, tpl, owner in templates:
        spec = tpl["spec"]
        if (spec.get("automountServiceAccountToken") is not False
                and where not in AUTOMOUNT_TOKEN_ALLOWED):
            bad(f"{where}: automountServiceAccountToken is not false (no Blossom pod talks to the "
                "Kubernetes API; a mounted token is one more credential for whoever breaks in; "
                "allow-list it in AUTOMOUNT_TOKEN_ALLOWED with the reason if one must)")
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        servers = [c for c in spec["containers"] if is_server(c)]
        mounted = set()
        for c in spec["containers"]:
            cw = f"{where}/{c['name']}"
            argv, inner = argv_of(c)
            for m in c.get("volumeMounts", []):
                mounted.add(m["name"])
                v = volumes.get(m["name"], {})
                if "secret" not in v:
                    continue
                root = m["mountPath"].rstrip("/") + "/"
                used = [a[a.index(root):] for a in argv if root in a]
                if not used:
                    bad(f"{cw}: mounts Secret {v['secret']['secretName']} at {m['mountPath']} but "
                        "passes no file under it (a process that does not read those keys must "
                        "not hold them)")
                items = [i["path"] for i in v["secret"].get("items", [])]
                for path in used:
                    if items and path[len(root):] not in items:
                        bad(f"{cw}: {path} is not a file of volume {m['name']} (items {items})")
            own = {p.get("name"): p["containerPort"] for p in c.get("ports", [])}
            if c in servers:
                host = flag(inner, "host")
                if host is None:
                    bad(f"{cw}: no --host: pass --host=127.0.0.1 explicitly (the gateway beside it "
                        "is its only client; the default has changed before)")
                elif host not in LOOPBACK:
                    bad(f"{cw}: --host={host} opens gRPC to other pods; bind 127.0.0.1 (the "
                        "gateway in the pod reaches it over loopback)")
                loopback_ports = set()
                if (host or "127.0.0.1") in LOOPBACK:
                    loopback_ports.add(int(flag(inner, "port") or 8033))
                if (flag(inner, "metrics-host") or "127.0.0.1") in LOOPBACK:
                    loopback_ports.add(int(flag(inner, "metrics-port") or 9090))
                for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
                    for handler, action in (c.get(probe) or {}).items():
                        if handler in ("httpGet", "tcpSocket", "grpc"):
                            port = own.get(action["port"], action["port"])
                            if port in loopback_ports:
                                bad(f"{cw}: {probe} aims at port {port}, which the server binds "
                                    "to loopback (the kubelet probes the pod IP); probe /health "
                                    "on the metrics port")
                for p in c.get("ports", []):
                    if p["containerPort"] in loopback_ports:
                        bad(f"{cw}: declares port {p.get('name')} ({p['containerPort']}), which "
                            "it binds to loopback")
            if is_gateway(c):
                ghost = flag(argv, "host")
                if ghost is None or ghost in LOOPBACK:
                    bad(f"{cw}: --host={ghost or 'unset (127.0.0.1)'}: the Service and the kubelet "
                        "reach the gateway on the pod IP; pass --host=0.0.0.0")
                backend = flag(argv, "backend") or "127.0.0.1:8033"
                bhost, _, bport = backend.rpartition(":")
                if bhost not in LOOPBACK:
                    bad(f"{cw}: --backend={backend}: the server is beside it, on loopback")
                elif not any(str(flag(argv_of(sv)[1], "port") or 8033) == bport for sv in servers):
                    bad(f"{cw}: --backend={backend}: no server of the pod listens on port {bport}")
        for name, v in volumes.items():
            if "secret" in v and name not in mounted:
                bad(f"{where}: Secret volume {name} is mounted by no container")

    def selected(selector):
        return [(w, t) for w, t, _ in templates
                if selector and all(pod_labels(t).get(k) == v for k, v in selector.items())]

    for o in objs:
        name = f"{o['kind']}/{o['metadata']['name']}"
        if o["kind"] == "Service":
            for p in o["spec"]["ports"]:
                target = p.get("targetPort", p["port"])
                for w, t in selected(o["spec"].get("selector", {})):
                    for c in t["spec"]["containers"]:
                        ports = {q["containerPort"] for q in c.get("ports", [])} | {
                            q.get("name") for q in c.get("ports", [])}
                        if target in ports and not is_gateway(c):
                            bad(f"{name}: port {p.get('name')} publishes {target} of {w}/{c['name']}; "
                                "only the gateway's port may be published (the server's gRPC is "
                                "for the gateway over loopback, its metrics are scraped pod by pod)")
        elif o["kind"] == "PodMonitor":
            spec = o.get("spec", {})
            for ep in spec.get("podMetricsEndpoints", []):
                cred = ep.get("authorization", {}).get("credentials")
                for w, t in selected(spec.get("selector", {}).get("matchLabels", {})):
                    for c in t["spec"]["containers"]:
                        names = {q.get("name") for q in c.get("ports", [])}
                        if not is_gateway(c) or ep.get("port") not in names:
                            continue
                        argv = argv_of(c)[0]
                        if not cred:
                            bad(f"{name}: scrapes {w}/{c['name']} /metrics without a key")
                            continue
                        metrics_file = flag(argv, "metrics-api-keys-file")
                        src = secret_file(t, c, metrics_file)
                        if src != (cred["name"], cred["key"]):
                            holds = f"Secret {src[0]} key {src[1]}" if src else "no Secret file"
                            bad(f"{name}: Prometheus sends Secret {cred['name']} key {cred['key']}, but "
                                f"{w}/{c['name']}'s --metrics-api-keys-file is "
                                f"{metrics_file or 'unset'} ({holds}): the scrape key belongs there, "
                                "accepted on /metrics only")
                        scrape = secret_value(by_key, cred["name"], cred["key"])
                        keys_src = secret_file(t, c, flag(argv, "api-keys-file"))
                        keys = secret_value(by_key, *keys_src) if keys_src else None
                        lines = {line.strip() for line in (keys or "").splitlines()}
                        if scrape and scrape.strip() in lines:
                            bad(f"{name}: the scrape key (Secret {cred['name']} key {cred['key']}) is "
                                f"also a line of {w}/{c['name']}'s --api-keys-file (Secret "
                                f"{keys_src[0]} key {keys_src[1]}): that makes it a full inference "
                                "key; keep it out of api-keys.txt")
        elif o["kind"] == "MPIJob" and ("Service", o["metadata"]["name"]) in by_key:
            bad(f"{name}: shares its name with Service/{o['metadata']['name']}: the MPI Operator "
                "creates a headless Service of the job's name and will not run the job beside one "
                "it does not own")


def check_network_policies(objs, templates, bad):
    """Every pod isolated both ways; what is admitted, and from where."""
    nps = [o for o in objs if o["kind"] == "NetworkPolicy"]
    scraped = {}  # pod template -> port names a PodMonitor scrapes
    for o in objs:
        if o["kind"] == "PodMonitor":
            sel = o.get("spec", {}).get("selector", {})
            for w, t, _ in templates:
                if ((sel.get("matchLabels") or sel.get("matchExpressions"))
                        and label_match(sel, pod_labels(t))):
                    scraped.setdefault(w, set()).update(
                        ep.get("port") for ep in o["spec"].get("podMetricsEndpoints", []))
    for np in nps:
        if not any(label_match(np["spec"].get("podSelector", {}), pod_labels(t))
                   for _, t, _ in templates):
            bad(f"NetworkPolicy/{np['metadata']['name']}: selects no pod of the render")

    def same_workload(peer, owner):
        """The peer's pods in the render (it selects at least one) all belong to `owner`."""
        hit = [o for _, t, o in templates if label_match(peer.get("podSelector", {}), pod_labels(t))]
        return bool(hit) and all(o is owner for o in hit)

    for where, tpl, owner in templates:
        labels = pod_labels(tpl)
        mine = [np for np in nps if label_match(np["spec"].get("podSelector", {}), labels)]
        table = port_table(tpl["spec"])
        gateway = {e for e in table for c in tpl["spec"]["containers"]
                   if c["name"] == e[0] and is_gateway(c)}
        # An MPIJob's pods talk to each other on ephemeral ports (ssh, MPI, NCCL).
        job_pods = ([(w, t) for w, t, o in templates if o is owner]
                    if owner["kind"] == "MPIJob" else [])

        ingress = [(np, r) for np in mine if "Ingress" in policy_types(np)
                   for r in np["spec"].get("ingress", []) or []]
        if not any("Ingress" in policy_types(np) for np in mine):
            bad(f"{where}: no NetworkPolicy selects it for Ingress: every port is open to the cluster")
        else:
            prometheus = set()
            for np, r in ingress:
                npw = f"NetworkPolicy/{np['metadata']['name']}"
                ports, unknown = resolve_ports(r.get("ports"), table)
                for u in unknown:
                    bad(f"{where}: {npw} admits port {u}, which the pod does not open")
                restricted = (set(table) if ports is None else ports) - gateway
                for peer in (r.get("from") or [{"ipBlock": {"cidr": "0.0.0.0/0"}}]):
                    kind, words = classify_peer(peer)
                    names = sorted(f"{e[1] or e[2]} ({e[0]})" for e in restricted)
                    if kind in ("anywhere", "namespace", "every-namespace"):
                        if ports is None:
                            bad(f"{where}: {npw} admits every port from {words}")
                        elif restricted:
                            bad(f"{where}: {npw} admits {names} from {words}; only the gateway's "
                                "port may be open that widely")
                    elif kind == "same-namespace" and not same_workload(peer, owner):
                        bad(f"{where}: {npw} admits {words}, which are not (only) its own "
                            "workload's pods")
                    elif kind == "pods-elsewhere":
                        prometheus |= {e[1] for e in (set(table) if ports is None else ports)}
            for port in sorted(scraped.get(where, set()) - {e[1] for e in gateway}):
                if port not in prometheus:
                    bad(f"{where}: no NetworkPolicy admits Prometheus (named pods of a named "
                        f"namespace) to port {port}, which a PodMonitor scrapes")
            for w2, t2 in job_pods:
                if not any(not r.get("ports") and any(
                        classify_peer(p)[0] == "same-namespace"
                        and label_match(p.get("podSelector", {}), pod_labels(t2))
                        for p in r.get("from") or []) for _, r in ingress):
                    bad(f"{where}: no NetworkPolicy admits {w2} on every port (ssh, MPI and NCCL "
                        "between the job's pods use ephemeral ports)")

        egress = [(np, r) for np in mine if "Egress" in policy_types(np)
                  for r in np["spec"].get("egress", []) or []]
        if not any("Egress" in policy_types(np) for np in mine):
            bad(f"{where}: no NetworkPolicy selects it for Egress: it may connect anywhere (the "
                "cluster's services, the API server, the cloud's metadata endpoint)")
            continue
        dns = False
        for np, r in egress:
            npw = f"NetworkPolicy/{np['metadata']['name']}"
            ports = r.get("ports") or []
            if any(p.get("port") == 53 and p.get("protocol", "TCP") == "UDP" for p in ports):
                dns = True
            for peer in (r.get("to") or [{"ipBlock": {"cidr": "0.0.0.0/0"}}]):
                kind, words = classify_peer(peer)
                if kind == "same-namespace" and same_workload(peer, owner):
                    continue
                if kind != "pods-elsewhere" and (not ports or any(p.get("port") != 53 for p in ports)):
                    bad(f"{where}: {npw} lets it connect to {words} on "
                        f"{'every port' if not ports else sorted(str(p.get('port')) for p in ports)}; "
                        "only DNS (53) may go that widely")
        if not dns:
            bad(f"{where}: its egress NetworkPolicies block DNS (UDP 53)")
        for w2, t2 in job_pods:
            if not any(not r.get("ports") and any(
                    classify_peer(p)[0] == "same-namespace"
                    and label_match(p.get("podSelector", {}), pod_labels(t2))
                    for p in r.get("to") or []) for _, r in egress):
                bad(f"{where}: no NetworkPolicy lets it connect to {w2} on every port (ssh, MPI "
                    "and NCCL between the job's pods use ephemeral ports)")
