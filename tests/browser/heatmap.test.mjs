// heatmap.test.mjs - the source heatmap: index grouping, navigation, callers/callees links,
// #line-N permalinks whose highlight replays, hiding cold lines, missing sources, colour by
// total or self, the theme, the index's per-file summary cards (hostile names included) and
// colouring by specialization (frames with instructions, PYAGENT_OPCODES).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { mkdirSync, writeFileSync } from 'node:fs';
import { launch, open, render, shot, work, waitFor } from './lib.mjs';

const dir = join(work, 'heatmap');
const specDir = join(work, 'heatmap-spec');
/* no ';' (it separates frames) */
const HOSTILE = '/build/app/</h3><img src=x onerror=alert(1)>&amp"q\'.py';
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
  /* spec.py: line 5 runs only a specialized instruction, line 6 only an unspecialized one,
   * line 7 half and half, line 8 has no instruction data; <module> on line 1 calls (CALL,
   * not specialized) in all 80 samples. Plus a file whose name is markup. */
  writeFileSync(join(src, 'app', 'spec.py'), Array.from({ length: 12 }, (_, i) => `x_${i + 1} = ${i + 1}`).join('\n') + '\n');
  const mod = 'thread:Main;<module> (/build/app/spec.py:1) @2 CALL';
  const specProf = join(work, 'spec.folded');
  writeFileSync(specProf, [
    `${mod};f (/build/app/spec.py:5) @10 LOAD_ATTR_INSTANCE_VALUE 30`,
    `${mod};f (/build/app/spec.py:6) @20 BINARY_OP 20`,
    `${mod};f (/build/app/spec.py:7) @30 BINARY_OP_ADD_INT 10`,
    `${mod};f (/build/app/spec.py:7) @32 LOAD_FAST 10`,
    `${mod};f (/build/app/spec.py:8) 10`,
    `thread:Evil;<script>alert(2)</script> (${HOSTILE}:3) @4 LOAD_FAST 5`,
  ].join('\n') + '\n');
  render('heatmap', specProf, '-o', specDir, '--source-root', `/build=${src}`);
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

/* The index card of the file whose name matches re. */
async function card(page, re) {
  for (const li of await page.$$('li.card')) {
    if (re.test(await li.$eval('h3', (h) => h.textContent))) return li;
  }
  throw new Error('no card for ' + re);
}

test('index cards sum up each file with the numbers its page shows, and link its hottest lines', async () => {
  const { page, errors, foreign } = await open(ctx, join(dir, 'index.html'));
  assert.deepEqual(errors, []);
  assert.deepEqual(foreign(), []);
  const main = await card(page, /main\.py$/);
  const text = (sel) => main.$eval(sel, (e) => e.textContent);
  /* main.py: 105 samples of 105, 20 with line 12 as the leaf, lines 30 and 12 sampled */
  assert.equal(await text('.c-total'), 'total 105 (100.00%)');
  assert.equal(await text('.c-self'), 'self 20 (19.05%)');
  assert.equal(await text('.c-lines'), '2 lines and 2 functions sampled'); /* <module>, work */
  assert.equal(await main.$('.c-spec'), null, 'no instruction data, no specialization');
  const hottest = await main.$$eval('.hottest a', (as) => as.map((a) => [a.textContent, a.getAttribute('href')]));
  assert.equal(hottest.length, 2);
  assert.deepEqual(hottest.map((h) => h[0]), ['line 30', 'line 12']);
  assert.match(hottest[1][1], /^file-[0-9]+\.html#line-12$/);
  assert.equal(await main.$eval('.bar span', (s) => s.style.width), '100%');
  const util = await card(page, /util\.py$/);
  assert.equal(await util.$eval('.bar span', (s) => s.style.width), '66.67%');
  /* the page says the same */
  await (await main.$('.hottest a:nth-of-type(2)')).click();
  await waitFor(page, () => document.body.dataset.ready === '1' && location.hash === '#line-12');
  assert.match(await page.textContent('.sum'), /^105 samples on this file's lines \(100\.00% of 105\), 20 with a line here as the leaf/);
  assert.equal(await page.getAttribute('#line-12', 'class'), 'hot flash');
  assert.equal(await page.$$eval('tr.hot:not(.op)', (r) => r.length), 2);
  assert.deepEqual(errors, []);
  await page.close();
});

test('index cards sort by total, self or name, keyboard first, and the order is kept in the link', async () => {
  const { page, errors } = await open(ctx, join(dir, 'index.html'));
  const names = () => page.$$eval('#group-own li.card h3', (hs) => hs.map((h) => h.textContent.replace(/.*\//, '')));
  assert.deepEqual(await names(), ['main.py', 'util.py']);
  await page.focus('#sort-by');
  await page.keyboard.press('ArrowDown'); /* self: util.py is the leaf in 70, main.py in 20 */
  assert.equal(await page.inputValue('#sort-by'), 'self');
  assert.deepEqual(await names(), ['util.py', 'main.py']);
  assert.match(page.url(), /\?sort=self$/);
  await page.selectOption('#sort-by', 'name');
  assert.deepEqual(await names(), ['main.py', 'util.py']);
  await page.keyboard.press('Tab');
  assert.equal(await page.evaluate(() => document.activeElement.id), 'colour-by', 'the controls are in tab order');
  assert.deepEqual(errors, []);
  await page.close();
});

test('hostile file names are escaped in the cards', async () => {
  const { page, errors, foreign } = await open(ctx, join(specDir, 'index.html'));
  assert.deepEqual(errors, []);
  assert.deepEqual(foreign(), []);
  const evil = await card(page, /onerror/);
  assert.equal(await evil.$eval('h3', (h) => h.textContent), HOSTILE);
  assert.match(await evil.$eval('.hottest a', (a) => a.getAttribute('href')), /^file-[0-9]+\.html#line-3$/);
  assert.equal(await page.$$eval('img', (i) => i.length), 0);
  assert.equal(await page.$$eval('script', (i) => i.length), 1, 'the page\'s own only');
  await page.close();
});

test('lines colour by specialization, with a legend, kept in the link', async () => {
  const idx = await open(ctx, join(specDir, 'index.html'));
  const spec = await card(idx.page, /spec\.py$/);
  /* instruction samples of spec.py's lines: line 1 0/80, 5 30/30, 6 0/20, 7 10/20 -> 40/150 */
  assert.equal(await spec.$eval('.c-spec', (e) => e.textContent), '26.7% specialized');
  const href = await spec.$eval('h3 a', (a) => a.getAttribute('href'));
  await idx.page.close();
  const { page, errors } = await open(ctx, join(specDir, href));
  assert.match(await page.textContent('.sum'), /26\.7% of 150 samples with instruction data on specialized instructions/);
  assert.equal(await page.isVisible('.spec-legend'), false);
  const bg = (id) => page.$eval(id, (e) => getComputedStyle(e).backgroundColor);
  const alpha = async (id) => Number((/rgba\([^)]*,\s*([0-9.]+)\)/.exec(await bg(id)) || [0, 1])[1]);
  await page.focus('#by-spec');
  await page.keyboard.press('Space');
  assert.equal(await page.isChecked('#by-spec'), true);
  assert.ok(await page.isVisible('.spec-legend'));
  assert.match(page.url(), /\?spec=1$/);
  assert.match(await bg('#line-5'), /^rgba\(20, 150, 90,/, 'the specialization hue');
  const a5 = await alpha('#line-5'), a7 = await alpha('#line-7'), a6 = await alpha('#line-6');
  assert.ok(Math.abs(a5 - 0.68) < 0.01, 'all specialized: the strongest colour, ' + a5);
  assert.ok(Math.abs(a6 - 0.08) < 0.01, 'none specialized: the weakest, ' + a6);
  assert.ok(a6 < a7 && a7 < a5, 'half and half in between');
  assert.equal(await bg('#line-8'), 'rgba(0, 0, 0, 0)', 'no instruction data: uncoloured');
  assert.match(await page.getAttribute('#line-8', 'title'), /no instruction data/);
  assert.match(await page.getAttribute('#line-5', 'title'), /100\.0% of 30 samples/);
  await shot(page, 'heatmap-spec');
  await page.click('header a[href^="index.html"]');
  await waitFor(page, () => document.body.dataset.ready === '1' && location.pathname.endsWith('index.html'));
  assert.match(page.url(), /index\.html\?spec=1$/, 'the index keeps the view');
  const back = await page.$eval('li.card h3 a', (a) => a.getAttribute('href'));
  assert.match(back, /^file-[0-9]+\.html\?spec=1$/);
  await page.click(`li.card h3 a[href="${back}"]`);
  await waitFor(page, () => document.body.dataset.ready === '1' && location.pathname.includes('file-'));
  assert.equal(await page.isChecked('#by-spec'), true);
  await page.uncheck('#by-spec');
  assert.doesNotMatch(page.url(), /spec=/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('without instruction data a file page offers no specialization colouring', async () => {
  const { page, errors } = await mainPage();
  assert.equal(await page.$('#by-spec'), null);
  assert.equal(await page.getAttribute('#line-12', 'title'), null);
  assert.deepEqual(errors, []);
  await page.close();
});
