#!/usr/bin/env bash
# sh_test: a follower that dies must make the leader's steps fail, never hang.
# `mpirun --enable-recovery` keeps the job alive when a process dies (plain mpirun would end the
# whole job at once, which is also no hang); the server runs with --collective_timeout 2.
#  1. a greedy request is served;
#  2. rank 1 is killed (SIGKILL); the next request fails within seconds with the collective's
#     DeadlineExceeded ("not complete after 2000 ms");
#  3. the server then knows it cannot run again (the ranks are out of step): gRPC health is
#     NOT_SERVING, /live on the metrics port 503 (Kubernetes restarts it), and the next request
#     is refused at once with UNAVAILABLE ("must be restarted");
#  4. SIGTERM to the leader still stops it.
# Without mpirun: one SKIPPED case with the reason.
set -uo pipefail
runfiles="${TEST_SRCDIR:-$PWD/..}/${TEST_WORKSPACE:-blossom}"
source "$runfiles/tests/mpi/mpi_env.sh"
mpi_setup

server="$runfiles/server/blossom-server"
cli="$runfiles/clients/blossom"
model="$runfiles/tests/fixtures/models/bloom-tiny-h4"
work="$MPI_SESSION_DIR/work"
mkdir -p "$work"
failures=0
fail() {
  echo "FAIL: $1"
  failures=$((failures + 1))
}

log="$work/server.log"
mpirun -np 2 "${MPIRUN_ARGS[@]}" --enable-recovery "$server" --model "$model" --launcher mpi \
  --tp 2 --port 0 --host 127.0.0.1 --metrics_port 0 --threads 1 --kv_cache_mb 16 \
  --collective_timeout 2 --drain_timeout 5 >"$log" 2>&1 &
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
  echo "FAIL: the server did not start"
  exit 1
fi
rank_pid() {
  for pid in $(pgrep -P "$mpirun_pid"); do
    if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$1"; then
      echo "$pid"
    fi
  done
}
leader=$(rank_pid 0)
follower=$(rank_pid 1)
[ -n "$leader" ] && [ -n "$follower" ] || fail "cannot find the ranks among mpirun's children"

request() {
  timeout 60 "$cli" generate --server "127.0.0.1:$port" --prompt "Hello" --max_new_tokens 4 \
    --quiet >"$work/out" 2>"$work/err"
}
request || { cat "$work/err"; fail "the first request failed"; }
metrics_port=$(grep -o 'metrics_port=[0-9]*' "$log" | head -n 1 | cut -d= -f2)
[ "$(curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$metrics_port/live")" = 200 ] ||
  fail "/live is not 200 on a healthy server"

kill -KILL "$follower"
start=$(date +%s)
if request; then fail "a request succeeded after the follower died"; fi
elapsed=$(($(date +%s) - start))
cat "$work/err"
grep -q "not complete after 2000 ms" "$work/err" ||
  fail "the request after the follower's death did not fail with the collective timeout"
[ "$elapsed" -le 20 ] || fail "the failure took $elapsed s"
live_status() {
  curl -s -o /dev/null -w '%{http_code}' --max-time 10 "http://127.0.0.1:$metrics_port/live"
}
live=$(live_status)
[ "$live" = "503" ] || fail "/live answers $live on a broken group, not 503 (nothing would restart it)"
health=$(timeout 30 "$cli" health --server "127.0.0.1:$port" 2>&1)
echo "health: $health"
[ "$health" = "NOT_SERVING" ] || fail "health is '$health' on a broken group, not NOT_SERVING"
start=$(date +%s)
if request; then fail "a request succeeded on a broken group"; fi
cat "$work/err"
grep -q "UNAVAILABLE: .*must be restarted" "$work/err" ||
  fail "a broken group does not refuse with UNAVAILABLE saying to restart"
[ $(($(date +%s) - start)) -le 5 ] || fail "the refusal on a broken group was not at once"

kill -TERM "$leader" 2>/dev/null
for _ in $(seq 1 300); do
  kill -0 "$leader" 2>/dev/null || break
  sleep 0.1
done
kill -0 "$leader" 2>/dev/null && fail "the leader still runs 30 s after SIGTERM"
kill -KILL "$mpirun_pid" 2>/dev/null  # mpirun --enable-recovery may linger without its ranks
wait "$mpirun_pid" 2>/dev/null

echo "---- server log ----"
cat "$log"
if [ "$failures" -gt 0 ]; then
  echo "$failures check(s) failed"
  exit 1
fi
echo "PASSED: a dead follower fails the leader's step after the collective timeout, no hang"
