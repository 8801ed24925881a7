// pprof-format, an independent pprof decoder, reads every pprof we write (the agent's /ingest
// bodies and the profiles inside its Pushes) and every pprof the collector serves (/render's
// pprof export, SelectMergeProfile), with the same totals as the local file and our folded
// export.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync } from 'node:fs';
import { gunzipSync } from 'node:zlib';
import { Profile } from 'pprof-format';
import { foldedTotal, render, runAgent, startCollector } from './lib.mjs';
import { pushProfiles, stringFields } from './protobuf.mjs';

const gunzip = (b) => (b[0] === 0x1f && b[1] === 0x8b ? gunzipSync(b) : b);

// Sum of the first value over the samples, as pprof-format decodes them.
function total(bytes) {
  const p = Profile.decode(gunzip(bytes));
  assert.equal(p.stringTable.strings[0], '');
  return p.sample.reduce((n, s) => n + Number(s.value[0]), 0);
}

function captureServer() {
  const bodies = [];
  const srv = createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      bodies.push({ path: req.url.split('?')[0], body: Buffer.concat(chunks) });
      res.writeHead(200, { 'Content-Type': 'application/proto' });
      res.end();
    });
  });
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => r({ srv, bodies,
    url: `http://127.0.0.1:${srv.address().port}` })));
}

test('pprof-format decodes the pprof the agent writes, totals equal', async () => {
  for (const protocol of ['push', 'ingest']) {
    const cap = await captureServer();
    try {
      const local = await runAgent(cap.url, 'written', { seconds: 2, protocol });
      const want = foldedTotal(readFileSync(local, 'utf8'));
      let got = 0;
      for (const { path, body } of cap.bodies) {
        const profiles = path === '/ingest' ? [body] : pushProfiles(body);
        assert.ok(profiles.length > 0, `${protocol}: no pprof in an upload to ${path}`);
        for (const p of profiles) got += total(p);
      }
      assert.ok(want > 0);
      assert.equal(got, want, protocol);
    } finally {
      cap.srv.close();
    }
  }
});

test('pprof-format decodes the pprof the collector serves, totals equal', async () => {
  const col = await startCollector();
  try {
    await runAgent(col.url, 'served', { seconds: 2 });
    const folded = foldedTotal(await render(col.url, 'served.cpu'));
    assert.ok(folded > 0);
    assert.equal(total(await render(col.url, 'served.cpu', 'pprof')), folded);
    const body = stringFields([[1, 'process_cpu:samples:count:cpu:nanoseconds'], [2, '{service_name="served"}']]);
    const r = await fetch(`${col.url}/querier.v1.QuerierService/SelectMergeProfile`, {
      method: 'POST', headers: { 'Content-Type': 'application/proto' }, body });
    assert.equal(r.status, 200);
    assert.equal(total(new Uint8Array(await r.arrayBuffer())), folded);
  } finally {
    await col.stop();
  }
});
