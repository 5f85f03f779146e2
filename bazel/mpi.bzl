"""Compile flags for code that includes mpi.h (Open MPI from Debian: libopenmpi-dev).

Link flags come from pkg-config (@system_libs//:mpi, module ompi-c). The include directory is
given here because pkg_config_repository keeps only -D flags: Debian's multiarch link to the
MPI alternative, under /usr/include so Bazel accepts it. OMPI_SKIP_MPICXX: mpi.h would
otherwise pull in the deprecated C++ bindings, whose symbols live in libmpi_cxx (not linked).
"""

MPI_COPTS = [
    "-isystem",
    "/usr/include/x86_64-linux-gnu/mpi",
    "-isystem",
    "/usr/include/aarch64-linux-gnu/mpi",
    "-DOMPI_SKIP_MPICXX",
]

# target_compatible_with for targets that need a real MPI (tests that run under mpirun):
# skipped in a `--config=nompi` build.
MPI_COMPAT = select({
    "//:mpi_off": ["@platforms//:incompatible"],
    "//conditions:default": [],
})
