#!/usr/bin/env python3
"""Sign GET {AGENT_HOSTNAME}/whoami as an agentid agent, in Python.

Reads AGENT_UID, AGENT_PRIVATE_JWK and AGENT_HOSTNAME (default
http://localhost:3000) from the environment, builds the signature base of
the web-bot-auth profile (docs/signing.md), signs it with Ed25519 and
prints the answer. Exit status 0 on HTTP 200, 1 otherwise.
Needs the `cryptography` package (pip install cryptography, or Debian's
python3-cryptography).
"""
import base64
import hashlib
import json
import os
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

DEFAULT_HOSTNAME = "http://localhost:3000"  # what idcli uses when AGENT_HOSTNAME is unset


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def authority(scheme: str, netloc: str) -> str:
    """host[:port], lowercased, without the scheme's default port (RFC 9421 §2.2.3)."""
    netloc = netloc.lower()
    default = {"http": ":80", "https": ":443"}[scheme]
    return netloc[: -len(default)] if netloc.endswith(default) else netloc


def main() -> int:
    uid = os.environ["AGENT_UID"]
    jwk = json.loads(os.environ["AGENT_PRIVATE_JWK"])
    hostname = os.environ.get("AGENT_HOSTNAME") or DEFAULT_HOSTNAME
    if "://" not in hostname:
        hostname = "https://" + hostname

    key = Ed25519PrivateKey.from_private_bytes(b64url_decode(jwk["d"]))
    # keyid is the RFC 7638 thumbprint of the public key.
    canonical = '{"crv":"Ed25519","kty":"OKP","x":"%s"}' % jwk["x"]
    kid = b64url(hashlib.sha256(canonical.encode()).digest())

    service = urllib.parse.urlsplit(hostname.rstrip("/"))
    origin = f"{service.scheme}://{uid}.{authority(service.scheme, service.netloc)}"
    url = f"{service.scheme}://{service.netloc}/whoami"

    # The signature covers the Signature-Agent member too (web-bot-auth
    # protocol-01): its value is the member as sent, quotes included.
    agent_member = f'"{origin}"'
    created = int(time.time())
    params = (
        '("@authority" "signature-agent";key="sig1")'
        f';created={created};keyid="{kid}";alg="ed25519";expires={created + 300}'
        f';nonce="{b64url(secrets.token_bytes(64))}";tag="web-bot-auth"'
    )
    base = (
        f'"@authority": {authority(service.scheme, service.netloc)}\n'
        f'"signature-agent";key="sig1": {agent_member}\n'
        f'"@signature-params": {params}'
    )
    signature = base64.b64encode(key.sign(base.encode())).decode()

    req = urllib.request.Request(url, headers={
        "Signature-Input": f"sig1={params}",
        "Signature": f"sig1=:{signature}:",
        "Signature-Agent": f"sig1={agent_member}",
    })
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            print(resp.read().decode())
            return 0 if resp.status == 200 else 1
    except urllib.error.HTTPError as err:
        print(f"HTTP {err.code}: {err.read().decode()}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
