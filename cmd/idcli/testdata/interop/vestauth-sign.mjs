// vestauth-sign.mjs: sign a request with vestauth's primitives.headers (what
// `vestauth agent headers` and `agent curl` send).
//
//   node vestauth-sign.mjs '{"method":"GET","url":"http://localhost:3000/whoami",
//     "uid":"agent-…","private_jwk":{…with d…},"hostname":"http://localhost:3000"}'
//
// hostname is the agent API hostname (Signature-Agent becomes
// <scheme>://<uid>.<host of hostname>); tag and nonce are optional.
// Prints {"ok":true,"peer":…,"headers":{"Signature","Signature-Input","Signature-Agent"}}.
import { importPeer, main, need, peerName, requestMethod } from './_peers.mjs';

await main('vestauth-sign', 'vestauth', async (args) => {
  const method = requestMethod(args);
  const url = need(args, 'url');
  const uid = need(args, 'uid');
  const jwk = need(args, 'private_jwk', 'object');
  const hostname = need(args, 'hostname');
  const mod = await importPeer('vestauth');
  const vestauth = mod.default || mod;
  const headers = await vestauth.primitives.headers(method, url, uid, JSON.stringify(jwk), args.tag || 'web-bot-auth', args.nonce || null, hostname);
  return { peer: peerName('vestauth'), headers };
});
