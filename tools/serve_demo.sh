#!/usr/bin/env bash
# One command to serve the bundled demo model: installs what is missing, builds blossom-server
# and blossom-gateway (CPU backend), starts both on loopback and waits until the gateway answers
# /health, then runs until Ctrl-C or SIGTERM, which stop both (each drains) before it exits 0.
# If either process dies on its own, the other is stopped and the script exits 1.
#
#   tools/serve_demo.sh [--http-port 8080] [--grpc-port 8033] [--metrics-port 9090]
#                       [--model DIR] [-- EXTRA blossom-server FLAGS]
#
# Then, from another terminal:
#   curl -s localhost:8080/v1/completions -H 'Content-Type: application/json' \
#        -d '{"prompt": "The server reads", "max_tokens": 16}'
#
# BLOSSOM_SERVER_BIN and BLOSSOM_GATEWAY_BIN (both set) run prebuilt binaries instead of
# installing and building (the test //tests/docs:readme_serving_test does this).
set -euo pipefail
cd "$(dirname "$0")/.."

http_port=8080
grpc_port=8033
metrics_port=9090
model=tests/fixtures/models/bloom-demo
while [[ $# -gt 0 ]]; do
  case "$1" in
    --http-port) http_port="$2"; shift 2 ;;
    --grpc-port) grpc_port="$2"; shift 2 ;;
    --metrics-port) metrics_port="$2"; shift 2 ;;
    --model) model="$2"; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "serve_demo: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done

server_bin="${BLOSSOM_SERVER_BIN:-}"
gateway_bin="${BLOSSOM_GATEWAY_BIN:-}"
if [[ -z "$server_bin" || -z "$gateway_bin" ]]; then
  tools/install_deps.sh
  bazel build --config=nocuda //server:blossom-server //clients:blossom-gateway >&2
  server_bin=bazel-bin/server/blossom-server
  gateway_bin=bazel-bin/clients/gateway/blossom-gateway
fi

server_pid=""
gateway_pid=""
# Sends SIGTERM to both (gateway first, so no new request reaches a draining server) and waits
# for them; SIGKILL only if one is still there after 60 s.
stop_both() {
  trap '' INT TERM
  local pid
  for pid in $gateway_pid $server_pid; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in $gateway_pid $server_pid; do
    for _ in $(seq 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    if kill -0 "$pid" 2>/dev/null; then
      echo "serve_demo: pid $pid did not stop within 60 s; killing it" >&2
      kill -KILL "$pid" 2>/dev/null || true
    fi
    wait "$pid" 2>/dev/null || true
  done
}
trap 'echo "serve_demo: stopping" >&2; stop_both; echo "serve_demo: stopped" >&2; exit 0' INT TERM

"$server_bin" --model "$model" --host 127.0.0.1 --port "$grpc_port" \
  --metrics-port "$metrics_port" "$@" &
server_pid=$!
"$gateway_bin" --host 127.0.0.1 --port "$http_port" --backend "127.0.0.1:$grpc_port" &
gateway_pid=$!
echo "serve_demo: blossom-server pid $server_pid, blossom-gateway pid $gateway_pid" >&2

# Ready when the gateway's /health is 200 (the server answers GetModelInfo: model loaded).
ready=0
for _ in $(seq 1200); do
  if curl -sf -o /dev/null --max-time 2 "http://127.0.0.1:$http_port/health"; then ready=1; break; fi
  if ! kill -0 "$server_pid" 2>/dev/null || ! kill -0 "$gateway_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [[ "$ready" != 1 ]]; then
  echo "serve_demo: the server or the gateway exited or never became ready; stopping" >&2
  stop_both
  exit 1
fi
echo "serve_demo: ready: http://127.0.0.1:$http_port (OpenAI /v1/*, TGI /generate*)," \
     "gRPC 127.0.0.1:$grpc_port, metrics http://127.0.0.1:$metrics_port/metrics; Ctrl-C stops both"

# Runs until a signal (the trap) or until one of the two exits on its own.
set +e
wait -n "$server_pid" "$gateway_pid"
rc=$?
set -e
echo "serve_demo: a process exited on its own (status $rc); stopping the other" >&2
stop_both
exit 1
