"""Build hook: generates the blossom.v1 gRPC stubs from the repository's proto at build time.

The proto lives at <repo>/proto/blossom/v1/blossom.proto, i.e. ../../proto from here, so the
package must be built in-tree (`pip install ./clients/python`, pip >= 21.3 does that). The stubs
go to blossom_client/_proto/blossom/v1/ inside the build directory; nothing generated is written
to the source tree except for editable installs, which need the files next to the sources
(clients/python/.gitignore covers them).

protoc runs with `-I <repo>/proto`, so the descriptor keeps its canonical file name
"blossom/v1/blossom.proto" (what the C++ server and reflection use); the one absolute import that
layout produces in blossom_pb2_grpc.py (`from blossom.v1 import blossom_pb2`) is then rewritten
to point inside this package.
"""
import os
import re
import sys

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO_FILE = os.path.join("blossom", "v1", "blossom.proto")
PACKAGE_PREFIX = "blossom_client._proto"


def generate_stubs(package_dir):
    """Runs grpc_tools.protoc into <package_dir>/_proto and fixes the imports."""
    from grpc_tools import protoc  # build-time dependency (pyproject [build-system] requires)
    import grpc_tools

    source = os.path.join(PROTO_ROOT, PROTO_FILE)
    if not os.path.isfile(source):
        sys.exit(f"blossom-client: {source} not found; build from the repository checkout "
                 "(pip install ./clients/python)")
    out = os.path.join(package_dir, "_proto")
    os.makedirs(os.path.join(out, "blossom", "v1"), exist_ok=True)
    well_known = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    args = ["grpc_tools.protoc", f"-I{PROTO_ROOT}", f"-I{well_known}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", source]
    if protoc.main(args) != 0:
        sys.exit(f"blossom-client: protoc failed on {source}")
    for d in ("", "blossom", os.path.join("blossom", "v1")):
        init = os.path.join(out, d, "__init__.py")
        if not os.path.exists(init):
            with open(init, "w") as f:
                f.write("# Generated package marker (blossom-client build).\n")
    for name in os.listdir(os.path.join(out, "blossom", "v1")):
        if not name.endswith((".py", ".pyi")):
            continue
        path = os.path.join(out, "blossom", "v1", name)
        with open(path) as f:
            text = f.read()
        fixed = re.sub(r"^from blossom\.v1 import ", f"from {PACKAGE_PREFIX}.blossom.v1 import ",
                       text, flags=re.M)
        fixed = re.sub(r"^import blossom\.v1\.", f"import {PACKAGE_PREFIX}.blossom.v1.", fixed,
                       flags=re.M)
        if fixed != text:
            with open(path, "w") as f:
                f.write(fixed)


class BuildPyWithStubs(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            generate_stubs(os.path.join(HERE, "blossom_client"))
        else:
            generate_stubs(os.path.join(self.build_lib, "blossom_client"))


setup(cmdclass={"build_py": BuildPyWithStubs})
