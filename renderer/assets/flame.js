/* flame.js - the interactive flamegraph, differential flamegraph, sandwich and time heatmap,
 * drawn on canvases.
 *
 * The page carries the stacks as a prefix tree (see pa_profile_encode_report_json) and, when
 * the profile has them, the samples per tree node and time bucket. Every view (merge by line,
 * function or module, reversed, one thread, a time range, the diff of two ranges, the
 * sandwich of one function) is rebuilt from those arrays in one pass into flat arrays, and
 * drawing walks only the frames wide enough to see, so the cost of a redraw follows what is
 * on screen, not the size of the profile. Names are untrusted: they only ever reach the page
 * through textContent and fillText (and, in a saved SVG, through xml()). */
'use strict';
(function () {
  const data = JSON.parse(document.getElementById('profile-data').textContent);
  const isDiffPage = typeof data.baseTotal === 'number';
  const F = data.frames;
  const KINDS = ['own', 'stdlib', 'site', 'native', 'synthetic', 'thread', 'other'];
  const KIND_TEXT = {
    own: 'your code', stdlib: 'standard library', site: 'site-packages', native: 'native',
    synthetic: 'synthetic', thread: 'thread', other: 'frame'
  };
  const ROW = 18;
  const MIN_PX = 0.5; /* narrower frames are pruned, their share reported */
  const $ = (id) => document.getElementById(id);
  const meta = data.meta || {};
  /* The header's per-thread state counts (formats.md, thread_states:
   * "HELD:RELEASED:WAIT:HANDLING:RAISING:NAME;..."); empty for profiles without them. */
  const STATE_KEYS = ['held', 'released', 'wait', 'handling', 'raising'];
  const THREAD_STATES = String(meta.thread_states || '').split(';').map((entry) => {
    const parts = entry.split(':');
    const n = parts.slice(0, 5).map((x) => (/^[0-9]+$/.test(x) ? Number(x) : NaN));
    if (parts.length < 6 || n.some((x) => Number.isNaN(x))) return null;
    const t = { name: parts.slice(5).join(':') };
    STATE_KEYS.forEach((k, i) => { t[k] = n[i]; });
    return t;
  }).filter(Boolean);
  /* Source lines of the hottest Python locations, read at render time: file -> line -> [first
   * line number, text...]. */
  const SRC = JSON.parse(document.getElementById('source-data').textContent || '{}');

  /* ---- the prefix tree from the page ---- */
  const N = data.nodes;
  const n = N.up.length;
  const tparent = new Int32Array(n);
  for (let i = 0; i < n; i++) tparent[i] = i - N.up[i];
  const tframe = N.frame;
  const rootOf = new Int32Array(n);
  for (let i = 0; i < n; i++) rootOf[i] = tparent[i] < 0 ? tframe[i] : rootOf[tparent[i]];
  /* What each tree node weighs now: the whole profile, or a time range (and its baseline). */
  let tself = N.self;
  let tbase = isDiffPage ? N.base : null;
  let diff = isDiffPage;
  let totalCur = data.total;
  let totalBase = isDiffPage ? data.baseTotal : 0;

  /* Control characters stay visible but inert. */
  function readable(s) {
    return s.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g,
      (c) => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
  }

  /* The module a file belongs to: the dotted path under the standard library or
   * site-packages, the file's own name for the program's code, the library for native code. */
  function moduleOf(kind, file, name) {
    if (kind === 'thread' || kind === 'synthetic' || kind === 'other' || !file) return name;
    if (kind === 'native') return file.replace(/^.*\//, '');
    let m = file;
    const roots = [/^.*\/(?:site|dist)-packages\//, /^.*\/lib\/python[0-9.]+\//, /^<frozen /];
    let rooted = false;
    for (const r of roots) if (r.test(m)) { m = m.replace(r, ''); rooted = true; break; }
    if (!rooted) m = m.replace(/^.*\//, '');
    m = m.replace(/>$/, '').replace(/\.py$/, '').replace(/\/__init__$/, '').replace(/\//g, '.');
    return m || file;
  }

  /* Keys: what a view node stands for. By line a key is a frame (its instruction aside); by
   * function, frames that differ only in their line share a key; by module, every frame of a
   * module does. */
  function makeKeys(by) {
    const nf = F.name.length;
    const keyOf = new Int32Array(nf);
    const label = [], kind = [], file = [], line = [], name = [], modLabel = [], mod = [], src = [];
    const seen = new Map();
    for (let f = 0; f < nf; f++) {
      const kd = KINDS[F.kind[f]] || 'other';
      const fileName = readable(data.files[F.file[f]]);
      const nm = readable(F.name[f]);
      const ln = by === 'line' ? F.line[f] : 0;
      let text;
      if (by === 'module') text = moduleOf(kd, fileName, kd === 'thread' ? 'thread:' + nm : nm);
      else if (kd === 'thread') text = 'thread:' + nm;
      else if (kd === 'native') text = nm + ' [' + fileName + ']';
      else if (fileName) text = nm + ' (' + fileName + (ln ? ':' + ln : '') + ')';
      else text = nm;
      const sig = kd + '\u0000' + text;
      let k = seen.get(sig);
      if (k === undefined) {
        k = label.length;
        seen.set(sig, k);
        label.push(text); kind.push(kd); file.push(by === 'module' ? '' : fileName); line.push(ln);
        name.push(by === 'module' ? text : nm);
        /* The same frame labelled with its module instead of its file (the "module names"
         * toggle): only the text changes, the key stays the file's. */
        const m = fileName && kd !== 'thread' && by !== 'module' ? moduleOf(kd, fileName, nm) : '';
        mod.push(m);
        const lines = ln && SRC[data.files[F.file[f]]];
        src.push(lines && lines[ln] ? lines[ln] : null);
        modLabel.push(!m ? text : kd === 'native' ? nm + ' [' + m + ']' : nm + ' (' + m + (ln ? ':' + ln : '') + ')');
      }
      keyOf[f] = k;
    }
    /* Children are ordered by name, as in flamegraph.pl, so that two profiles line up. */
    const order = label.map((_, i) => i).sort((a, b) => (label[a] < label[b] ? -1 : label[a] > label[b] ? 1 : 0));
    const rank = new Int32Array(label.length);
    order.forEach((k, r) => { rank[k] = r; });
    const byLabel = new Map();
    label.forEach((l, k) => byLabel.set(l, k));
    return { keyOf, label, kind, file, line, name, rank, byLabel, by, modLabel, mod, src };
  }
  const keySets = {};
  function keys(by) {
    if (!keySets[by]) keySets[by] = makeKeys(by);
    return keySets[by];
  }

  /* Threads: root frames named thread:NAME. */
  const threadTotals = new Map();
  for (let i = 0; i < n; i++) {
    if (tparent[i] < 0 && KINDS[F.kind[tframe[i]]] === 'thread') threadTotals.set(tframe[i], 0);
  }

  /* ---- building views ---- */
  function viewBuilder(K, collapse) {
    const B = { K, parent: [-1], key: [-1], self: [0], other: [0], index: new Map() };
    B.child = (p, k) => {
      if (collapse && p > 0 && B.key[p] === k) return p; /* by module: one box per run */
      const id = p * 16777216 + k;
      let v = B.index.get(id);
      if (v === undefined) {
        v = B.parent.length;
        B.index.set(id, v);
        B.parent.push(p); B.key.push(k); B.self.push(0); B.other.push(0);
      }
      return v;
    };
    return B;
  }
  function finishView(B) {
    const { parent, key, self, other, K } = B;
    const m = parent.length;
    const total = Float64Array.from(self), btotal = Float64Array.from(other);
    const depth = new Int32Array(m);
    let maxDepth = 0;
    for (let v = 1; v < m; v++) {
      depth[v] = depth[parent[v]] + 1;
      if (depth[v] > maxDepth) maxDepth = depth[v];
    }
    for (let v = m - 1; v > 0; v--) { total[parent[v]] += total[v]; btotal[parent[v]] += btotal[v]; }
    /* Children in CSR form, sorted by name. */
    const count = new Int32Array(m + 1);
    for (let v = 1; v < m; v++) count[parent[v] + 1]++;
    for (let v = 0; v < m; v++) count[v + 1] += count[v];
    const kids = new Int32Array(Math.max(m - 1, 0));
    const fill = count.slice(0, m);
    for (let v = 1; v < m; v++) kids[fill[parent[v]]++] = v;
    for (let v = 0; v < m; v++) {
      const a = count[v], z = count[v + 1];
      if (z - a > 1) {
        const seg = Array.from(kids.subarray(a, z)).sort((x, y) => K.rank[key[x]] - K.rank[key[y]]);
        kids.set(seg, a);
      }
    }
    return { K, parent, key, self, other, total, btotal, depth, maxDepth, kidStart: count, kids, size: m, treeMap: B.treeMap };
  }
  /* What a tree node counts for: its width (w) and, in a diff, the baseline (b). */
  function weight(i, elided) {
    if (!diff) return [tself[i], 0];
    if (elided) return [tself[i] === 0 ? tbase[i] : 0, 0];
    return [tself[i], tbase[i]];
  }
  const keepThread = (i, thread) => thread === '' || String(rootOf[i]) === thread;

  function buildView(opt) {
    const K = keys(opt.by);
    const B = viewBuilder(K, opt.by === 'module');
    if (!opt.reversed) {
      const map = new Int32Array(n);
      for (let i = 0; i < n; i++) {
        const p = tparent[i];
        if ((p < 0 && !keepThread(i, opt.thread)) || (p >= 0 && map[p] < 0)) { map[i] = -1; continue; }
        const v = B.child(p < 0 ? 0 : map[p], K.keyOf[tframe[i]]);
        map[i] = v;
        const [w, b] = weight(i, opt.elided);
        B.self[v] += w; B.other[v] += b;
      }
      B.treeMap = map;
    } else {
      const path = [];
      for (let i = 0; i < n; i++) {
        const [w, b] = weight(i, opt.elided);
        if ((w === 0 && b === 0) || !keepThread(i, opt.thread)) continue;
        path.length = 0;
        for (let j = i; j >= 0; j = tparent[j]) path.push(K.keyOf[tframe[j]]);
        let v = 0;
        for (const k of path) v = B.child(v, k);
        B.self[v] += w; B.other[v] += b;
      }
    }
    return finishView(B);
  }

  /* The sandwich of key k: who called it (callers, nearest first) and what it called
   * (callees). Only the outermost occurrence on a stack counts, so recursion adds nothing. */
  function buildSandwich(opt, k) {
    const K = keys(opt.by);
    const inK = new Uint8Array(n), occ = new Uint8Array(n);
    const w = new Float64Array(n);
    for (let i = 0; i < n; i++) {
      const p = tparent[i];
      const hit = K.keyOf[tframe[i]] === k;
      occ[i] = hit && !(p >= 0 && inK[p]) ? 1 : 0;
      inK[i] = (p >= 0 && inK[p]) || hit ? 1 : 0;
      w[i] = keepThread(i, opt.thread) ? tself[i] : 0;
    }
    const sub = Float64Array.from(w);
    for (let i = n - 1; i >= 0; i--) if (tparent[i] >= 0) sub[tparent[i]] += sub[i];
    const collapse = opt.by === 'module';
    const callees = viewBuilder(K, collapse), callers = viewBuilder(K, collapse);
    const cv = new Int32Array(n).fill(-1);
    for (let i = 0; i < n; i++) {
      if (!inK[i]) continue;
      cv[i] = occ[i] ? callees.child(0, k) : callees.child(cv[tparent[i]], K.keyOf[tframe[i]]);
      callees.self[cv[i]] += w[i];
      if (occ[i] && sub[i] > 0) {
        let v = callers.child(0, k);
        for (let j = tparent[i]; j >= 0; j = tparent[j]) v = callers.child(v, K.keyOf[tframe[j]]);
        callers.self[v] += sub[i];
      }
    }
    return { callers: finishView(callers), callees: finishView(callees) };
  }

  /* ---- state, kept in the URL ---- */
  const prefersDark = () => window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
  const state = {
    zoom: [], search: '', regex: false, inverted: false, reversed: false, by: 'line', thread: '',
    theme: 'light', view: 'current', mode: 'flame', sw: '', hl: '', time: false, tr: null, tb: null
  };
  const SIDEBAR_W = 270, SIDEBAR_MIN = 160, SIDEBAR_MAX = 640;
  const sidebarWidth = (w) => Math.round(Math.min(SIDEBAR_MAX, Math.max(SIDEBAR_MIN, w)));
  const range = (s) => { const m = /^(\d+)-(\d+)$/.exec(s || ''); return m ? [Number(m[1]), Number(m[2])] : null; };
  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    state.zoom = (h.get('z') || '').split('.').filter((s) => s !== '').map(Number);
    state.search = h.get('s') || '';
    state.regex = h.get('re') === '1';
    state.inverted = h.get('inv') === '1';
    state.reversed = h.get('rev') === '1';
    state.by = ['func', 'module'].includes(h.get('by')) ? h.get('by') : 'line';
    state.modnames = h.get('mn') === '1';
    state.sidebar = h.get('sb') !== '0';
    state.sidebarW = sidebarWidth(Number(h.get('sbw')) || SIDEBAR_W);
    state.thread = h.get('t') || '';
    state.theme = h.get('theme') === 'dark' || (h.get('theme') !== 'light' && prefersDark()) ? 'dark' : 'light';
    state.view = isDiffPage && h.get('view') === 'elided' ? 'elided' : 'current';
    state.mode = h.get('mode') === 'sandwich' ? 'sandwich' : 'flame';
    state.sw = h.get('sw') || '';
    state.hl = h.get('hl') || '';
    state.time = h.get('time') === '1' && !!data.time;
    state.tr = data.time ? range(h.get('tr')) : null;
    state.tb = data.time && state.tr ? range(h.get('tb')) : null;
  }
  function writeHash() {
    const h = new URLSearchParams();
    if (state.zoom.length) h.set('z', state.zoom.join('.'));
    if (state.search) h.set('s', state.search);
    if (state.regex) h.set('re', '1');
    if (state.inverted) h.set('inv', '1');
    if (state.reversed) h.set('rev', '1');
    if (state.by !== 'line') h.set('by', state.by);
    if (state.modnames) h.set('mn', '1');
    if (!state.sidebar) h.set('sb', '0');
    if (state.sidebarW !== SIDEBAR_W) h.set('sbw', String(state.sidebarW));
    if (state.thread) h.set('t', state.thread);
    if (state.theme !== (prefersDark() ? 'dark' : 'light')) h.set('theme', state.theme);
    if (state.view === 'elided') h.set('view', 'elided');
    if (state.mode === 'sandwich') h.set('mode', 'sandwich');
    if (state.sw) h.set('sw', state.sw);
    if (state.hl) h.set('hl', state.hl);
    if (state.time) h.set('time', '1');
    if (state.tr) h.set('tr', state.tr.join('-'));
    if (state.tb) h.set('tb', state.tb.join('-'));
    const s = h.toString();
    try {
      history.replaceState(null, '', s ? '#' + s : location.pathname + location.search);
    } catch (e) {
      /* some file:// setups refuse; the view still works */
    }
  }

  let V = null; /* the current flamegraph view */
  let viewSig = '';
  let matchedKeys = null;
  let maxAbsDelta = 0;

  function ensureView() {
    const sig = [state.by, state.reversed, state.thread, state.view, state.tr, state.tb].join('|');
    if (sig === viewSig) return;
    viewSig = sig;
    applyTimeRange();
    V = buildView({ by: state.by, reversed: state.reversed, thread: state.thread, elided: state.view === 'elided' });
    maxAbsDelta = 0;
    if (diff) {
      for (let v = 1; v < V.size; v++) {
        const d = Math.abs(deltaShare(V, v));
        if (d > maxAbsDelta) maxAbsDelta = d;
      }
    }
  }

  function pathOf(W, v) {
    const p = [];
    for (; v > 0; v = W.parent[v]) p.push(W.key[v]);
    return p.reverse();
  }
  function nodeOfPath(W, path) {
    let v = 0;
    for (const k of path) {
      let found = -1;
      for (let c = W.kidStart[v]; c < W.kidStart[v + 1]; c++) {
        if (W.key[W.kids[c]] === k) { found = W.kids[c]; break; }
      }
      if (found < 0) break;
      v = found;
    }
    return v;
  }

  /* ---- search and highlight ---- */
  function computeMatches() {
    matchedKeys = null;
    $('matched').textContent = '';
    if (!state.search) return;
    let re;
    try {
      re = state.regex ? new RegExp(state.search) : null;
    } catch (e) {
      $('matched').textContent = 'bad regex';
      return;
    }
    const needle = state.search.toLowerCase();
    const K = V.K;
    matchedKeys = new Uint8Array(K.label.length);
    for (let k = 0; k < K.label.length; k++) {
      const t = shownOf(K, k);
      matchedKeys[k] = re ? re.test(t) : t.toLowerCase().includes(needle);
    }
    const under = new Uint8Array(V.size);
    let matched = 0;
    for (let v = 1; v < V.size; v++) {
      const hit = matchedKeys[V.key[v]];
      const p = V.parent[v];
      if (hit && !under[p]) matched += V.total[v];
      under[v] = under[p] || hit;
    }
    const all = V.total[0] || 1;
    $('matched').textContent = 'Matched: ' + pct(matched / all) + ' (' + fmt(matched) + ' samples)';
  }

  /* ---- colours ---- */
  function hash(s) {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) { h ^= s.charCodeAt(i); h = Math.imul(h, 16777619); }
    return (h >>> 0) / 4294967296;
  }
  const dark = () => state.theme === 'dark';
  function kindColour(kind, name) {
    const r = hash(name);
    const l = dark() ? 0.62 : 1;
    switch (kind) {
      case 'own': return hsl(12 + 28 * r, 85, 58 * l + (dark() ? 0 : 2));
      case 'stdlib': return hsl(48 + 14 * r, 78, 52 * l + (dark() ? 0 : 4));
      case 'site': return hsl(195 + 25 * r, 62, 60 * l);
      case 'native': return hsl(25 + 10 * r, 22, 58 * l);
      case 'synthetic': return hsl(275 + 20 * r, 35, 68 * l);
      case 'thread': return hsl(220, 8, 70 * l);
      default: return hsl(5 + 45 * r, 82, 58 * l);
    }
  }
  function hsl(h, s, l) { return 'hsl(' + h.toFixed(1) + ',' + s + '%,' + l.toFixed(1) + '%)'; }
  const MATCH = () => (dark() ? '#d05ce3' : '#e040fb');
  const HIGHLIGHT = '#00a6ff';
  function deltaShare(W, v) {
    return W.total[v] / (totalCur || 1) - W.btotal[v] / (totalBase || 1);
  }
  function diffColour(W, v) {
    if (state.view === 'elided') return 'rgb(110,150,235)';
    const d = deltaShare(W, v);
    const t = maxAbsDelta > 0 ? Math.min(1, Math.sqrt(Math.abs(d) / maxAbsDelta)) : 0;
    const c = Math.round(235 - 200 * t);
    if (Math.abs(d) < 1e-12) return 'rgb(235,235,235)';
    return d > 0 ? 'rgb(245,' + c + ',' + c + ')' : 'rgb(' + c + ',' + c + ',245)';
  }
  function colourOf(g, v) {
    const W = g.V;
    if (v === 0) return dark() ? '#55575f' : '#c9c9cf';
    const k = W.key[v];
    if (matchedKeys && matchedKeys[k]) return MATCH();
    if (state.hl && W.K.label[k] === state.hl) return HIGHLIGHT;
    if (diff && g === graphs.main) return diffColour(W, v);
    return kindColour(W.K.kind[k], W.K.name[k]);
  }

  /* ---- drawing ---- */
  function fmt(x) { return Math.round(x).toLocaleString('en-US'); }
  function pct(x) { return (100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 2) + '%'; }

  /* A graph on a canvas: its view, zoom, orientation, and the frames drawn (for hits). */
  function makeGraph(id, opts) {
    const canvas = $(id);
    return { id, canvas, ctx: canvas.getContext('2d'), V: null, zoom: 0, rows: [], pruned: 0, prunedCount: 0, sel: -1, opts };
  }
  const graphs = {
    main: makeGraph('canvas', { inverted: () => state.inverted }),
    callers: makeGraph('callers', { inverted: () => false }),
    callees: makeGraph('callees', { inverted: () => true }),
  };

  function drawGraph(g) {
    const W = g.V;
    const canvas = g.canvas, ctx = g.ctx;
    const width = Math.max(50, canvas.parentElement.clientWidth - 24);
    const rowsShown = Math.min(W.maxDepth + 1, Math.floor(32000 / ROW));
    const height = rowsShown * ROW;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.max(1, Math.floor(width * dpr));
    canvas.height = Math.max(1, Math.floor(height * dpr));
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = '12px ui-monospace, Menlo, Consolas, monospace';
    ctx.textBaseline = 'middle';
    const charW = 7.2;
    const inverted = g.opts.inverted();
    g.rows = [];
    g.rowsShown = rowsShown;
    g.pruned = 0;
    g.prunedCount = 0;
    const yOf = (d) => (inverted ? d * ROW : (rowsShown - 1 - d) * ROW);
    g.yOf = yOf;
    const rect = (v, x, w, d, faded) => {
      if (d >= rowsShown) return;
      const y = yOf(d);
      ctx.globalAlpha = faded ? 0.55 : 1;
      ctx.fillStyle = colourOf(g, v);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      if (diff && g === graphs.main && v > 0 && state.view !== 'elided' && W.btotal[v] === 0 && W.total[v] > 0) {
        ctx.strokeStyle = '#8b0000';
        ctx.lineWidth = 2;
        ctx.strokeRect(x + 1, y + 1, Math.max(w - 2.5, 0.5), ROW - 3);
      }
      if (v === g.sel) {
        ctx.strokeStyle = getComputedStyle(document.body).getPropertyValue('--focus') || '#1463ff';
        ctx.lineWidth = 2;
        ctx.strokeRect(x + 1, y + 1, Math.max(w - 2, 1), ROW - 3);
      }
      (g.rows[d] = g.rows[d] || []).push([x, w, v]);
      if (w > 28) {
        const label = v === 0 ? 'all' : shownOf(W.K, W.key[v]);
        const max = Math.floor((w - 6) / charW);
        const text = label.length > max ? label.slice(0, Math.max(max - 1, 0)) + '…' : label;
        ctx.fillStyle = '#111';
        ctx.fillText(text, x + 3, y + ROW / 2);
      }
    };
    /* Ancestors of the zoomed frame span the whole width. */
    const anc = [];
    for (let v = g.zoom; v > 0; v = W.parent[v]) anc.push(v);
    anc.push(0);
    anc.reverse();
    for (let i = 0; i < anc.length - 1; i++) rect(anc[i], 0, width, W.depth[anc[i]], true);
    const ztotal = W.total[g.zoom];
    const scale = ztotal > 0 ? width / ztotal : 0;
    const stack = [[g.zoom, 0]];
    while (stack.length) {
      const [v, x] = stack.pop();
      const w = W.total[v] * scale;
      if (W.total[v] === 0) continue; /* in a diff: a stack only the baseline has */
      if (w < MIN_PX) { g.pruned += W.total[v]; g.prunedCount++; continue; }
      rect(v, x, w, W.depth[v], false);
      let cx = x;
      const kidsOut = [];
      for (let c = W.kidStart[v]; c < W.kidStart[v + 1]; c++) {
        const k = W.kids[c];
        kidsOut.push([k, cx]);
        cx += W.total[k] * scale;
      }
      for (let i = kidsOut.length - 1; i >= 0; i--) stack.push(kidsOut[i]);
    }
    ctx.globalAlpha = 1;
  }

  function draw() {
    ensureView();
    const g = graphs.main;
    g.V = V;
    g.zoom = nodeOfPath(V, state.zoom);
    if (g.sel >= V.size) g.sel = -1;
    const sandwich = state.mode === 'sandwich';
    $('chart').hidden = sandwich;
    $('sandwich').hidden = !sandwich;
    $('mode-flame').setAttribute('aria-pressed', String(!sandwich));
    $('mode-sandwich').setAttribute('aria-pressed', String(sandwich));
    if (sandwich) {
      drawSandwich();
    } else {
      drawGraph(g);
      const all = V.total[0] || 1;
      $('status').textContent = (g.prunedCount
        ? g.prunedCount.toLocaleString('en-US') + ' frames narrower than ' + MIN_PX + ' px not drawn: ' +
          pct(g.pruned / all) + ' of samples (' + fmt(g.pruned) + '). Click a frame to zoom in.'
        : 'All frames drawn.') + rangeNote();
    }
    $('reset').disabled = g.zoom === 0;
    drawHeat();
  }

  function drawSandwich() {
    const K = keys(state.by);
    const k = K.byLabel.get(state.sw);
    if (k === undefined) {
      $('sw-title').textContent = 'Choose a function: select a frame and press s, or use a hot spot\u2019s button.';
      for (const g of [graphs.callers, graphs.callees]) { g.canvas.width = 1; g.canvas.height = 1; g.V = null; }
      return;
    }
    const sw = buildSandwich({ by: state.by, thread: state.thread }, k);
    graphs.callers.V = sw.callers;
    graphs.callees.V = sw.callees;
    graphs.callers.zoom = graphs.callees.zoom = 0;
    drawGraph(graphs.callers);
    drawGraph(graphs.callees);
    const t = sw.callees.total[0];
    $('sw-title').textContent = shownOf(K, k) + ': on the stack in ' + fmt(t) + ' samples (' + pct(t / (V.total[0] || 1)) + ')';
    $('status').textContent = 'Sandwich: callers above (nearest caller first), callees below.' + rangeNote();
  }

  function labelOf(g, v) {
    return g.V.K.label[g.V.key[v]];
  }
  /* What a key reads as: its label, or with module names its module's. */
  function shownOf(K, k) {
    return state.modnames ? K.modLabel[k] : K.label[k];
  }
  /* "file:line" or "module:line", '' for a frame without a file. */
  function whereOf(K, k) {
    const w = state.modnames && K.mod[k] ? K.mod[k] : K.file[k];
    return w ? w + (K.line[k] ? ':' + K.line[k] : '') : '';
  }

  /* ---- interaction ---- */
  function hitAt(g, clientX, clientY) {
    if (!g.V) return -1;
    const r = g.canvas.getBoundingClientRect();
    const x = clientX - r.left, y = clientY - r.top;
    const d = g.opts.inverted() ? Math.floor(y / ROW) : g.rowsShown - 1 - Math.floor(y / ROW);
    const row = g.rows[d];
    if (!row) return -1;
    let lo = 0, hi = row.length - 1;
    while (lo <= hi) {
      const mid = (lo + hi) >> 1;
      const [rx, rw, v] = row[mid];
      if (x < rx) hi = mid - 1;
      else if (x >= rx + rw) lo = mid + 1;
      else return v;
    }
    return -1;
  }
  /* Where v is drawn, in client coordinates, or null. */
  function boxOf(g, v) {
    const r = g.canvas.getBoundingClientRect();
    for (let d = 0; d < g.rows.length; d++) {
      for (const [x, w, u] of g.rows[d] || []) {
        if (u === v) return { x: r.left + x, y: r.top + g.yOf(d), w, h: ROW - 1 };
      }
    }
    return null;
  }

  const tip = $('tooltip');
  function addRow(table, cells) {
    const tr = document.createElement('tr');
    cells.forEach((c, i) => {
      const td = document.createElement('td');
      td.textContent = c;
      if (i > 0) td.className = 'num';
      tr.appendChild(td);
    });
    table.appendChild(tr);
  }
  function div(cls, text) {
    const e = document.createElement('div');
    e.className = cls;
    e.textContent = text;
    return e;
  }

  /* The bytecode instructions behind a flamegraph node (frames that carry one), with their
   * samples: read from the tree nodes that map to it. */
  function instructionsOf(g, v) {
    if (!F.op || g !== graphs.main || !g.V.treeMap) return [];
    const map = g.V.treeMap;
    const sub = subtotals();
    const by = new Map();
    for (let i = 0; i < n; i++) {
      if (map[i] !== v || F.off[tframe[i]] < 0) continue;
      const key = F.off[tframe[i]] + ' ' + F.op[tframe[i]];
      const e = by.get(key) || { off: F.off[tframe[i]], op: data.frames.ops[F.op[tframe[i]]] || '', span: '', total: 0, self: 0 };
      /* the instruction's source columns on its line (@OFFSET:COL-ENDCOL), where recorded */
      if (F.col && F.col[tframe[i]] >= 0) e.span = ':' + F.col[tframe[i]] + '-' + F.endcol[tframe[i]];
      e.total += sub[i];
      e.self += tself[i];
      by.set(key, e);
    }
    return Array.from(by.values()).sort((a, b) => b.total - a.total);
  }
  let subCache = null;
  function subtotals() {
    if (subCache && subCache.of === tself) return subCache.sub;
    const sub = Float64Array.from(tself);
    for (let i = n - 1; i >= 0; i--) if (tparent[i] >= 0) sub[tparent[i]] += sub[i];
    subCache = { of: tself, sub };
    return sub;
  }

  function showTip(g, v, cx, cy) {
    const W = g.V;
    tip.textContent = '';
    const K = W.K;
    const k = W.key[v];
    tip.appendChild(div('name', v === 0 ? 'all samples' : K.kind[k] === 'thread' ? K.label[k] : K.name[k]));
    if (v !== 0) {
      tip.appendChild(div('where', (whereOf(K, k) ? whereOf(K, k) + '  ·  ' : '') + KIND_TEXT[K.kind[k]]));
      if (K.src[k]) {
        const box = div('source', '');
        const [first, ...lines] = K.src[k];
        lines.forEach((t, i) => {
          const ln = first + i;
          const cur = ln === K.line[k];
          box.appendChild(div(cur ? 'current' : '', (cur ? '→ ' : '  ') + String(ln).padStart(5) + '  ' + readable(t)));
        });
        tip.appendChild(box);
      }
    }
    const table = document.createElement('table');
    const all = W.total[0] || 1;
    const z = W.total[g.zoom] || 1;
    const selfN = W.self[v];
    if (!diff || g !== graphs.main) {
      addRow(table, ['total', fmt(W.total[v]) + ' samples', pct(W.total[v] / all) + ' of all', pct(W.total[v] / z) + ' of zoom']);
      addRow(table, ['self', fmt(selfN) + ' samples', pct(selfN / all) + ' of all', pct(selfN / z) + ' of zoom']);
    } else if (state.view === 'elided') {
      addRow(table, ['baseline', fmt(W.total[v]) + ' samples', pct(W.total[v] / (totalBase || 1)) + ' of baseline']);
      addRow(table, ['current', '0 samples', 'stack vanished']);
    } else {
      const bt = totalBase || 1, ct = totalCur || 1;
      const before = W.btotal[v], after = W.total[v];
      const expected = before * ct / bt; /* the baseline scaled to the current total */
      const change = after - expected;
      const d = deltaShare(W, v);
      addRow(table, ['before', fmt(before) + ' samples', pct(before / bt) + ' of baseline']);
      addRow(table, ['after', fmt(after) + ' samples', pct(after / ct) + ' of current']);
      addRow(table, ['change', (change >= 0 ? '+' : '−') + fmt(Math.abs(change)) + ' samples (normalised)',
        (d >= 0 ? '+' : '−') + (100 * Math.abs(d)).toFixed(2) + ' points',
        before > 0 ? (after / ct >= before / bt ? '+' : '−') + (100 * Math.abs((after / ct) / (before / bt) - 1)).toFixed(1) + '% relative' : 'new']);
      if (before === 0 && after > 0) {
        const e = div('', 'NEW: not in the baseline');
        e.style.fontWeight = '600';
        tip.appendChild(e);
      }
    }
    tip.appendChild(table);
    const ops = v > 0 ? instructionsOf(g, v) : [];
    if (ops.length) {
      const box = div('ops', 'Bytecode instructions:');
      const t2 = document.createElement('table');
      for (const e of ops.slice(0, 8)) {
        const [opname, base] = e.op.split('|');
        addRow(t2, ['@' + e.off + e.span + ' ' + (opname || '?') + (base ? ' (specialized ' + base + ')' : ''),
          fmt(e.total) + ' total', fmt(e.self) + ' self', pct(e.total / (W.total[v] || 1))]);
      }
      box.appendChild(t2);
      if (ops.length > 8) box.appendChild(div('where', (ops.length - 8) + ' more'));
      tip.appendChild(box);
    }
    tip.hidden = false;
    const pad = 14;
    let left = cx + pad, top = cy + pad;
    const r = tip.getBoundingClientRect();
    if (left + r.width > innerWidth) left = Math.max(0, cx - r.width - pad);
    if (top + r.height > innerHeight) top = Math.max(0, cy - r.height - pad);
    tip.style.left = left + 'px';
    tip.style.top = top + 'px';
    if (v > 0) {
      $('status').textContent = shownOf(K, k) + ' — ' + fmt(W.total[v]) + ' samples (' + pct(W.total[v] / all) + '), self ' + fmt(selfN);
    }
  }

  for (const g of Object.values(graphs)) {
    g.canvas.addEventListener('mousemove', (ev) => {
      const v = hitAt(g, ev.clientX, ev.clientY);
      if (v < 0) { tip.hidden = true; return; }
      showTip(g, v, ev.clientX, ev.clientY);
    });
    g.canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
    g.canvas.addEventListener('click', (ev) => {
      const v = hitAt(g, ev.clientX, ev.clientY);
      if (v < 0) return;
      if (g === graphs.main) {
        state.zoom = pathOf(V, v);
        g.sel = v;
      } else if (v > 0) {
        /* in the sandwich, a frame becomes the next sandwich's function */
        state.sw = labelOf(g, v);
      }
      writeHash();
      draw();
    });
    g.canvas.addEventListener('keydown', (ev) => keyNav(g, ev));
  }

  /* Arrow keys move the selected frame: towards the leaves, the root, or a sibling. */
  function keyNav(g, ev) {
    const W = g.V;
    if (!W) return;
    if (g.sel < 0 || g.sel >= W.size) g.sel = g.zoom;
    const deeper = g.opts.inverted() ? 'ArrowDown' : 'ArrowUp';
    const shallower = g.opts.inverted() ? 'ArrowUp' : 'ArrowDown';
    let v = g.sel;
    const kidsOf = (u) => Array.from(W.kids.subarray(W.kidStart[u], W.kidStart[u + 1])).filter((c) => W.total[c] > 0);
    if (ev.key === deeper) {
      const kids = kidsOf(v);
      if (kids.length) v = kids.reduce((a, b) => (W.total[b] > W.total[a] ? b : a));
    } else if (ev.key === shallower) {
      if (v > 0) v = W.parent[v];
    } else if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
      if (v > 0) {
        const sib = kidsOf(W.parent[v]);
        const i = sib.indexOf(v) + (ev.key === 'ArrowLeft' ? -1 : 1);
        if (i >= 0 && i < sib.length) v = sib[i];
      }
    } else if (ev.key === 'Enter' && g === graphs.main) {
      state.zoom = pathOf(W, v);
      writeHash();
      draw();
      ev.preventDefault();
      return;
    } else {
      return;
    }
    ev.preventDefault();
    g.sel = v;
    if (g === graphs.main) drawGraph(g); else draw();
    const b = boxOf(g, v);
    if (b) showTip(g, v, b.x + Math.min(b.w, 40), b.y);
  }

  function setMode(mode, fn) {
    if (fn) fn();
    state.mode = mode;
    writeHash();
    draw();
  }
  function sandwichOfSelection() {
    const g = graphs.main;
    const v = g.sel > 0 ? g.sel : -1;
    setMode('sandwich', () => { if (v > 0) state.sw = labelOf(g, v); });
  }

  document.addEventListener('keydown', (ev) => {
    const t = ev.target;
    const typing = t && (t.tagName === 'INPUT' || t.tagName === 'SELECT' || t.tagName === 'TEXTAREA');
    if (ev.key === 'Escape') {
      if ($('help').open) return;
      if (typing) t.blur();
      state.zoom = []; writeHash(); draw();
      return;
    }
    if (typing || ev.ctrlKey || ev.metaKey || ev.altKey) return;
    if (ev.key === '/') { ev.preventDefault(); $('search').focus(); }
    else if (ev.key === 's') sandwichOfSelection();
    else if (ev.key === 'b') $('sidebar-toggle').click();
    else if (ev.key === 'f') setMode('flame');
    else if (ev.key === 't' && data.time) toggleTime();
    else if (ev.key === '?') openHelp();
  });
  $('mode-flame').addEventListener('click', () => setMode('flame'));
  $('mode-sandwich').addEventListener('click', sandwichOfSelection);
  $('reset').addEventListener('click', () => { state.zoom = []; writeHash(); draw(); });
  let searchTimer = 0;
  $('search').addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { state.search = $('search').value; writeHash(); computeMatches(); draw(); }, 120);
  });
  $('regex').addEventListener('change', () => { state.regex = $('regex').checked; writeHash(); computeMatches(); draw(); });
  const viewChange = (fn) => () => { fn(); state.zoom = []; writeHash(); ensureView(); computeMatches(); refreshSidebar(); draw(); };
  $('inverted').addEventListener('change', () => { state.inverted = $('inverted').checked; writeHash(); draw(); });
  $('reversed').addEventListener('change', viewChange(() => { state.reversed = $('reversed').checked; }));
  $('by').addEventListener('change', viewChange(() => { state.by = $('by').value; state.sw = ''; state.hl = ''; }));
  $('modnames').addEventListener('change', () => {
    state.modnames = $('modnames').checked;
    writeHash(); computeMatches(); refreshSidebar(); draw();
  });
  $('thread').addEventListener('change', viewChange(() => { state.thread = $('thread').value; }));
  $('view').addEventListener('change', viewChange(() => { state.view = $('view').value; }));
  $('theme').addEventListener('click', () => {
    state.theme = dark() ? 'light' : 'dark';
    applyTheme();
    writeHash();
    refreshSidebar();
    draw();
  });
  /* ---- the sidebar: collapsed by its button or "b", resized by dragging its edge ---- */
  function applySidebar() {
    $('sidebar').hidden = !state.sidebar;
    $('sidebar-toggle').setAttribute('aria-expanded', String(state.sidebar));
    $('main').style.setProperty('--sidebar-w', state.sidebarW + 'px');
    const edge = $('sidebar-resize');
    edge.setAttribute('aria-valuemin', String(SIDEBAR_MIN));
    edge.setAttribute('aria-valuemax', String(SIDEBAR_MAX));
    edge.setAttribute('aria-valuenow', String(state.sidebarW));
  }
  function setSidebar(fn) {
    fn();
    applySidebar();
    writeHash();
    draw(); /* the graphs take the width the sidebar leaves */
  }
  $('sidebar-toggle').addEventListener('click', () => setSidebar(() => { state.sidebar = !state.sidebar; }));
  const edge = $('sidebar-resize');
  edge.addEventListener('pointerdown', (ev) => {
    ev.preventDefault();
    edge.setPointerCapture(ev.pointerId);
    edge.classList.add('dragging');
    const x0 = ev.clientX, w0 = state.sidebarW;
    const move = (e) => setSidebar(() => { state.sidebarW = sidebarWidth(w0 + e.clientX - x0); });
    const up = () => {
      edge.classList.remove('dragging');
      edge.removeEventListener('pointermove', move);
      edge.removeEventListener('pointerup', up);
      edge.removeEventListener('pointercancel', up);
    };
    edge.addEventListener('pointermove', move);
    edge.addEventListener('pointerup', up);
    edge.addEventListener('pointercancel', up);
  });
  edge.addEventListener('keydown', (ev) => {
    const step = ev.shiftKey ? 64 : 16;
    const to = { ArrowLeft: state.sidebarW - step, ArrowRight: state.sidebarW + step, Home: SIDEBAR_MIN, End: SIDEBAR_MAX }[ev.key];
    if (to === undefined) return;
    ev.preventDefault();
    ev.stopPropagation();
    setSidebar(() => { state.sidebarW = sidebarWidth(to); });
  });

  function openHelp() {
    const d = $('help');
    if (!d.open) d.showModal();
  }
  $('help-open').addEventListener('click', openHelp);
  $('save-svg').addEventListener('click', () => {
    const blob = new Blob([svgOf(graphs.main)], { type: 'image/svg+xml' });
    const a = document.createElement('a');
    a.href = URL.createObjectURL(blob);
    a.download = 'flamegraph.svg';
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  });
  function applyTheme() {
    document.body.className = state.theme;
    $('theme').textContent = dark() ? 'light theme' : 'dark theme';
  }
  window.addEventListener('resize', () => draw());
  window.addEventListener('hashchange', () => { readHash(); syncControls(); ensureView(); computeMatches(); refreshSidebar(); draw(); });
  if (window.matchMedia) {
    window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      if (!new URLSearchParams(location.hash.slice(1)).get('theme')) { readHash(); applyTheme(); draw(); }
    });
  }

  function syncControls() {
    $('search').value = state.search;
    $('regex').checked = state.regex;
    $('inverted').checked = state.inverted;
    $('reversed').checked = state.reversed;
    $('by').value = state.by;
    $('modnames').checked = state.modnames;
    applySidebar();
    $('thread').value = state.thread;
    $('view').value = state.view;
    $('time-toggle').setAttribute('aria-pressed', String(state.time));
    $('timepanel').hidden = !state.time;
    applyTheme();
  }

  /* ---- a saved SVG of what is drawn ---- */
  function xml(s) {
    return s.replace(/[<>&"']/g, (c) => ({ '<': '&lt;', '>': '&gt;', '&': '&amp;', '"': '&quot;', "'": '&#39;' }[c]))
      .replace(/[\u0000-\u0008\u000b\u000c\u000e-\u001f]/g, '');
  }
  function svgOf(g) {
    const width = parseFloat(g.canvas.style.width) || 1200;
    const height = g.rowsShown * ROW;
    const out = ['<svg xmlns="http://www.w3.org/2000/svg" width="' + width + '" height="' + (height + 24) +
      '" font-family="monospace" font-size="12"><text x="4" y="16">' + xml(document.title) + '</text><g transform="translate(0,24)">'];
    for (let d = 0; d < g.rows.length; d++) {
      for (const [x, w, v] of g.rows[d] || []) {
        const label = v === 0 ? 'all' : shownOf(g.V.K, g.V.key[v]);
        out.push('<g><title>' + xml(label + ' (' + fmt(g.V.total[v]) + ' samples)') + '</title><rect x="' + x.toFixed(1) +
          '" y="' + g.yOf(d) + '" width="' + Math.max(w - 0.5, 0.5).toFixed(1) + '" height="' + (ROW - 1) +
          '" fill="' + colourOf(g, v) + '"/>' + (w > 28 ? '<text x="' + (x + 3).toFixed(1) + '" y="' + (g.yOf(d) + 13) +
          '">' + xml(label.slice(0, Math.floor((w - 6) / 7.2))) + '</text>' : '') + '</g>');
      }
    }
    out.push('</g></svg>');
    return out.join('\n');
  }

  /* ---- the time heatmap (FlameScope): columns are seconds, rows parts of a second ---- */
  const T = data.time || null;
  let heat = null; /* { rows, rowMs, sec0, cols, counts, max }, set below */
  function heatLayout() {
    if (!T) return null;
    const w = T.w;
    const rowMs = Math.max(w, Math.ceil(1000 / 50 / w) * w);
    const rows = Math.ceil(1000 / rowMs);
    const sec0 = Math.floor(T.t0 / 1000);
    let last = 0;
    for (let i = 0; i < T.b.length; i++) if (T.b[i] > last) last = T.b[i];
    const cols = Math.floor((T.t0 + last * w) / 1000) - sec0 + 1;
    return { rows, rowMs, sec0, cols };
  }
  /* The cell index (column-major, so cell order is time order) of time entry i. */
  function cellOf(i) {
    const t = T.t0 + T.b[i] * T.w;
    const col = Math.floor(t / 1000) - heat.sec0;
    return col * heat.rows + Math.floor((t - Math.floor(t / 1000) * 1000) / heat.rowMs);
  }
  function cellTime(c) {
    return (heat.sec0 + Math.floor(c / heat.rows)) * 1000 + (c % heat.rows) * heat.rowMs;
  }
  /* Tree weights of a range of cells [a, b]. */
  function rangeWeights(r) {
    const w = new Float64Array(n);
    let total = 0;
    for (let i = 0; i < T.b.length; i++) {
      const c = cellOf(i);
      if (c >= r[0] && c <= r[1]) { w[T.node[i]] += T.n[i]; total += T.n[i]; }
    }
    return [w, total];
  }
  function applyTimeRange() {
    if (T && !heat) heat = heatLayout();
    if (!T || !state.tr) {
      tself = N.self; tbase = isDiffPage ? N.base : null; diff = isDiffPage;
      totalCur = data.total; totalBase = isDiffPage ? data.baseTotal : 0;
      return;
    }
    const [w, total] = rangeWeights(state.tr);
    if (state.tb) {
      const [bw, btotal] = rangeWeights(state.tb);
      tself = w; tbase = bw; totalCur = total; totalBase = btotal; diff = true;
    } else {
      tself = w; totalCur = total; diff = false; tbase = null;
    }
  }
  function when(ms) {
    const d = new Date(ms);
    return d.toISOString().replace('T', ' ').replace(/\.(\d+)Z$/, '.$1Z');
  }
  function rangeText(r) {
    return when(cellTime(r[0])) + ' – ' + when(cellTime(r[1]) + heat.rowMs).slice(11);
  }
  function rangeNote() {
    if (!state.tr || !heat) return '';
    return state.tb ? '  Diff: ' + rangeText(state.tr) + ' (current) against ' + rangeText(state.tb) + ' (baseline).'
      : '  Time range ' + rangeText(state.tr) + ': ' + fmt(totalCur) + ' samples.';
  }
  let dragFrom = -1, dragTo = -1, dragSecond = false, cursor = 0;
  const CELL_W = () => Math.max(4, Math.min(22, Math.floor((($('heatwrap').clientWidth || 800) - 40) / heat.cols)));
  const CELL_H = () => Math.max(3, Math.min(10, Math.floor(220 / heat.rows)));
  function drawHeat() {
    if (!T || !state.time) return;
    if (!heat) heat = heatLayout();
    const cw = CELL_W(), ch = CELL_H();
    const counts = new Float64Array(heat.cols * heat.rows);
    let timed = 0;
    for (let i = 0; i < T.b.length; i++) {
      if (!keepThread(T.node[i], state.thread)) continue;
      counts[cellOf(i)] += T.n[i];
      timed += T.n[i];
    }
    let max = 0;
    for (const c of counts) if (c > max) max = c;
    heat.max = max;
    heat.counts = counts;
    const canvas = $('heat');
    const left = 34, top = 4;
    const width = left + heat.cols * cw + 4, height = top + heat.rows * ch + 16;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = Math.floor(width * dpr);
    canvas.height = Math.floor(height * dpr);
    canvas.style.width = width + 'px';
    canvas.style.height = height + 'px';
    const ctx = canvas.getContext('2d');
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = dark() ? '#17181c' : '#ffffff';
    ctx.fillRect(0, 0, width, height);
    const inRange = (c, r) => r && c >= r[0] && c <= r[1];
    const sel = dragFrom >= 0 ? [Math.min(dragFrom, dragTo), Math.max(dragFrom, dragTo)] : null;
    for (let c = 0; c < counts.length; c++) {
      const col = Math.floor(c / heat.rows), row = c % heat.rows;
      const x = left + col * cw, y = top + row * ch;
      const v = counts[c] / (max || 1);
      /* FlameScope's scale: white for nothing, deeper red for more samples */
      ctx.fillStyle = counts[c] === 0 ? (dark() ? '#202127' : '#f4f4f6')
        : 'rgb(' + Math.round(255 - 30 * v) + ',' + Math.round(235 - 205 * v) + ',' + Math.round(225 - 205 * v) + ')';
      ctx.fillRect(x, y, cw - 1, ch - 1);
      const a = dragSecond ? null : sel, b = dragSecond ? sel : null;
      if (inRange(c, a || state.tr) || inRange(c, b || state.tb)) {
        ctx.fillStyle = inRange(c, b || state.tb) ? 'rgba(40,90,255,0.45)' : 'rgba(176,32,159,0.45)';
        ctx.fillRect(x, y, cw - 1, ch - 1);
      }
      if (c === cursor && document.activeElement === canvas) {
        ctx.strokeStyle = '#1463ff';
        ctx.strokeRect(x + 0.5, y + 0.5, cw - 2, ch - 2);
      }
    }
    ctx.fillStyle = dark() ? '#a0a0a8' : '#5f5f66';
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillText('0 ms', 2, top + 8);
    ctx.fillText(Math.round(1000 - heat.rowMs) + '', 2, top + heat.rows * ch - 1);
    const step = Math.max(1, Math.ceil(40 / cw));
    for (let col = 0; col < heat.cols; col += step) ctx.fillText(col + 's', left + col * cw, top + heat.rows * ch + 12);
    const untimed = totalAll() - timedAll();
    $('timeinfo').textContent = fmt(timed) + ' samples over ' + heat.cols + ' s from ' + when(heat.sec0 * 1000) +
      ' · rows of ' + heat.rowMs + ' ms · deepest cell ' + fmt(max) + ' samples' +
      (untimed > 0 ? ' · ' + fmt(untimed) + ' samples without time are left out of ranges' : '') + '.';
  }
  const totalAll = () => data.total;
  let timedCache = -1;
  function timedAll() {
    if (timedCache < 0) { timedCache = 0; for (const c of T.n) timedCache += c; }
    return timedCache;
  }
  function heatCell(ev) {
    const r = $('heat').getBoundingClientRect();
    const cw = CELL_W(), ch = CELL_H();
    const col = Math.floor((ev.clientX - r.left - 34) / cw), row = Math.floor((ev.clientY - r.top - 4) / ch);
    if (col < 0 || row < 0 || col >= heat.cols || row >= heat.rows) return -1;
    return col * heat.rows + row;
  }
  function commitRange(a, b, second) {
    const r = [Math.min(a, b), Math.max(a, b)];
    if (second && state.tr) state.tb = state.tr;
    state.tr = r;
    if (!second) state.tb = null;
    state.zoom = [];
    writeHash();
    ensureView();
    computeMatches();
    refreshSidebar();
    draw();
  }
  function toggleTime() {
    state.time = !state.time;
    syncControls();
    writeHash();
    draw();
  }
  if (T) {
    $('time-toggle').hidden = false;
    $('time-toggle').addEventListener('click', toggleTime);
    const hc = $('heat');
    hc.addEventListener('mousedown', (ev) => {
      const c = heatCell(ev);
      if (c < 0) return;
      dragFrom = dragTo = c;
      dragSecond = ev.shiftKey && !!state.tr;
      ev.preventDefault();
      drawHeat();
    });
    hc.addEventListener('mousemove', (ev) => {
      const c = heatCell(ev);
      if (dragFrom >= 0 && c >= 0 && c !== dragTo) { dragTo = c; drawHeat(); }
      if (c >= 0) hc.title = when(cellTime(c)) + ': ' + fmt(heat.counts[c]) + ' samples';
    });
    window.addEventListener('mouseup', () => {
      if (dragFrom < 0) return;
      const a = dragFrom, b = dragTo, second = dragSecond;
      dragFrom = dragTo = -1;
      commitRange(a, b, second);
    });
    hc.addEventListener('focus', () => drawHeat());
    hc.addEventListener('blur', () => drawHeat());
    hc.addEventListener('keydown', (ev) => {
      const last = heat.cols * heat.rows - 1;
      const moves = { ArrowUp: -1, ArrowDown: 1, ArrowLeft: -heat.rows, ArrowRight: heat.rows };
      if (moves[ev.key] !== undefined) {
        const next = Math.max(0, Math.min(last, cursor + moves[ev.key]));
        if (ev.shiftKey) { if (dragFrom < 0) { dragFrom = cursor; dragSecond = ev.altKey && !!state.tr; } dragTo = next; }
        cursor = next;
        ev.preventDefault();
        drawHeat();
      } else if (ev.key === 'Enter') {
        const a = dragFrom >= 0 ? dragFrom : cursor, b = dragFrom >= 0 ? dragTo : cursor, second = dragSecond;
        dragFrom = dragTo = -1;
        commitRange(a, b, second);
        ev.preventDefault();
      } else if (ev.key === 'Escape') {
        dragFrom = dragTo = -1;
        clearRange();
        ev.stopPropagation();
      }
    });
    $('time-clear').addEventListener('click', clearRange);
  }
  function clearRange() {
    state.tr = state.tb = null;
    state.zoom = [];
    writeHash();
    ensureView();
    computeMatches();
    refreshSidebar();
    draw();
  }

  /* ---- the sidebar ---- */
  function fact(dl, term, value, warn) {
    const dt = document.createElement('dt');
    dt.textContent = term;
    const dd = document.createElement('dd');
    dd.textContent = value;
    if (warn) dd.className = 'warn';
    dl.appendChild(dt);
    dl.appendChild(dd);
  }
  function seconds(s) {
    return s >= 3600 ? (s / 3600).toFixed(1) + ' h' : s >= 60 ? (s / 60).toFixed(1) + ' min' : s.toFixed(s < 10 ? 2 : 1) + ' s';
  }
  function refreshFacts() {
    const dl = $('facts');
    dl.textContent = '';
    const program = meta.program || meta.app || meta.cmd;
    if (program) fact(dl, 'program', program);
    if (meta.python) fact(dl, 'interpreter', 'CPython ' + meta.python);
    if (meta.mode) fact(dl, 'mode', meta.mode + (meta.timer ? ' (' + meta.timer + ')' : ''));
    if (meta.rate) fact(dl, 'rate asked', meta.rate + ' Hz');
    if (meta.achieved_rate) fact(dl, 'rate achieved', meta.achieved_rate + ' Hz', Number(meta.achieved_rate) < 0.8 * Number(meta.rate || 0));
    if (T) {
      let last = 0;
      for (const b of T.b) if (b > last) last = b;
      fact(dl, 'duration', seconds(((last + 1) * T.w) / 1000) + ' (wall, from the time buckets)');
    } else if (meta.end && meta.start) {
      fact(dl, 'duration', seconds(Number(meta.end) - Number(meta.start)) + ' (wall)');
    }
    if (meta.cpu_s) fact(dl, 'CPU time', seconds(Number(meta.cpu_s)));
    if (diff) fact(dl, 'samples', fmt(totalBase) + ' → ' + fmt(totalCur));
    else fact(dl, 'samples', fmt(totalCur) + (state.tr ? ' in the range (of ' + fmt(data.total) + ')' : ''));
    fact(dl, 'threads', String(threadTotals.size || 1));
    fact(dl, 'functions', fmt(keys('func').label.filter((_, k) => !['thread', 'other'].includes(keys('func').kind[k])).length));
    for (const [key, text] of [['dropped', 'dropped'], ['truncated', 'truncated stacks'], ['unreadable', 'unreadable frames']]) {
      if (meta[key] !== undefined) fact(dl, text, fmt(Number(meta[key])), Number(meta[key]) > 0);
    }
    if (meta.pid) fact(dl, 'pid', meta.pid);
    if (meta.start) fact(dl, 'started', when(Number(meta.start) * 1000).replace(/\.\d+Z$/, 'Z'));
  }

  /* Hot spots: the keys with the most self samples (thread filter and time range apply). */
  function refreshHotspots() {
    const K = keys(state.by);
    const self = new Float64Array(K.label.length);
    let all = 0;
    for (let i = 0; i < n; i++) {
      if (tself[i] === 0 || !keepThread(i, state.thread)) continue;
      self[K.keyOf[tframe[i]]] += tself[i];
      all += tself[i];
    }
    const top = Array.from(self.keys()).filter((k) => self[k] > 0 && K.kind[k] !== 'thread')
      .sort((a, b) => self[b] - self[a]).slice(0, 10);
    const ol = $('hotspots');
    ol.textContent = '';
    for (const k of top) {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.setAttribute('aria-pressed', String(state.hl === K.label[k]));
      b.title = 'highlight it in the graph (again: clear); s: its sandwich';
      b.appendChild(document.createTextNode(K.name[k] + ' '));
      const strong = document.createElement('strong');
      strong.textContent = pct(self[k] / (all || 1));
      b.appendChild(strong);
      const where = document.createElement('span');
      where.className = 'where';
      where.textContent = (whereOf(K, k) ? whereOf(K, k) + ' · ' : '') + fmt(self[k]) + ' samples';
      b.appendChild(where);
      b.addEventListener('click', () => {
        state.hl = state.hl === K.label[k] ? '' : K.label[k];
        state.sw = K.label[k];
        writeHash();
        refreshHotspots();
        draw();
      });
      b.addEventListener('keydown', (ev) => {
        if (ev.key === 's') { ev.stopPropagation(); setMode('sandwich', () => { state.sw = K.label[k]; }); }
      });
      li.appendChild(b);
      ol.appendChild(li);
    }
    if (!top.length) ol.textContent = 'no samples';
  }

  function bar(share) {
    const b = document.createElement('span');
    b.className = 'bar';
    const i = document.createElement('i');
    i.style.width = (100 * share).toFixed(1) + '%';
    b.appendChild(i);
    return b;
  }

  function refreshThreads() {
    const sub = subtotals();
    const totals = new Map();
    for (const f of threadTotals.keys()) totals.set(f, 0);
    for (let i = 0; i < n; i++) if (tparent[i] < 0 && totals.has(tframe[i])) totals.set(tframe[i], totals.get(tframe[i]) + sub[i]);
    const ul = $('threads');
    ul.textContent = '';
    const sorted = Array.from(totals.entries()).sort((a, b) => b[1] - a[1]);
    for (const [f, t] of sorted) {
      const li = document.createElement('li');
      const b = document.createElement('button');
      b.type = 'button';
      b.textContent = readable(F.name[f]) + ' ' + pct(t / (totalCur || 1));
      b.title = 'show only this thread (again: all threads)';
      b.appendChild(bar(t / (totalCur || 1)));
      b.addEventListener('click', () => {
        $('thread').value = state.thread === String(f) ? '' : String(f);
        $('thread').dispatchEvent(new Event('change'));
      });
      li.appendChild(b);
      ul.appendChild(li);
    }
    $('sec-threads').hidden = sorted.length === 0;
    /* Thread states: the share of samples whose leaf is a state (<idle>, <waiting for the GIL>,
     * <GC>). */
    const states = new Map();
    let leafTotal = 0;
    for (let i = 0; i < n; i++) {
      if (tself[i] === 0 || !keepThread(i, state.thread)) continue;
      leafTotal += tself[i];
      const kd = KINDS[F.kind[tframe[i]]];
      const name = kd === 'synthetic' ? readable(F.name[tframe[i]]) : 'running Python or native code';
      states.set(name, (states.get(name) || 0) + tself[i]);
    }
    const su = $('states');
    su.textContent = '';
    const list = Array.from(states.entries()).sort((a, b) => b[1] - a[1]);
    for (const [name, c] of list) {
      const li = document.createElement('li');
      li.textContent = name + ' ' + pct(c / (leafTotal || 1));
      li.appendChild(bar(c / (leafTotal || 1)));
      su.appendChild(li);
    }
    /* What the agent saw of the sampled Python threads besides their stacks: shares of those
     * threads' samples with the GIL held, released, waiting for it, handling and raising an
     * exception. From the header's thread_states, the thread filter applies (one thread's
     * counts, else all of them); a profile without it has the whole process's counts only
     * (gil_held, ...), which no filter changes. The time range never applies (the counts have
     * no time). */
    const sel = state.thread === '' ? null : F.name[Number(state.thread)];
    const shown = THREAD_STATES.filter((t) => sel === null || sel === t.name);
    const sum = {};
    for (const k of STATE_KEYS) {
      sum[k] = THREAD_STATES.length ? shown.reduce((a, t) => a + t[k], 0)
        : Number(meta[{ held: 'gil_held', released: 'gil_released', wait: 'gil_wait', handling: 'exception', raising: 'raising' }[k]]);
    }
    const known = {
      held: meta.gil_held !== undefined, released: meta.gil_held !== undefined,
      wait: meta.gil_wait !== undefined, handling: meta.exception !== undefined, raising: meta.raising !== undefined,
    };
    const TEXT = { held: 'GIL held', released: 'GIL released', wait: 'waiting for the GIL', handling: 'handling an exception', raising: 'raising an exception' };
    let extra = 0;
    const py = sum.held + sum.released;
    if (known.held && py > 0) {
      const whose = !THREAD_STATES.length ? 'whole profile, every thread'
        : sel === null ? 'every thread' : readable(sel);
      for (const k of STATE_KEYS) {
        if (!known[k]) continue;
        const li = document.createElement('li');
        li.className = 'header-state';
        li.dataset.state = k;
        li.title = 'of the ' + fmt(py) + ' samples of Python threads (' + whose + ')';
        li.textContent = TEXT[k] + ' ' + pct(sum[k] / (py || 1));
        li.appendChild(bar(sum[k] / (py || 1)));
        su.appendChild(li);
        extra++;
      }
    }
    /* Each thread's own shares, the busiest first (the filter keeps its thread's row). */
    const table = $('thread-states');
    const body = table.querySelector('tbody');
    body.textContent = '';
    const rows = shown.slice().sort((a, b) => (b.held + b.released) - (a.held + a.released));
    for (const t of rows) {
      const tr = document.createElement('tr');
      const n = t.held + t.released;
      const name = document.createElement('td');
      name.textContent = readable(t.name);
      tr.appendChild(name);
      for (const k of STATE_KEYS) {
        const td = document.createElement('td');
        td.textContent = known[k] ? (100 * t[k] / (n || 1)).toFixed(1) : '—';
        td.title = TEXT[k] + ': ' + fmt(t[k]) + ' of ' + fmt(n) + ' samples';
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    table.hidden = rows.length === 0;
    $('sec-states').hidden = list.length < 2 && extra === 0;
  }

  function refreshLegend() {
    const legend = $('legend');
    legend.textContent = '';
    const row = (colour, text) => {
      const d = document.createElement('div');
      const s = document.createElement('span');
      s.className = 'swatch';
      s.style.background = colour;
      d.appendChild(s);
      d.appendChild(document.createTextNode(text));
      legend.appendChild(d);
    };
    if (diff) {
      $('viewlabel').hidden = !isDiffPage;
      row('rgb(245,60,60)', 'grew');
      row('rgb(60,60,245)', 'shrank');
      row('rgb(235,235,235)', 'unchanged');
      legend.appendChild(div('note', 'widths: current profile; colour: change in share of all samples, each profile normalised by its own total; dark outline: new frame.' + (isDiffPage ? ' "elided" shows stacks only the baseline has.' : '')));
      return;
    }
    /* by where the code lives, with each kind's share of the self samples */
    const self = new Float64Array(KINDS.length);
    let all = 0;
    for (let i = 0; i < n; i++) {
      if (tself[i] === 0 || !keepThread(i, state.thread)) continue;
      self[F.kind[tframe[i]]] += tself[i];
      all += tself[i];
    }
    for (const kd of ['own', 'stdlib', 'site', 'native', 'synthetic']) {
      row(kindColour(kd, 'a'), KIND_TEXT[kd] + ' ' + pct(self[KINDS.indexOf(kd)] / (all || 1)));
    }
    row(MATCH(), 'search match');
    row(HIGHLIGHT, 'highlighted hot spot');
    legend.appendChild(div('note', 'shares: of the samples spent in each kind of code (self).'));
  }

  function refreshSidebar() {
    refreshFacts();
    refreshHotspots();
    refreshThreads();
    refreshLegend();
  }

  function setup() {
    const sub = subtotals();
    for (let i = 0; i < n; i++) {
      if (tparent[i] < 0 && threadTotals.has(tframe[i])) threadTotals.set(tframe[i], threadTotals.get(tframe[i]) + sub[i]);
    }
    const sel = $('thread');
    const threads = Array.from(threadTotals.entries()).sort((a, b) => b[1] - a[1]);
    for (const [f, t] of threads) {
      const o = document.createElement('option');
      o.value = String(f);
      o.textContent = readable(F.name[f]) + ' (' + pct(t / (data.total || 1)) + ')';
      sel.appendChild(o);
    }
    if (!threads.length) sel.parentElement.hidden = true;
    const bits = [];
    if (isDiffPage) {
      bits.push('baseline ' + fmt(data.baseTotal) + ' samples → current ' + fmt(data.total) + ' samples');
    } else {
      bits.push(fmt(data.total) + ' samples');
    }
    if (meta.rate) bits.push(meta.rate + ' Hz');
    if (meta.mode) bits.push(meta.mode + ' time');
    if (meta.python) bits.push('Python ' + meta.python);
    $('summary').textContent = bits.join(' · ');
    if (isDiffPage) $('viewlabel').hidden = false;
  }

  /* A small API for tests and for people poking at the page from the console. */
  function findAll(label, which) {
    const g = graphs[which || 'main'];
    const found = [];
    if (!g.V) return found;
    const r = g.canvas.getBoundingClientRect();
    for (let d = 0; d < g.rows.length; d++) {
      for (const [x, w, v] of g.rows[d] || []) {
        if (v > 0 && labelOf(g, v) === label) {
          found.push({ x: r.left + x, y: r.top + g.yOf(d), w, h: ROW - 1, colour: colourOf(g, v), total: g.V.total[v], self: g.V.self[v] });
        }
      }
    }
    return found;
  }
  window.pyagentFlame = {
    find: (label, which) => findAll(label, which)[0] || null,
    findAll,
    state: () => JSON.parse(JSON.stringify(state)),
    pruned: () => ({ total: graphs.main.pruned, count: graphs.main.prunedCount }),
    svg: () => svgOf(graphs.main),
    total: () => (V ? V.total[0] : 0),
    heatCell: (c) => (heat ? { x: $('heat').getBoundingClientRect().left + 34 + Math.floor(c / heat.rows) * CELL_W() + 1,
      y: $('heat').getBoundingClientRect().top + 4 + (c % heat.rows) * CELL_H() + 1, count: heat.counts ? heat.counts[c] : 0 } : null),
    heatLayout: () => (heat ? { rows: heat.rows, cols: heat.cols, rowMs: heat.rowMs } : null),
  };

  readHash();
  setup();
  syncControls();
  ensureView();
  computeMatches();
  refreshSidebar();
  draw();
  /* milliseconds from navigation start to the first complete drawing (read by the bench) */
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = '1';
})();
