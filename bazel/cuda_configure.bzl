"""Detects the CUDA toolkit at /usr/local/cuda so CUDA targets build by default only where it exists.

Creates @cuda_config with defs.bzl: CUDA_FOUND (bool). cuda_library() marks its targets
incompatible when CUDA_FOUND is false, so `bazel build //...` skips them on machines without a
toolkit; `--config=nocuda` skips them everywhere.
"""

def _impl(rctx):
    found = rctx.path("/usr/local/cuda/bin/nvcc").exists and rctx.path("/usr/local/cuda/include/cuda_runtime.h").exists
    rctx.file("WORKSPACE", 'workspace(name = "%s")\n' % rctx.name)
    rctx.file("BUILD.bazel", "")
    rctx.file("defs.bzl", "CUDA_FOUND = %s\n" % ("True" if found else "False"))

cuda_configure = repository_rule(implementation = _impl, local = True)
