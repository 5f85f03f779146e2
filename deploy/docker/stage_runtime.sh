#!/usr/bin/env bash
# Stages the runtime file tree of the Blossom images: the Dockerfiles' build stage runs it after
# `bazel build` and the runtime stage copies the result to / (`COPY --from=build /stage/ /`).
# //deploy:image_layout_test runs the same script on the binaries Bazel built for the test, so CI
# proves the layout the images get.
#
#   deploy/docker/stage_runtime.sh OUT_DIR [--bin-dir DIR] [--bundle-libs]
#
#   OUT_DIR        created (must not exist or be empty)
#   --bin-dir DIR  where the built binaries are, by package path (default: bazel-bin)
#   --bundle-libs  also copy every shared library the binaries load into OUT/opt/blossom/lib,
#                  except what a CUDA runtime image provides: the C runtime (glibc, libstdc++,
#                  libgcc_s), CUDA (libcuda, libcudart, cuBLAS, NCCL) and Open MPI
#                  (from its openmpi-bin package). Used by Dockerfile.cuda.
#
# Layout (OUT_DIR/...):
#   usr/local/bin/blossom-server, blossom-gateway, blossom   the binaries
#   usr/local/bin/launch_tp.sh                               deploy/launch_tp.sh (mpirun wrapper)
#   opt/blossom/models/bloom-demo/                           the bundled demo model
#   opt/blossom/lib/                                         (--bundle-libs) shared libraries
#   opt/blossom/MANIFEST                                     every staged file, sorted
set -euo pipefail
cd "$(dirname "$0")/../.."

out=""
bin_dir="bazel-bin"
bundle=0
while [[ $# -gt 0 ]]; do
  case "$1" in
    --bin-dir) bin_dir="$2"; shift 2 ;;
    --bundle-libs) bundle=1; shift ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "stage_runtime: unknown flag '$1'" >&2; exit 2 ;;
    *) out="$1"; shift ;;
  esac
done
if [[ -z "$out" ]]; then echo "stage_runtime: OUT_DIR is required" >&2; exit 2; fi
if [[ -e "$out" && -n "$(ls -A "$out")" ]]; then
  echo "stage_runtime: $out exists and is not empty" >&2
  exit 2
fi

# The binaries by their Bazel package path (//clients:blossom-gateway is an alias of this one).
binaries=(server/blossom-server clients/gateway/blossom-gateway clients/blossom)
for b in "${binaries[@]}"; do
  if [[ ! -x "$bin_dir/$b" ]]; then
    echo "stage_runtime: $bin_dir/$b is missing (bazel build //server:blossom-server" \
         "//clients:blossom-gateway //clients:blossom first)" >&2
    exit 1
  fi
done

mkdir -p "$out/usr/local/bin" "$out/opt/blossom/models"
for b in "${binaries[@]}"; do
  install -m 0755 "$bin_dir/$b" "$out/usr/local/bin/$(basename "$b")"
done
install -m 0755 deploy/launch_tp.sh "$out/usr/local/bin/launch_tp.sh"
mkdir -p "$out/opt/blossom/models/bloom-demo"
for f in tests/fixtures/models/bloom-demo/*; do
  install -m 0644 "$f" "$out/opt/blossom/models/bloom-demo/$(basename "$f")"
done

if [[ "$bundle" == 1 ]]; then
  mkdir -p "$out/opt/blossom/lib"
  # Provided by the runtime image: C runtime, CUDA, Open MPI.
  keep_re='^(linux-vdso|ld-linux|libc\.so|libm\.so|libdl\.so|librt\.so|libpthread\.so|libutil\.so|libresolv\.so|libstdc\+\+\.so|libgcc_s\.so|libcuda\.so|libcudart\.so|libcublas\.so|libcublasLt\.so|libnccl\.so|libmpi\.so|libmpi_cxx\.so|libopen-rte\.so|libopen-pal\.so|libhwloc\.so|libevent|libevent_.*\.so|libz\.so|libudev\.so)'
  for b in "${binaries[@]}"; do
    while read -r lib arrow path _; do
      [[ "$arrow" == "=>" ]] || continue
      [[ "$lib" =~ $keep_re ]] && continue
      if [[ "$path" == "not" ]]; then echo "stage_runtime: ldd: $lib not found" >&2; exit 1; fi
      [[ -e "$out/opt/blossom/lib/$lib" ]] || install -m 0644 "$path" "$out/opt/blossom/lib/$lib"
    done < <(ldd "$bin_dir/$b")
  done
fi

(cd "$out" && find . -type f ! -path ./opt/blossom/MANIFEST | sed 's|^\./|/|' | sort) \
  > "$out/opt/blossom/MANIFEST"
echo "stage_runtime: staged $(wc -l < "$out/opt/blossom/MANIFEST") files in $out"
