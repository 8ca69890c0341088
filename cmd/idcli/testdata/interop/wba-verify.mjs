// wba-verify.mjs: verify a captured request with Cloudflare's web-bot-auth verify().
//
//   node wba-verify.mjs '{"method":"GET","url":"http://localhost:3000/whoami",
//     "headers":{"Signature":…,"Signature-Input":…,"Signature-Agent":…},
//     "public_jwk":{…},"member_adapter":false}'
//
// The key is imported with web-bot-auth's verifierFromJWK. Like any web-bot-auth
// deployment that looks keys up by keyid, the driver also requires keyid to be the
// JWK's jwkToKeyID. member_adapter: web-bot-auth 0.1.3 rebuilds a covered
// `"signature-agent";key="L"` from the whole field (not RFC 9421 §2.1.2); with
// member_adapter true the driver hands it member L's serialized value instead,
// which is what a correct verifier (and the web-bot-auth repository head) uses.
// Prints {"ok":true,"peer":…,"keyid","tag","created","expires","nonce","base"}
// or {"ok":false,"peer":…,"error":…} with exit status 1.
import { givenHeaders, importPeer, main, need, needURL, peerName, requestMethod, wbaMessage } from './_peers.mjs';

await main('wba-verify', 'web-bot-auth', async (args) => {
  const method = requestMethod(args);
  const url = needURL(args);
  const headers = new Map(givenHeaders(need(args, 'headers', 'object')).map(([k, v]) => [k.toLowerCase(), v]));
  const jwk = need(args, 'public_jwk', 'object');

  const wba = await importPeer('web-bot-auth');
  const wbaCrypto = await importPeer('web-bot-auth', './crypto');
  const sh = await importPeer('structured-headers');

  let member = null;
  if (args.member_adapter && headers.has('signature-input') && headers.has('signature-agent')) {
    const input = sh.parseDictionary(headers.get('signature-input'));
    for (const [, inner] of input) {
      if (!Array.isArray(inner[0])) continue;
      for (const [name, p] of inner[0]) {
        if (name === 'signature-agent' && p.has('key')) {
          const agent = sh.parseDictionary(headers.get('signature-agent'));
          const m = agent.get(p.get('key'));
          if (!m) throw new Error(`Signature-Agent has no member ${p.get('key')}`);
          member = Array.isArray(m[0]) ? sh.serializeInnerList(m) : sh.serializeItem(m);
        }
      }
    }
  }
  const message = wbaMessage(method, url, headers, member);

  const wantKid = await wba.jwkToKeyID(jwk, wba.helpers.WEBCRYPTO_SHA256, wba.helpers.BASE64URL_DECODE);
  const check = await wbaCrypto.verifierFromJWK(jwk);
  let base = '';
  const params = await wba.verify(message, async (data, signature, p) => {
    base = data;
    if (p.keyid !== wantKid) throw new Error(`keyid ${p.keyid} is not the key's jwkToKeyID ${wantKid}`);
    await check(data, signature, p);
    return p;
  });
  return {
    peer: peerName('web-bot-auth'),
    member_adapter: member !== null,
    keyid: params.keyid,
    tag: params.tag,
    created: Math.floor(params.created.getTime() / 1000),
    expires: Math.floor(params.expires.getTime() / 1000),
    nonce: params.nonce,
    base,
  };
});
