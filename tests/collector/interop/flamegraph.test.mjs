// Grafana's own flame graph component (@grafana/flamegraph, bundled with React by esbuild into a
// tiny page) draws the answer of our SelectMergeStacktraces in headless Chromium: no error, a
// canvas drawn, the root's value the total of our own /render, and its tooltip saying so.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:http';
import { join, normalize } from 'node:path';
import { chromium } from 'playwright-core';
import { ARTIFACTS, HERE, REPO, foldedTotal, querier, render, runAgent, startCollector, work } from './lib.mjs';

function bundle() {
  const out = join(work, 'page');
  execFileSync(join(HERE, 'node_modules', '.bin', 'esbuild'), [
    join(HERE, 'flamegraph-page.jsx'), '--bundle', '--format=iife', `--outfile=${out}/page.js`,
    '--jsx=automatic', '--define:process.env.NODE_ENV="production"',
    `--alias:@grafana/assistant=${join(HERE, 'assistant-stub.js')}`,
    `--alias:react-custom-scrollbars-2=${join(HERE, 'scrollbars-shim.js')}`,
    '--loader:.ttf=empty', '--loader:.woff=empty', '--loader:.woff2=empty', '--loader:.svg=empty',
    '--log-level=error'], { cwd: HERE });
  writeFileSync(join(out, 'index.html'), `<!doctype html><html><head><meta charset="utf-8">
<link rel="stylesheet" href="page.css"></head>
<body style="margin:0;background:#fff"><div id="root" style="width:1200px;height:700px;padding:8px"></div>
<script src="page.js"></script></body></html>`);
  return out;
}

// The page over HTTP, as Grafana serves it: the bundle, and @grafana/ui's icons where it
// fetches them (public/build/img/icons/).
function serve(dir) {
  const icons = join(HERE, 'node_modules', '@grafana', 'ui', 'dist', 'public', 'img', 'icons');
  const types = { html: 'text/html', js: 'text/javascript', css: 'text/css', svg: 'image/svg+xml' };
  const srv = createServer((req, res) => {
    const path = normalize(decodeURIComponent(req.url.split('?')[0]));
    const file = path.startsWith('/public/build/img/icons/')
      ? join(icons, path.slice('/public/build/img/icons/'.length))
      : join(dir, path === '/' ? 'index.html' : path);
    try {
      const body = readFileSync(file);
      res.writeHead(200, { 'Content-Type': types[file.split('.').pop()] || 'application/octet-stream' });
      res.end(body);
    } catch {
      res.writeHead(404);
      res.end();
    }
  });
  return new Promise((r) => srv.listen(0, '127.0.0.1', () => r(srv)));
}

test('@grafana/flamegraph renders SelectMergeStacktraces with our totals', async () => {
  const col = await startCollector();
  const browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'] });
  try {
    await runAgent(col.url, 'grafanaflame', { seconds: 3 });
    const total = foldedTotal(await render(col.url, 'grafanaflame.cpu'));
    assert.ok(total > 0, 'no samples at the collector');
    const answer = await querier(col.url, 'SelectMergeStacktraces', {
      profileTypeID: 'process_cpu:samples:count:cpu:nanoseconds',
      labelSelector: '{service_name="grafanaflame"}', start: '0', end: String(Date.now() + 60000) });
    assert.equal(Number(answer.flamegraph.total), total);
    const page = await browser.newPage({ viewport: { width: 1240, height: 760 } });
    const errors = [];
    page.on('pageerror', (e) => errors.push(String(e)));
    page.on('console', (m) => { if (m.type() === 'error' && !/Failed to load resource/.test(m.text())) errors.push(m.text()); });
    // @grafana/ui does not ship every icon Grafana's server has (angle-double-up.svg): those
    // buttons go without their icon, said here; any other failed request is an error.
    page.on('response', (r) => {
      if (r.status() < 400) return;
      if (r.url().includes('/public/build/img/icons/')) console.log(`# icon not in @grafana/ui: ${r.url()}`);
      else errors.push(`${r.status()} ${r.url()}`);
    });
    await page.addInitScript((fg) => { window.PA_FLAME = fg; }, answer.flamegraph);
    const srv = await serve(bundle());
    await page.goto(`http://127.0.0.1:${srv.address().port}/`);
    await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 });
    await page.waitForSelector('canvas', { timeout: 60000 });
    assert.equal(await page.evaluate(() => window.PA_ROOT), total);
    const canvas = await page.$('canvas');
    const box = await canvas.boundingBox();
    assert.ok(box && box.width > 200 && box.height > 20, `canvas ${JSON.stringify(box)}`);
    // The root bar spans the canvas's width on its first row: its tooltip gives the total.
    await page.mouse.move(box.x + box.width / 2 - 5, box.y + 8);
    await page.mouse.move(box.x + box.width / 2, box.y + 9);
    const tip = await page.locator('p:has-text("Samples:")').last().textContent({ timeout: 10000 });
    const samples = tip.replace(/[,\s]/g, '').match(/Samples:(\d+)/);
    assert.ok(samples, `tooltip: ${tip}`);
    assert.equal(Number(samples[1]), total, `tooltip: ${tip}`);
    assert.deepEqual(errors, []);
    await page.screenshot({ path: join(ARTIFACTS, 'grafana-flamegraph.png') });
    srv.close();
    if (process.env.PA_DOC_SHOTS)
      copyFileSync(join(ARTIFACTS, 'grafana-flamegraph.png'), join(REPO, 'docs', 'img', 'grafana-flamegraph.png'));
  } finally {
    await browser.close();
    await col.stop();
  }
});
