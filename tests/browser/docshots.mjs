// docshots.mjs BUILD_DIR - regenerates the screenshots of docs/reports.md (docs/img/*.png)
// from profiles made by bench/render/genprofile.py. Not a test; run it after changing a report.
import { join } from 'node:path';
import { mkdirSync } from 'node:fs';
import { launch, open, render, genprofile, work, REPO, FIXTURES } from './lib.mjs';

const img = join(REPO, 'docs', 'img');
mkdirSync(img, { recursive: true });
const gen = ['--stacks', '3000', '--samples', '60000', '--functions', '400', '--depth', '5', '--max-depth', '22'];
const a = genprofile(join(work, 'service.folded'), ...gen);
const b = genprofile(join(work, 'service-v2.folded'), ...gen, '--variant', '1');
render('flamegraph', a, '-o', join(work, 'fg.html'), '--title', 'Flamegraph: service.folded');
render('diff', a, b, '-o', join(work, 'diff.html'));
render('flamegraph', a, '-o', join(work, 'fg.svg'), '--width', '1100');
render('heatmap', join(FIXTURES, 'app.folded'), '-o', join(work, 'hm'));
const ctx = await launch();
const shots = [
  ['flamegraph.png', join(work, 'fg.html'), ''],
  ['flamegraph-search.png', join(work, 'fg.html'), '#s=json&inv=1'],
  ['flamegraph-dark.png', join(work, 'fg.html'), '#theme=dark&by=func'],
  ['diff.png', join(work, 'diff.html'), ''],
  ['heatmap-index.png', join(work, 'hm', 'index.html'), ''],
];
for (const [name, file, hash] of shots) {
  const { page } = await open(ctx, file, hash, { width: 1100, height: 640 });
  await page.screenshot({ path: join(img, name), fullPage: false });
  await page.close();
}
await ctx.close_();
console.log('screenshots written to', img);
