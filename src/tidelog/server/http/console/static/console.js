// tidelog console: refresh the page's figures, banners and charts from
// /console/api/... every few seconds, without reloading the page. Figures
// are written with textContent and charts built with the DOM: nothing the
// server sends is ever read as HTML.
(function () {
  "use strict";
  var body = document.body;
  var source = body.dataset.live;
  var every = parseInt(body.dataset.refreshMs || "3000", 10);
  var SVG = "http://www.w3.org/2000/svg";

  function setFields(fields) {
    document.querySelectorAll("[data-live]").forEach(function (el) {
      if (el === body) return;
      var value = fields[el.dataset.live];
      if (value !== undefined && el.textContent !== value) el.textContent = value;
    });
  }

  function setBanners(list) {
    var box = document.getElementById("banners");
    if (!box) return;
    box.replaceChildren.apply(box, list.map(function (b) {
      var p = document.createElement("p");
      p.className = "banner";
      if (b.href) {
        var a = document.createElement("a");
        a.href = b.href;
        a.textContent = b.text;
        p.appendChild(a);
      } else {
        p.textContent = b.text;
      }
      return p;
    }));
  }

  function nice(top) {
    // The axis' top: the next 1, 2 or 5 times a power of ten above the peak.
    if (!(top > 0)) return 1;
    var step = Math.pow(10, Math.floor(Math.log10(top)));
    var m = top / step;
    return (m <= 1 ? 1 : m <= 2 ? 2 : m <= 5 ? 5 : 10) * step;
  }

  function label(value, unit) {
    var digits = unit === "/s" || !Number.isInteger(value) ? 1 : 0;  // half of a top of 5 is 2.5
    var text = value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
    return text + unit;
  }

  function text(selector, value) {
    var el = document.querySelector(selector);
    if (el && el.textContent !== value) el.textContent = value;
  }

  function axis(name, part, value) {
    text('[data-axis="' + CSS.escape(name + ":" + part) + '"]', value);
  }

  function span(ms) {
    var s = ms / 1000;
    return s < 120 ? Math.round(s) + " s" : Math.round(s / 60) + " min";
  }

  function draw(svg, points, t0, t1) {
    // [t0, t1]: the time axis of every chart on the page, so that a moment is at one
    // place in each (a rate between samples starts a sample after the samples do).
    var name = svg.dataset.chart, unit = svg.dataset.unit || "";
    var note = document.querySelector('[data-chart-note="' + name + '"]');
    var covers = '[data-chart-span="' + CSS.escape(name) + '"]';
    var peak = points.length ? Math.max.apply(null, points.map(function (p) { return p[1]; })) : 0;
    var top = nice(peak);
    axis(name, "top", label(top, unit));
    axis(name, "mid", label(top / 2, unit));
    var grid = [0, 80, 155].map(function (y) {
      var g = document.createElementNS(SVG, "line");
      g.setAttribute("class", "grid");
      g.setAttribute("x1", "0"); g.setAttribute("x2", "600");
      g.setAttribute("y1", String(y)); g.setAttribute("y2", String(y));
      return g;
    });
    if (points.length < 2) {
      svg.replaceChildren.apply(svg, grid);
      axis(name, "start", "");
      text(covers, "");
      if (note) note.textContent = "(collecting: a point every few seconds)";
      return;
    }
    var line = document.createElementNS(SVG, "polyline");
    line.setAttribute("points", points.map(function (p) {
      var x = t1 > t0 ? (p[0] - t0) / (t1 - t0) * 600 : 0;
      var y = 155 - p[1] / top * 155;
      return x.toFixed(1) + "," + y.toFixed(1);
    }).join(" "));
    svg.replaceChildren.apply(svg, grid.concat([line]));
    axis(name, "start", "−" + span(t1 - t0));
    text(covers, ", the last " + span(t1 - t0));  // what the samples cover, not the hour they may grow to
    if (note) {
      var last = points[points.length - 1][1];
      note.textContent = "(now " + label(last, unit) + " · peak " + label(peak, unit) + ")";
    }
  }

  function unseen(fields) {
    // Figures the page has no place for: a topic, partition or group that appeared since it loaded.
    return Object.keys(fields).some(function (k) {
      return !document.querySelector('[data-live="' + CSS.escape(k) + '"]');
    });
  }

  function apply(data) {
    var fields = data.fields || {};
    setFields(fields);
    var banners = (data.banners || []).slice();
    if (unseen(fields)) banners.push({ text: "New topics, partitions or groups: reload the page to see them.", href: window.location.href });
    setBanners(banners);
    var charts = data.charts || {}, t0 = Infinity, t1 = -Infinity;
    Object.keys(charts).forEach(function (name) {
      var points = charts[name];
      if (points.length) {
        t0 = Math.min(t0, points[0][0]);
        t1 = Math.max(t1, points[points.length - 1][0]);
      }
    });
    document.querySelectorAll("svg[data-chart]").forEach(function (svg) {
      draw(svg, charts[svg.dataset.chart] || [], t0, t1);
    });
  }

  function refresh() {
    fetch(source, { headers: { accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) {
        if (r.redirected || r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.json() : null;
      })
      .then(function (data) {
        if (data) { apply(data); body.dataset.refreshed = String(Date.now()); }
      })
      .catch(function () { /* the server restarts: try again next time */ })
      .finally(function () { window.setTimeout(refresh, every); });
  }

  var initial = document.getElementById("live-data");
  if (initial) apply(JSON.parse(initial.textContent));
  if (source) window.setTimeout(refresh, every);
})();
