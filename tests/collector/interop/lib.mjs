// lib.mjs - shared setup of the interoperability tests: a real pyagent-collector on a port it
// picks, the agent uploading a real Python program to it, and small clients of its APIs.
import { execFile, spawn } from 'node:child_process';
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const BUILD = resolve(process.env.PA_BUILD_DIR || 'build/release');
export const REPO = resolve(new URL('../../..', import.meta.url).pathname);
export const HERE = resolve(new URL('.', import.meta.url).pathname);
export const COLLECTOR = join(BUILD, 'bin', 'pyagent-collector');
export const LIB = join(BUILD, 'lib', 'libpyagent.so');
export const ARTIFACTS = join(BUILD, 'artifacts', 'interop');
export const PYTHON = '/usr/bin/python3.11';
mkdirSync(ARTIFACTS, { recursive: true });
export const work = mkdtempSync(join(tmpdir(), 'pa-interop-'));

// Starts a collector; resolves to { port, url, stop() }.
export function startCollector(...args) {
  const dir = mkdtempSync(join(work, 'col-'));
  const p = spawn(COLLECTOR, ['--listen', '127.0.0.1:0', '--db', join(dir, 'p.db'), ...args],
    { stdio: ['ignore', 'pipe', 'pipe'] });
  let err = '';
  p.stderr.on('data', (d) => { err += d; });
  return new Promise((res, rej) => {
    let out = '';
    p.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/http:\/\/127\.0\.0\.1:(\d+)\//);
      if (m) {
        const port = Number(m[1]);
        res({ port, url: `http://127.0.0.1:${port}`, stderr: () => err,
          stop: () => new Promise((r) => { p.on('exit', r); p.kill('SIGTERM'); }) });
      }
    });
    p.on('exit', (c) => rej(new Error(`collector exited ${c}: ${err}`)));
  });
}

export const WORKLOAD = `
import sys, time
def leaf(n):
    return sum(i * i for i in range(n))
def middle():
    return leaf(3000) + leaf(1000)
def top(seconds):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        middle()
top(float(sys.argv[1]))
`;

// Runs WORKLOAD under the agent, uploading to url; resolves to the local folded file's path
// (asynchronous: the server may be in this very process).
export function runAgent(url, app, { seconds = 2, protocol = 'push', extra = {} } = {}) {
  const dir = mkdtempSync(join(work, 'run-'));
  writeFileSync(join(dir, 'work.py'), WORKLOAD);
  const env = { ...process.env, LD_PRELOAD: LIB, PYAGENT_SERVER: url, PYAGENT_APP_NAME: app,
    PYAGENT_PROTOCOL: protocol, PYAGENT_RATE: '250', PYAGENT_UPLOAD_INTERVAL: '1',
    PYAGENT_OUTPUT: join(dir, 'local.folded'), PYAGENT_SPOOL_DIR: join(dir, 'spool'), ...extra };
  return new Promise((res, rej) => execFile(PYTHON, [join(dir, 'work.py'), String(seconds)],
    { env, cwd: dir }, (err) => (err ? rej(err) : res(join(dir, 'local.folded')))));
}

export function foldedTotal(text) {
  let n = 0;
  for (const line of text.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    n += Number(line.slice(line.lastIndexOf(' ') + 1));
  }
  return n;
}

export async function render(url, query, format = 'folded') {
  const r = await fetch(`${url}/render?query=${encodeURIComponent(query)}&from=0&until=now&format=${format}`);
  if (r.status !== 200) throw new Error(`render ${query}: ${r.status} ${await r.text()}`);
  return format === 'pprof' ? new Uint8Array(await r.arrayBuffer()) : r.text();
}

// A querier call in Connect's JSON codec.
export async function querier(url, method, body) {
  const r = await fetch(`${url}/querier.v1.QuerierService/${method}`, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });
  const text = await r.text();
  if (r.status !== 200) throw new Error(`${method}: ${r.status} ${text}`);
  return JSON.parse(text);
}

export function flameTotal(fg) {
  return Number(fg.total);
}

export const nowMs = () => Date.now();
