// timeviews.test.mjs - the views that need time or instructions: the FlameScope time heatmap
// (drag-select a range, shift+drag a second range for a diff), the sandwich view, and the
// bytecode instructions in the flamegraph's tooltip and in the source heatmap.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { launch, open, render, shot, work, waitFor, timedProfile } from './lib.mjs';

const folded = join(work, 'timed.folded');
const html = join(work, 'timed.html');
let ctx;
before(async () => {
  timedProfile(folded);
  render('flamegraph', folded, '-o', html);
  ctx = await launch();
});
after(async () => { await ctx.close_(); });

const total = (page) => page.evaluate(() => window.pyagentFlame.total());
const find = (page, l, which) => page.evaluate(([l, w]) => window.pyagentFlame.find(l, w), [l, which]);

async function dragCells(page, from, to, shift) {
  const a = await page.evaluate((c) => window.pyagentFlame.heatCell(c), from);
  const b = await page.evaluate((c) => window.pyagentFlame.heatCell(c), to);
  if (shift) await page.keyboard.down('Shift');
  await page.mouse.move(a.x + 1, a.y + 1);
  await page.mouse.down();
  await page.mouse.move(b.x + 1, b.y + 1, { steps: 4 });
  await page.mouse.up();
  if (shift) await page.keyboard.up('Shift');
}

test('the time heatmap has a column per second and a row per 20 ms, coloured by samples', async () => {
  const { page, errors } = await open(ctx, html);
  assert.equal(await page.isHidden('#timepanel'), true, 'closed until asked for');
  await page.click('#time-toggle');
  assert.equal(await page.isVisible('#timepanel'), true);
  assert.deepEqual(await page.evaluate(() => window.pyagentFlame.heatLayout()), { rows: 50, cols: 6, rowMs: 20 });
  assert.equal((await page.evaluate(() => window.pyagentFlame.heatCell(0))).count, 3, 'phase_a 2 + poll 1');
  assert.match(await page.textContent('#timeinfo'), /^900 samples over 6 s/);
  assert.match(page.url(), /time=1/);
  assert.deepEqual(errors, []);
  await shot(page, 'time-heatmap');
  await page.close();
});

test('dragging over the heatmap shows that range\'s flamegraph', async () => {
  const { page, errors } = await open(ctx, html, '#time=1');
  await dragCells(page, 0, 3 * 50 - 1); // seconds 0, 1 and 2
  assert.equal(await total(page), 450, 'phase_a 300 + poll 150');
  assert.equal(await find(page, 'phase_b (/srv/app/main.py:25)'), null);
  assert.equal((await find(page, 'phase_a (/srv/app/main.py:20)')).total, 300);
  assert.match(page.url(), /tr=0-149/);
  assert.match(await page.textContent('#status'), /Time range .*: 450 samples/);
  const hot = await page.$$eval('#hotspots button', (bs) => bs.map((b) => b.textContent.split(' ')[0]));
  assert.deepEqual(hot, ['phase_a', 'poll'], 'the sidebar follows the range');
  await shot(page, 'time-heatmap-range');
  // and the range survives a reload of the link
  const again = await open(ctx, html, '#' + page.url().split('#')[1]);
  assert.equal(await total(again.page), 450);
  await again.page.close();
  await page.click('#time-clear');
  assert.equal(await total(page), 900);
  assert.deepEqual(errors, []);
  await page.close();
});

test('shift+dragging a second range compares it with the first: a diff flamegraph', async () => {
  const { page, errors } = await open(ctx, html, '#time=1');
  await dragCells(page, 0, 149);
  await dragCells(page, 150, 299, true);
  assert.match(page.url(), /tr=150-299&tb=0-149/);
  assert.match(await page.textContent('#legend'), /grew.*shrank/);
  const b = await find(page, 'phase_b (/srv/app/main.py:25)');
  assert.equal(b.colour, 'rgb(245,35,35)', 'phase_b is all new: the deepest red');
  assert.match(await page.textContent('#status'), /Diff: .* \(current\) against .* \(baseline\)/);
  assert.deepEqual(errors, []);
  await shot(page, 'time-heatmap-diff');
  await page.close();
});

test('the heatmap answers the keyboard: arrows, shift+arrows, Enter', async () => {
  const { page } = await open(ctx, html, '#time=1');
  await page.focus('#heat');
  await page.keyboard.down('Shift');
  for (let i = 0; i < 49; i++) await page.keyboard.press('ArrowDown');
  await page.keyboard.up('Shift');
  await page.keyboard.press('Enter');
  assert.match(page.url(), /tr=0-49/);
  assert.equal(await total(page), 150, 'the first second');
  await page.close();
});

test('the sandwich shows a function\'s callers above and its callees below', async () => {
  const { page, errors } = await open(ctx, html);
  await page.click('#hotspots li:first-child button'); // phase_a becomes the chosen function
  await page.click('#mode-sandwich');
  assert.match(page.url(), /mode=sandwich/);
  assert.match(await page.textContent('#sw-title'), /^phase_a \(\/srv\/app\/main\.py:20\): on the stack in 300 samples/);
  const caller = await find(page, 'main (/srv/app/main.py:31)', 'callers');
  assert.equal(caller.total, 300);
  const callee = await find(page, 'phase_a (/srv/app/main.py:20)', 'callees');
  assert.equal(callee.total, 300);
  await shot(page, 'sandwich');
  // a caller clicked becomes the next sandwich: main calls phase_a and phase_b
  await page.mouse.click(caller.x + 3, caller.y + 3);
  assert.equal((await find(page, 'phase_b (/srv/app/main.py:25)', 'callees')).total, 300);
  await page.keyboard.press('f');
  assert.equal(await page.isVisible('#canvas'), true);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the tooltip unfolds a line into its bytecode instructions', async () => {
  const { page } = await open(ctx, html);
  const r = await find(page, 'phase_a (/srv/app/main.py:20)');
  await page.mouse.move(r.x + r.w / 2, r.y + r.h / 2);
  await page.waitForSelector('#tooltip:not([hidden])');
  const tip = await page.textContent('#tooltip');
  assert.match(tip, /Bytecode instructions:/);
  assert.match(tip, /@40:4-12 BINARY_OP150 total150 self50\.00%/);
  assert.match(tip, /@52 LOAD_ATTR_INSTANCE_VALUE \(specialized LOAD_ATTR\)150 total/);
  await shot(page, 'flamegraph-opcodes');
  await page.close();
});

test('the source heatmap unfolds a line into its instructions, under the line\'s columns', async () => {
  const dir = join(work, 'timed-heat');
  render('heatmap', folded, '-o', dir);
  const { page, errors } = await open(ctx, join(dir, 'file-0.html'));
  assert.equal(await page.isHidden('tr.op'), true);
  await page.click('#line-20 button.bc');
  const rows = await page.$$eval('tr.op[data-of="20"]', (rs) => rs.map((r) => Array.from(r.cells).map((c) => c.textContent)));
  assert.deepEqual(rows, [['@40', '150', '150', 'BINARY_OP columns 4-12'], ['@52', '150', '150', 'LOAD_ATTR_INSTANCE_VALUE specialized from LOAD_ATTR']]);
  const line = await page.$$eval('#line-20 td', (c) => c.slice(1, 3).map((x) => x.textContent));
  assert.deepEqual(line, ['300', '300'], 'the line is the sum of its instructions');
  // the instruction columns line up with the line's
  const x = await page.$$eval('#line-20 td.n, tr.op[data-of="20"] td.n', (c) => c.map((e) => Math.round(e.getBoundingClientRect().left)));
  assert.equal(new Set([x[0], x[2], x[4]]).size, 1);
  await page.keyboard.press('b');
  assert.equal(await page.isHidden('tr.op'), true, 'b closes them all');
  assert.deepEqual(errors, []);
  await page.keyboard.press('b');
  await shot(page, 'heatmap-opcodes');
  await page.close();
});
