// heatmap.test.mjs - the source heatmap: index grouping, navigation, callers/callees links,
// #line-N permalinks whose highlight replays, hiding cold lines, missing sources, colour by
// total or self, the theme.
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
  const heat = (id, v) => page.$eval(id, (r, v) => parseFloat(r.style.getPropertyValue(v)), v);
  const heat30 = await heat('#line-30', '--heat-total');
  const heat12 = await heat('#line-12', '--heat-total');
  assert.ok(heat30 > heat12 && heat30 === 1, 'log-scaled heat, hottest is 1');
  assert.equal(await heat('#line-30', '--heat-self'), 0, 'never the leaf');
  assert.ok(await heat('#line-12', '--heat-self') > 0);
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

test('lines colour by total or by self samples, and the choice follows the links', async () => {
  const { page, errors } = await mainPage();
  const alpha = (id) => page.$eval(id, (e) => Number((/rgba\([^)]*,\s*([0-9.]+)\)/.exec(getComputedStyle(e).backgroundColor) || [0, 1])[1]));
  assert.equal(await page.inputValue('#colour-by'), 'total');
  /* line 30 (<module>) is on the stack in 105 samples and never the leaf; line 12 in 90, leaf in 20 */
  assert.ok(await alpha('#line-30') > await alpha('#line-12'), 'by total the caller is hotter');
  await page.selectOption('#colour-by', 'self');
  assert.ok(await alpha('#line-30') < await alpha('#line-12'), 'by self the leaf is hotter');
  assert.ok(Math.abs(await alpha('#line-30') - 0.08) < 0.01, 'no self samples: the faintest tint');
  assert.match(page.url(), /\?by=self/);
  await page.click('header a[href^="index.html"]');
  await waitFor(page, () => document.body.dataset.ready === '1' && location.pathname.endsWith('index.html'));
  assert.match(page.url(), /index\.html\?by=self/, 'the index keeps the scale');
  assert.equal(await page.inputValue('#colour-by'), 'self');
  assert.match(await page.getAttribute('#group-own a', 'href'), /^file-[0-9]+\.html\?by=self$/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the theme follows the system, the switch overrides it, and links keep it', async () => {
  const { page, errors } = await mainPage('#line-12');
  assert.equal(await page.evaluate(() => document.body.classList.contains('dark')), false);
  await page.emulateMedia({ colorScheme: 'dark' });
  await waitFor(page, () => document.body.classList.contains('dark'));
  const bg = await page.$eval('body', (b) => getComputedStyle(b).backgroundColor);
  assert.equal(bg, 'rgb(23, 24, 28)', 'dark background');
  assert.equal(await page.textContent('#theme'), 'light theme');
  assert.doesNotMatch(page.url(), /theme=/, 'the system\'s choice needs no parameter');
  await shot(page, 'heatmap-dark');
  await page.focus('#theme');
  await page.keyboard.press('Enter');
  assert.equal(await page.evaluate(() => document.body.classList.contains('dark')), false);
  assert.match(page.url(), /\?theme=light#line-12$/, 'the permalink stays the hash');
  await page.click('header a[href^="index.html"]');
  await waitFor(page, () => document.body.dataset.ready === '1' && location.pathname.endsWith('index.html'));
  assert.equal(await page.evaluate(() => document.body.classList.contains('dark')), false, 'light, though the system is dark');
  assert.deepEqual(errors, []);
  await page.close();
});
