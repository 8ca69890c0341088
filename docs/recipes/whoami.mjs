#!/usr/bin/env node
// Sign GET {AGENT_HOSTNAME}/whoami as an agentid agent, in Node.js with
// node:crypto only (Node 18 or later: global fetch).
//
// Reads AGENT_UID, AGENT_PRIVATE_JWK and AGENT_HOSTNAME (default
// http://localhost:3000) from the environment, builds the signature base of
// the web-bot-auth profile (docs/signing.md), signs it with Ed25519 and
// prints the answer. Exit status 0 on HTTP 200, 1 otherwise.
//
// A refusal that names what to cover (Accept-Signature, or Signature-Error
// invalid_input with required_input) or says clock_skew is retried once, as
// idcli and Go's signer.Transport do (docs/signing.md, "Retries").
//
// The service serves the agent's key directory with a signature the agent
// made, which expires after 7 days. idcli agent curl refreshes it as it goes;
// an agent that signs with this recipe alone must schedule the refresh, e.g.
// this crontab line (daily, in the folder holding the agent's .env):
//   17 3 * * * cd /srv/my-agent && idcli agent directory refresh
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

// The signature covers the Signature-Agent member too (web-bot-auth
// protocol-01): its value is the member as sent, quotes included.
const agentMember = `"${origin}"`;
const values = { // the components this recipe can sign, by identifier
  '"@method"': "GET",
  '"@authority"': authority,
  '"@path"': "/whoami",
  '"@target-uri"': url,
  '"signature-agent";key="sig1"': agentMember,
};

function signed(components, created) {
  const params = `(${components.join(" ")});created=${created};keyid="${kid}";alg="ed25519";expires=${created + 300}` +
    `;nonce="${randomBytes(64).toString("base64url")}";tag="web-bot-auth"`;
  const base = components.map((c) => `${c}: ${values[c]}\n`).join("") + `"@signature-params": ${params}`;
  const signature = sign(null, Buffer.from(base), key).toString("base64");
  return { "Signature-Input": `sig1=${params}`, "Signature": `sig1=:${signature}:`, "Signature-Agent": `sig1=${agentMember}` };
}

// What a refusal asks for: "clock_skew", the component identifiers to cover,
// or null. The headers come from the server: bounded, and anything
// unexpected means no retry.
function challenge(resp) {
  const err = resp.headers.get("Signature-Error") ?? "", accept = resp.headers.get("Accept-Signature") ?? "";
  if (err.length + accept.length > 4096 || !([400, 401].includes(resp.status) || (resp.status === 403 && err))) return null;
  if (/^\s*error=clock_skew\s*$/.test(err)) return "clock_skew";
  let m = /\berror=invalid_input\b.*\brequired_input=\(([^()]*)\)/.exec(err);
  if (m) return [...m[1].matchAll(/"([^"\\]*)"/g)].map((x) => `"${x[1]}"`);
  m = /(?:^|,)\s*sig1=\(([^()]*)\)([^,]*)/.exec(accept);
  if (!m || (m[2].includes("tag=") && !m[2].includes('tag="web-bot-auth"'))) return null;
  return m[1].match(/"[^"]*"(?:;key="[^"]*")?/g) ?? [];
}

let components = ['"@authority"', '"signature-agent";key="sig1"'];
const created = Math.floor(Date.now() / 1000);
let resp = await fetch(url, { headers: signed(components, created) });
// One retry, for this host only (fetch follows redirects by itself).
const asked = new URL(resp.url).host === authority ? challenge(resp) : null;
if (asked === "clock_skew") {
  // The verifier's clock (Date) is behind created: wait, then send the same created.
  const wait = created - Date.parse(resp.headers.get("Date") ?? "") / 1000;
  if (wait > 0 && wait <= 60) {
    await resp.arrayBuffer();
    await new Promise((ok) => setTimeout(ok, wait * 1000));
    resp = await fetch(url, { headers: signed(components, created) });
  }
} else if (asked && asked.every((c) => Object.hasOwn(values, c)) && !asked.every((c) => components.includes(c))) {
  // Add what the verifier asks for; never drop what we cover.
  components = [...components, ...asked.filter((c) => !components.includes(c))];
  await resp.arrayBuffer();
  resp = await fetch(url, { headers: signed(components, Math.floor(Date.now() / 1000)) });
}
const body = await resp.text();
if (resp.status === 200) {
  console.log(body);
} else {
  console.error(`HTTP ${resp.status}: ${body}`);
  process.exit(1);
}
