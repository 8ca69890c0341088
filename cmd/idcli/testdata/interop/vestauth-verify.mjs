// vestauth-verify.mjs: verify a captured request with vestauth's primitives.verify.
//
//   node vestauth-verify.mjs '{"method":"GET","url":"http://localhost:3000/whoami",
//     "headers":{"Signature":…,"Signature-Input":…,"Signature-Agent":…},"public_jwk":{…}}'
//
// With a public JWK given, vestauth does no network I/O. vestauth itself never
// compares keyid with the key; the driver reports both (keyid_matches).
// Prints {"ok":true,"peer":…,"result":{uid,kid,public_jwk,well_known_url},"keyid_matches"}
// or {"ok":false,"peer":…,"error":…} with exit status 1.
import crypto from 'node:crypto';
import { givenHeaders, importPeer, main, need, needURL, peerName, requestMethod } from './_peers.mjs';

function thumbprint(jwk) {
  const canon = `{"crv":"${jwk.crv}","kty":"${jwk.kty}","x":"${jwk.x}"}`;
  return crypto.createHash('sha256').update(canon).digest('base64url');
}

await main('vestauth-verify', 'vestauth', async (args) => {
  const method = requestMethod(args);
  const url = needURL(args);
  const headers = Object.fromEntries(givenHeaders(need(args, 'headers', 'object')));
  const jwk = need(args, 'public_jwk', 'object');

  const mod = await importPeer('vestauth');
  const vestauth = mod.default || mod;
  const result = await vestauth.primitives.verify(method, url, headers, jwk);
  return { peer: peerName('vestauth'), result, keyid_matches: result.kid === thumbprint(jwk) };
});
