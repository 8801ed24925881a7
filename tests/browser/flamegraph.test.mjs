// flamegraph.test.mjs - the HTML flamegraph in Chromium: quiet, self-contained, and every
// interactive feature doing what the numbers of the fixture say it should.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { mkdirSync, writeFileSync } from 'node:fs';
import { launch, open, render, shot, genprofile, work, waitFor, FIXTURES } from './lib.mjs';

const app = join(FIXTURES, 'app.folded');
const html = join(work, 'app.html');
const MAIN = 'main (/srv/app/main.py:31)';
const WORK = 'work (/srv/app/main.py:12)';
let ctx;

before(async () => {
  render('flamegraph', app, '-o', html);
  ctx = await launch();
});
after(async () => { await ctx.close_(); });

// Hovers the widest drawn frame with this label.
async function hover(page, label) {
  const all = await page.evaluate((l) => window.pyagentFlame.findAll(l), label);
  const r = all.sort((a, b) => b.w - a.w)[0];
  assert.ok(r, `frame ${label} is drawn`);
  await page.mouse.move(r.x + r.w / 2, r.y + r.h / 2);
  await page.waitForSelector('#tooltip:not([hidden])');
  return page.textContent('#tooltip');
}

test('loads with no console error and no request but the page itself', async () => {
  const { page, errors, foreign } = await open(ctx, html);
  assert.deepEqual(errors, []);
  assert.deepEqual(foreign(), []);
  assert.match(await page.textContent('#summary'), /1,000 samples · 100 Hz · cpu time · Python 3\.11\.2/);
  await shot(page, 'flamegraph');
  await page.close();
});

test('hover shows total and self samples with percentages', async () => {
  const { page } = await open(ctx, html);
  const tip = await hover(page, MAIN);
  assert.match(tip, /^main/);
  assert.match(tip, /\/srv\/app\/main\.py:31/);
  assert.match(tip, /total800 samples80\.00% of all80\.00% of zoom/);
  assert.match(tip, /self0 samples0\.00% of all/);
  const tip2 = await hover(page, WORK);
  assert.match(tip2, /total600 samples60\.00% of all/);
  assert.match(tip2, /self600 samples60\.00% of all/);
  assert.match(tip2, /your code/);
  await page.close();
});

test('click zooms, percentages follow the zoomed frame, the URL keeps it', async () => {
  const { page } = await open(ctx, html);
  const r = await page.evaluate((l) => window.pyagentFlame.find(l), MAIN);
  await page.mouse.click(r.x + 2, r.y + 2);
  const z = await page.evaluate((l) => window.pyagentFlame.find(l), MAIN);
  // the chart is as wide as its canvas (the sidebar takes the rest of the window)
  const full = await page.evaluate(() => document.getElementById('canvas').getBoundingClientRect().width);
  assert.ok(z.w >= full - 1, 'zoomed frame spans the width');
  assert.equal(await page.evaluate(() => window.pyagentFlame.find('get (/srv/venv/lib/python3.11/site-packages/requests/api.py:70)')), null, 'sibling hidden');
  const tip = await hover(page, WORK);
  assert.match(tip, /60\.00% of all75\.00% of zoom/);
  const url = page.url();
  assert.match(url, /#z=[0-9.]+/);
  await shot(page, 'flamegraph-zoomed');
  await page.close();
  const again = await open(ctx, html, '#' + url.split('#')[1]);
  const z2 = await again.page.evaluate((l) => window.pyagentFlame.find(l), MAIN);
  assert.ok(z2.w >= full - 1, 'zoom restored from the URL');
  await again.page.click('#reset');
  const z3 = await again.page.evaluate((l) => window.pyagentFlame.find(l), MAIN);
  assert.ok(z3.w < 0.9 * full, 'reset');
  await again.page.close();
});

test('search highlights matches and reports the matched share', async () => {
  const { page } = await open(ctx, html);
  await page.fill('#search', 'work');
  await waitFor(page, () => document.getElementById('matched').textContent.includes('%'));
  assert.match(await page.textContent('#matched'), /Matched: 70\.00% \(700 samples\)/);
  const r = await page.evaluate((l) => window.pyagentFlame.find(l), WORK);
  assert.equal(r.colour, '#e040fb');
  await page.check('#regex');
  await page.fill('#search', '^(loads|get) ');
  await waitFor(page, () => document.getElementById('matched').textContent.includes('30.00%'));
  assert.match(page.url(), /s=%5E%28loads%7Cget%29/);
  await shot(page, 'flamegraph-search');
  await page.close();
});

test('inverted draws the root at the top', async () => {
  const { page } = await open(ctx, html);
  const before = await page.evaluate(() => [window.pyagentFlame.find('thread:MainThread').y, window.pyagentFlame.find('work (/srv/app/main.py:12)').y]);
  assert.ok(before[0] > before[1], 'flame: root below');
  await page.check('#inverted');
  const afterY = await page.evaluate(() => [window.pyagentFlame.find('thread:MainThread').y, window.pyagentFlame.find('work (/srv/app/main.py:12)').y]);
  assert.ok(afterY[0] < afterY[1], 'icicle: root above');
  assert.match(page.url(), /inv=1/);
  await shot(page, 'flamegraph-inverted');
  await page.close();
});

test('thread filter keeps one thread', async () => {
  const { page } = await open(ctx, html);
  const options = await page.$$eval('#thread option', (os) => os.map((o) => o.textContent));
  assert.deepEqual(options, ['all threads', 'MainThread (90.00%)', 'worker-1 (10.00%)']);
  await page.selectOption('#thread', { label: 'worker-1 (10.00%)' });
  assert.equal(await page.evaluate((l) => window.pyagentFlame.find(l), MAIN), null);
  const tip = await hover(page, 'run (/usr/lib/python3.11/threading.py:975)');
  assert.match(tip, /total100 samples100\.00% of all/);
  await page.close();
});

test('merge by function joins lines, reversed merges by leaf', async () => {
  const { page } = await open(ctx, html);
  await page.selectOption('#by', 'func');
  const tip = await hover(page, 'main (/srv/app/main.py)');
  assert.match(tip, /total900 samples90\.00% of all/);
  await page.selectOption('#by', 'line');
  await page.check('#reversed');
  const tip2 = await hover(page, WORK);
  assert.match(tip2, /total680 samples68\.00% of all/, 'leaf work:12 from both threads');
  await page.close();
});

test('dark theme', async () => {
  const { page, errors } = await open(ctx, html);
  await page.click('#theme');
  assert.equal(await page.getAttribute('body', 'class'), 'dark');
  assert.match(page.url(), /theme=dark/);
  await shot(page, 'flamegraph-dark');
  assert.deepEqual(errors, []);
  await page.close();
});

test('hostile names stay inert and readable', async () => {
  const evil = genprofile(join(work, 'evil.folded'), '--hostile');
  const out = join(work, 'evil.html');
  render('flamegraph', evil, '-o', out);
  const { page, errors, foreign } = await open(ctx, out);
  assert.deepEqual(errors, []);
  assert.deepEqual(foreign(), []);
  assert.equal(await page.$$eval('img', (i) => i.length), 0, 'no element injected');
  const r = await page.evaluate(() => window.pyagentFlame.find('</script><img src=x onerror=alert(1)> (evil</script>.py:1)'));
  assert.ok(r, 'the name is shown as text');
  const r2 = await page.evaluate(() => window.pyagentFlame.find('nul\\x00byte (evil</script>.py:4)'));
  assert.ok(r2, 'NUL shown visibly');
  await shot(page, 'flamegraph-hostile');
  await page.close();
});

test('a large profile loads without errors, prunes narrow frames and answers a search', async () => {
  const big = genprofile(join(work, 'big.folded'), '--stacks', '20000', '--samples', '200000');
  const out = join(work, 'big.html');
  render('flamegraph', big, '-o', out);
  const t0 = Date.now();
  const { page, errors } = await open(ctx, out);
  const loaded = Date.now() - t0;
  assert.deepEqual(errors, []);
  // How fast is a benchmark figure (bench/render), not asserted: a loaded machine is slower.
  console.log(`# large profile loaded in ${loaded} ms`);
  const pruned = await page.evaluate(() => window.pyagentFlame.pruned());
  assert.ok(pruned.count > 0);
  assert.match(await page.textContent('#status'), /frames narrower than 0\.5 px not drawn: [0-9.]+% of samples/);
  const t1 = Date.now();
  await page.fill('#search', 'json');
  await waitFor(page, () => document.getElementById('matched').textContent.includes('%'));
  console.log(`# search answered in ${Date.now() - t1} ms`);
  await shot(page, 'flamegraph-large');
  await page.close();
});

test('tooltips quote the hot frames\' source lines, escaped, and only the hottest are embedded', async () => {
  const src = join(work, 'quoted');
  mkdirSync(join(src, 'app'), { recursive: true });
  const lines = ['import os', '', 'def work(x):', '    y = "</script><img src=x onerror=alert(1)>"', '    return helper(y)', '', 'def helper(y):', '\treturn y'];
  for (let i = 9; i <= 260; i++) lines.push(`cold_${i} = ${i}`);
  writeFileSync(join(src, 'app', 'main.py'), lines.join('\n') + '\n');
  const stacks = ['thread:M;<module> (/build/app/main.py:1);work (/build/app/main.py:5);helper (/build/app/main.py:8) 1000'];
  /* 250 more locations, each colder than the last: only the hottest 200 of all are quoted */
  for (let i = 9; i <= 258; i++) stacks.push(`thread:M;<module> (/build/app/main.py:1);f${i} (/build/app/main.py:${i}) ${300 - i}`);
  const prof = join(work, 'quoted.folded');
  writeFileSync(prof, stacks.join('\n') + '\n');
  const out = join(work, 'quoted.html');
  render('flamegraph', prof, '-o', out, '--source-root', `/build=${src}`);
  const { page, errors } = await open(ctx, out);
  const tip = await hover(page, 'work (/build/app/main.py:5)');
  assert.match(tip, /def work\(x\):/, 'the lines around it');
  assert.match(tip, /→ +5 {2}    return helper\(y\)/, 'the frame\'s own line marked');
  assert.match(tip, /<\/script><img src=x onerror=alert\(1\)>/, 'quoted as text');
  assert.equal(await page.$$eval('#tooltip img', (x) => x.length), 0, 'never markup');
  assert.equal(await page.$eval('#tooltip .source .current', (e) => e.textContent.trim()), '→     5      return helper(y)');
  const quoted = await page.evaluate(() => Object.values(JSON.parse(document.getElementById('source-data').textContent)).map((f) => Object.keys(f).length));
  assert.deepEqual(quoted, [200], 'bounded to the hottest locations');
  assert.doesNotMatch(await hover(page, 'f258 (/build/app/main.py:258)'), /cold_258/, 'a cold frame is not quoted');
  assert.deepEqual(errors, []);
  await shot(page, 'flamegraph-tooltip-source');
  await page.close();
  const bare = join(work, 'bare.html');
  render('flamegraph', prof, '-o', bare, '--source-root', `/build=${src}`, '--no-source');
  const b = await open(ctx, bare);
  assert.doesNotMatch(await hover(b.page, 'work (/build/app/main.py:5)'), /def work/, '--no-source reads none');
  assert.deepEqual(b.errors, []);
  await b.page.close();
});
