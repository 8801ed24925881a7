/* heatmap.js - the little behaviour of the heatmap pages: hiding cold lines, and permalinks
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
  fromHash();
  document.body.dataset.ready = '1';
})();
