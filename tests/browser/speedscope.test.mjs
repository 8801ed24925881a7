// speedscope.test.mjs - the pprof the agent uploads opens in speedscope (npm's speedscope
// package, its built web app served from 127.0.0.1). A real program runs under libpyagent.so
// and uploads to an ingest endpoint of this test's own server (PYAGENT_PROTOCOL=ingest);
// speedscope then loads that exact body, and its Sandwich view (a DOM table) must list the
// program's functions.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { spawn } from 'node:child_process';
import { readFileSync, existsSync, mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, extname } from 'node:path';
import { launch, shot, waitFor, BUILD, REPO } from './lib.mjs';

const APP = join(REPO, 'tests', 'browser', 'node_modules', 'speedscope', 'dist', 'release');
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm' };
let server, port, ctx;
const uploads = [];

before(async () => {
  server = createServer((req, res) => {
    if (req.method === 'POST' && req.url.startsWith('/ingest')) {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => { uploads.push(Buffer.concat(chunks)); res.end(); });
      return;
    }
    const path = req.url.split('?')[0].split('#')[0];
    if (path === '/upload.pb.gz') {
      res.setHeader('Content-Type', 'application/octet-stream');
      return res.end(uploads[uploads.length - 1]);
    }
    const file = join(APP, path === '/' ? 'index.html' : path.replace(/^\/+/, ''));
    if (!file.startsWith(APP) || !existsSync(file)) { res.statusCode = 404; return res.end(); }
    res.setHeader('Content-Type', types[extname(file)] || 'application/octet-stream');
    res.end(readFileSync(file));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  port = server.address().port;
  ctx = await launch();
});
after(async () => { await ctx.close_(); server.close(); });

test('the pprof the agent uploads opens in speedscope', async () => {
  // /ingest's body is the gzipped pprof itself (Push, the default, wraps it in a PushRequest);
  // a spool of this run's own, so nothing an earlier run left is sent instead.
  const env = { ...process.env, LD_PRELOAD: join(BUILD, 'lib', 'libpyagent.so'), PYAGENT_RATE: '250',
    PYAGENT_SERVER: `http://127.0.0.1:${port}`, PYAGENT_APP_NAME: 'speedscope-test',
    PYAGENT_PROTOCOL: 'ingest', PYAGENT_SPOOL_DIR: mkdtempSync(join(tmpdir(), 'pa-speedscope-spool-')) };
  delete env.PYAGENT_OUTPUT;
  // an async server in this very process answers the uploads, so the program must not block it
  await new Promise((resolve, reject) => {
    const p = spawn('/usr/bin/python3', [join(REPO, 'tests', 'agent', 'programs', 'plain.py'), '1'], { env });
    p.on('exit', (code) => (code === 0 ? resolve() : reject(new Error('program exit ' + code))));
  });
  assert.ok(uploads.length > 0, 'no upload arrived');
  assert.equal(uploads[uploads.length - 1][0], 0x1f, 'the upload is gzip-compressed pprof');
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`http://127.0.0.1:${port}/index.html#profileURL=http://127.0.0.1:${port}/upload.pb.gz&title=pyagent-upload`);
  await waitFor(page, () => document.body.innerText.includes('pyagent-upload'), null, 15000);
  await page.getByText('Sandwich').click();
  await waitFor(page, () => /\bwork\b/.test(document.body.innerText), null, 15000);
  const text = await page.evaluate(() => document.body.innerText);
  assert.doesNotMatch(text, /Something went wrong|Unrecognized format/);
  assert.match(text, /<module>/);
  assert.deepEqual(errors, []);
  await shot(page, 'speedscope-upload');
  await page.close();
});
