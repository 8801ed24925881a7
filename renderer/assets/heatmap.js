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
  fromHash();
  document.body.dataset.ready = '1';
})();
