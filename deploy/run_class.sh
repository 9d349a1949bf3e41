#!/usr/bin/env bash
# Serve a class from this machine: N Streamlit processes on consecutive ports behind nginx.
#
#   deploy/run_class.sh N [-- app.py flags]      e.g. deploy/run_class.sh 2 -- --max-new-tokens 128
#
# Students open http://HOST:$TFM_PORT (default 8600). The processes listen on 127.0.0.1 ports
# TFM_PORT+1 .. TFM_PORT+N; nginx listens on $TFM_LISTEN (default 127.0.0.1:$TFM_PORT: set it to
# 0.0.0.0:8600 to open the class to the network). TFM_UPSTREAMS="10.0.0.2:8601 10.0.0.3:8601 ..."
# adds processes running on other machines (docs/class.md). Each local process is
# warmed (deploy/warm.py: model loaded, a first prompt traced) before nginx opens the class.
# Class rooms (the Class page) live in one SQLite file all local processes share ($TFM_ROOMS_DB,
# default ~/.local/share/tfm/rooms.sqlite3); TFM_ROOMS_REDIS=redis://HOST:PORT/0 keeps them in that
# Redis instead (processes on several machines: give each machine the same URL), and
# TFM_ROOMS_REDIS=start starts a redis-server for this machine's processes (a unix socket in the
# runtime folder, nothing kept on disk). Ctrl-C stops everything.
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:?usage: deploy/run_class.sh N [-- app.py flags]}
shift
[ "${1:-}" = "--" ] && shift
[[ "$n" =~ ^[1-9][0-9]?$ ]] || { echo "N must be a number of processes from 1 to 99, got '$n'" >&2; exit 2; }
command -v nginx >/dev/null || { echo "nginx is not installed (Debian: apt-get install nginx-light)" >&2; exit 2; }
port=${TFM_PORT:-8600}
listen=${TFM_LISTEN:-127.0.0.1:$port}
cores=$(nproc)
# Each process gets its share of the cores (a process's heavy slots share its torch threads).
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
export TFM_TORCH_THREADS=${TFM_TORCH_THREADS:-$(( cores / n > 1 ? cores / n : 1 ))}
prefix=$(mktemp -d "${TMPDIR:-/tmp}/tfm-class.XXXXXX")
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$prefix"
}
trap cleanup EXIT INT TERM
if [ "${TFM_ROOMS_REDIS:-}" = start ]; then
  command -v redis-server >/dev/null || { echo "TFM_ROOMS_REDIS=start needs redis-server (Debian: apt-get install redis-server)" >&2; exit 2; }
  redis-server --port 0 --unixsocket "$prefix/redis.sock" --unixsocketperm 700 --dir "$prefix" --save "" \
    --appendonly no >"$prefix/redis.log" 2>&1 &
  pids+=("$!")
  for _ in $(seq 1 100); do [ -S "$prefix/redis.sock" ] && break; sleep 0.05; done
  [ -S "$prefix/redis.sock" ] || { echo "redis-server did not start:" >&2; tail -5 "$prefix/redis.log" >&2; exit 1; }
  export TFM_ROOMS_REDIS="unix://$prefix/redis.sock"
fi
echo "tfm class rooms: ${TFM_ROOMS_REDIS:-SQLite ${TFM_ROOMS_DB:-~/.local/share/tfm/rooms.sqlite3}}"
upstreams=""
for i in $(seq 1 "$n"); do
  p=$((port + i))
  .venv/bin/python -m streamlit run app.py --server.port "$p" --server.address 127.0.0.1 --server.headless true \
    --browser.gatherUsageStats false -- "$@" >"$prefix/app-$p.log" 2>&1 &
  pids+=("$!")
  upstreams+="        server 127.0.0.1:$p;"$'\n'
done
for extra in ${TFM_UPSTREAMS:-}; do
  upstreams+="        server $extra;"$'\n'
done
healthy() {
  .venv/bin/python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "http://127.0.0.1:$1/_stcore/health" >/dev/null 2>&1
}
for i in $(seq 1 "$n"); do  # nginx starts once every local process answers
  p=$((port + i))
  for _ in $(seq 1 120); do healthy "$p" && break; sleep 0.5; done
  healthy "$p" || { echo "the process on port $p did not start:" >&2; tail -20 "$prefix/app-$p.log" >&2; exit 1; }
done
# Each process loads the model on its first visit: warm them all now, so no student waits for
# that (TFM_WARM=0 skips it; TFM_WARM_MODEL names another model than the server's default).
if [ "${TFM_WARM:-1}" != 0 ]; then
  if .venv/bin/python -c 'import websocket, psutil' 2>/dev/null; then
    ports=$(seq $((port + 1)) $((port + n)))
    .venv/bin/python deploy/warm.py $ports ${TFM_WARM_MODEL:+--model "$TFM_WARM_MODEL"} \
      || echo "some processes were not warmed (above): their first student waits for the model" >&2
  else
    echo "not warming the processes: deploy/warm.py needs websocket-client and psutil (scripts/setup.sh dev)" >&2
  fi
fi
mkdir -p "$prefix"/{body,proxy,fastcgi,uwsgi,scgi}
python3 - "$prefix" "$listen" "$upstreams" <<'PY'
import sys
prefix, listen, upstreams = sys.argv[1:4]
text = open("deploy/nginx.conf").read()
text = text.replace("@PREFIX@", prefix).replace("@LISTEN@", listen).replace("@UPSTREAMS@", upstreams.rstrip("\n"))
open(f"{prefix}/nginx.conf", "w").write(text)
PY
nginx -t -q -e "$prefix/error.log" -c "$prefix/nginx.conf" -p "$prefix"
echo "tfm class: $n process(es) behind nginx on http://$listen (logs in $prefix)"
nginx -e "$prefix/error.log" -c "$prefix/nginx.conf" -p "$prefix" -g "daemon off;" &
pids+=("$!")
wait "${pids[-1]}"
