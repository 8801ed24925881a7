/* svg.js - behaviour of the SVG flamegraph: details on hover, click a frame to zoom into it,
 * "Reset Zoom" to come back. Works on the frames' own geometry, so the SVG needs no data. */
'use strict';
(function () {
  var svg = document.documentElement;
  var xpad = +svg.getAttribute('data-xpad');
  var W = +svg.getAttribute('width');
  var inverted = svg.getAttribute('data-inverted') === '1';
  var details = document.getElementById('details');
  var reset = document.getElementById('reset');
  var frames = Array.prototype.slice.call(document.querySelectorAll('g.f'));
  frames.forEach(function (g) {
    var r = g.querySelector('rect');
    g.dataset.x = r.getAttribute('x');
    g.dataset.w = r.getAttribute('width');
    g.dataset.y = r.getAttribute('y');
  });
  function nameOf(g) {
    return g.querySelector('title').textContent;
  }
  function label(g, w) {
    var t = nameOf(g).replace(/ \(\d+ samples, [0-9.]+%\)$/, '');
    var fit = w > 21 ? Math.floor((w - 6) / 7) : 0;
    if (fit < 3) return '';
    return t.length <= fit ? t : t.slice(0, fit - 2) + '..';
  }
  function place(g, x, w, show) {
    var r = g.querySelector('rect'), t = g.querySelector('text');
    g.style.display = show ? '' : 'none';
    if (!show) return;
    r.setAttribute('x', x.toFixed(2));
    r.setAttribute('width', w.toFixed(2));
    t.setAttribute('x', (x + 3).toFixed(2));
    t.textContent = label(g, w);
  }
  function deeper(a, b) { /* is frame a at or above (child side of) frame b */
    return inverted ? +a.dataset.y >= +b.dataset.y : +a.dataset.y <= +b.dataset.y;
  }
  function zoom(z) {
    var zx = +z.dataset.x, zw = +z.dataset.w, eps = 1e-6;
    var s = (W - 2 * xpad) / zw;
    frames.forEach(function (g) {
      var x = +g.dataset.x, w = +g.dataset.w;
      if (deeper(g, z) && x >= zx - eps && x + w <= zx + zw + eps) {
        place(g, xpad + (x - zx) * s, w * s, true);
      } else if (!deeper(g, z) && x <= zx + eps && x + w >= zx + zw - eps) {
        place(g, xpad, W - 2 * xpad, true);
        g.style.opacity = '0.6';
      } else {
        place(g, 0, 0, false);
      }
    });
    z.style.opacity = '';
    reset.setAttribute('visibility', 'visible');
  }
  function unzoom() {
    frames.forEach(function (g) {
      g.style.opacity = '';
      place(g, +g.dataset.x, +g.dataset.w, true);
    });
    reset.setAttribute('visibility', 'hidden');
  }
  frames.forEach(function (g) {
    g.addEventListener('mouseover', function () { details.textContent = nameOf(g); });
    g.addEventListener('mouseout', function () { details.textContent = ' '; });
    g.addEventListener('click', function () { zoom(g); });
  });
  reset.addEventListener('click', unzoom);
  svg.setAttribute('data-ready', '1');
})();
