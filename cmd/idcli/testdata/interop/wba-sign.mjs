// wba-sign.mjs: sign a request with Cloudflare's web-bot-auth and print the headers.
//
//   node wba-sign.mjs '{"method":"GET","url":"http://localhost:3000/whoami",
//     "private_jwk":{…Ed25519 with d…},"signature_agent":"http://agent-x.localhost:3000",
//     "mode":"member"}'
//
// private_jwk is an Ed25519 key (OKP) or an RSA key marked "alg":"PS512": web-bot-auth's
// signerFromJWK picks Ed25519Signer or RSAPSSSHA512Signer (alg="rsa-pss-sha512").
//
// mode (default "whole-field" with a signature_agent, "none" without):
//   none         no Signature-Agent; covers ("@authority")                       (web-bot-auth default)
//   whole-field  Signature-Agent sent; covers ("@authority" "signature-agent")     (web-bot-auth 0.1.3 default)
//   member       covers ("@authority" "signature-agent";key="<label>") with the RFC 9421 §2.1.2
//                member value; web-bot-auth 0.1.3 does not extract dictionary members itself, so
//                the driver hands it the member's serialized value for that component
//   member-raw   same components, but the base web-bot-auth 0.1.3 builds on its own (the whole
//                field as the value of the keyed component: not RFC 9421; a strict verifier rejects it)
// Optional: label (default "sig1"), created / expires (unix seconds; default now / now+300),
// nonce (64 bytes, standard base64: what web-bot-auth accepts).
// Prints {"ok":true,"peer":…,"headers":{"Signature","Signature-Input"[,"Signature-Agent"]},"keyid","alg","base"}.
import { importPeer, main, need, needURL, peerName, requestMethod, sfString, UsageError, wbaMessage } from './_peers.mjs';

await main('wba-sign', 'web-bot-auth', async (args) => {
  const method = requestMethod(args);
  const url = needURL(args);
  const jwk = need(args, 'private_jwk', 'object');
  const label = args.label || 'sig1';
  const origin = args.signature_agent || '';
  const mode = args.mode || (origin ? 'whole-field' : 'none');
  if (!['none', 'whole-field', 'member', 'member-raw'].includes(mode)) throw new UsageError(`unknown mode ${mode}`);
  if (mode !== 'none' && !origin) throw new UsageError(`mode ${mode} needs signature_agent`);

  const wba = await importPeer('web-bot-auth');
  const wbaCrypto = await importPeer('web-bot-auth', './crypto');

  const headers = new Map();
  let agentHeader = '';
  if (mode !== 'none') {
    agentHeader = `${label}=${sfString(origin)}`;
    headers.set('signature-agent', agentHeader);
  }
  const message = wbaMessage(method, url, headers, mode === 'member' ? sfString(origin) : null);

  const signer = await wbaCrypto.signerFromJWK(jwk);
  let base = '';
  const sign = signer.sign.bind(signer);
  signer.sign = async (data) => { base = data; return sign(data); };

  const now = Math.floor(Date.now() / 1000);
  const created = new Date(1000 * (Number.isInteger(args.created) ? args.created : now));
  const expires = new Date(1000 * (Number.isInteger(args.expires) ? args.expires : Math.floor(created.getTime() / 1000) + 300));
  const params = { created, expires, key: label };
  if (args.nonce) params.nonce = args.nonce;
  if (mode === 'member' || mode === 'member-raw') {
    params.components = ['@authority', { name: 'signature-agent', parameters: new Map([['key', label]]) }];
  }
  const out = await wba.signatureHeaders(message, signer, params);
  const result = { Signature: out.Signature, 'Signature-Input': out['Signature-Input'] };
  if (agentHeader) result['Signature-Agent'] = agentHeader;
  return { peer: peerName('web-bot-auth'), mode, headers: result, keyid: signer.keyid, alg: signer.alg, base };
});
