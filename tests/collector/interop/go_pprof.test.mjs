// Google's pprof (the Go tool), built offline from Debian's own Go sources
// (golang-github-google-pprof-dev with golang-go: GOPATH=/usr/share/gocode, no module
// download), reads with `pprof -top` every pprof we write (the agent's /ingest bodies and the
// profiles inside its Pushes) and serve (/render's pprof export, SelectMergeProfile), and finds
// the totals ours are.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:http';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { BUILD, foldedTotal, render, runAgent, startCollector, work } from './lib.mjs';
import { pushProfiles, stringFields } from './protobuf.mjs';

function goPprof() {
  const dir = join(BUILD, 'go-pprof');
  const exe = join(dir, 'pprof');
  if (!existsSync(exe)) {
    assert.ok(existsSync('/usr/share/gocode/src/github.com/google/pprof'),
      'Debian\'s golang-github-google-pprof-dev is not installed (scripts/deps.sh --test installs it)');
    mkdirSync(dir, { recursive: true });
    execFileSync('go', ['build', '-o', exe, 'github.com/google/pprof'], {
      env: { ...process.env, GO111MODULE: 'off', GOPATH: '/usr/share/gocode', GOFLAGS: '',
        GOCACHE: join(dir, 'cache'), CGO_ENABLED: '0', GOPROXY: 'off' }, stdio: 'inherit' });
  }
  return exe;
}

// pprof -top's total of the first sample type ("... of N total").
function top(exe, file) {
  const out = execFileSync(exe, ['-top', '-sample_index=0', file], { encoding: 'utf8',
    env: { ...process.env, PPROF_TMPDIR: work, HOME: work } });
  const m = out.match(/of (\d+) total/);
  assert.ok(m, out.slice(0, 2000));
  return { total: Number(m[1]), out };
}

test('pprof -top reads what we write and serve', async () => {
  const exe = goPprof();
  // Written: the agent's uploads, captured.
  for (const protocol of ['push', 'ingest']) {
    const bodies = [];
    const srv = createServer((req, res) => {
      const chunks = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => { bodies.push({ path: req.url.split('?')[0], body: Buffer.concat(chunks) }); res.end(); });
    });
    await new Promise((r) => srv.listen(0, '127.0.0.1', r));
    const local = await runAgent(`http://127.0.0.1:${srv.address().port}`, 'gowritten', { protocol });
    srv.close();
    let got = 0;
    bodies.forEach(({ path, body }, i) => {
      for (const [j, p] of (path === '/ingest' ? [body] : pushProfiles(body)).entries()) {
        const f = join(work, `written-${protocol}-${i}-${j}.pb.gz`);
        writeFileSync(f, p);
        got += top(exe, f).total;
      }
    });
    assert.equal(got, foldedTotal(readFileSync(local, 'utf8')), protocol);
  }
  // Served.
  const col = await startCollector();
  try {
    await runAgent(col.url, 'goserved', { seconds: 2 });
    const total = foldedTotal(await render(col.url, 'goserved.cpu'));
    const f = join(work, 'served.pb.gz');
    writeFileSync(f, await render(col.url, 'goserved.cpu', 'pprof'));
    const t = top(exe, f);
    assert.equal(t.total, total);
    assert.match(t.out, /work\.leaf/, 'module-qualified Python functions');
    const sel = stringFields([[1, 'process_cpu:samples:count:cpu:nanoseconds'], [2, '{service_name="goserved"}']]);
    const r = await fetch(`${col.url}/querier.v1.QuerierService/SelectMergeProfile`,
      { method: 'POST', headers: { 'Content-Type': 'application/proto' }, body: sel });
    assert.equal(r.status, 200);
    const g = join(work, 'merged.pb');
    writeFileSync(g, Buffer.from(await r.arrayBuffer()));
    assert.equal(top(exe, g).total, total);
  } finally {
    await col.stop();
  }
});
