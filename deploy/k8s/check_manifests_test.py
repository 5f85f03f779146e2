#!/usr/bin/env python3
"""Plants the errors check_manifests.py exists to catch, one per copy of deploy/k8s, and expects
each one's finding; the unchanged tree must have none.

    check_manifests_test.py --k8s-dir deploy/k8s --server-metrics server/server_metrics.cc \
        [--kubernetes-version 1.30.0] [--source-root .]

Needs what check_manifests.py needs (deploy/setup_venv.sh). kubectl is not compared here
(//deploy:k8s_manifests_test does that on the real tree). Prints PASS/FAIL per case and exits 1
if any case fails. The exposure cases put back what the security review found (the Service's
gRPC and metrics ports, no NetworkPolicy, the API keys in the MPI worker, service-account tokens,
the scrape key as an inference key, gRPC on 0.0.0.0) or break what the fix relies on.
"""
import argparse
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_manifests  # noqa: E402

DEPLOYMENT = "base/deployment.yaml"
MPIJOB = "overlays/multinode-mpi/mpijob.yaml"
POLICY = "base/networkpolicy.yaml"

# (name, [(file under k8s/, text to replace, replacement)], a finding must contain this).
CASES = [
    ("the Service publishes the server's metrics port",
     [("base/service.yaml", "    - {name: http, port: 80, targetPort: http}\n",
       "    - {name: http, port: 80, targetPort: http}\n"
       "    - {name: metrics, port: 9090, targetPort: metrics}\n")],
     "Service/blossom: port metrics publishes metrics of Deployment/blossom/server"),
    ("no NetworkPolicy in the base",
     [("base/kustomization.yaml", "  - networkpolicy.yaml\n", "")],
     "cpu: Deployment/blossom: no NetworkPolicy selects it for Ingress"),
    ("the metrics port admitted from anywhere",
     [(POLICY, "    - from:\n"
               "        - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}\n"
               "          podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}\n"
               "      ports:\n", "    - ports:\n")],
     "NetworkPolicy/blossom-metrics admits ['metrics (server)'] from ipBlock 0.0.0.0/0"),
    ("the metrics port admitted from the whole monitoring namespace",
     [(POLICY, "          podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}\n", "")],
     "admits ['metrics (server)'] from every pod of namespaces"),
    ("the gateway policy admits every port",
     [(POLICY, "  ingress:\n    - ports:\n        - {port: 8080, protocol: TCP}\n",
       "  ingress:\n    - {}\n")],
     "NetworkPolicy/blossom-gateway admits every port from ipBlock 0.0.0.0/0"),
    ("egress opened",
     [(POLICY, "  egress:\n    - ports:\n        - {port: 53, protocol: UDP}\n"
               "        - {port: 53, protocol: TCP}\n",
       "  egress:\n    - {}\n")],
     "NetworkPolicy/blossom-default-deny lets it connect to ipBlock 0.0.0.0/0 on every port"),
    ("DNS blocked",
     [(POLICY, "        - {port: 53, protocol: UDP}\n", "")],
     "its egress NetworkPolicies block DNS"),
    ("the MPI job's own policy missing",
     [("overlays/multinode-mpi/kustomization.yaml", "  - networkpolicy.yaml\n", "")],
     "MPIJob/blossom-mpi/Launcher: no NetworkPolicy admits MPIJob/blossom-mpi/Worker on every port"),
    ("the API keys mounted in the MPI worker again",
     [(MPIJOB, "                - {name: models, mountPath: /models, readOnly: true}\n"
               "                - {name: dshm, mountPath: /dev/shm}\n",
       "                - {name: models, mountPath: /models, readOnly: true}\n"
               "                - {name: api-keys, mountPath: /etc/blossom, readOnly: true}\n"
               "                - {name: dshm, mountPath: /dev/shm}\n"),
      (MPIJOB, "            - name: models\n"
               "              persistentVolumeClaim: {claimName: blossom-models, readOnly: true}\n"
               "            - name: dshm\n",
       "            - name: models\n"
               "              persistentVolumeClaim: {claimName: blossom-models, readOnly: true}\n"
               "            - name: api-keys\n"
               "              secret: {secretName: blossom-api-keys, items: [{key: keys, path: keys}]}\n"
               "            - name: dshm\n")],
     "MPIJob/blossom-mpi/Worker/worker: mounts Secret blossom-api-keys at /etc/blossom but passes "
     "no file under it"),
    ("a service-account token in the Deployment's pods",
     [(DEPLOYMENT, "      automountServiceAccountToken: false\n", "")],
     "cpu: Deployment/blossom: automountServiceAccountToken is not false"),
    ("a service-account token in the MPI worker",
     [(MPIJOB, "        spec:\n"  # the worker's (the launcher's has a comment above the grace)
               "          terminationGracePeriodSeconds: 120\n"
               "          enableServiceLinks: false\n"
               "          automountServiceAccountToken: false\n",
       "        spec:\n"
       "          terminationGracePeriodSeconds: 120\n"
       "          enableServiceLinks: false\n")],
     "MPIJob/blossom-mpi/Worker: automountServiceAccountToken is not false"),
    ("gRPC on 0.0.0.0 (gpu-1)",
     [("overlays/gpu-1/gpu.yaml", '"--host=127.0.0.1"', '"--host=0.0.0.0"')],
     "gpu-1: Deployment/blossom/server: --host=0.0.0.0 opens gRPC to other pods"),
    ("no --host on the server (its default has changed before)",
     [(DEPLOYMENT, '"--host=127.0.0.1", ', "")],
     "cpu: Deployment/blossom/server: no --host"),
    ("a gRPC probe on the loopback-bound server",
     [(DEPLOYMENT, "          readinessProbe:\n            httpGet: {path: /health, port: metrics}\n",
       "          readinessProbe:\n            grpc: {port: 8033}\n")],
     "readinessProbe aims at port 8033, which the server binds to loopback"),
    ("the gateway on loopback",
     [(DEPLOYMENT, '["--host=0.0.0.0", "--port=8080"', '["--port=8080"')],
     "cpu: Deployment/blossom/gateway: --host=unset (127.0.0.1)"),
    ("the gateway's backend on a port no server listens on",
     [(DEPLOYMENT, '"--backend=127.0.0.1:8033"', '"--backend=127.0.0.1:50051"')],
     "no server of the pod listens on port 50051"),
    ("the gateway without its scrape-key file",
     [(DEPLOYMENT, '\n                 "--metrics-api-keys-file=/etc/blossom-scrape/key", ', " ")],
     "Prometheus sends Secret blossom-scrape-key key scrape, but Deployment/blossom/gateway's "
     "--metrics-api-keys-file is unset"),
    ("the scrape-key file path misspelt",
     [(DEPLOYMENT, "--metrics-api-keys-file=/etc/blossom-scrape/key",
       "--metrics-api-keys-file=/etc/blossom-scrape/keys")],
     "/etc/blossom-scrape/keys is not a file of volume scrape-key"),
    ("the scrape-key flag misspelt",
     [(DEPLOYMENT, "--metrics-api-keys-file=", "--metrics-api-key-file=")],
     "blossom-gateway has no flag --metrics_api_key_file"),
    ("the scrape key also a line of api-keys.txt (a full inference key)",
     [("base/api-keys.txt", None, "client-key-0123456789\nprometheus-key-0123456789\n"),
      ("base/scrape-key.txt", None, "prometheus-key-0123456789")],
     "the scrape key (Secret blossom-scrape-key key scrape) is also a line of "
     "Deployment/blossom/gateway's --api-keys-file"),
    ("the gateway's drain no longer than the server's (both 60 s, SIGTERM together)",
     [(DEPLOYMENT, '"--metrics-api-keys-file=/etc/blossom-scrape/key", "--drain-timeout=65"',
       '"--metrics-api-keys-file=/etc/blossom-scrape/key", "--drain-timeout=60"')],
     "cpu: Deployment/blossom/gateway: --drain-timeout 60 s is not above "
     "Deployment/blossom/server's 60 s"),
    ("the grace period short of preStop + the gateway's drain",
     [(DEPLOYMENT, "      terminationGracePeriodSeconds: 90\n",
       "      terminationGracePeriodSeconds: 80\n")],
     "Deployment/blossom/gateway: terminationGracePeriodSeconds 80 < preStop 10 s + drain 65 s"),
    ("the MPIJob named like the base Service",
     [(MPIJOB, "metadata:\n  name: blossom-mpi\n", "metadata:\n  name: blossom\n")],
     "MPIJob/blossom: shares its name with Service/blossom"),
]


def plant(tree, edits):
    for rel, old, new in edits:
        path = os.path.join(tree, rel)
        if old is None:  # a whole file (the git-ignored key files)
            text = new
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
            if text.count(old) != 1:
                raise ValueError(f"{rel}: the text to replace occurs {text.count(old)} times: {old!r}")
            text = text.replace(old, new)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--k8s-dir", required=True)
    parser.add_argument("--server-metrics", required=True)
    parser.add_argument("--kubernetes-version", default="1.30.0")
    parser.add_argument("--source-root", default=".")
    args = parser.parse_args()

    def run(tree):
        return check_manifests.run(tree, args.server_metrics, args.kubernetes_version, None,
                                   args.source_root, out=lambda *_: None)[0]

    failed = 0
    baseline = run(args.k8s_dir)
    if baseline:
        failed += 1
        print("FAIL: the unchanged tree has findings:", *baseline, sep="\n  ")
    else:
        print("PASS: the unchanged tree has no finding")
    for name, edits, expected in CASES:
        tmp = tempfile.mkdtemp(prefix="blossom-k8s-plant-")
        try:
            tree = os.path.join(tmp, "k8s")
            shutil.copytree(args.k8s_dir, tree)
            try:
                plant(tree, edits)
            except (OSError, ValueError) as e:
                failed += 1
                print(f"FAIL: {name}: cannot plant it: {e}")
                continue
            findings = run(tree)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if any(expected in f for f in findings):
            print(f"PASS: {name}")
        else:
            failed += 1
            print(f"FAIL: {name}: no finding contains {expected!r}; findings:", *findings,
                  sep="\n  ")
    print(f"check_manifests_test: {len(CASES) + 1} cases, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
