#!/usr/bin/env bash
# Compares the /whoami throughput of vestauth's own server (npm vestauth
# 0.21.1, started with `npx vestauth server start`) and agentid's reference
# server (`idcli server start`), both on PostgreSQL on this machine, measured
# the same way: `idcli bench --target whoami`, every request signed with its
# own nonce. It prints both reports and the throughput ratio.
#
#   cmd/idcli/testdata/compare-vestauth.sh
#
# Loopback only: both servers and the load generator run here and talk over
# 127.0.0.1 (agentid binds 127.0.0.1; vestauth's server, which has no bind
# option, listens on a random high port for the run). It stops by itself:
# each step has a time limit, and everything it started (servers, scratch
# databases, temporary folder) is removed on exit, on failure or on Ctrl-C.
#
# Settings (environment):
#   DATABASE_URL  a PostgreSQL URL whose user may create databases; only its
#                 scheme, user, password, host and port are used
#                 (default postgres://postgres@127.0.0.1:5432/postgres)
#   DURATION      bench time per server (default 10s)
#   CONCURRENCY   connections (default 64)
#   REPLAY_STORE  agentid's nonce store: postgres (default; in the database,
#                 shared by every instance) or memory
#   PRESIGN       sign this many requests (each with its own nonce) before
#                 each timed phase, so the generator's signing stays out of
#                 the measured loop on a machine it shares with the servers
#                 (default 0: sign inside the loop)
#   TIME_LIMIT    seconds after which each server is stopped whatever
#                 happens (default 600)
#   AGENTID_INTEROP_NODE_MODULES  node_modules holding vestauth 0.21.1, as made
#                 by testdata/interop/install.sh (default: installed into the
#                 temporary folder from the pinned lock file)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../../.." && pwd)
base_url=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
duration=${DURATION:-10s}
concurrency=${CONCURRENCY:-64}
replay_store=${REPLAY_STORE:-postgres}
presign=${PRESIGN:-0}
step_limit=180                    # seconds, any one step
server_limit=${TIME_LIMIT:-600}   # seconds, each server (and so the whole run)

for tool in go node npx timeout; do
  command -v "$tool" >/dev/null || { echo "compare-vestauth.sh: $tool is not installed" >&2; exit 1; }
done
case "$base_url" in
  postgres://*/* | postgresql://*/*) ;;
  *) echo "compare-vestauth.sh: DATABASE_URL must be postgres://USER[:PASS]@HOST:PORT/DATABASE" >&2; exit 1;;
esac

scratch=$(mktemp -d)
pids=() # servers, each the leader of its own process group (setsid)
dbs=()
stop() { # PID: stop the server process group PID started by this script
  kill -TERM -- "-$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
}
cleanup() {
  for pid in "${pids[@]}"; do stop "$pid"; done
  for db in "${dbs[@]}"; do
    timeout 30 "$scratch/idcli" server db:drop --database-url "$db" >/dev/null 2>&1 || true
  done
  rm -rf "$scratch"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# db_url NAME: the scratch database NAME on the DATABASE_URL server.
db_url() {
  local prefix=${base_url%%\?*}
  echo "${prefix%/*}/$1"
}

# free_port: a port nothing listens on now.
free_port() {
  node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})'
}

# wait_http URL: wait (at most 30 s) until URL answers.
wait_http() {
  for _ in $(seq 1 150); do
    if node -e 'fetch(process.argv[1]).then(r=>process.exit(r.status<500?0:1),()=>process.exit(1))' "$1"; then return 0; fi
    sleep 0.2
  done
  echo "compare-vestauth.sh: nothing answers at $1" >&2
  return 1
}

# bench NAME URL ARGS…: idcli bench against URL's /whoami, report in NAME.json.
bench() {
  local name=$1 url=$2
  shift 2
  echo "== idcli bench $url (whoami, $duration, $concurrency connections)"
  timeout "$step_limit" "$scratch/idcli" bench --url "$url" --connect "127.0.0.1:${url##*:}" --target whoami \
    --duration "$duration" --concurrency "$concurrency" --presign "$presign" "$@" --json >"$scratch/$name.json"
}

echo "== building idcli"
(cd "$repo" && timeout "$step_limit" go build -o "$scratch/idcli" ./cmd/idcli)

modules=${AGENTID_INTEROP_NODE_MODULES:-}
if [ -z "$modules" ]; then
  timeout "$step_limit" "$here/interop/install.sh" "$scratch/peers" >/dev/null
  modules="$scratch/peers/node_modules"
fi
peers=$(cd "$modules/.." && pwd)
version=$(node -p "require('$modules/vestauth/package.json').version")
[ "$version" = "0.21.1" ] || { echo "compare-vestauth.sh: $modules has vestauth $version, want the pinned 0.21.1" >&2; exit 1; }

suffix="$(date +%s)_$$"
vdb=$(db_url "vestauth_bench_$suffix")
adb=$(db_url "agentid_bench_$suffix")

# vestauth: its own server on its own database, and an agent registered by
# its own CLI.
vport=$(free_port)
dbs+=("$vdb")
(cd "$peers" && timeout "$step_limit" npx --no-install vestauth server db:create --database-url "$vdb" >/dev/null)
(cd "$peers" && timeout "$step_limit" npx --no-install vestauth server db:migrate --database-url "$vdb" >/dev/null)
(cd "$peers" && exec setsid timeout "$server_limit" npx --no-install vestauth server start --port "$vport" \
  --hostname "http://localhost:$vport" --database-url "$vdb") >"$scratch/vestauth.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$vport/"
mkdir "$scratch/vestauth-agent"
(cd "$scratch/vestauth-agent" && timeout "$step_limit" node "$modules/vestauth/src/cli/vestauth.js" agent init \
  --hostname "http://localhost:$vport" >/dev/null)
bench vestauth "http://localhost:$vport" --env-file "$scratch/vestauth-agent/.env" --legacy
stop "${pids[-1]}"

# agentid: the reference server on its own database, the bench agent
# registered by idcli bench.
aport=$(free_port)
dbs+=("$adb")
timeout "$step_limit" "$scratch/idcli" server db:create --database-url "$adb" >/dev/null
timeout "$step_limit" "$scratch/idcli" server db:migrate --database-url "$adb" >/dev/null
setsid timeout "$server_limit" "$scratch/idcli" server start --port "$aport" --bind 127.0.0.1 \
  --hostname "http://localhost:$aport" --database-url "$adb" --replay-store "$replay_store" \
  --rate-limit off --log-level warn >"$scratch/agentid.log" 2>&1 &
pids+=($!)
wait_http "http://127.0.0.1:$aport/"
bench agentid "http://localhost:$aport" --database-url "$adb"

node - "$scratch/vestauth.json" "$scratch/agentid.json" "$replay_store" <<'EOF'
const fs = require('fs')
const [v, a] = [process.argv[2], process.argv[3]].map(f => JSON.parse(fs.readFileSync(f, 'utf8')).targets[0])
const line = (name, t) => console.log(
  `${name.padEnd(28)} ${t.requests_per_second.toFixed(0).padStart(8)} req/s  p50 ${t.p50_ms.toFixed(2)} ms  ` +
  `p99 ${t.p99_ms.toFixed(2)} ms  statuses ${JSON.stringify(t.status)}`)
line('vestauth 0.21.1', v)
line(`agentid (replay: ${process.argv[4]})`, a)
const ok = t => (t.status['200'] || 0) > 0 && t.errors === 0 && Object.keys(t.status).every(s => s === '200')
if (!ok(v) || !ok(a)) {
  console.error('compare-vestauth.sh: a server answered something other than 200; the ratio would mean nothing')
  process.exit(1)
}
console.log(`throughput ratio agentid / vestauth: ${(a.requests_per_second / v.requests_per_second).toFixed(1)}x`)
EOF
