#!/usr/bin/env bash
# sh_test: tensor parallelism with one process per rank, end to end on the CPU.
#  1. `mpirun -np 2 blossom generate --launcher mpi --tp 2` prints what TP = 1 in-process prints;
#  2. `mpirun -np 2 blossom-server --launcher mpi --tp 2` serves greedy generate and stream
#     requests (made by `blossom generate|stream --server`) with TP = 1's text;
#  3. SIGTERM to the leader (rank 0) drains it, it releases the follower, and every process and
#     mpirun exit 0.
# Without mpirun: one SKIPPED case with the reason.
set -uo pipefail
runfiles="${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-blossom}"
source "$runfiles/tests/mpi/mpi_env.sh"
mpi_setup

server="$runfiles/server/blossom-server"
cli="$runfiles/clients/blossom"
model="$runfiles/tests/fixtures/models/bloom-tiny-h4"
prompt="The quick brown fox"
work="$MPI_SESSION_DIR/work"
mkdir -p "$work"
failures=0
fail() {
  echo "FAIL: $1"
  failures=$((failures + 1))
}

expected=$("$cli" generate --model "$model" --prompt "$prompt" --max_new_tokens 16 --threads 1 \
  --quiet 2>"$work/tp1.err") || { cat "$work/tp1.err"; fail "TP=1 generate failed"; }
echo "TP=1 in-process: $(printf '%q' "$expected")"

# 1. The CLI under mpirun.
got=$(timeout 60 mpirun -np 2 "${MPIRUN_ARGS[@]}" "$cli" generate --model "$model" \
  --prompt "$prompt" --max_new_tokens 16 --threads 2 --quiet --launcher mpi --tp 2 \
  2>"$work/cli.err")
rc=$?
[ "$rc" = 0 ] || { cat "$work/cli.err"; fail "mpirun blossom generate exited $rc"; }
[ "$got" = "$expected" ] || fail "mpirun blossom generate printed $(printf '%q' "$got")"

# 2. The server under mpirun.
log="$work/server.log"
mpirun -np 2 "${MPIRUN_ARGS[@]}" "$server" --model "$model" --launcher mpi --tp 2 --port 0 \
  --host 127.0.0.1 --metrics_port -1 --threads 1 --kv_cache_mb 16 --drain_timeout 10 \
  >"$log" 2>&1 &
mpirun_pid=$!
port=""
for _ in $(seq 1 600); do
  port=$(grep -o 'grpc_port=[0-9]*' "$log" | head -n 1 | cut -d= -f2)
  if [ -n "$port" ] && grep -q "serving bloom-tiny-h4" "$log"; then break; fi
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$port" ] || ! grep -q "serving bloom-tiny-h4" "$log"; then
  cat "$log"
  kill -KILL "$mpirun_pid" 2>/dev/null
  fail "the server did not start"
  exit 1
fi
grep -q "tp 2" "$log" || fail "the server does not report tp 2"

remote=$(timeout 60 "$cli" generate --server "127.0.0.1:$port" --prompt "$prompt" \
  --max_new_tokens 16 --quiet 2>"$work/remote.err")
[ $? = 0 ] || { cat "$work/remote.err"; fail "remote generate failed"; }
[ "$prompt$remote" = "$expected" ] || fail "remote generate returned $(printf '%q' "$remote")"
streamed=$(timeout 60 "$cli" stream --server "127.0.0.1:$port" --prompt "$prompt" \
  --max_new_tokens 16 --quiet 2>"$work/stream.err")
[ $? = 0 ] || { cat "$work/stream.err"; fail "remote stream failed"; }
[ "$prompt$streamed" = "$expected" ] || fail "remote stream returned $(printf '%q' "$streamed")"

# 3. SIGTERM to rank 0 only: it drains, then tells the follower to stop.
leader=""
for pid in $(pgrep -P "$mpirun_pid"); do
  if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx 'OMPI_COMM_WORLD_RANK=0'; then
    leader=$pid
  fi
done
if [ -z "$leader" ]; then
  fail "cannot find rank 0 among mpirun's children"
  kill -TERM "$mpirun_pid"
fi
kill -TERM "$leader"
for _ in $(seq 1 300); do
  kill -0 "$mpirun_pid" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$mpirun_pid" 2>/dev/null; then
  fail "mpirun still runs 30 s after SIGTERM to the leader"
  kill -KILL "$mpirun_pid"
fi
wait "$mpirun_pid"
rc=$?
[ "$rc" = 0 ] || fail "mpirun exited $rc after the leader's SIGTERM"
grep -q "model rank 1/2: the leader shut down" "$log" || fail "the follower was not released"
grep -q "stopped (the leader shut down)" "$log" || fail "the follower did not stop cleanly"
grep -q "stopped (0 generations were cut" "$log" || fail "the leader did not drain cleanly"

echo "---- server log ----"
cat "$log"
if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASSED: TP=2 over MPI (CLI and server) matches TP=1; SIGTERM to rank 0 stops every process with 0"
