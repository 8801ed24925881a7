// pageload.mjs REPORT.html [RUNS] - load and first draw of a report in headless Chromium, and
// the cost of one interaction (zoom into the widest child of the root, then search), in ms.
// Prints one JSON line. Uses the playwright-core installed by tests/browser/run.sh.
import { createRequire } from 'node:module';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const require = createRequire(resolve(new URL('../../tests/browser/', import.meta.url).pathname) + '/');
const { chromium } = require('playwright-core');
const file = resolve(process.argv[2]);
const runs = Number(process.argv[3] || 3);
const dir = mkdtempSync(join(tmpdir(), 'pa-bench-chromium-'));
const ctx = await chromium.launchPersistentContext(dir, {
  executablePath: '/usr/bin/chromium', headless: true, viewport: { width: 1600, height: 1000 },
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
const loads = [], zooms = [], searches = [];
for (let i = 0; i < runs; i++) {
  const page = await ctx.newPage();
  await page.goto(pathToFileURL(file).href);
  await page.waitForSelector('body[data-ready="1"]', { timeout: 60000 });
  loads.push(Number(await page.getAttribute('body', 'data-ready-ms')));
  const r = await page.evaluate(() => {
    const t0 = performance.now();
    const c = document.getElementById('canvas');
    const box = c.getBoundingClientRect();
    // the widest frame just above the root row
    const y = box.bottom - 18 * 1.5;
    c.dispatchEvent(new MouseEvent('click', { clientX: box.left + box.width / 3, clientY: y, bubbles: true }));
    const t1 = performance.now();
    const s = document.getElementById('search');
    s.value = 'json';
    document.getElementById('regex').click();
    const t2 = performance.now();
    return [t1 - t0, t2 - t1];
  });
  zooms.push(r[0]);
  searches.push(r[1]);
  await page.close();
}
await ctx.close();
rmSync(dir, { recursive: true, force: true });
const median = (a) => a.slice().sort((x, y) => x - y)[Math.floor(a.length / 2)];
console.log(JSON.stringify({ load_draw_ms: median(loads), zoom_ms: Math.round(median(zooms)), search_ms: Math.round(median(searches)), runs }));
