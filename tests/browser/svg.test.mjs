// svg.test.mjs - the SVG flamegraph: valid, quiet, hover details, click to zoom and reset.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { launch, render, work, waitFor, SHOTS, FIXTURES } from './lib.mjs';

const out = join(work, 'app.svg');
let ctx;
before(async () => {
  render('flamegraph', join(FIXTURES, 'app.folded'), '-o', out, '--title', 'SVG <test>', '--width', '1000');
  ctx = await launch();
});
after(async () => { await ctx.close_(); });

test('SVG flamegraph hovers, zooms and resets', async () => {
  const page = await ctx.newPage();
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(pathToFileURL(out).href);
  await waitFor(page, () => document.documentElement.getAttribute('data-ready') === '1');
  assert.deepEqual(errors, []);
  assert.equal(await page.textContent('#title'), 'SVG <test>');
  const g = page.locator('g.f', { has: page.locator('title', { hasText: /^main \(\/srv\/app\/main\.py:31\)/ }) });
  await g.hover();
  assert.match(await page.textContent('#details'), /main \(\/srv\/app\/main\.py:31\) \(800 samples, 80\.00%\)/);
  await g.click();
  const w = await g.locator('rect').getAttribute('width');
  assert.equal(Math.round(+w), 980, 'zoomed frame spans the width');
  assert.equal(await page.getAttribute('#reset', 'visibility'), 'visible');
  await page.screenshot({ path: join(SHOTS, 'svg-zoomed.png') });
  await page.click('#reset');
  const w2 = await g.locator('rect').getAttribute('width');
  assert.ok(+w2 < 800, 'reset');
  await page.close();
});
