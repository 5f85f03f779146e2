#!/usr/bin/env python3
"""Proves the file layout the Blossom images get, without a Docker engine (standard library).

    check_image_layout.py --root DIR

DIR holds the built binaries by package path (bazel-bin, or a Bazel test's runfiles) and the
repository files (deploy/, tests/fixtures/models/bloom-demo). Steps:
  1. deploy/docker/stage_runtime.sh (what both Dockerfiles run) stages the runtime tree; every
     path the Dockerfiles' CMD and the Kubernetes manifests run (/usr/local/bin/...,
     /opt/blossom/models/bloom-demo) is in it and executable where it must be.
  2. The staged CLI generates two tokens from the staged demo model.
  3. CPU image: every shared library the staged binaries load (ldd) comes from a Debian package
     that the runtime stage of deploy/docker/Dockerfile installs (or one of their dependencies,
     or the debian:12-slim base).
  4. CUDA image: with --bundle-libs, every library outside the bundle is one the CUDA runtime
     image provides (C runtime, CUDA, Open MPI), and the staged CLI runs from the bundle.
Prints one line per problem and exits 1 if there is any.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

BINARIES = ["blossom-server", "blossom-gateway", "blossom", "launch_tp.sh"]
DEMO = "/opt/blossom/models/bloom-demo"
# What the CUDA runtime image (nvidia/cuda:*-runtime-ubuntu24.04 + openmpi-bin) provides.
CUDA_IMAGE_PROVIDES = re.compile(
    r"^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libutil\.so|"
    r"libresolv\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|"
    r"libcublasLt\.so|libnccl\.so|libmpi\.so|libmpi_cxx\.so|libopen-rte\.so|libopen-pal\.so|"
    r"libhwloc\.so|libevent|libz\.so|libudev\.so)")

problems = []


def problem(text):
    problems.append(text)
    print("FAIL:", text)


def ldd(path, env=None):
    """{library name: resolved path or None} of one binary."""
    out = subprocess.run(["ldd", path], capture_output=True, text=True, env=env).stdout
    libs = {}
    for line in out.splitlines():
        m = re.match(r"\s*(\S+)\s+=>\s+(\S+)", line)
        if m:
            libs[m.group(1)] = None if m.group(2) == "not" else m.group(2)
        else:
            m = re.match(r"\s*(/\S+)\s+\(", line)
            if m:
                libs[os.path.basename(m.group(1))] = m.group(1)
    return libs


def stage(root, out, *flags):
    r = subprocess.run([os.path.join(root, "deploy/docker/stage_runtime.sh"), out,
                        "--bin-dir", root, *flags], capture_output=True, text=True)
    print(r.stdout.strip(), r.stderr.strip())
    if r.returncode != 0:
        problem(f"stage_runtime.sh {' '.join(flags)} failed ({r.returncode}): {r.stderr}")
        return None
    with open(os.path.join(out, "opt/blossom/MANIFEST")) as f:
        return set(f.read().split())


def dockerfile_runtime_packages(path):
    """The packages apt-get installs in the last stage of a Dockerfile."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    last = re.split(r"^FROM\s", text, flags=re.M)[-1]
    pkgs = set()
    for m in re.finditer(r"apt-get\s+(?:-\S+\s+)*install\b([^;&|]*)", last):
        pkgs |= {w for w in m.group(1).split() if not w.startswith("-")}
    return pkgs


def installed_packages():
    """{package: (priority, [dependency names])} from dpkg, alternatives all counted."""
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Priority}\t${Depends}, "
                          "${Pre-Depends}\t${Provides}\n"], capture_output=True, text=True).stdout
    pkgs, provides = {}, {}
    for line in out.splitlines():
        name, priority, deps, prov = (line.split("\t") + ["", "", ""])[:4]
        names = [re.sub(r"[\s(:].*", "", d.strip()) for d in re.split(r"[,|]", deps)]
        pkgs[name] = (priority, [n for n in names if n])
        for p in prov.split(","):
            p = re.sub(r"[\s(].*", "", p.strip())
            if p:
                provides.setdefault(p, []).append(name)
    return pkgs, provides


def closure(start, pkgs, provides):
    seen, todo = set(), list(start)
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        for q in [p] + provides.get(p, []):
            if q in pkgs:
                todo += pkgs[q][1]
                seen.add(q)
    return seen


def packages_of(paths):
    """{path: Debian package or None}, with one dpkg -S for all (merged /usr: the path, its
    real path and the /usr/lib spelling are all tried)."""
    candidates = {}
    for path in paths:
        real = os.path.realpath(path)
        candidates[path] = [path, real] + [c.replace("/lib/", "/usr/lib/", 1)
                                           for c in (path, real) if c.startswith("/lib/")]
    everything = sorted({c for cs in candidates.values() for c in cs})
    out = subprocess.run(["dpkg", "-S", *everything], capture_output=True, text=True).stdout
    owner = {}
    for line in out.splitlines():
        pkgs, _, file = line.partition(": ")
        owner[file.strip()] = pkgs.split(",")[0].split(":")[0].strip()
    return {p: next((owner[c] for c in cs if c in owner), None) for p, cs in candidates.items()}


def check_layout(root, staged, manifest):
    for b in BINARIES:
        p = os.path.join(staged, "usr/local/bin", b)
        if f"/usr/local/bin/{b}" not in manifest or not os.access(p, os.X_OK):
            problem(f"/usr/local/bin/{b} is not staged as an executable")
    for f in ("config.json", "model.safetensors", "tokenizer.json"):
        if f"{DEMO}/{f}" not in manifest:
            problem(f"{DEMO}/{f} is not staged")
    # Paths the Dockerfiles' CMD and the manifests name.
    for name in ("Dockerfile", "Dockerfile.cuda"):
        with open(os.path.join(root, "deploy/docker", name)) as f:
            text = f.read()
        if "stage_runtime.sh /stage" not in text or "COPY --from=build /stage/ /" not in text:
            problem(f"{name} does not stage with stage_runtime.sh /stage and copy /stage/ to /")
        for m in re.finditer(r'^CMD \[(.*)\]', text, re.M):
            words = [w.strip().strip('"') for w in m.group(1).split(",")]
            if f"/usr/local/bin/{words[0]}" not in manifest:
                problem(f"{name}: CMD runs {words[0]}, which is not staged in /usr/local/bin")
            for w in words[1:]:
                if w.startswith("/") and not any(x == w or x.startswith(w.rstrip("/") + "/")
                                                  for x in manifest):
                    problem(f"{name}: CMD names {w}, which is not in the staged tree")


def run_cli(staged, env=None):
    r = subprocess.run([os.path.join(staged, "usr/local/bin/blossom"), "generate", "--model",
                        staged + DEMO, "--prompt", "The server reads", "--max-new-tokens", "2"],
                       capture_output=True, text=True, env=env, timeout=120)
    if r.returncode != 0:
        problem(f"the staged blossom CLI failed on the staged demo model: {r.stderr[-2000:]}")
    else:
        print("staged CLI generated:", repr(r.stdout.strip()))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--root", required=True)
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    tmp = tempfile.mkdtemp(prefix="blossom-stage-")

    cpu = os.path.join(tmp, "cpu")
    manifest = stage(root, cpu)
    if manifest is not None:
        check_layout(root, cpu, manifest)
        run_cli(cpu)
        pkgs, provides = installed_packages()
        wanted = dockerfile_runtime_packages(os.path.join(root, "deploy/docker/Dockerfile"))
        for p in sorted(wanted):
            if p not in pkgs:
                problem(f"Dockerfile installs {p}, which is not the Debian 12 package installed here")
        base = [p for p, (prio, _) in pkgs.items() if prio == "required"] + ["apt"]
        have = closure(list(wanted) + base, pkgs, provides)
        loads = [(b, lib, path) for b in BINARIES[:3]
                 for lib, path in sorted(ldd(os.path.join(cpu, "usr/local/bin", b)).items())
                 if not lib.startswith("linux-vdso")]
        # Where the CUDA toolkit exists, Bazel builds the CUDA backend into the test's binaries;
        # the CPU image builds with --config=nocuda, so the toolkit's libraries are not its.
        cuda_libs = sorted({lib for _, lib, path in loads
                            if path and os.path.realpath(path).startswith("/usr/local/cuda")})
        if cuda_libs:
            print("CPU image: not counting the CUDA toolkit's", ", ".join(cuda_libs),
                  "(these binaries were built with CUDA; the CPU image builds with --config=nocuda)")
        loads = [x for x in loads if x[1] not in cuda_libs]
        owners = packages_of({path for _, _, path in loads if path})
        for b, lib, path in loads:
                if path is None:
                    problem(f"{b}: {lib} not found")
                    continue
                pkg = owners[path]
                if pkg is None:
                    problem(f"{b}: {lib} ({path}) belongs to no Debian package")
                elif pkg not in have:
                    problem(f"{b}: {lib} comes from {pkg}, which the CPU image's runtime stage "
                            "does not install")
        print(f"CPU image: {len(wanted)} runtime packages cover the libraries of "
              f"{', '.join(BINARIES[:3])}")

    cuda = os.path.join(tmp, "cuda")
    manifest = stage(root, cuda, "--bundle-libs")
    if manifest is not None:
        libdir = os.path.join(cuda, "opt/blossom/lib")
        env = dict(os.environ, LD_LIBRARY_PATH=libdir)
        bundled = 0
        for b in BINARIES[:3]:
            for lib, path in sorted(ldd(os.path.join(cuda, "usr/local/bin", b), env).items()):
                if path and path.startswith(libdir + "/"):
                    bundled += 1
                elif not CUDA_IMAGE_PROVIDES.match(lib):
                    problem(f"CUDA image: {b} loads {lib} from {path}: neither bundled nor "
                            "provided by the CUDA runtime image")
        run_cli(cuda, env)
        print(f"CUDA image: {bundled} library loads resolved from the bundle")
    print(f"check_image_layout: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
