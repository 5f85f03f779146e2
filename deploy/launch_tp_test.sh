#!/usr/bin/env bash
# launch_tp.sh with a stand-in mpirun that prints its arguments and working directory: every
# NCCL_* variable (digits in the name too) is forwarded with -x, a relative hostfile is made
# absolute, and the command runs from the caller's directory.
set -euo pipefail
script="$(cd "$(dirname "$0")" && pwd)/launch_tp.sh"
fake="$(mktemp -d)"
trap 'rm -rf "$fake"' EXIT
cat > "$fake/mpirun" <<'FAKE'
#!/usr/bin/env bash
echo "cwd=$PWD"
printf 'arg=%s\n' "$@"
FAKE
chmod +x "$fake/mpirun"
mkdir -p "$fake/work"
cd "$fake/work"
out="$(env PATH="$fake:$PATH" NCCL_P2P_LEVEL=NVL NCCL_DEBUG=WARN \
       bash "$script" --np 2 --hostfile hosts.txt -- blossom-server --model=models/x)"
fail() { echo "FAIL: $1"; echo "$out"; exit 1; }
grep -qx "arg=NCCL_P2P_LEVEL" <<<"$out" || fail "NCCL_P2P_LEVEL not forwarded"
grep -qx "arg=NCCL_DEBUG" <<<"$out" || fail "NCCL_DEBUG not forwarded"
grep -qx "arg=$fake/work/hosts.txt" <<<"$out" || fail "the hostfile is not absolute"
grep -qx "cwd=$fake/work" <<<"$out" || fail "mpirun did not run from the caller's directory"
grep -qx "arg=--model=models/x" <<<"$out" || fail "the command's arguments changed"
echo "launch_tp_test: PASSED"
