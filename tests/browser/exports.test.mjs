// exports.test.mjs - the exports in their consumers: speedscope (npm's speedscope web app)
// loads our speedscope file in time order and our pprof with timestamps; the Firefox
// Profiler's processed format (no consumer on npm) is checked against the facts its own type
// definitions publish (src/types/profile.ts, processed version 70).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import { readFileSync, existsSync } from 'node:fs';
import { join, extname } from 'node:path';
import { launch, render, shot, waitFor, work, timedProfile, REPO } from './lib.mjs';

const APP = join(REPO, 'tests', 'browser', 'node_modules', 'speedscope', 'dist', 'release');
const types = { '.html': 'text/html', '.js': 'text/javascript', '.css': 'text/css', '.wasm': 'application/wasm', '.json': 'application/json' };
let server, port, ctx;
const folded = join(work, 'timed-export.folded');

before(async () => {
  timedProfile(folded);
  render('export', folded, '-o', join(work, 'timed.speedscope.json'));
  render('export', folded, '-o', join(work, 'timed.pb.gz'));
  render('export', folded, '-o', join(work, 'timed.firefox.json'));
  server = createServer((req, res) => {
    const path = req.url.split('?')[0].split('#')[0];
    const file = path.startsWith('/profiles/') ? join(work, path.slice(10)) : join(APP, path === '/' ? 'index.html' : path.replace(/^\/+/, ''));
    if (!existsSync(file)) { res.statusCode = 404; return res.end(); }
    res.setHeader('Content-Type', types[extname(file)] || 'application/octet-stream');
    res.end(readFileSync(file));
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  port = server.address().port;
  ctx = await launch();
});
after(async () => { await ctx.close_(); server.close(); });

async function speedscope(file, title) {
  const page = await ctx.newPage();
  const errors = [];
  page.on('pageerror', (e) => errors.push(String(e)));
  await page.goto(`http://127.0.0.1:${port}/index.html#profileURL=http://127.0.0.1:${port}/profiles/${file}&title=${title}`);
  await waitFor(page, (t) => document.body.innerText.includes(t), title, 15000);
  return { page, errors };
}

test('speedscope loads the speedscope export, samples in time order', async () => {
  const doc = JSON.parse(readFileSync(join(work, 'timed.speedscope.json'), 'utf8'));
  const main = doc.profiles.find((p) => p.name === 'thread:MainThread');
  const names = main.samples.map((s) => doc.shared.frames[s[s.length - 1]].name);
  // phase_a's buckets (first 3 s) all come before phase_b's (last 3 s)
  assert.ok(names.lastIndexOf('phase_a') < names.indexOf('phase_b'));
  assert.equal(main.weights.reduce((a, b) => a + b, 0), 600);
  const { page, errors } = await speedscope('timed.speedscope.json', 'timed-speedscope');
  await page.getByText('Sandwich').click();
  await waitFor(page, () => /phase_b/.test(document.body.innerText), null, 15000);
  const text = await page.evaluate(() => document.body.innerText);
  assert.doesNotMatch(text, /Something went wrong|Unrecognized format/);
  assert.match(text, /phase_a/);
  assert.deepEqual(errors, []);
  await shot(page, 'speedscope-time-order');
  await page.close();
});

test('speedscope loads the pprof export with its timestamp labels', async () => {
  const { page, errors } = await speedscope('timed.pb.gz', 'timed-pprof');
  await page.getByText('Sandwich').click();
  await waitFor(page, () => /phase_b/.test(document.body.innerText), null, 15000);
  assert.doesNotMatch(await page.evaluate(() => document.body.innerText), /Something went wrong|Unrecognized format/);
  assert.deepEqual(errors, []);
  await page.close();
});

test('the Firefox Profiler export keeps the processed format\'s published rules', () => {
  const p = JSON.parse(readFileSync(join(work, 'timed.firefox.json'), 'utf8'));
  const m = p.meta;
  assert.equal(m.preprocessedProfileVersion, 70);
  for (const k of ['interval', 'startTime', 'processType', 'product', 'stackwalk', 'version', 'markerSchema']) assert.ok(k in m, 'meta.' + k);
  // categories: at least one grey (the default); colours from the allowed list; subcategory 0 exists
  const colours = ['transparent', 'purple', 'green', 'orange', 'yellow', 'lightblue', 'blue', 'brown', 'magenta', 'red', 'lightred', 'darkgrey', 'grey'];
  assert.ok(m.categories.some((c) => c.color === 'grey'));
  for (const c of m.categories) { assert.ok(colours.includes(c.color), c.color); assert.ok(c.subcategories.length >= 1); }
  const s = p.shared;
  const str = s.stringArray;
  const cols = (t, names) => { for (const c of names) assert.equal(t[c].length, t.length, c + ' has one value per row'); };
  cols(s.stackTable, ['frame', 'prefixOffset']);
  cols(s.frameTable, ['address', 'lib', 'inlineDepth', 'category', 'subcategory', 'func', 'nativeSymbol', 'innerWindowID', 'line', 'column', 'originalLocation']);
  cols(s.funcTable, ['name', 'isJS', 'relevantForJS', 'resource', 'source', 'lineNumber', 'columnNumber', 'originalLocation']);
  cols(s.resourceTable, ['name', 'host', 'type']);
  assert.equal(s.nativeSymbols.length, 0);
  cols(s.sources, ['id', 'filename', 'startLine', 'startColumn', 'sourceMapURL', 'content']);
  assert.equal(s.sourceLocationTable.length, 0);
  assert.ok(!('lib' in s.resourceTable), 'version 70 moved lib to the frame table');
  // the stack table is in topological order: prefixOffset 0 is a root, k > 0 points k rows back
  s.stackTable.prefixOffset.forEach((k, i) => assert.ok(k >= 0 && k <= i));
  s.stackTable.frame.forEach((f) => assert.ok(f >= 0 && f < s.frameTable.length));
  s.frameTable.func.forEach((f) => assert.ok(f >= 0 && f < s.funcTable.length));
  s.frameTable.category.forEach((c) => assert.ok(c >= 0 && c < m.categories.length));
  s.frameTable.lib.forEach((l) => assert.equal(l, -1));
  s.frameTable.address.forEach((a) => assert.equal(a, -1));
  s.funcTable.name.forEach((i) => assert.ok(typeof str[i] === 'string'));
  s.funcTable.resource.forEach((r) => assert.ok(r === -1 || (r >= 0 && r < s.resourceTable.length)));
  s.funcTable.source.forEach((r) => assert.ok(r === null || (r >= 0 && r < s.sources.length)));
  // threads: samples with increasing times, stacks in range, weights adding up to the profile
  assert.deepEqual(p.threads.map((t) => t.name), ['MainThread', 'worker-1']);
  let sum = 0;
  for (const t of p.threads) {
    for (const k of ['processType', 'processStartupTime', 'processShutdownTime', 'registerTime', 'unregisterTime', 'pausedRanges', 'isMainThread', 'pid', 'tid', 'markers']) assert.ok(k in t, 'thread.' + k);
    assert.equal(typeof t.pid, 'string');
    const sm = t.samples;
    cols(sm, ['stack', 'time', 'weight']);
    assert.equal(sm.weightType, 'samples');
    sm.time.forEach((x, i) => assert.ok(i === 0 || x >= sm.time[i - 1], 'times in order'));
    sm.stack.forEach((x) => assert.ok(x === null || (x >= 0 && x < s.stackTable.length)));
    sum += sm.weight.reduce((a, b) => a + b, 0);
    cols(t.markers, ['data', 'name', 'startTime', 'endTime', 'phase', 'category']);
  }
  assert.equal(sum, 900);
  // phase_b's first sample is at 3 s: times are real
  const main = p.threads[0];
  const leafName = (st) => str[s.funcTable.name[s.frameTable.func[s.stackTable.frame[st]]]];
  const firstB = main.samples.stack.findIndex((st) => leafName(st) === 'phase_b');
  assert.equal(main.samples.time[firstB], 3010, 'the middle of the first 20 ms bucket after 3 s');
});
