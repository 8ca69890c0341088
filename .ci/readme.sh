#!/usr/bin/env bash
# Runs every command line of README.md's shell blocks as a new user would:
# the demo, the install, the self-host walkthrough on PostgreSQL, the
# agent walkthrough against it, a Go service behind the middleware, the
# verifying proxy in front of it from its --config file (checked first)
# and its status page. `go test` lines are run by .ci/run itself. A line
# ending in " &" is a service: it is started in the background and waited
# for ("listening" in its output).
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
server_pid="" proxy_pid="" upstream_pid="" service_pid=""
cleanup() {
  [ -n "$service_pid" ] && kill -- "-$service_pid" 2>/dev/null || true
  for pid in "$proxy_pid" "$upstream_pid" "$service_pid" "$server_pid"; do
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null || true
  done
  if [ -x "$scratch/bin/idcli" ] && [ -f "$scratch/server/.env" ]; then
    (cd "$scratch/server" && "$scratch/bin/idcli" server db:drop >/dev/null 2>&1) || true
  fi
  rm -rf "$scratch"
}
trap cleanup EXIT

# Lines of ```sh blocks, in order.
mapfile -t lines < <(awk '/^```sh$/{on=1; next} /^```$/{on=0} on && NF && !/^#/' "$repo/README.md")
[ "${#lines[@]}" -gt 0 ] || { echo "README.md has no shell commands" >&2; exit 1; }

mkdir -p "$scratch/bin" "$scratch/server" "$scratch/agent"
export GOBIN="$scratch/bin" PATH="$scratch/bin:$PATH"

# start_echo HOST PORT: a stand-in for the README's "your service" that
# answers every request with its method, URL and headers as JSON and logs
# the X-Agent-Verdict and X-Agent-Uid it received.
start_echo() {
  node -e '
    const [host, port] = process.argv.slice(1);
    require("http").createServer((req, res) => {
      console.log(`verdict=${req.headers["x-agent-verdict"] || ""} uid=${req.headers["x-agent-uid"] || ""} ${req.method} ${req.url}`);
      res.setHeader("content-type", "application/json");
      res.end(JSON.stringify({ method: req.method, url: req.url, headers: req.headers }) + "\n");
    }).listen(Number(port), host, () => console.log(`echo service on ${host}:${port}`));
  ' "$1" "$2" >"$scratch/upstream.log" 2>&1 &
  upstream_pid=$!
  for _ in $(seq 1 50); do grep -q "echo service on" "$scratch/upstream.log" && break; sleep 0.1; done
}

run_line() { # dir, line
  echo "\$ $2"
  (cd "$1" && eval "$2")
}

# start_service LINE: a README line ending in " &", run from the
# repository (go run ./…) in the background until it says it listens.
start_service() {
  echo "\$ $1"
  # A session of its own, so that cleanup stops go run and the program it
  # built together.
  (cd "$repo" && exec setsid bash -c "exec ${1% &}") >"$scratch/service.log" 2>&1 &
  service_pid=$!
  for _ in $(seq 1 300); do grep -q "listening" "$scratch/service.log" && break; sleep 0.2; done
  cat "$scratch/service.log"
  grep -q "listening" "$scratch/service.log" || { echo "the service of '$1' did not start" >&2; exit 1; }
}

server_lines=() agent_lines=()
for l in "${lines[@]}"; do
  case "$l" in
    "go test"*) echo "(skipped here, run by .ci/run: $l)";;
    "go "*" &") start_service "$l";;
    "go "*) run_line "$repo" "$l";;
    "idcli server start"*) server_lines+=("$l");;
    "idcli server"*) server_lines+=("$l");;
    "idcli proxy"*"--check"*) run_line "$repo" "$l";; # validates and exits
    "idcli proxy"*) server_lines+=("$l");;
    "idcli agent"*) agent_lines+=("$l");;
    "curl "*) agent_lines+=("$l");; # the status page, after the agent's requests
    "idcli "*) run_line "$scratch" "$l";;
    *) echo "README shell line not understood by .ci/readme.sh: $l" >&2; exit 1;;
  esac
done

for l in "${server_lines[@]}"; do
  case "$l" in
    "idcli server start"*)
      echo "\$ $l &"
      (cd "$scratch/server" && exec $l) >"$scratch/server.log" 2>&1 &
      server_pid=$!
      for _ in $(seq 1 50); do grep -q "listening on" "$scratch/server.log" && break; sleep 0.2; done
      cat "$scratch/server.log"
      grep -q "idcli server listening on http://localhost:3000" "$scratch/server.log" \
        || { echo "server did not start" >&2; exit 1; }
      ;;
    "idcli proxy"*)
      # The README puts the proxy in front of "your service": a loopback
      # --upstream gets a stand-in that logs the X-Agent-* headers it sees.
      upstream=$(sed -n 's|.*--upstream http://\(127\.0\.0\.1:[0-9]*\).*|\1|p' <<<"$l")
      if [ -n "$upstream" ]; then
        start_echo "${upstream%:*}" "${upstream#*:}"
      fi
      echo "\$ $l &"
      # From the repository: a --config path is relative to it.
      (cd "$repo" && eval "exec $l") >"$scratch/proxy.log" 2>&1 &
      proxy_pid=$!
      for _ in $(seq 1 50); do grep -q "idcli proxy listening on" "$scratch/proxy.log" && break; sleep 0.2; done
      cat "$scratch/proxy.log"
      grep -q "idcli proxy listening on" "$scratch/proxy.log" || { echo "proxy did not start" >&2; exit 1; }
      ;;
    *) run_line "$scratch/server" "$l";;
  esac
done
for l in "${agent_lines[@]}"; do run_line "$scratch/agent" "$l"; done | tee "$scratch/agent.log"
uid=$(sed -n 's/^AGENT_UID="\{0,1\}\(agent-[0-9a-f]*\)"\{0,1\}$/\1/p' "$scratch/agent/.env")
if [ -n "$service_pid" ]; then
  # The Go service greeted the agent by uid, directly and through the
  # proxy, and the status page names it by uid.
  n=$(grep -c "^hello $uid (verified by the Go middleware" "$scratch/agent.log" || true)
  [ "$n" -ge 2 ] || { echo "the Go service greeted $uid $n times, want 2 (direct and through idcli proxy)" >&2; exit 1; }
  if grep -q "9090/status" <<<"${agent_lines[*]}"; then
    grep -q "data-uid=\"$uid\"" "$scratch/agent.log" || { echo "the status page does not name $uid" >&2; exit 1; }
  fi
fi
if [ -n "$upstream_pid" ]; then
  # The agent's request went through the proxy, verified, to the service.
  cat "$scratch/upstream.log"
  grep -q "verdict=verified uid=$uid" "$scratch/upstream.log" \
    || { echo "the service behind idcli proxy saw no verified request from $uid" >&2; exit 1; }
fi
echo "README walkthrough: ${#lines[@]} lines ran"
