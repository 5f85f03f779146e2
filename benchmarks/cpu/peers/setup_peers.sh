#!/usr/bin/env bash
# Installs the peer engines for benchmarks/cpu/peer_bench.py and converts one checkpoint for each.
#
#   benchmarks/cpu/peers/setup_peers.sh WORK_DIR F32_MODEL_DIR BF16_MODEL_DIR
#
# Into WORK_DIR (idempotent: finished steps are skipped):
#   venv/                 Debian's python3 + python3-torch, plus requirements.txt from PyPI
#                         (transformers, CTranslate2, the converters' needs)
#   llama.cpp             from the llama-cpp-python sdist on PyPI (the version pinned below): its
#                         vendored llama.cpp, built with CMake for this CPU (GGML_NATIVE), giving
#                         llama-bench and llama-batched-bench, llama.cpp's own benchmark tools.
#                         LLAMA_CPP_NO_AMX=1: built for this CPU's x86 extensions named one by
#                         one, without its AMX code (on the 2-core Xeon VM of 2026-11-25 its AMX
#                         q8_0 path dies: SIGILL, and SIGSEGV with the tile permission granted)
#   models/               gguf f32 and q8_0 (from F32_MODEL_DIR), bf16 (from BF16_MODEL_DIR);
#                         CTranslate2 float32 and int8 (from F32), bfloat16 (from BF16)
# Needs: apt-get install python3-venv python3-torch libopenblas0-pthread cmake ninja-build g++
# (done if missing).
set -euo pipefail
[ $# -eq 3 ] || { sed -n '2,14p' "$0"; exit 2; }
WORK=$(mkdir -p "$1" && cd "$1" && pwd)
F32=$(cd "$2" && pwd)
BF16=$(cd "$3" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
LLAMA_CPP_PYTHON=0.3.36

need=()
# libopenblas0-pthread: Debian's torch calls whatever libblas.so.3 the alternatives system points
# at; with only the reference BLAS (libblas3) a 128-token bloom-560m forward takes 75 s instead of
# about 6 s, which would make transformers a straw man.
for p in python3-venv python3-torch libopenblas0-pthread cmake ninja-build g++; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

# Debian's interpreter (not a pyenv one on PATH), so that its torch is visible in the venv.
if [ ! -x "$WORK/venv/bin/python" ]; then
  /usr/bin/python3 -m venv --system-site-packages "$WORK/venv"
fi
"$WORK/venv/bin/pip" install -q -r "$HERE/requirements.txt"

SRC="$WORK/llama_cpp_python-$LLAMA_CPP_PYTHON/vendor/llama.cpp"
if [ ! -d "$SRC" ]; then
  "$WORK/venv/bin/pip" download -q --no-binary :all: --no-deps \
      "llama-cpp-python==$LLAMA_CPP_PYTHON" -d "$WORK/sdist"
  tar xzf "$WORK/sdist/llama_cpp_python-$LLAMA_CPP_PYTHON.tar.gz" -C "$WORK"
fi
# The build's mode is recorded in build/blossom-mode (peer_bench.py prints it); a build of the
# other mode is replaced (builds from before the marker are native ones).
MODE=native
ISA=(-DGGML_NATIVE=ON)
if [ "${LLAMA_CPP_NO_AMX:-0}" = 1 ]; then
  MODE=no-amx
  ISA=(-DGGML_NATIVE=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
  flags=" $(grep -m1 '^flags' /proc/cpuinfo) "
  for pair in sse4_2:SSE42 f16c:F16C fma:FMA bmi2:BMI2 avx:AVX avx2:AVX2 avx_vnni:AVX_VNNI \
              avx512f:AVX512 avx512vbmi:AVX512_VBMI avx512_vnni:AVX512_VNNI \
              avx512_bf16:AVX512_BF16; do
    case "$flags" in *" ${pair%%:*} "*) ISA+=("-DGGML_${pair##*:}=ON") ;; esac
  done
fi
built=$(cat "$SRC/build/blossom-mode" 2>/dev/null || { [ -d "$SRC/build" ] && echo native; } || true)
if [ -n "$built" ] && [ "$built" != "$MODE" ]; then rm -rf "$SRC/build"; fi
if [ ! -x "$SRC/build/bin/llama-batched-bench" ] || [ ! -x "$SRC/build/bin/llama-quantize" ]; then
  cmake -S "$SRC" -B "$SRC/build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${ISA[@]}" \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
      -DLLAMA_BUILD_SERVER=OFF -DLLAMA_OPENSSL=OFF >/dev/null
  cmake --build "$SRC/build" -j"$(nproc)" --target llama-bench llama-batched-bench llama-quantize >/dev/null
  echo "$MODE" > "$SRC/build/blossom-mode"
fi
ln -sfn "$SRC" "$WORK/llama.cpp"

mkdir -p "$WORK/models"
gguf() {  # SRC_MODEL OUTTYPE
  local out="$WORK/models/gguf-$2.gguf"
  if [ ! -s "$out" ]; then
    "$WORK/venv/bin/python" "$HERE/gguf_convert.py" "$SRC" "$1" "$out.tmp" "$2" \
        >"$WORK/models/gguf-$2.log" 2>&1
    mv "$out.tmp" "$out"
  fi
}
ct2() {  # SRC_MODEL QUANTIZATION
  local out="$WORK/models/ct2-$2"
  if [ ! -s "$out/model.bin" ]; then
    "$WORK/venv/bin/python" "$HERE/ct2_convert.py" "$1" "$out" "$2" \
        >"$WORK/models/ct2-$2.log" 2>&1
  fi
}
gguf "$F32" f32; gguf "$F32" q8_0; gguf "$BF16" bf16
# q4_0 from the f32 gguf with llama-quantize, every tensor q4_0 (--pure: no q6_K output tensor),
# as Blossom's --quantize int4 --quantize-lm-head packs every Linear weight and the head in int4.
if [ ! -s "$WORK/models/gguf-q4_0.gguf" ]; then
  "$SRC/build/bin/llama-quantize" --pure "$WORK/models/gguf-f32.gguf" "$WORK/models/gguf-q4_0.gguf.tmp" q4_0 \
      >"$WORK/models/gguf-q4_0.log" 2>&1
  mv "$WORK/models/gguf-q4_0.gguf.tmp" "$WORK/models/gguf-q4_0.gguf"
fi
ct2 "$F32" float32; ct2 "$F32" int8; ct2 "$BF16" bfloat16
echo "peers ready in $WORK"
