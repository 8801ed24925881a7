/* index.js - an application's timeline on the collector's page: samples per time step as bars;
 * drag (or shift+arrows) to select a range, shift+drag a second range to compare with it; the
 * links then open that range's flamegraph, time heatmap, source heatmap, the diff of the two
 * ranges, or this page zoomed to the range. Data and selectors come from the page's JSON;
 * nothing is fetched. */
'use strict';
(function () {
  const data = JSON.parse(document.getElementById('timeline-data').textContent);
  const canvas = document.getElementById('timeline');
  const ctx = canvas.getContext('2d');
  const info = document.getElementById('tl-info');
  const series = document.getElementById('tl-series');
  const n = data.counts.length;
  let a = null, b = null; /* selected [from, to] bucket ranges: a the current, b the baseline */
  let drag = null, cursor = 0;
  const t = (i) => data.from + i * data.step;
  const iso = (s) => new Date(s * 1000).toISOString().replace('T', ' ').replace(/\.000Z$/, 'Z');
  const span = (r) => [t(r[0]), t(r[1] + 1)];
  const enc = encodeURIComponent;

  function draw() {
    const w = canvas.clientWidth, h = canvas.clientHeight;
    const dpr = window.devicePixelRatio || 1;
    canvas.width = w * dpr;
    canvas.height = h * dpr;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.clearRect(0, 0, w, h);
    const dark = window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
    const max = Math.max(1, ...data.counts);
    const bw = w / n;
    const inR = (i, r) => r && i >= r[0] && i <= r[1];
    const sel = drag ? [Math.min(drag[0], drag[1]), Math.max(drag[0], drag[1])] : null;
    for (let i = 0; i < n; i++) {
      const cur = drag && !drag[2] ? sel : a, base = drag && drag[2] ? sel : b;
      if (inR(i, cur) || inR(i, base)) {
        ctx.fillStyle = inR(i, base) ? 'rgba(40,90,255,0.18)' : 'rgba(176,32,159,0.18)';
        ctx.fillRect(i * bw, 0, bw, h);
      }
      const bh = data.counts[i] ? Math.max(1, (data.counts[i] / max) * (h - 14)) : 0;
      ctx.fillStyle = inR(i, base) ? '#2850ff' : '#e8743b';
      ctx.fillRect(i * bw + 0.5, h - 12 - bh, Math.max(bw - 1, 1), bh);
      if (i === cursor && document.activeElement === canvas) {
        ctx.strokeStyle = '#1463ff';
        ctx.strokeRect(i * bw + 0.5, 0.5, Math.max(bw - 1, 1), h - 13);
      }
    }
    ctx.fillStyle = dark ? '#a0a0a8' : '#666';
    ctx.font = '10px system-ui, sans-serif';
    ctx.fillText(iso(data.from).slice(0, 16), 2, h - 2);
    const end = iso(t(n)).slice(0, 16);
    ctx.fillText(end, w - ctx.measureText(end).width - 2, h - 2);
  }

  function link(id, href) {
    const el = document.getElementById(id);
    if (href) { el.href = href; el.removeAttribute('aria-disabled'); } else { el.removeAttribute('href'); el.setAttribute('aria-disabled', 'true'); }
  }
  function update() {
    const q = series.value;
    if (!a) {
      info.textContent = 'Drag over the timeline to select a range (keyboard: arrows, shift+arrows, Enter).';
      for (const id of ['tl-flame', 'tl-time', 'tl-heat', 'tl-diff', 'tl-zoom']) link(id, null);
      return;
    }
    const [f, u] = span(a);
    const sum = (r) => data.counts.slice(r[0], r[1] + 1).reduce((x, y) => x + y, 0);
    info.textContent = 'Selected ' + iso(f) + ' – ' + iso(u) + ' (' + sum(a).toLocaleString('en-US') + ' samples)' +
      (b ? '; compared with ' + iso(span(b)[0]) + ' – ' + iso(span(b)[1]) + ' (' + sum(b).toLocaleString('en-US') + ')' : '; shift+drag a second range to compare');
    const range = '&from=' + f + '&until=' + u;
    link('tl-flame', '/render?query=' + enc(q) + range + '&format=html');
    link('tl-time', '/render?query=' + enc(q) + range + '&format=html#time=1');
    link('tl-heat', '/heatmap?query=' + enc(q) + range);
    link('tl-zoom', '/?app=' + enc(data.app) + range);
    if (b) {
      const [bf, bu] = span(b);
      link('tl-diff', '/diff?query=' + enc(q) + '&leftFrom=' + bf + '&leftUntil=' + bu + '&rightFrom=' + f + '&rightUntil=' + u);
    } else {
      link('tl-diff', null);
    }
  }
  function commit(r, second) {
    if (second && a) b = a;
    else b = null;
    a = r;
    update();
    draw();
  }
  const at = (ev) => {
    const r = canvas.getBoundingClientRect();
    return Math.max(0, Math.min(n - 1, Math.floor(((ev.clientX - r.left) / r.width) * n)));
  };
  canvas.addEventListener('mousedown', (ev) => { const i = at(ev); drag = [i, i, ev.shiftKey && !!a]; ev.preventDefault(); draw(); });
  canvas.addEventListener('mousemove', (ev) => {
    const i = at(ev);
    canvas.title = iso(t(i)) + ': ' + data.counts[i].toLocaleString('en-US') + ' samples';
    if (drag && drag[1] !== i) { drag[1] = i; draw(); }
  });
  window.addEventListener('mouseup', () => {
    if (!drag) return;
    const r = [Math.min(drag[0], drag[1]), Math.max(drag[0], drag[1])], second = drag[2];
    drag = null;
    commit(r, second);
  });
  canvas.addEventListener('keydown', (ev) => {
    if (ev.key === 'ArrowLeft' || ev.key === 'ArrowRight') {
      const next = Math.max(0, Math.min(n - 1, cursor + (ev.key === 'ArrowLeft' ? -1 : 1)));
      if (ev.shiftKey) { if (!drag) drag = [cursor, cursor, ev.altKey && !!a]; drag[1] = next; }
      cursor = next;
      ev.preventDefault();
      draw();
    } else if (ev.key === 'Enter') {
      const r = drag ? [Math.min(drag[0], drag[1]), Math.max(drag[0], drag[1])] : [cursor, cursor];
      const second = drag ? drag[2] : false;
      drag = null;
      commit(r, second);
    } else if (ev.key === 'Escape') {
      drag = null; a = b = null; update(); draw();
    }
  });
  canvas.addEventListener('focus', draw);
  canvas.addEventListener('blur', draw);
  series.addEventListener('change', update);
  window.addEventListener('resize', draw);
  window.pyagentTimeline = {
    select: (from, to, second) => commit([from, to], second),
    bar: (i) => { const r = canvas.getBoundingClientRect(); return { x: r.left + (i + 0.5) * r.width / n, y: r.top + r.height / 2 }; },
  };
  update();
  draw();
  document.body.dataset.ready = '1';
})();
