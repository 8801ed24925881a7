// A page with Grafana's own flame graph component (@grafana/flamegraph), bundled by esbuild for
// flamegraph.test.mjs. It draws what the test hands it in window.PA_FLAME: the FlameGraph of a
// SelectMergeStacktraces answer (names and levels, Pyroscope's format), turned into the nested
// set DataFrame (level, value, self, label in depth-first order) that Grafana's Pyroscope data
// source makes of it. body[data-ready] says when it is drawn; window.PA_ROOT the root's value.
import React from 'react';
import { createRoot } from 'react-dom/client';
import { FlameGraph } from '@grafana/flamegraph';
import { createDataFrame, createTheme, FieldType } from '@grafana/data';

// Levels: per node (offset from the end of the previous node of its level, total, self, name).
function nestedSet(fg) {
  const levels = fg.levels.map((lv) => {
    const v = (lv.values || []).map(Number);
    const nodes = [];
    let end = 0;
    for (let i = 0; i < v.length; i += 4) {
      const start = end + v[i];
      nodes.push({ start, total: v[i + 1], self: v[i + 2], name: fg.names[v[i + 3]], kids: [] });
      end = start + v[i + 1];
    }
    return nodes;
  });
  for (let d = 1; d < levels.length; d++) {
    let p = 0;
    for (const n of levels[d]) {
      while (p < levels[d - 1].length &&
             levels[d - 1][p].start + levels[d - 1][p].total <= n.start) p++;
      levels[d - 1][p].kids.push(n);
    }
  }
  const out = { level: [], value: [], self: [], label: [] };
  const walk = (n, depth) => {
    out.level.push(depth);
    out.value.push(n.total);
    out.self.push(n.self);
    out.label.push(n.name);
    n.kids.forEach((k) => walk(k, depth + 1));
  };
  walk(levels[0][0], 0);
  return out;
}

const fg = window.PA_FLAME;
const ns = nestedSet(fg);
window.PA_ROOT = ns.value[0];
window.PA_NODES = ns.label.length;
const frame = createDataFrame({
  fields: [
    { name: 'level', type: FieldType.number, values: ns.level },
    { name: 'value', type: FieldType.number, values: ns.value, config: { unit: 'short' } },
    { name: 'self', type: FieldType.number, values: ns.self, config: { unit: 'short' } },
    { name: 'label', type: FieldType.string, values: ns.label },
  ],
});
const theme = createTheme({ colors: { mode: 'light' } });
createRoot(document.getElementById('root')).render(
  <FlameGraph data={frame} getTheme={() => theme} vertical={true} />
);
setTimeout(() => document.body.setAttribute('data-ready', '1'), 0);
