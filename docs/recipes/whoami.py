#!/usr/bin/env python3
"""Sign GET {AGENT_HOSTNAME}/whoami as an agentid agent, in Python.

Reads AGENT_UID, AGENT_PRIVATE_JWK and AGENT_HOSTNAME (default
http://localhost:3000) from the environment, builds the signature base of
the web-bot-auth profile (docs/signing.md), signs it with Ed25519 and
prints the answer. Exit status 0 on HTTP 200, 1 otherwise.
Needs the `cryptography` package (pip install cryptography, or Debian's
python3-cryptography).

A refusal that names what to cover (Accept-Signature, or Signature-Error
invalid_input with required_input) or says clock_skew is retried once, as
idcli and Go's signer.Transport do (docs/signing.md, "Retries").

The service serves the agent's key directory with a signature the agent
made, which expires after 7 days. idcli agent curl refreshes it as it goes;
an agent that signs with this recipe alone must schedule the refresh, e.g.
this crontab line (daily, in the folder holding the agent's .env):
    17 3 * * * cd /srv/my-agent && idcli agent directory refresh
"""
import base64
import hashlib
import json
import os
import re
import secrets
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import parsedate_to_datetime

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
    values = {  # the components this recipe can sign, by identifier
        '"@method"': "GET",
        '"@authority"': authority(service.scheme, service.netloc),
        '"@path"': "/whoami",
        '"@target-uri"': url,
        '"signature-agent";key="sig1"': agent_member,
    }

    def signed(components: list, created: int) -> dict:
        params = (
            f'({" ".join(components)})'
            f';created={created};keyid="{kid}";alg="ed25519";expires={created + 300}'
            f';nonce="{b64url(secrets.token_bytes(64))}";tag="web-bot-auth"'
        )
        base = "".join(f"{c}: {values[c]}\n" for c in components) + f'"@signature-params": {params}'
        signature = base64.b64encode(key.sign(base.encode())).decode()
        return {
            "Signature-Input": f"sig1={params}",
            "Signature": f"sig1=:{signature}:",
            "Signature-Agent": f"sig1={agent_member}",
        }

    components = ['"@authority"', '"signature-agent";key="sig1"']
    created = int(time.time())
    status, headers, body, final = get(url, signed(components, created))
    # One retry, for this host only (urllib follows redirects by itself).
    asked = challenge(status, headers) if urllib.parse.urlsplit(final).netloc == service.netloc else None
    if asked == "clock_skew":
        # The verifier's clock (Date) is behind created: wait, then send the same created.
        try:
            wait = created - parsedate_to_datetime(headers["Date"]).timestamp()
        except (TypeError, ValueError):
            wait = 0
        if 0 < wait <= 60:
            time.sleep(wait)
            status, headers, body, final = get(url, signed(components, created))
    elif asked and set(asked) <= values.keys() and not set(asked) <= set(components):
        # Add what the verifier asks for; never drop what we cover.
        components += [c for c in asked if c not in components]
        status, headers, body, final = get(url, signed(components, int(time.time())))
    if status == 200:
        print(body)
        return 0
    print(f"HTTP {status}: {body}", file=sys.stderr)
    return 1


def get(url: str, headers: dict):
    """GET url: the status, headers, body and the URL that answered."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30) as resp:
            return resp.status, resp.headers, resp.read().decode(), resp.geturl()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read().decode(), err.geturl()


def challenge(status: int, headers):
    """What a refusal asks for: "clock_skew", the component identifiers to
    cover, or None. The headers come from the server: bounded, and anything
    unexpected means no retry."""
    err, accept = headers.get("Signature-Error", ""), headers.get("Accept-Signature", "")
    if len(err) + len(accept) > 4096 or not (status in (400, 401) or status == 403 and err):
        return None
    if re.fullmatch(r"\s*error=clock_skew\s*", err):
        return "clock_skew"
    m = re.search(r"\berror=invalid_input\b.*\brequired_input=\(([^()]*)\)", err)
    if m:
        return ['"%s"' % name for name in re.findall(r'"([^"\\]*)"', m.group(1))]
    m = re.search(r'(?:^|,)\s*sig1=\(([^()]*)\)([^,]*)', accept)
    if not m or "tag=" in m.group(2) and 'tag="web-bot-auth"' not in m.group(2):
        return None
    return re.findall(r'"[^"]*"(?:;key="[^"]*")?', m.group(1))

if __name__ == "__main__":
    sys.exit(main())
