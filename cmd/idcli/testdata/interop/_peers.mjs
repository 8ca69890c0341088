// Shared helpers of the interop drivers: locate the peers installed by
// install.sh, read the JSON argument and the request it describes, print the
// JSON result.
//
// The peers live outside the repository, in the node_modules directory named
// by AGENTID_INTEROP_NODE_MODULES (or the first NODE_PATH entry that holds
// them). ESM ignores NODE_PATH, so packages are imported by resolved path.
//
// Exit status: 0 success; 1 the peer rejected or failed (stdout carries
// {"ok":false,"peer":…,"error":…}); 2 the driver itself could not run
// (bad arguments, peers not installed).
import fs from 'node:fs';
import path from 'node:path';
import { pathToFileURL } from 'node:url';

export class UsageError extends Error {}

function hasPackages(dir) {
  return fs.existsSync(path.join(dir, 'web-bot-auth', 'package.json')) &&
    fs.existsSync(path.join(dir, 'vestauth', 'package.json'));
}

// nodeModules returns the directory holding the peer packages.
export function nodeModules() {
  const candidates = [];
  if (process.env.AGENTID_INTEROP_NODE_MODULES) candidates.push(process.env.AGENTID_INTEROP_NODE_MODULES);
  for (const p of (process.env.NODE_PATH || '').split(path.delimiter)) if (p) candidates.push(p);
  for (const c of candidates) {
    for (const dir of [c, path.join(c, 'node_modules')]) {
      if (hasPackages(dir)) return path.resolve(dir);
    }
  }
  throw new UsageError(
    'peers not installed: set AGENTID_INTEROP_NODE_MODULES to the node_modules directory made by ' +
    'cmd/idcli/testdata/interop/install.sh (searched: ' + (candidates.join(', ') || 'nothing') + ')');
}

function pickTarget(entry) {
  if (typeof entry === 'string') return entry;
  if (entry && typeof entry === 'object') {
    for (const cond of ['import', 'node', 'default', 'require']) {
      if (cond in entry) {
        const t = pickTarget(entry[cond]);
        if (t) return t;
      }
    }
  }
  return null;
}

// resolveEntry returns the file that `import "<pkg><subpath>"` loads, read
// from the package's own package.json "exports" (ESM condition first).
export function resolveEntry(pkg, subpath = '.') {
  const dir = path.join(nodeModules(), pkg);
  const manifest = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8'));
  let target = null;
  const ex = manifest.exports;
  if (ex !== undefined) {
    const isMap = typeof ex === 'object' && ex !== null && Object.keys(ex).some((k) => k.startsWith('.'));
    target = pickTarget(isMap ? ex[subpath] : (subpath === '.' ? ex : undefined));
  } else if (subpath === '.') {
    target = manifest.module || manifest.main || 'index.js';
  } else {
    target = subpath;
  }
  if (!target) throw new UsageError(`${pkg}: no export for ${subpath}`);
  return { file: path.join(dir, target), version: manifest.version, dir, manifest };
}

// importPeer imports a peer package (or one of its subpaths).
export async function importPeer(pkg, subpath = '.') {
  const { file } = resolveEntry(pkg, subpath);
  return import(pathToFileURL(file).href);
}

// peerName is "<pkg>@<installed version>".
export function peerName(pkg) {
  return `${pkg}@${resolveEntry(pkg).version}`;
}

// readArgs parses the JSON argument: argv[2] if given (or "-" for stdin), else stdin.
export async function readArgs() {
  let text = process.argv[2];
  if (text === undefined || text === '-') {
    const chunks = [];
    for await (const c of process.stdin) chunks.push(c);
    text = Buffer.concat(chunks).toString('utf8');
  }
  try {
    const v = JSON.parse(text);
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not a JSON object');
    return v;
  } catch (e) {
    throw new UsageError(`argument is not a JSON object: ${e.message}`);
  }
}

export function need(args, name, type = 'string') {
  const v = args[name];
  if (typeof v !== type || (type === 'string' && v === '')) {
    throw new UsageError(`missing or invalid "${name}" (want ${type})`);
  }
  return v;
}

// requestMethod is the "method" argument, upper-cased (default GET).
export function requestMethod(args) {
  return String(args.method || 'GET').toUpperCase();
}

// needURL is need(args, 'url') for an absolute URL, returned as given.
export function needURL(args) {
  const url = need(args, 'url');
  try { new URL(url); } catch { throw new UsageError(`url ${url} is not absolute`); }
  return url;
}

// givenHeaders returns the [name, value] pairs of a "headers" argument
// that carry a value, each value as a string.
export function givenHeaders(given) {
  return Object.entries(given).filter(([, v]) => v !== undefined && v !== null && v !== '').map(([k, v]) => [k, String(v)]);
}

// wbaMessage is the request web-bot-auth signs or verifies: method, url and
// the Map headers (lower-case names). When agentMember is not null it is
// the value of the covered "signature-agent";key=… component: the member's
// serialized value (RFC 9421 §2.1.2), which web-bot-auth 0.1.3 does not
// extract from the Signature-Agent dictionary itself.
export function wbaMessage(method, url, headers, agentMember = null) {
  return {
    method,
    url,
    headers: {
      get: (name) => {
        const n = name.toLowerCase();
        if (agentMember !== null && n === 'signature-agent') return agentMember;
        return headers.has(n) ? headers.get(n) : null;
      },
      set: (name, value) => headers.set(name.toLowerCase(), value),
    },
  };
}

// main runs fn(args) and prints its result as JSON. A thrown error becomes
// {"ok":false,…} on stdout, a one-line message on stderr naming the peer
// and the request, and exit status 1 (2 for a UsageError).
export async function main(script, peer, fn) {
  let args = {};
  let request = '';
  try {
    args = await readArgs();
    if (args.method || args.url) request = `${requestMethod(args)} ${args.url || ''}`.trim();
    const out = await fn(args);
    process.stdout.write(JSON.stringify({ ok: true, ...out }) + '\n');
  } catch (e) {
    const usage = e instanceof UsageError;
    let who = peer;
    try { if (!usage) who = peerName(peer); } catch { /* keep the bare name */ }
    const reason = e && e.message ? e.message : String(e);
    process.stdout.write(JSON.stringify({ ok: false, peer: who, request, error: reason, ...(e && e.details ? e.details : {}) }) + '\n');
    process.stderr.write(`${script}: ${who}${request ? ' ' + request : ''}: ${reason}\n`);
    process.exitCode = usage ? 2 : 1;
  }
}

// sfString serializes s as an RFC 8941 sf-string.
export function sfString(s) {
  return '"' + String(s).replace(/[\\"]/g, (c) => '\\' + c) + '"';
}
