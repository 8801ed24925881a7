// collector.test.mjs - the collector's pages in Chromium: a real pyagent-collector stores
// uploads that carry time buckets; an application's timeline selects a range and opens its
// flamegraph, its time heatmap (the buckets survived storage), its source heatmap, and the
// diff of two ranges; no console error on any page.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { launch, shot, waitFor, timedProfile, BUILD } from './lib.mjs';

let proc, base, ctx, dir;
const now = Math.floor(Date.now() / 1000);
const uploads = [now - 600, now - 300]; // two uploads, 5 minutes apart

before(async () => {
  dir = mkdtempSync(join(tmpdir(), 'pa-coll-ui-'));
  proc = spawn(join(BUILD, 'bin', 'pyagent-collector'), ['--listen', '127.0.0.1:0', '--db', join(dir, 'p.db'), '--folded-dialects'], { stdio: ['ignore', 'pipe', 'inherit'] });
  base = await new Promise((resolve, reject) => {
    proc.stdout.once('data', (d) => {
      const m = /http:\/\/127\.0\.0\.1:(\d+)\//.exec(String(d));
      return m ? resolve(`http://127.0.0.1:${m[1]}`) : reject(new Error('collector: ' + d));
    });
    proc.once('exit', (c) => reject(new Error('collector exited ' + c)));
  });
  for (const from of uploads) {
    const body = readFileSync(timedProfile(join(dir, `u${from}.folded`), from * 1000));
    const r = await fetch(`${base}/ingest?name=shop.cpu{env=test}&from=${from}&until=${from + 6}&sampleRate=100`, { method: 'POST', body });
    assert.equal(r.status, 200, await r.text());
  }
  ctx = await launch();
});
after(async () => {
  await ctx.close_();
  proc.kill('SIGTERM');
  await new Promise((r) => proc.once('exit', r));
  rmSync(dir, { recursive: true, force: true });
});

async function visit(url, ready = true) {
  const page = await ctx.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(url);
  if (ready) await page.waitForSelector('body[data-ready="1"]', { timeout: 15000 });
  return { page, errors };
}

test('the index lists the application and its page has a timeline to select on', async () => {
  const { page, errors } = await visit(`${base}/`, false); // the list: links only, no script
  await page.click('text=shop.cpu');
  await page.waitForSelector('#timeline');
  await waitFor(page, () => document.body.dataset.ready === '1');
  const counts = await page.evaluate(() => JSON.parse(document.getElementById('timeline-data').textContent).counts);
  assert.equal(counts.reduce((a, b) => a + b, 0), 1800, 'both uploads on the timeline');
  assert.equal(await page.getAttribute('#tl-flame', 'aria-disabled'), 'true', 'nothing selected yet');
  const opts = await page.$$eval('#tl-series option', (o) => o.map((x) => x.textContent));
  assert.deepEqual(opts, ['all series', 'env=test']);
  assert.deepEqual(errors, []);
  await page.close();
});

test('a range dragged on the timeline opens its flamegraph and time heatmap', async () => {
  const { page, errors } = await visit(`${base}/?app=${encodeURIComponent('shop.cpu')}&from=now-15m`);
  const data = await page.evaluate(() => JSON.parse(document.getElementById('timeline-data').textContent));
  const first = data.counts.findIndex((c) => c > 0);
  const a = await page.evaluate((i) => window.pyagentTimeline.bar(i), first);
  await page.mouse.move(a.x - 2, a.y);
  await page.mouse.down();
  await page.mouse.move(a.x + 2, a.y, { steps: 2 });
  await page.mouse.up();
  assert.match(await page.textContent('#tl-info'), /Selected .* \(900 samples\)/);
  await shot(page, 'collector-timeline');
  const href = await page.getAttribute('#tl-time', 'href');
  assert.match(href, /^\/render\?query=shop\.cpu&from=\d+&until=\d+&format=html#time=1$/);
  const flame = await visit(base + href);
  assert.equal(await flame.page.evaluate(() => window.pyagentFlame.total()), 900);
  assert.equal(await flame.page.isVisible('#timepanel'), true);
  assert.match(await flame.page.textContent('#timeinfo'), /^900 samples over 6 s/, 'the time buckets were kept by the store');
  assert.deepEqual(flame.errors, []);
  await shot(flame.page, 'collector-time-heatmap');
  await flame.page.close();
  const heat = await visit(base + (await page.getAttribute('#tl-heat', 'href')));
  assert.match(await heat.page.textContent('body'), /Your code/);
  assert.deepEqual(heat.errors, []);
  await heat.page.close();
  assert.deepEqual(errors, []);
  await page.close();
});

test('two ranges selected on the timeline open their diff', async () => {
  const { page, errors } = await visit(`${base}/?app=${encodeURIComponent('shop.cpu')}&from=now-15m`);
  const data = await page.evaluate(() => JSON.parse(document.getElementById('timeline-data').textContent));
  const bars = data.counts.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0);
  assert.equal(bars.length, 2);
  await page.evaluate((i) => window.pyagentTimeline.select(i, i, false), bars[0]);
  const b = await page.evaluate((i) => window.pyagentTimeline.bar(i), bars[1]);
  await page.keyboard.down('Shift');
  await page.mouse.click(b.x, b.y);
  await page.keyboard.up('Shift');
  const href = await page.getAttribute('#tl-diff', 'href');
  assert.match(href, /^\/diff\?query=shop\.cpu&leftFrom=\d+&leftUntil=\d+&rightFrom=\d+&rightUntil=\d+$/);
  const diff = await visit(base + href);
  assert.match(await diff.page.textContent('#summary'), /baseline 900 samples → current 900 samples/);
  assert.deepEqual(diff.errors, []);
  await diff.page.close();
  // the series menu narrows every link to one label set
  await page.selectOption('#tl-series', { label: 'env=test' });
  assert.match(await page.getAttribute('#tl-flame', 'href'), /query=shop\.cpu%7Benv%3D%22test%22%7D/);
  assert.deepEqual(errors, []);
  await page.close();
});
