#!/usr/bin/env bash
# Installs the pinned peer implementations (npm vestauth 0.21.1 and
# web-bot-auth 0.1.3) outside the repository for cmd/idcli/interop_test.go.
#
#   cmd/idcli/testdata/interop/install.sh [DIR]      # DIR default: ${TMPDIR:-/tmp}/agentid-interop
#   export AGENTID_INTEROP_NODE_MODULES="$DIR/node_modules"
#
# It is the pinned form of `npm install --prefix DIR vestauth@0.21.1 web-bot-auth@0.1.3`:
# package.json and package-lock.json (committed beside this script) are copied
# into DIR and installed with `npm ci`, so every transitive version and
# integrity hash is fixed. Idempotent: a second run with the same lock file
# does nothing. Talks only to the npm registry; runs no package scripts.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
dir="${1:-${TMPDIR:-/tmp}/agentid-interop}"

command -v node >/dev/null || { echo "install.sh: node is not installed" >&2; exit 1; }
command -v npm >/dev/null || { echo "install.sh: npm is not installed" >&2; exit 1; }

mkdir -p "$dir"
dir="$(cd "$dir" && pwd)"
want="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -d' ' -f1)"
stamp="$dir/.agentid-interop-stamp"

if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] \
  && [ -f "$dir/node_modules/vestauth/package.json" ] && [ -f "$dir/node_modules/web-bot-auth/package.json" ]; then
  echo "install.sh: peers already installed in $dir/node_modules"
  exit 0
fi

cp "$here/package.json" "$here/package-lock.json" "$dir/"
rm -f "$stamp"
npm ci --prefix "$dir" --ignore-scripts --no-audit --no-fund --loglevel=error
printf '%s\n' "$want" > "$stamp"
echo "install.sh: installed $(node -p "'vestauth@' + require('$dir/node_modules/vestauth/package.json').version + ' web-bot-auth@' + require('$dir/node_modules/web-bot-auth/package.json').version") in $dir/node_modules"
