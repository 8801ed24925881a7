/* flame.js - the interactive flamegraph and differential flamegraph, drawn on a canvas.
 *
 * The page carries the stacks as a prefix tree (see pa_profile_encode_report_json). Every
 * view (merge by line or by function, reversed, one thread, the diff's elided view) is
 * rebuilt from it in one pass into flat arrays, and drawing walks only the frames wide enough
 * to see, so the cost of a redraw follows what is on screen, not the size of the profile.
 * Names are untrusted: they only ever reach the page through textContent and fillText. */
'use strict';
(function () {
  const data = JSON.parse(document.getElementById('profile-data').textContent);
  const isDiff = typeof data.baseTotal === 'number';
  const F = data.frames;
  const KINDS = ['own', 'stdlib', 'site', 'native', 'synthetic', 'thread', 'other'];
  const KIND_TEXT = {
    own: 'your code', stdlib: 'standard library', site: 'site-packages', native: 'native',
    synthetic: 'synthetic', thread: 'thread', other: 'frame'
  };
  const ROW = 18;
  const MIN_PX = 0.5; /* narrower frames are pruned, their share reported */
  const $ = (id) => document.getElementById(id);

  /* ---- the prefix tree from the page ---- */
  const N = data.nodes;
  const n = N.up.length;
  const tparent = new Int32Array(n);
  for (let i = 0; i < n; i++) tparent[i] = i - N.up[i];
  const tframe = N.frame;
  const tself = N.self;
  const tbase = isDiff ? N.base : null;

  /* Control characters stay visible but inert. */
  function readable(s) {
    return s.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g,
      (c) => '\\x' + c.charCodeAt(0).toString(16).padStart(2, '0'));
  }

  /* Keys: what a view node stands for. By line a key is a frame; by function, frames that
   * differ only in their line share a key. */
  function makeKeys(byFunc) {
    const nf = F.name.length;
    const keyOf = new Int32Array(nf);
    const label = [], kind = [], file = [], line = [], name = [];
    const seen = new Map();
    for (let f = 0; f < nf; f++) {
      const fileName = data.files[F.file[f]];
      const ln = byFunc ? 0 : F.line[f];
      const sig = F.kind[f] + '\u0000' + F.name[f] + '\u0000' + fileName + '\u0000' + ln;
      let k = seen.get(sig);
      if (k === undefined) {
        k = label.length;
        seen.set(sig, k);
        const kd = KINDS[F.kind[f]] || 'other';
        const nm = readable(F.name[f]);
        const fl = readable(fileName);
        let text = nm;
        if (kd === 'thread') text = 'thread:' + nm;
        else if (kd === 'native') text = nm + ' [' + fl + ']';
        else if (fl) text = nm + ' (' + fl + (ln ? ':' + ln : '') + ')';
        label.push(text); kind.push(kd); file.push(fl); line.push(ln); name.push(nm);
      }
      keyOf[f] = k;
    }
    /* Children are ordered by name, as in flamegraph.pl, so that two profiles line up. */
    const order = label.map((_, i) => i).sort((a, b) => (label[a] < label[b] ? -1 : label[a] > label[b] ? 1 : 0));
    const rank = new Int32Array(label.length);
    order.forEach((k, r) => { rank[k] = r; });
    return { keyOf, label, kind, file, line, name, rank };
  }
  const keySets = {};
  function keys(by) {
    if (!keySets[by]) keySets[by] = makeKeys(by === 'func');
    return keySets[by];
  }

  /* Threads: root frames named thread:NAME. */
  const threadTotals = new Map();
  for (let i = 0; i < n; i++) {
    if (tparent[i] < 0 && KINDS[F.kind[tframe[i]]] === 'thread') threadTotals.set(tframe[i], 0);
  }

  /* ---- building a view ---- */
  function buildView(opt) {
    const K = keys(opt.by);
    const parent = [-1], key = [-1], self = [0], other = [0];
    const index = new Map();
    const child = (p, k) => {
      const id = p * 16777216 + k;
      let v = index.get(id);
      if (v === undefined) {
        v = parent.length;
        index.set(id, v);
        parent.push(p); key.push(k); self.push(0); other.push(0);
      }
      return v;
    };
    /* What each stack counts for: its width (w) and, in a diff, the baseline (b). */
    const weight = (i) => {
      if (!isDiff) return [tself[i], 0];
      if (opt.elided) return [tself[i] === 0 ? tbase[i] : 0, 0];
      return [tself[i], tbase[i]];
    };
    const rootOf = new Int32Array(n);
    for (let i = 0; i < n; i++) rootOf[i] = tparent[i] < 0 ? tframe[i] : rootOf[tparent[i]];
    const keep = (i) => opt.thread === '' || String(rootOf[i]) === opt.thread;
    if (!opt.reversed) {
      const map = new Int32Array(n);
      for (let i = 0; i < n; i++) {
        const p = tparent[i];
        if ((p < 0 && !keep(i)) || (p >= 0 && map[p] < 0)) { map[i] = -1; continue; }
        const v = child(p < 0 ? 0 : map[p], K.keyOf[tframe[i]]);
        map[i] = v;
        const [w, b] = weight(i);
        self[v] += w; other[v] += b;
      }
    } else {
      const path = [];
      for (let i = 0; i < n; i++) {
        const [w, b] = weight(i);
        if ((w === 0 && b === 0) || !keep(i)) continue;
        path.length = 0;
        for (let j = i; j >= 0; j = tparent[j]) path.push(K.keyOf[tframe[j]]);
        let v = 0;
        for (const k of path) v = child(v, k);
        self[v] += w; other[v] += b;
      }
    }
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
    return { K, parent, key, self, other, total, btotal, depth, maxDepth, kidStart: count, kids, size: m };
  }

  /* ---- state, kept in the URL ---- */
  const state = { zoom: [], search: '', regex: false, inverted: false, reversed: false, by: 'line', thread: '', theme: 'light', view: 'current' };
  function readHash() {
    const h = new URLSearchParams(location.hash.slice(1));
    state.zoom = (h.get('z') || '').split('.').filter((s) => s !== '').map(Number);
    state.search = h.get('s') || '';
    state.regex = h.get('re') === '1';
    state.inverted = h.get('inv') === '1';
    state.reversed = h.get('rev') === '1';
    state.by = h.get('by') === 'func' ? 'func' : 'line';
    state.thread = h.get('t') || '';
    state.theme = h.get('theme') === 'dark' ? 'dark' : 'light';
    state.view = isDiff && h.get('view') === 'elided' ? 'elided' : 'current';
  }
  function writeHash() {
    const h = new URLSearchParams();
    if (state.zoom.length) h.set('z', state.zoom.join('.'));
    if (state.search) h.set('s', state.search);
    if (state.regex) h.set('re', '1');
    if (state.inverted) h.set('inv', '1');
    if (state.reversed) h.set('rev', '1');
    if (state.by === 'func') h.set('by', 'func');
    if (state.thread) h.set('t', state.thread);
    if (state.theme === 'dark') h.set('theme', 'dark');
    if (state.view === 'elided') h.set('view', 'elided');
    const s = h.toString();
    try {
      history.replaceState(null, '', s ? '#' + s : location.pathname + location.search);
    } catch (e) {
      /* some file:// setups refuse; the view still works */
    }
  }

  let V = null; /* the current view */
  let viewSig = '';
  let zoomNode = 0;
  let matchedFlag = null;
  let rows = []; /* per depth: drawn frames as [x, w, node] */
  let prunedTotal = 0, prunedCount = 0;
  let maxAbsDelta = 0;

  function ensureView() {
    const sig = [state.by, state.reversed, state.thread, state.view].join('|');
    if (sig === viewSig) return;
    viewSig = sig;
    V = buildView({ by: state.by, reversed: state.reversed, thread: state.thread, elided: state.view === 'elided' });
    maxAbsDelta = 0;
    if (isDiff) {
      for (let v = 1; v < V.size; v++) {
        const d = Math.abs(deltaShare(v));
        if (d > maxAbsDelta) maxAbsDelta = d;
      }
    }
  }

  function pathOf(v) {
    const p = [];
    for (; v > 0; v = V.parent[v]) p.push(V.key[v]);
    return p.reverse();
  }
  function nodeOfPath(path) {
    let v = 0;
    for (const k of path) {
      let found = -1;
      for (let c = V.kidStart[v]; c < V.kidStart[v + 1]; c++) {
        if (V.key[V.kids[c]] === k) { found = V.kids[c]; break; }
      }
      if (found < 0) break;
      v = found;
    }
    return v;
  }

  /* ---- search ---- */
  function computeMatches() {
    matchedFlag = null;
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
    const keyHit = new Uint8Array(K.label.length);
    for (let k = 0; k < K.label.length; k++) {
      keyHit[k] = re ? re.test(K.label[k]) : K.label[k].toLowerCase().includes(needle);
    }
    matchedFlag = new Uint8Array(V.size);
    const under = new Uint8Array(V.size);
    let matched = 0;
    for (let v = 1; v < V.size; v++) {
      const hit = keyHit[V.key[v]];
      matchedFlag[v] = hit;
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
  function deltaShare(v) {
    const cur = V.total[v] / (data.total || 1);
    const base = V.btotal[v] / (data.baseTotal || 1);
    return cur - base;
  }
  function diffColour(v) {
    if (state.view === 'elided') return 'rgb(110,150,235)';
    const d = deltaShare(v);
    const t = maxAbsDelta > 0 ? Math.min(1, Math.sqrt(Math.abs(d) / maxAbsDelta)) : 0;
    const c = Math.round(235 - 200 * t);
    if (Math.abs(d) < 1e-12) return 'rgb(235,235,235)';
    return d > 0 ? 'rgb(245,' + c + ',' + c + ')' : 'rgb(' + c + ',' + c + ',245)';
  }
  function colourOf(v) {
    if (v === 0) return dark() ? '#55575f' : '#c9c9cf';
    if (matchedFlag && matchedFlag[v]) return dark() ? '#d05ce3' : '#e040fb';
    if (isDiff) return diffColour(v);
    return kindColour(V.K.kind[V.key[v]], V.K.name[V.key[v]]);
  }

  /* ---- drawing ---- */
  const canvas = $('canvas');
  const ctx = canvas.getContext('2d');
  function fmt(x) { return Math.round(x).toLocaleString('en-US'); }
  function pct(x) { return (100 * x).toFixed(x < 0.001 && x > 0 ? 3 : 2) + '%'; }

  function draw() {
    ensureView();
    zoomNode = nodeOfPath(state.zoom);
    const width = canvas.parentElement.clientWidth - 24;
    const rowsShown = Math.min(V.maxDepth + 1, Math.floor(32000 / ROW));
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
    rows = [];
    prunedTotal = 0;
    prunedCount = 0;
    const yOf = (d) => (state.inverted ? d * ROW : (rowsShown - 1 - d) * ROW);
    const rect = (v, x, w, d, faded) => {
      if (d >= rowsShown) return;
      const y = yOf(d);
      ctx.globalAlpha = faded ? 0.55 : 1;
      ctx.fillStyle = colourOf(v);
      ctx.fillRect(x, y, Math.max(w - 0.5, 0.5), ROW - 1);
      if (isDiff && v > 0 && state.view !== 'elided' && V.btotal[v] === 0 && V.total[v] > 0) {
        ctx.strokeStyle = '#8b0000';
        ctx.lineWidth = 2;
        ctx.strokeRect(x + 1, y + 1, Math.max(w - 2.5, 0.5), ROW - 3);
      }
      (rows[d] = rows[d] || []).push([x, w, v]);
      if (w > 28) {
        const label = v === 0 ? 'all' : labelOf(v);
        const max = Math.floor((w - 6) / charW);
        const text = label.length > max ? label.slice(0, Math.max(max - 1, 0)) + '…' : label;
        ctx.fillStyle = isDiff || !dark() ? '#111' : '#0d0d0d';
        ctx.fillText(text, x + 3, y + ROW / 2);
      }
    };
    /* Ancestors of the zoomed frame span the whole width. */
    const anc = [];
    for (let v = zoomNode; v > 0; v = V.parent[v]) anc.push(v);
    anc.push(0);
    anc.reverse();
    for (let i = 0; i < anc.length - 1; i++) rect(anc[i], 0, width, V.depth[anc[i]], true);
    const ztotal = V.total[zoomNode];
    const scale = ztotal > 0 ? width / ztotal : 0;
    const stack = [[zoomNode, 0]];
    while (stack.length) {
      const [v, x] = stack.pop();
      const w = V.total[v] * scale;
      if (V.total[v] === 0) continue; /* in a diff: a stack only the baseline has */
      if (w < MIN_PX) { prunedTotal += V.total[v]; prunedCount++; continue; }
      rect(v, x, w, V.depth[v], false);
      let cx = x;
      const kidsOut = [];
      for (let c = V.kidStart[v]; c < V.kidStart[v + 1]; c++) {
        const k = V.kids[c];
        kidsOut.push([k, cx]);
        cx += V.total[k] * scale;
      }
      for (let i = kidsOut.length - 1; i >= 0; i--) stack.push(kidsOut[i]);
    }
    ctx.globalAlpha = 1;
    const all = V.total[0] || 1;
    $('status').textContent = prunedCount
      ? prunedCount.toLocaleString('en-US') + ' frames narrower than ' + MIN_PX + ' px not drawn: ' +
        pct(prunedTotal / all) + ' of samples (' + fmt(prunedTotal) + '). Click a frame to zoom in.'
      : 'All frames drawn.';
    $('reset').disabled = zoomNode === 0;
  }

  function labelOf(v) {
    return V.K.label[V.key[v]];
  }

  /* ---- interaction ---- */
  function hit(ev) {
    const r = canvas.getBoundingClientRect();
    const x = ev.clientX - r.left, y = ev.clientY - r.top;
    const rowsShown = Math.round(r.height / ROW);
    const d = state.inverted ? Math.floor(y / ROW) : rowsShown - 1 - Math.floor(y / ROW);
    const row = rows[d];
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
  function showTip(v, ev) {
    tip.textContent = '';
    const head = document.createElement('div');
    head.className = 'name';
    const K = V.K;
    const k = V.key[v];
    head.textContent = v === 0 ? 'all samples' : K.kind[k] === 'thread' ? 'thread:' + K.name[k] : K.name[k];
    tip.appendChild(head);
    if (v !== 0 && K.file[k]) {
      const where = document.createElement('div');
      where.className = 'where';
      where.textContent = K.file[k] + (K.line[k] ? ':' + K.line[k] : '') + '  ·  ' + KIND_TEXT[K.kind[k]];
      tip.appendChild(where);
    } else if (v !== 0) {
      const where = document.createElement('div');
      where.className = 'where';
      where.textContent = KIND_TEXT[K.kind[k]];
      tip.appendChild(where);
    }
    const table = document.createElement('table');
    const all = V.total[0] || 1;
    const z = V.total[zoomNode] || 1;
    const childSum = V.total[v] - V.self[v];
    const selfN = V.total[v] - childSum;
    if (!isDiff) {
      addRow(table, ['total', fmt(V.total[v]) + ' samples', pct(V.total[v] / all) + ' of all', pct(V.total[v] / z) + ' of zoom']);
      addRow(table, ['self', fmt(selfN) + ' samples', pct(selfN / all) + ' of all', pct(selfN / z) + ' of zoom']);
    } else if (state.view === 'elided') {
      addRow(table, ['baseline', fmt(V.total[v]) + ' samples', pct(V.total[v] / (data.baseTotal || 1)) + ' of baseline']);
      addRow(table, ['current', '0 samples', 'stack vanished']);
    } else {
      const bt = data.baseTotal || 1, ct = data.total || 1;
      const before = V.btotal[v], after = V.total[v];
      const expected = before * ct / bt; /* the baseline scaled to the current total */
      const change = after - expected;
      const d = deltaShare(v);
      addRow(table, ['before', fmt(before) + ' samples', pct(before / bt) + ' of baseline']);
      addRow(table, ['after', fmt(after) + ' samples', pct(after / ct) + ' of current']);
      addRow(table, ['change', (change >= 0 ? '+' : '−') + fmt(Math.abs(change)) + ' samples (normalised)',
        (d >= 0 ? '+' : '−') + (100 * Math.abs(d)).toFixed(2) + ' points',
        before > 0 ? (after / ct >= before / bt ? '+' : '−') + (100 * Math.abs((after / ct) / (before / bt) - 1)).toFixed(1) + '% relative' : 'new']);
      if (before === 0 && after > 0) {
        const n = document.createElement('div');
        n.textContent = 'NEW: not in the baseline';
        n.style.fontWeight = '600';
        tip.appendChild(n);
      }
    }
    tip.appendChild(table);
    tip.hidden = false;
    const pad = 14;
    let left = ev.clientX + pad, top = ev.clientY + pad;
    const r = tip.getBoundingClientRect();
    if (left + r.width > innerWidth) left = Math.max(0, ev.clientX - r.width - pad);
    if (top + r.height > innerHeight) top = Math.max(0, ev.clientY - r.height - pad);
    tip.style.left = left + 'px';
    tip.style.top = top + 'px';
  }

  canvas.addEventListener('mousemove', (ev) => {
    const v = hit(ev);
    if (v < 0) { tip.hidden = true; return; }
    showTip(v, ev);
  });
  canvas.addEventListener('mouseleave', () => { tip.hidden = true; });
  canvas.addEventListener('click', (ev) => {
    const v = hit(ev);
    if (v < 0) return;
    state.zoom = pathOf(v);
    writeHash();
    draw();
  });
  document.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') { state.zoom = []; writeHash(); draw(); }
  });
  $('reset').addEventListener('click', () => { state.zoom = []; writeHash(); draw(); });
  let searchTimer = 0;
  $('search').addEventListener('input', () => {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => { state.search = $('search').value; writeHash(); computeMatches(); draw(); }, 120);
  });
  $('regex').addEventListener('change', () => { state.regex = $('regex').checked; writeHash(); computeMatches(); draw(); });
  const viewChange = (fn) => () => { fn(); state.zoom = []; writeHash(); ensureView(); computeMatches(); draw(); };
  $('inverted').addEventListener('change', () => { state.inverted = $('inverted').checked; writeHash(); draw(); });
  $('reversed').addEventListener('change', viewChange(() => { state.reversed = $('reversed').checked; }));
  $('by').addEventListener('change', viewChange(() => { state.by = $('by').value; }));
  $('thread').addEventListener('change', viewChange(() => { state.thread = $('thread').value; }));
  $('view').addEventListener('change', viewChange(() => { state.view = $('view').value; }));
  $('theme').addEventListener('click', () => {
    state.theme = dark() ? 'light' : 'dark';
    applyTheme();
    writeHash();
    draw();
  });
  function applyTheme() {
    document.body.className = state.theme;
    $('theme').textContent = dark() ? 'light theme' : 'dark theme';
  }
  window.addEventListener('resize', () => draw());
  window.addEventListener('hashchange', () => { readHash(); syncControls(); ensureView(); computeMatches(); draw(); });

  function syncControls() {
    $('search').value = state.search;
    $('regex').checked = state.regex;
    $('inverted').checked = state.inverted;
    $('reversed').checked = state.reversed;
    $('by').value = state.by;
    $('thread').value = state.thread;
    $('view').value = state.view;
    applyTheme();
  }

  /* ---- page furniture ---- */
  function setup() {
    /* thread totals from the tree: a root's subtree */
    const sub = new Float64Array(n);
    for (let i = 0; i < n; i++) sub[i] = tself[i];
    for (let i = n - 1; i >= 0; i--) if (tparent[i] >= 0) sub[tparent[i]] += sub[i];
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
    const meta = data.meta || {};
    const bits = [];
    if (isDiff) {
      bits.push('baseline ' + fmt(data.baseTotal) + ' samples → current ' + fmt(data.total) + ' samples');
    } else {
      bits.push(fmt(data.total) + ' samples');
    }
    if (meta.rate) bits.push(meta.rate + ' Hz');
    if (meta.mode) bits.push(meta.mode + ' time');
    if (meta.python) bits.push('Python ' + meta.python);
    $('summary').textContent = bits.join(' · ');
    const legend = $('legend');
    const swatch = (colour, text) => {
      const s = document.createElement('span');
      s.className = 'swatch';
      s.style.background = colour;
      legend.appendChild(s);
      legend.appendChild(document.createTextNode(text));
    };
    if (isDiff) {
      $('viewlabel').hidden = false;
      swatch('rgb(245,60,60)', 'grew');
      swatch('rgb(60,60,245)', 'shrank');
      swatch('rgb(235,235,235)', 'unchanged');
      legend.appendChild(document.createTextNode('  · widths: current profile; colour: change in share of all samples, each profile normalised by its own total; dark outline: new frame. "elided" shows stacks only the baseline has.'));
    } else {
      swatch(kindColour('own', 'a'), 'your code');
      swatch(kindColour('stdlib', 'a'), 'standard library');
      swatch(kindColour('site', 'a'), 'site-packages');
      swatch(kindColour('native', 'a'), 'native');
      swatch(kindColour('synthetic', 'a'), 'synthetic');
      swatch(dark() ? '#d05ce3' : '#e040fb', 'search match');
    }
  }

  /* A small API for tests and for people poking at the page from the console. */
  function findAll(label) {
    const found = [];
    const r = canvas.getBoundingClientRect();
    const rowsShown = Math.round(r.height / ROW);
    for (let d = 0; d < rows.length; d++) {
      for (const [x, w, v] of rows[d] || []) {
        if (v > 0 && labelOf(v) === label) {
          const y = state.inverted ? d * ROW : (rowsShown - 1 - d) * ROW;
          found.push({ x: r.left + x, y: r.top + y, w, h: ROW - 1, colour: colourOf(v), total: V.total[v] });
        }
      }
    }
    return found;
  }
  window.pyagentFlame = {
    find: (label) => findAll(label)[0] || null,
    findAll,
    state: () => JSON.parse(JSON.stringify(state)),
    pruned: () => ({ total: prunedTotal, count: prunedCount }),
  };

  readHash();
  setup();
  syncControls();
  ensureView();
  computeMatches();
  draw();
  /* milliseconds from navigation start to the first complete drawing (read by the bench) */
  document.body.dataset.readyMs = String(Math.round(performance.now()));
  document.body.dataset.ready = '1';
})();
