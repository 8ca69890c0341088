#!/usr/bin/env bash
# Runs every command line of README.md's shell blocks as a new user would:
# the demo, the install, the self-host walkthrough on PostgreSQL and the
# agent walkthrough against it. `go test` lines are run by .ci/run itself.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
server_pid=""
cleanup() {
  [ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null && wait "$server_pid" 2>/dev/null || true
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

run_line() { # dir, line
  echo "\$ $2"
  (cd "$1" && eval "$2")
}

server_lines=() agent_lines=()
for l in "${lines[@]}"; do
  case "$l" in
    "go test"*) echo "(skipped here, run by .ci/run: $l)";;
    "go "*) run_line "$repo" "$l";;
    "idcli server start"*) server_lines+=("$l");;
    "idcli server"*) server_lines+=("$l");;
    "idcli agent"*) agent_lines+=("$l");;
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
    *) run_line "$scratch/server" "$l";;
  esac
done
for l in "${agent_lines[@]}"; do run_line "$scratch/agent" "$l"; done
echo "README walkthrough: ${#lines[@]} lines ran"
