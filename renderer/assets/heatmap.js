/* heatmap.js - the little behaviour of the heatmap pages: hiding cold lines, the colour scale
 * (total, self, or specialization on file pages), the theme, the order of the index's cards,
 * and permalinks
 * (#line-N) whose highlight plays on load, on navigation and again when the same link is
 * clicked twice (the hash does not change then, so no hashchange event fires). */
'use strict';
(function () {
  function flash(id) {
    const row = document.getElementById(id);
    if (!row) return;
    row.classList.remove('flash');
    void row.offsetWidth; /* restart the animation */
    row.classList.add('flash');
    row.scrollIntoView({ block: 'center' });
  }
  function fromHash() {
    if (location.hash.startsWith('#line-')) flash(location.hash.slice(1));
  }
  document.addEventListener('click', (ev) => {
    const a = ev.target.closest ? ev.target.closest('a') : null;
    if (!a) return;
    const href = a.getAttribute('href') || '';
    if (href.startsWith('#line-') && href === location.hash) {
      ev.preventDefault();
      flash(href.slice(1));
    }
  });
  window.addEventListener('hashchange', fromHash);
  const box = document.getElementById('hide-cold');
  if (box) {
    box.addEventListener('change', () => {
      document.body.classList.toggle('hide-cold', box.checked);
      fromHash();
    });
  }
  /* A line's bytecode rows: its button opens them; 'b' opens or closes all. */
  function showBytecode(btn, open) {
    btn.setAttribute('aria-expanded', String(open));
    for (const r of document.querySelectorAll('tr.op[data-of="' + btn.dataset.line + '"]')) r.hidden = !open;
  }
  for (const btn of document.querySelectorAll('button.bc')) {
    btn.addEventListener('click', () => showBytecode(btn, btn.getAttribute('aria-expanded') !== 'true'));
  }
  document.addEventListener('keydown', (ev) => {
    if (ev.key !== 'b' || ev.ctrlKey || ev.metaKey || ev.altKey || /INPUT|SELECT|TEXTAREA/.test(ev.target.tagName)) return;
    const all = document.querySelectorAll('button.bc');
    const open = Array.from(all).some((x) => x.getAttribute('aria-expanded') !== 'true');
    for (const btn of all) showBytecode(btn, open);
  });
  /* The view: the colour scale (total or self samples, or specialization), the order of the
   * index's cards and the theme (the system's unless switched), kept in the query string so that the hash stays the line's permalink, and
   * carried along every link between the pages of the heatmap. */
  const prefersDark = () => window.matchMedia && window.matchMedia('(prefers-color-scheme: dark)').matches;
  const q = new URLSearchParams(location.search);
  const view = {
    by: q.get('by') === 'self' ? 'self' : 'total',
    spec: q.get('spec') === '1',
    sort: q.get('sort') === 'self' || q.get('sort') === 'name' ? q.get('sort') : 'total',
    theme: q.get('theme') === 'dark' || (q.get('theme') !== 'light' && prefersDark()) ? 'dark' : 'light',
  };
  const links = Array.from(document.querySelectorAll('a[href]'))
    .filter((a) => /^(index|file-[0-9]+)\.html(#|$)/.test(a.getAttribute('href')))
    .map((a) => [a, a.getAttribute('href')]);
  /* Cards in their group's list, by samples (most first) or by file name; ties keep the
   * renderer's order (by total). */
  const cardLists = Array.from(document.querySelectorAll('ol.cards'))
    .map((ol) => [ol, Array.from(ol.children)]);
  function sortCards() {
    const key = (li) => view.sort === 'name' ? li.querySelector('h3').textContent : Number(li.dataset[view.sort]);
    for (const [ol, cards] of cardLists) {
      const sorted = cards.slice().sort((a, b) => {
        const x = key(a), y = key(b);
        if (view.sort === 'name') return x < y ? -1 : x > y ? 1 : 0;
        return y - x;
      });
      for (const li of sorted) ol.appendChild(li);
    }
  }
  function applyView() {
    document.body.classList.toggle('by-self', view.by === 'self');
    document.body.classList.toggle('by-spec', view.spec);
    document.body.classList.toggle('dark', view.theme === 'dark');
    const by = document.getElementById('colour-by');
    if (by) by.value = view.by;
    const spec = document.getElementById('by-spec');
    if (spec) spec.checked = view.spec;
    const sort = document.getElementById('sort-by');
    if (sort) sort.value = view.sort;
    sortCards();
    const theme = document.getElementById('theme');
    if (theme) theme.textContent = view.theme === 'dark' ? 'light theme' : 'dark theme';
    const p = new URLSearchParams();
    if (view.by !== 'total') p.set('by', view.by);
    if (view.spec) p.set('spec', '1');
    if (view.sort !== 'total') p.set('sort', view.sort);
    if (view.theme !== (prefersDark() ? 'dark' : 'light')) p.set('theme', view.theme);
    const search = p.toString() ? '?' + p.toString() : '';
    for (const [a, href] of links) {
      const i = href.indexOf('#');
      a.setAttribute('href', i < 0 ? href + search : href.slice(0, i) + search + href.slice(i));
    }
    try {
      history.replaceState(null, '', location.pathname + search + location.hash);
    } catch (e) {
      /* some file:// setups refuse; the view still works */
    }
  }
  const byBox = document.getElementById('colour-by');
  if (byBox) byBox.addEventListener('change', () => { view.by = byBox.value; applyView(); });
  const specBox = document.getElementById('by-spec');
  if (specBox) specBox.addEventListener('change', () => { view.spec = specBox.checked; applyView(); });
  const sortBox = document.getElementById('sort-by');
  if (sortBox) sortBox.addEventListener('change', () => { view.sort = sortBox.value; applyView(); });
  const themeButton = document.getElementById('theme');
  if (themeButton) {
    themeButton.addEventListener('click', () => { view.theme = view.theme === 'dark' ? 'light' : 'dark'; applyView(); });
  }
  if (window.matchMedia) {
    window.matchMedia('(prefers-color-scheme: dark)').addEventListener('change', () => {
      if (!new URLSearchParams(location.search).get('theme')) { view.theme = prefersDark() ? 'dark' : 'light'; applyView(); }
    });
  }
  applyView();
  fromHash();
  document.body.dataset.ready = '1';
})();
