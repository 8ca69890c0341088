#!/usr/bin/env node
// Sign GET {AGENT_HOSTNAME}/whoami as an agentid agent, in Node.js with
// node:crypto only (Node 18 or later: global fetch).
//
// Reads AGENT_UID, AGENT_PRIVATE_JWK and AGENT_HOSTNAME (default
// http://localhost:3000) from the environment, builds the signature base of
// the web-bot-auth profile (docs/signing.md), signs it with Ed25519 and
// prints the answer. Exit status 0 on HTTP 200, 1 otherwise.
import { createHash, createPrivateKey, randomBytes, sign } from "node:crypto";

const DEFAULT_HOSTNAME = "http://localhost:3000"; // what idcli uses when AGENT_HOSTNAME is unset

const uid = process.env.AGENT_UID;
const jwk = JSON.parse(process.env.AGENT_PRIVATE_JWK);
let hostname = process.env.AGENT_HOSTNAME || DEFAULT_HOSTNAME;
if (!hostname.includes("://")) hostname = "https://" + hostname;

// node:crypto imports an OKP JWK directly; only kty, crv, x and d matter.
const key = createPrivateKey({ key: { kty: "OKP", crv: "Ed25519", x: jwk.x, d: jwk.d }, format: "jwk" });
// keyid is the RFC 7638 thumbprint of the public key.
const kid = createHash("sha256").update(`{"crv":"Ed25519","kty":"OKP","x":"${jwk.x}"}`).digest("base64url");

// URL.host is lowercased and drops the scheme's default port, which is
// what @authority is (RFC 9421 §2.2.3).
const service = new URL(hostname);
const authority = service.host;
const origin = `${service.protocol}//${uid}.${authority}`;
const url = `${service.protocol}//${authority}/whoami`;

const created = Math.floor(Date.now() / 1000);
// The signature covers the Signature-Agent member too (web-bot-auth
// protocol-01): its value is the member as sent, quotes included.
const agentMember = `"${origin}"`;
const params = `("@authority" "signature-agent";key="sig1");created=${created};keyid="${kid}";alg="ed25519";expires=${created + 300}` +
  `;nonce="${randomBytes(64).toString("base64url")}";tag="web-bot-auth"`;
const base = `"@authority": ${authority}\n"signature-agent";key="sig1": ${agentMember}\n"@signature-params": ${params}`;
const signature = sign(null, Buffer.from(base), key).toString("base64");

const resp = await fetch(url, {
  headers: {
    "Signature-Input": `sig1=${params}`,
    "Signature": `sig1=:${signature}:`,
    "Signature-Agent": `sig1=${agentMember}`,
  },
});
const body = await resp.text();
if (resp.status === 200) {
  console.log(body);
} else {
  console.error(`HTTP ${resp.status}: ${body}`);
  process.exit(1);
}
