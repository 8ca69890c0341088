#!/usr/bin/env bash
# Release check, run by .ci/run: builds the release twice from two clean
# clones of HEAD (other paths, other times, the second with an empty build
# cache and its own temporary directory), requires byte-identical
# archives, SBOMs and SHA256SUMS, then installs the linux/amd64 archive as
# the Install section of README.md says — verify against SHA256SUMS,
# unpack, put idcli on PATH, run — with no Go toolchain on PATH, and checks
# that the archive holds every file the README links to.
#
#   .ci/release.sh [OUT]    (OUT, default $TMPDIR/agentid-release, keeps dist/)
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-${TMPDIR:-/tmp}/agentid-release}
commit=$(git -C "$repo" rev-parse HEAD)
rm -rf "$out"
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build_in() { # dir, extra env…
  local dir=$1; shift
  git clone -q --no-local "$repo" "$dir"
  git -C "$dir" checkout -q "$commit"
  (cd "$dir" && env "$@" go run ./.ci/release -out "$dir/dist")
}

echo "release build 1 (in $work/a)"
build_in "$work/a/agentid"
sleep 2
echo "release build 2 (in $work/second/clone, empty build cache)"
mkdir -p "$work/cache2" "$work/tmp2"
build_in "$work/second/clone" GOCACHE="$work/cache2" TMPDIR="$work/tmp2"

if ! diff -r "$work/a/agentid/dist" "$work/second/clone/dist"; then
  echo "release: the two builds of $commit differ" >&2
  diff "$work/a/agentid/dist/SHA256SUMS" "$work/second/clone/dist/SHA256SUMS" >&2 || true
  exit 1
fi
cp "$work/a/agentid/dist/"* "$out/"
echo "release: two builds of $commit are byte-identical:"
cat "$out/SHA256SUMS"

# The ```shell block of README.md's "Install" section, run verbatim against
# the files just built (served over loopback in place of the release
# page) with no Go toolchain on PATH.
mapfile -t lines < <(awk '/^## /{sec=($0 == "## Install")} sec && /^```shell$/{on=1; next} on && /^```$/{on=0; sec=0} on && NF && !/^#/' "$repo/README.md")
[ "${#lines[@]}" -gt 0 ] || { echo "README.md's Install section has no \`\`\`shell block" >&2; exit 1; }
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
python3 -m http.server "$port" --bind 127.0.0.1 --directory "$out" >"$work/http.log" 2>&1 &
http_pid=$!
trap 'kill $http_pid 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 1 50); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done
mkdir -p "$work/user"
nogo_path=$(tr ':' '\n' <<<"$PATH" | while read -r d; do [ -x "$d/go" ] || echo "$d"; done | paste -sd:)
(
  cd "$work/user"
  export PATH="$nogo_path" HOME="$work/user"
  ! command -v go >/dev/null || { echo "go is still on PATH" >&2; exit 1; }
  export AGENTID_RELEASES="http://127.0.0.1:$port"
  for l in "${lines[@]}"; do
    echo "\$ $l"
    eval "$l"
  done
  # The Install section put the release's idcli on PATH.
  on_path=$(command -v idcli) || { echo "README.md's Install section leaves idcli off PATH" >&2; exit 1; }
  cmp -s "$on_path" "$work/user/idcli_"*"_linux_amd64/idcli" || { echo "idcli on PATH ($on_path) is not the release's" >&2; exit 1; }
) | tee "$work/user.log"
# A release user reads the README from the archive: every file it links to
# is there.
unpacked=$(echo "$work/user/idcli_"*"_linux_amd64")
while read -r link; do
  [ -e "$unpacked/$link" ] || { echo "README.md links to $link, which the archive lacks" >&2; exit 1; }
done < <(grep -o '](\([^)#]*\)' "$unpacked/README.md" | sed 's/^](//' | grep -v '^[a-z][a-z]*:' | grep . | sort -u)
[ -f "$unpacked/docs/README.md" ] || { echo "the archive has no docs/README.md" >&2; exit 1; }
grep -q "replayed" "$work/user.log" || { echo "idcli demo from the release did not run to its end" >&2; exit 1; }
got=$("$work/user/idcli_"*"_linux_amd64/idcli" version --json)
echo "$got"
grep -q "\"commit\":\"$commit\"" <<<"$got" || { echo "the release binary does not name commit $commit" >&2; exit 1; }
echo "release check passed"
