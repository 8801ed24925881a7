// sidebyside.mjs OUT_DIR IMG_DIR - Chromium screenshots of both tools' reports made by
// sidebyside.sh: side-NAME-cpython.png, side-NAME-pyagent.png (flamegraphs) and
// side-NAME-cpython-heatmap.png, side-NAME-pyagent-heatmap.png (source heatmaps, the hottest
// file of the program's own code).
import { createRequire } from 'node:module';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(resolve(new URL('../../tests/browser/', import.meta.url).pathname) + '/');
const { chromium } = require('playwright-core');
const [out, img] = process.argv.slice(2).map((p) => resolve(p));
const dir = mkdtempSync(join(tmpdir(), 'pa-side-'));
const ctx = await chromium.launchPersistentContext(dir, {
  executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1400, height: 900 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--no-first-run', '--disable-background-networking'],
});
async function snap(file, png, ready) {
  const page = await ctx.newPage();
  await page.goto(pathToFileURL(file).href);
  if (ready) await page.waitForSelector(ready, { timeout: 30000 }).catch(() => {});
  await page.waitForTimeout(1500); // CPython's page draws with d3 transitions
  await page.screenshot({ path: join(img, png) });
  await page.close();
  console.log('wrote docs/img/' + png);
}
/* The heatmap page of the program's own hottest file: the first own-code link of each index. */
function hottestOwn(indexDir) {
  const html = readFileSync(join(indexDir, 'index.html'), 'utf8');
  const m = /href="(file-\d+\.html|[^"]+\.html)"/.exec(html.slice(html.search(/Your code|group-own|Project/) || 0));
  return m ? join(indexDir, m[1]) : join(indexDir, 'index.html');
}
for (const name of ['shop', 'asyncio', 'numpy']) {
  if (!existsSync(join(out, `${name}.pyagent.html`))) continue;
  await snap(join(out, `${name}.cpython.html`), `side-${name}-cpython.png`);
  await snap(join(out, `${name}.pyagent.html`), `side-${name}-pyagent.png`, 'body[data-ready="1"]');
  const ch = join(out, `${name}.cpython-heatmap`);
  if (existsSync(ch)) await snap(hottestOwn(ch), `side-${name}-cpython-heatmap.png`);
  await snap(hottestOwn(join(out, `${name}.pyagent-heatmap`)), `side-${name}-pyagent-heatmap.png`, 'body[data-ready="1"]');
}
await ctx.close();
rmSync(dir, { recursive: true, force: true });
