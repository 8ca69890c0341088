// wba-keyid.mjs: fetch a key directory and compute web-bot-auth's jwkToKeyID for each key.
//
//   node wba-keyid.mjs '{"url":"http://agent-x.localhost:3000/.well-known/http-message-signatures-directory"}'
//
// Hosts "localhost" and "*.localhost" are connected to 127.0.0.1 (RFC 6761; the
// C library here does not resolve *.localhost); the Host header keeps the URL's
// authority. Only loopback is allowed: any other host is refused.
// Prints {"ok":true,"peer":…,"status","content_type","cache_control","media_type_expected",
//         "keys":[{"kid","computed","match"}]}; exit 1 if the fetch or JSON parse fails.
import http from 'node:http';
import { importPeer, main, needURL, peerName, UsageError } from './_peers.mjs';

function loopback(hostname) {
  const h = hostname.replace(/^\[|\]$/g, '').toLowerCase();
  if (h === 'localhost' || h.endsWith('.localhost')) return '127.0.0.1';
  if (h === '::1' || /^127\.\d+\.\d+\.\d+$/.test(h)) return h;
  return null;
}

function get(url) {
  const addr = loopback(url.hostname);
  if (!addr) throw new UsageError(`refusing non-loopback host ${url.hostname}`);
  return new Promise((resolve, reject) => {
    const req = http.get(url, {
      lookup: (hostname, opts, cb) => {
        const family = addr.includes(':') ? 6 : 4;
        if (opts && opts.all) cb(null, [{ address: addr, family }]);
        else cb(null, addr, family);
      },
      headers: { accept: 'application/http-message-signatures-directory+json, application/json;q=0.9' },
    }, (res) => {
      const chunks = [];
      res.on('data', (c) => chunks.push(c));
      res.on('end', () => resolve({ res, body: Buffer.concat(chunks).toString('utf8') }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.setTimeout(10000, () => req.destroy(new Error('timeout after 10 s')));
  });
}

await main('wba-keyid', 'web-bot-auth', async (args) => {
  const url = new URL(needURL(args));
  if (url.protocol !== 'http:') throw new UsageError('only http:// (loopback) URLs are supported');
  const wba = await importPeer('web-bot-auth');
  const { res, body } = await get(url);
  let doc;
  try { doc = JSON.parse(body); } catch (e) {
    throw new Error(`GET ${url.href}: status ${res.statusCode}, body is not JSON: ${e.message}`);
  }
  if (!doc || !Array.isArray(doc.keys)) throw new Error(`GET ${url.href}: status ${res.statusCode}, no "keys" array`);
  const keys = [];
  for (const k of doc.keys) {
    const computed = await wba.jwkToKeyID(k, wba.helpers.WEBCRYPTO_SHA256, wba.helpers.BASE64URL_DECODE);
    keys.push({ kid: k.kid, computed, match: k.kid === computed });
  }
  return {
    peer: peerName('web-bot-auth'),
    status: res.statusCode,
    content_type: res.headers['content-type'] || '',
    cache_control: res.headers['cache-control'] || '',
    media_type_expected: wba.MediaType.HTTP_MESSAGE_SIGNATURES_DIRECTORY,
    keys,
  };
});
