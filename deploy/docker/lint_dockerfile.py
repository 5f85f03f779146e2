#!/usr/bin/env python3
"""A Dockerfile linter for the rules that matter to the Blossom images (hadolint is not packaged
in Debian 12, and CI installs only Debian packages and PyPI wheels). Standard library only.

    lint_dockerfile.py [--context DIR] DOCKERFILE...

Prints one line per finding ("FILE:LINE: RULE message") and exits 1 if there is any.
Rules (hadolint's numbers where one exists):
  DL3000 WORKDIR is absolute            DL3002 the final stage runs as a non-root USER
  DL3004 no sudo                        DL3006/DL3007 every FROM has a tag, never :latest
  DL3008 apt-get install --no-install-recommends and -y
  DL3009 apt lists removed in the RUN that fetched them
  DL3020 COPY, not ADD, for local files DL3022 COPY --from names an earlier stage
  DL3025 CMD/ENTRYPOINT in JSON form    DL3027 apt-get, not apt
  DL4006 a RUN with a pipe has SHELL ... pipefail first
  BL001 every $VAR used in FROM or a stage is an ARG in scope (or an ENV of the stage)
  BL002 every `--build-arg NAME` (or "the NAME argument") in the file is an ARG of it
  BL003 the final stage is a runtime stage: no compilers, -dev packages, Bazel or nvcc
  BL004 a repository file the Dockerfile runs (deploy/..., tools/...) exists and is not excluded
        by .dockerignore
  BL005 .dockerignore exists and excludes .git, bazel-* and .venv*
  BL006 a CUDA image (FROM nvidia/cuda) ends on a -runtime- image, never -devel-
  BL007 the build stage (the one that runs `bazel build`) installs every build package of
        tools/install_deps.sh (the list CI builds with), so the image cannot drift from CI
"""
import argparse
import fnmatch
import os
import re
import sys

BUILD_TOOLS = re.compile(r"\b(g\+\+|gcc|clang|bazel(-bootstrap)?|nvcc|cuda-nvcc[\w.-]*|"
                         r"[\w.+-]+-dev|build-essential|cuda-toolkit[\w.-]*)\b")
VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")
# Variables Docker defines itself (predefined build args and platform args).
# tools/install_deps.sh packages that only the tests use (end-to-end tests, fuzzing, the TLS
# tests' certificates, lm-evaluation-harness's torch).
TEST_ONLY_PACKAGES = {"python3-venv", "curl", "prometheus", "clang-14", "libfuzzer-14-dev",
                      "openssl", "python3-torch"}
PREDEFINED = {"HTTP_PROXY", "HTTPS_PROXY", "FTP_PROXY", "NO_PROXY", "http_proxy", "https_proxy",
              "ftp_proxy", "no_proxy", "TARGETPLATFORM", "TARGETOS", "TARGETARCH",
              "TARGETVARIANT", "BUILDPLATFORM", "BUILDOS", "BUILDARCH", "BUILDVARIANT"}


def instructions(text):
    """(line number, INSTRUCTION, arguments) with continuation lines joined, comments dropped."""
    out, buf, start = [], "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # a comment inside a continued instruction is dropped, as Docker does
        if not buf:
            start = number
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        parts = buf.split(None, 1)
        out.append((start, parts[0].upper(), parts[1] if len(parts) > 1 else ""))
        buf = ""
    return out


def dockerignore_patterns(context):
    path = os.path.join(context, ".dockerignore")
    if not os.path.exists(path):
        return None
    pats = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                pats.append(line.lstrip("/"))
    return pats


def ignored(rel, patterns):
    """Whether .dockerignore excludes `rel` (or a parent folder of it); '!' re-includes."""
    result = False
    pieces = rel.split("/")
    candidates = ["/".join(pieces[:i]) for i in range(1, len(pieces) + 1)]
    for pat in patterns:
        negate = pat.startswith("!")
        p = pat[1:] if negate else pat
        # '**' matches any number of folders; '*' stays within one (approximated with fnmatch
        # per path piece count).
        regex = re.escape(p).replace(r"\*\*/", "(?:.*/)?").replace(r"\*\*", ".*")
        regex = regex.replace(r"\*", "[^/]*").replace(r"\?", "[^/]")
        if any(re.fullmatch(regex, c) for c in candidates):
            result = not negate
    return result


def lint(dockerfile, context):
    findings = []

    def bad(line, rule, message):
        findings.append(f"{dockerfile}:{line}: {rule} {message}")

    with open(dockerfile, encoding="utf-8") as f:
        text = f.read()
    instrs = instructions(text)
    global_args, stage_names, stages = {}, set(), []
    stage = None
    has_pipefail_shell = False
    for line, op, args in instrs:
        if op == "ARG" and stage is None:
            name = args.split("=", 1)[0].strip()
            global_args[name] = "=" in args
            continue
        if op == "FROM":
            m = re.match(r"(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?\s*$", args, re.I)
            if not m:
                bad(line, "DL3006", f"cannot parse FROM {args}")
                continue
            image, name = m.group(1), m.group(2)
            for var in VAR.findall(image):
                if var not in global_args:
                    bad(line, "BL001", f"FROM uses ${var}, which no ARG before the first FROM declares")
            resolved = VAR.sub("X", image)
            tag = resolved.rsplit("/", 1)[-1]
            if "@" not in tag and ":" not in tag and image != "scratch":
                bad(line, "DL3006", f"image {image} has no tag")
            elif tag.endswith(":latest"):
                bad(line, "DL3007", f"image {image} uses :latest")
            stage = {"line": line, "image": image, "name": name, "args": set(), "env": set(),
                     "user": None, "runs": []}
            stages.append(stage)
            if name:
                stage_names.add(name.lower())
            has_pipefail_shell = False
            continue
        if stage is None:
            bad(line, "DL3006", f"{op} before the first FROM")
            continue
        for var in VAR.findall(args):
            if op in ("ARG",):
                break
            if (var not in stage["args"] and var not in stage["env"] and var not in PREDEFINED
                    and op in ("RUN", "COPY", "ADD", "WORKDIR", "ENV", "USER", "EXPOSE")):
                # ${VAR} inside RUN may be a shell variable set in the same command.
                if op == "RUN" and re.search(rf"\b{var}=", args):
                    continue
                if op == "ENV" and var in ("LD_LIBRARY_PATH", "PATH"):
                    continue
                bad(line, "BL001", f"{op} uses ${var}, which is no ARG or ENV of this stage"
                    + (" (ARGs before FROM must be declared again inside the stage)"
                       if var in global_args else ""))
        if op == "ARG":
            stage["args"].add(args.split("=", 1)[0].strip())
        elif op == "ENV":
            for m in re.finditer(r"([A-Za-z_][A-Za-z0-9_]*)=", args):
                stage["env"].add(m.group(1))
        elif op == "WORKDIR":
            if not args.startswith("/") and not args.startswith("$"):
                bad(line, "DL3000", f"WORKDIR {args} is not absolute")
        elif op == "USER":
            stage["user"] = args.strip()
        elif op == "SHELL":
            has_pipefail_shell = "pipefail" in args
        elif op == "ADD":
            if not re.search(r"https?://", args):
                bad(line, "DL3020", "use COPY for local files")
        elif op == "COPY":
            m = re.search(r"--from=(\S+)", args)
            if m and m.group(1).lower() not in stage_names and not m.group(1).isdigit():
                bad(line, "DL3022", f"COPY --from={m.group(1)} names no earlier stage")
        elif op in ("CMD", "ENTRYPOINT"):
            if not args.strip().startswith("["):
                bad(line, "DL3025", f"{op} is not in JSON form")
        elif op == "RUN":
            stage["runs"].append((line, args))
            if re.search(r"(^|[;&|]\s*)sudo\b", args):
                bad(line, "DL3004", "do not use sudo")
            if re.search(r"(^|[;&|]\s*)apt\s", args):
                bad(line, "DL3027", "use apt-get, not apt")
            for m in re.finditer(r"apt-get\s+(?:-\S+\s+)*install\b([^;&|]*)", args):
                opts = m.group(1)
                if "--no-install-recommends" not in opts:
                    bad(line, "DL3008", "apt-get install without --no-install-recommends")
                if not re.search(r"(^|\s)(-y|--yes|-[a-z]*y[a-z]*)\b", opts):
                    bad(line, "DL3008", "apt-get install without -y")
            if "apt-get update" in args and "rm -rf /var/lib/apt/lists" not in args:
                bad(line, "DL3009", "apt lists are not removed in the same RUN")
            if re.search(r"[^|]\|[^|]", args) and not has_pipefail_shell:
                bad(line, "DL4006", "RUN with a pipe needs SHELL [\"/bin/bash\", \"-o\", "
                    "\"pipefail\", \"-c\"] first")
            for ref in re.findall(r"(?<![\w/])((?:deploy|tools)/[\w./-]+)", args):
                path = os.path.join(context, ref)
                if not os.path.exists(path):
                    bad(line, "BL004", f"RUN uses {ref}, which is not in the repository")
                elif patterns_cache.get(context) and ignored(ref, patterns_cache[context]):
                    bad(line, "BL004", f"RUN uses {ref}, which .dockerignore excludes")
    if not stages:
        bad(1, "DL3006", "no FROM")
        return findings
    final = stages[-1]
    user = final["user"]
    if user is None:
        bad(final["line"], "DL3002", "the final stage sets no USER (it would run as root)")
    elif user.split(":")[0] in ("root", "0"):
        bad(final["line"], "DL3002", f"the final stage runs as {user}")
    for line, args in final["runs"]:
        installs = " ".join(m.group(1) for m in
                            re.finditer(r"apt-get\s+(?:-\S+\s+)*install\b([^;&|]*)", args))
        tool = BUILD_TOOLS.search(installs) or re.search(r"\b(bazel|nvcc)\s+build\b", args)
        if tool:
            bad(line, "BL003", f"the final (runtime) stage installs or runs {tool.group(0)}")
    images = [s["image"] for s in stages]
    if any(i.startswith("nvidia/cuda") for i in images):
        if "-runtime-" not in final["image"]:
            bad(final["line"], "BL006", f"CUDA image ends on {final['image']}, not a -runtime- image")
    deps = os.path.join(context, "tools/install_deps.sh")
    if not os.path.exists(deps):
        bad(1, "BL007", f"{deps} not found (the build packages cannot be compared)")
    else:
        with open(deps, encoding="utf-8") as f:
            block = re.search(r"PACKAGES=\((.*?)\n\)", f.read(), re.S).group(1)
        wanted = set()
        for line in block.splitlines():
            line = line.split("#")[0]
            wanted |= set(line.split())
        wanted -= TEST_ONLY_PACKAGES
        for st in stages:
            runs = " ".join(a for _, a in st["runs"])
            if "bazel build" not in runs:
                continue
            installed = set()
            for m in re.finditer(r"apt-get\s+(?:-\S+\s+)*install\b([^;&|]*)", runs):
                installed |= {w for w in m.group(1).split() if not w.startswith("-")}
            for pkg in sorted(wanted - installed):
                bad(st["line"], "BL007", f"the build stage does not install {pkg}, which "
                    "tools/install_deps.sh installs for the build")
    for m in re.finditer(r"--build-arg[ =]([A-Za-z_][A-Za-z0-9_]*)|"
                         r"\b([A-Z][A-Z0-9_]{2,}) (?:build )?argument", text):
        name = m.group(1) or m.group(2)
        declared = name in global_args or any(name in s["args"] for s in stages)
        if not declared:
            bad(text[:m.start()].count("\n") + 1, "BL002",
                f"mentions --build-arg {name}, which the Dockerfile does not declare")
    return findings


patterns_cache = {}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--context", default=".", help="the build context (repository root)")
    parser.add_argument("dockerfiles", nargs="+")
    args = parser.parse_args(argv)
    findings = []
    patterns = dockerignore_patterns(args.context)
    if patterns is None:
        findings.append(f"{args.context}/.dockerignore: BL005 missing (the whole tree, .git "
                        "and bazel-* included, would be sent as the build context)")
    else:
        patterns_cache[args.context] = patterns
        for must in (".git", "bazel-bin", "bazel-out", ".venv-e2e"):
            if not ignored(must, patterns):
                findings.append(f"{args.context}/.dockerignore: BL005 does not exclude {must}")
        for needed in ("WORKSPACE", ".bazelrc", "server/BUILD", "deploy/launch_tp.sh",
                       "tests/fixtures/models/bloom-demo/config.json"):
            if ignored(needed, patterns):
                findings.append(f"{args.context}/.dockerignore: BL005 excludes {needed}, "
                                "which the image build needs")
    for dockerfile in args.dockerfiles:
        findings += lint(dockerfile, args.context)
    for f in findings:
        print(f)
    print(f"lint_dockerfile: {len(args.dockerfiles)} Dockerfile(s), {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
