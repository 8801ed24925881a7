// heatmap.test.mjs - the source heatmap: index grouping, navigation, callers/callees links,
// #line-N permalinks whose highlight replays, hiding cold lines, missing sources.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { mkdirSync, writeFileSync } from 'node:fs';
import { launch, open, render, shot, work, waitFor } from './lib.mjs';

const dir = join(work, 'heatmap');
let ctx;
before(async () => {
  const src = join(work, 'src');
  mkdirSync(join(src, 'app'), { recursive: true });
  const lines = [];
  for (let i = 1; i <= 40; i++) lines.push(i === 12 ? '    return helper(x) * 2' : `line_${i} = ${i}`);
  writeFileSync(join(src, 'app', 'main.py'), lines.join('\n') + '\n');
  writeFileSync(join(src, 'app', 'util.py'), 'def helper(x):\n    return sum(range(x))\n');
  const prof = join(work, 'heat.folded');
  writeFileSync(prof, [
    'thread:Main;<module> (/build/app/main.py:30);work (/build/app/main.py:12);helper (/build/app/util.py:2) 70',
    'thread:Main;<module> (/build/app/main.py:30);work (/build/app/main.py:12) 20',
    'thread:Main;<module> (/build/app/main.py:30);loads (/usr/lib/python3.11/json/__init__.py:346) 10',
    'thread:Main;<module> (/build/app/main.py:30);get (/srv/venv/lib/python3.11/site-packages/requests/api.py:70) 5',
  ].join('\n') + '\n');
  render('heatmap', prof, '-o', dir, '--source-root', `/build=${src}`);
  ctx = await launch();
});
after(async () => { await ctx.close_(); });

test('index groups files as own code, standard library and site-packages', async () => {
  const { page, errors, foreign } = await open(ctx, join(dir, 'index.html'));
  assert.deepEqual(errors, []);
  assert.deepEqual(foreign(), []);
  assert.match(await page.textContent('#group-own'), /\/build\/app\/main\.py/);
  assert.match(await page.textContent('#group-stdlib'), /json\/__init__\.py/);
  assert.match(await page.textContent('#group-site'), /requests\/api\.py/);
  await shot(page, 'heatmap-index');
  await page.click('#group-own a');
  await waitFor(page, () => document.body.dataset.ready === '1' && location.pathname.includes('file-'));
  assert.match(await page.textContent('h1'), /\/build\/app\/main\.py/);
  await page.close();
});

async function mainPage(hash = '') {
  const idx = await open(ctx, join(dir, 'index.html'));
  const href = await idx.page.getAttribute('#group-own a', 'href');
  await idx.page.close();
  return open(ctx, join(dir, href), hash);
}

test('lines show self and total, counted once per sample', async () => {
  const { page, errors } = await mainPage();
  assert.deepEqual(errors, []);
  const cells = await page.$$eval('#line-12 td.n', (tds) => tds.map((t) => t.textContent));
  assert.deepEqual(cells, ['20', '90']);
  assert.match(await page.textContent('#line-12 td.code'), /return helper\(x\) \* 2/);
  assert.equal(await page.getAttribute('#line-30', 'class'), 'hot');
  const heat30 = await page.$eval('#line-30', (r) => parseFloat(r.style.getPropertyValue('--heat')));
  const heat12 = await page.$eval('#line-12', (r) => parseFloat(r.style.getPropertyValue('--heat')));
  assert.ok(heat30 > heat12 && heat30 === 1, 'log-scaled heat, hottest is 1');
  await shot(page, 'heatmap-file');
  await page.close();
});

test('permalinks highlight on load and replay when clicked again', async () => {
  const { page } = await mainPage('#line-12');
  assert.equal(await page.getAttribute('#line-12', 'class'), 'hot flash');
  await page.evaluate(() => {
    window.flashes = 0;
    document.getElementById('line-12').addEventListener('animationstart', () => { window.flashes++; });
  });
  await page.click('#line-12 td.ln a');
  await page.click('#line-12 td.ln a');
  await waitFor(page, () => window.flashes >= 2);
  assert.match(page.url(), /#line-12$/);
  await page.close();
});

test('callers and callees link to their lines', async () => {
  const { page } = await mainPage();
  await page.click('#line-12 summary');
  const rel = await page.textContent('#line-12 details');
  assert.match(rel, /callers90 <module> \(\/build\/app\/main\.py:30\)/);
  assert.match(rel, /callees70 helper \(\/build\/app\/util\.py:2\)/);
  await page.click('#line-12 details a:has-text("helper")');
  await waitFor(page, () => location.hash === '#line-2' && document.body.dataset.ready === '1');
  assert.match(await page.textContent('h1'), /util\.py/);
  assert.equal(await page.getAttribute('#line-2', 'class'), 'hot flash');
  await page.close();
});

test('cold lines can be hidden; missing sources are said to be missing', async () => {
  const { page } = await mainPage();
  assert.ok(await page.isVisible('#line-1'));
  await page.check('#hide-cold');
  assert.equal(await page.isVisible('#line-1'), false);
  assert.ok(await page.isVisible('#line-12'));
  await page.close();
  const idx = await open(ctx, join(dir, 'index.html'));
  const href = await idx.page.getAttribute('#group-stdlib a', 'href');
  await idx.page.close();
  const { page: p2, errors } = await open(ctx, join(dir, href));
  assert.deepEqual(errors, []);
  assert.match(await p2.textContent('.missing'), /outside the --source-root mappings: not read/);
  assert.deepEqual(await p2.$$eval('#line-346 td.n', (t) => t.map((x) => x.textContent)), ['10', '10']);
  await p2.close();
});
