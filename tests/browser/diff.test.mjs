// diff.test.mjs - the differential flamegraph: widths from the current profile, colours from
// the change in share (each profile normalised by its own total), new and vanished stacks.
// Fixture: baseline 120 samples (steady 50, faster 50, removed 20), current 300 samples
// (steady 150, faster 50, added 100): steady grew 41.7% -> 50%, faster shrank to 16.7%,
// added is new (33.3%), removed exists only in the baseline.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { launch, open, render, shot, work, FIXTURES } from './lib.mjs';

const out = join(work, 'diff.html');
let ctx;
before(async () => {
  render('diff', join(FIXTURES, 'base.folded'), join(FIXTURES, 'current.folded'), '-o', out);
  ctx = await launch();
});
after(async () => { await ctx.close_(); });

const rgb = (s) => s.match(/\d+/g).map(Number);
const find = (page, l) => page.evaluate((x) => window.pyagentFlame.find(x), l);

test('diff loads quietly and explains its colours', async () => {
  const { page, errors, foreign } = await open(ctx, out);
  assert.deepEqual(errors, []);
  assert.deepEqual(foreign(), []);
  assert.match(await page.textContent('#legend'), /normalised by its own total/);
  assert.match(await page.textContent('#summary'), /baseline 120 samples → current 300 samples/);
  await shot(page, 'diff');
  await page.close();
});

test('colours follow the change: red grew, blue shrank, widths from current', async () => {
  const { page } = await open(ctx, out);
  const steady = await find(page, 'steady (/srv/app/main.py:10)');
  const faster = await find(page, 'faster (/srv/app/main.py:20)');
  const added = await find(page, 'added (/srv/app/new.py:3)');
  const [sr, , sb] = rgb(steady.colour);
  const [fr, , fb] = rgb(faster.colour);
  const [ar, , ab] = rgb(added.colour);
  assert.ok(sr > sb, `steady grew: ${steady.colour}`);
  assert.ok(fb > fr, `faster shrank: ${faster.colour}`);
  assert.ok(ar > ab, `added is red: ${added.colour}`);
  assert.ok(ar >= sr && rgb(added.colour)[1] < rgb(steady.colour)[1], 'bigger growth is redder');
  assert.ok(Math.abs(steady.w / faster.w - 3) < 0.05, 'widths from the current profile (150:50)');
  assert.equal(await find(page, 'removed (/srv/app/old.py:7)'), null, 'baseline-only stack not in the main view');
  // the pixel on the canvas is the colour the page says
  const px = await page.evaluate(([x, y]) => {
    const c = document.getElementById('canvas');
    const r = c.getBoundingClientRect();
    const d = window.devicePixelRatio || 1;
    return Array.from(c.getContext('2d').getImageData((x - r.left) * d, (y - r.top) * d, 1, 1).data);
  }, [faster.x + faster.w / 2, faster.y + 4]);
  assert.deepEqual(px.slice(0, 3), rgb(faster.colour));
  await page.close();
});

test('tooltips give before, after and the change', async () => {
  const { page } = await open(ctx, out);
  const f = await find(page, 'faster (/srv/app/main.py:20)');
  await page.mouse.move(f.x + f.w / 2, f.y + f.h / 2);
  const tip = await page.textContent('#tooltip');
  assert.match(tip, /before50 samples41\.67% of baseline/);
  assert.match(tip, /after50 samples16\.67% of current/);
  assert.match(tip, /change−75 samples \(normalised\)−25\.00 points−60\.0% relative/);
  const a = await find(page, 'added (/srv/app/new.py:3)');
  await page.mouse.move(a.x + a.w / 2, a.y + a.h / 2);
  const tip2 = await page.textContent('#tooltip');
  assert.match(tip2, /NEW: not in the baseline/);
  assert.match(tip2, /before0 samples/);
  assert.match(tip2, /after100 samples33\.33% of current/);
  await page.close();
});

test('the elided view shows stacks only the baseline has', async () => {
  const { page } = await open(ctx, out);
  await page.selectOption('#view', 'elided');
  const r = await find(page, 'removed (/srv/app/old.py:7)');
  assert.ok(r, 'baseline-only stack shown');
  assert.equal(await find(page, 'added (/srv/app/new.py:3)'), null);
  await page.mouse.move(r.x + r.w / 2, r.y + r.h / 2);
  assert.match(await page.textContent('#tooltip'), /baseline20 samples16\.67% of baseline/);
  assert.match(page.url(), /view=elided/);
  await shot(page, 'diff-elided');
  await page.close();
});
