#!/usr/bin/env bash
# Sign GET {AGENT_HOSTNAME}/whoami as an agentid agent from a shell:
# `idcli agent headers` signs, curl sends.
#
# Reads AGENT_UID, AGENT_PRIVATE_JWK and AGENT_HOSTNAME (default
# http://localhost:3000) from the environment (idcli also reads them from
# ./.env). Needs idcli, curl and jq. Exit status 0 on HTTP 200.
set -euo pipefail
hostname="${AGENT_HOSTNAME:-http://localhost:3000}"
url="${hostname%/}/whoami"

# The headers sign @authority and the Signature-Agent member (the protocol-01
# default), so they hold for any path on this host until they expire
# (300 s), but each nonce may be used once.
headers=$(idcli agent headers GET "$url")
curl --silent --show-error --fail-with-body \
  -H "Signature: $(jq -r '.Signature' <<<"$headers")" \
  -H "Signature-Input: $(jq -r '."Signature-Input"' <<<"$headers")" \
  -H "Signature-Agent: $(jq -r '."Signature-Agent"' <<<"$headers")" \
  "$url"
echo
