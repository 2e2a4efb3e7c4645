/* pglab report: timelines on canvas that share one UTC time axis.
   Wheel zooms around the cursor, drag pans, double-click resets; every chart follows.
   Data: the JSON in <script id="pglab-data">, built by pglab/report/model.py. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("pglab-data").textContent);
  var T = DATA.timeline;
  var PAD = { l: 118, r: 14, t: 8, b: 22 };  // wide left: the event lane names
  var CHART_H = 170, LANE_H = 20;
  var view = { x0: 0, x1: Math.max(1, T.xmax) };
  var hoverX = null;
  var charts = [];
  var tip = document.createElement("div");
  tip.className = "tip";
  document.body.appendChild(tip);

  function pad2(n) { return (n < 10 ? "0" : "") + n; }
  function utc(sec, withDate) {
    var d = new Date((T.t0 + sec) * 1000);
    var s = pad2(d.getUTCHours()) + ":" + pad2(d.getUTCMinutes()) + ":" + pad2(d.getUTCSeconds());
    return withDate ? d.toISOString().slice(0, 10) + " " + s : s;
  }
  function fmt(v) {
    if (v === null || v === undefined) return "–";
    if (v === 0) return "0";
    var a = Math.abs(v);
    if (a >= 1e6) return (v / 1e6).toFixed(a >= 1e7 ? 0 : 1) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(a >= 1e5 ? 0 : 1) + "k";
    if (a >= 100) return v.toFixed(0);
    if (a >= 10) return v.toFixed(1);
    if (a >= 1) return v.toFixed(2);
    return v.toPrecision(2);
  }
  function tick(v, step) {
    if (v >= 1e4) return fmt(v);
    return v.toFixed(Math.max(0, Math.min(3, -Math.floor(Math.log10(step)))));
  }
  function niceStep(range, count) {
    var raw = range / Math.max(1, count), mag = Math.pow(10, Math.floor(Math.log10(raw)));
    var f = raw / mag;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * mag;
  }
  var TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600];
  function timeStep(range, px) {
    var want = range / Math.max(1, px / 90);
    for (var i = 0; i < TIME_STEPS.length; i++) if (TIME_STEPS[i] >= want) return TIME_STEPS[i];
    return 86400;
  }
  // first index with x[i] >= v
  function lowerBound(x, v) {
    var lo = 0, hi = x.length;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (x[mid] < v) lo = mid + 1; else hi = mid; }
    return lo;
  }
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }

  function makeChart(spec, lanes) {
    var box = el("section", "chart");
    box.id = "chart-" + spec.id;
    var head = el("div", "chart-head");
    head.appendChild(el("h3", "", spec.title));
    if (spec.unit) head.appendChild(el("span", "unit", spec.unit));
    var legend = el("div", "legend");
    head.appendChild(legend);
    box.appendChild(head);
    var wrap = el("div", "canvas-wrap");
    var base = el("canvas", "base"), over = el("canvas", "over");
    base.setAttribute("role", "img"); base.setAttribute("aria-label", spec.title + " over time (UTC)");
    wrap.appendChild(base); wrap.appendChild(over);
    box.appendChild(wrap);
    if (spec.note) box.appendChild(el("div", "note", spec.note));
    var c = { spec: spec, lanes: lanes, box: box, base: base, over: over, hidden: {},
              height: lanes ? PAD.t + PAD.b + LANE_H * lanes.names.length : CHART_H };
    if (!lanes) {
      spec.series.forEach(function (s, i) {
        var item = el("span", "item");
        if (s.h) { c.hidden[i] = true; item.classList.add("off"); }
        var sw = el("i", "swatch"); sw.style.background = s.c;
        if (s.d) sw.className = "swatch dashed";
        item.appendChild(sw); item.appendChild(document.createTextNode(s.n));
        item.title = "click to hide or show";
        item.addEventListener("click", function () {
          c.hidden[i] = !c.hidden[i];
          item.classList.toggle("off", !!c.hidden[i]);
          draw(c); drawOverlay(c);
        });
        legend.appendChild(item);
      });
      spec.limits.forEach(function (lim) {
        var item = el("span", "item limit");
        item.appendChild(el("i", "swatch dashed red"));
        item.appendChild(document.createTextNode(lim[0] + " " + fmt(lim[1])));
        legend.appendChild(item);
      });
    }
    wire(c);
    return c;
  }

  function size(c) {
    var dpr = window.devicePixelRatio || 1;
    var w = c.box.clientWidth || 800;
    [c.base, c.over].forEach(function (cv) {
      cv.width = Math.round(w * dpr); cv.height = Math.round(c.height * dpr);
      cv.style.width = w + "px"; cv.style.height = c.height + "px";
    });
    c.w = w; c.dpr = dpr;
  }
  function sx(c, x) { return PAD.l + (x - view.x0) / (view.x1 - view.x0) * (c.w - PAD.l - PAD.r); }
  function xAt(c, px) { return view.x0 + (px - PAD.l) / (c.w - PAD.l - PAD.r) * (view.x1 - view.x0); }

  // Cumulative values for stacked series, raw values for the others.
  function layers(c) {
    var s = c.spec, acc = null, out = [];
    s.series.forEach(function (ser, i) {
      if (c.hidden[i]) { out.push(null); return; }
      if (!ser.s) { out.push({ lo: null, hi: ser.y }); return; }
      var lo = acc || ser.y.map(function () { return 0; });
      var hi = ser.y.map(function (v, k) { return lo[k] + (v || 0); });
      acc = hi;
      out.push({ lo: lo, hi: hi });
    });
    return out;
  }

  function drawFrame(ctx, c, plotH) {
    var step = timeStep(view.x1 - view.x0, c.w - PAD.l - PAD.r);
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillStyle = "#555"; ctx.strokeStyle = "#eee"; ctx.lineWidth = 1;
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    var start = Math.ceil((T.t0 + view.x0) / step) * step - T.t0;
    for (var t = start; t <= view.x1; t += step) {
      var px = Math.round(sx(c, t)) + 0.5;
      ctx.beginPath(); ctx.moveTo(px, PAD.t); ctx.lineTo(px, PAD.t + plotH); ctx.stroke();
      if (px > PAD.l + 20 && px < c.w - 26) ctx.fillText(utc(t), px, PAD.t + plotH + 5);
    }
    var shade = function (a, b, color, label) {
      var x0 = Math.max(PAD.l, sx(c, a)), x1 = Math.min(c.w - PAD.r, sx(c, b));
      if (x1 <= x0) return;
      ctx.fillStyle = color; ctx.fillRect(x0, PAD.t, Math.max(2, x1 - x0), plotH);
      if (label && x1 - x0 > 40) {
        ctx.fillStyle = "#666"; ctx.textAlign = "left"; ctx.fillText(label, x0 + 3, PAD.t + 2);
      }
    };
    if (T.warmup) shade(T.warmup[0], T.warmup[1], "rgba(0,0,0,0.05)", c.lanes ? "" : "warmup");
    T.stalls.forEach(function (st) { shade(st[0], st[1], "rgba(217,83,79,0.18)", ""); });
  }

  function draw(c) {
    var ctx = c.base.getContext("2d");
    ctx.setTransform(c.dpr, 0, 0, c.dpr, 0, 0);
    ctx.clearRect(0, 0, c.w, c.height);
    var plotH = c.height - PAD.t - PAD.b;
    drawFrame(ctx, c, plotH);
    ctx.save();
    ctx.beginPath(); ctx.rect(PAD.l, PAD.t, c.w - PAD.l - PAD.r, plotH); ctx.clip();
    if (c.lanes) drawLanes(ctx, c); else drawSeries(ctx, c, plotH);
    // a solid strip on top of the data as well: the tint alone hides under stacked areas
    T.stalls.forEach(function (st) {
      var a = sx(c, st[0]), b = sx(c, st[1]);
      ctx.fillStyle = "#d9534f"; ctx.fillRect(a, PAD.t, Math.max(2, b - a), 4);
    });
    ctx.restore();
    ctx.strokeStyle = "#bbb"; ctx.strokeRect(PAD.l + 0.5, PAD.t + 0.5, c.w - PAD.l - PAD.r, plotH);
    c.base.dataset.x0 = view.x0.toFixed(2); c.base.dataset.x1 = view.x1.toFixed(2);
  }

  function drawSeries(ctx, c, plotH) {
    var s = c.spec, x = s.x, L = layers(c);
    var i0 = Math.max(0, lowerBound(x, view.x0) - 1), i1 = Math.min(x.length, lowerBound(x, view.x1) + 1);
    var ymax = 0;
    L.forEach(function (l) {
      if (!l) return;
      for (var i = i0; i < i1; i++) if (l.hi[i] !== null && l.hi[i] > ymax) ymax = l.hi[i];
    });
    s.limits.forEach(function (lim) { ymax = Math.max(ymax, lim[1]); });
    if (ymax <= 0) ymax = 1;
    var step = niceStep(s.ymax || ymax, 4);
    ymax = s.ymax || Math.ceil(ymax * 1.05 / step) * step;
    c.ymax = ymax;
    var sy = function (v) { return PAD.t + plotH - v / ymax * plotH; };
    ctx.restore(); ctx.save();
    ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (var v = 0; v <= ymax + 1e-9; v += step) {
      var py = Math.round(sy(v)) + 0.5;
      ctx.strokeStyle = "#eee"; ctx.beginPath(); ctx.moveTo(PAD.l, py); ctx.lineTo(c.w - PAD.r, py); ctx.stroke();
      ctx.fillStyle = "#555"; ctx.fillText(tick(v, step), PAD.l - 5, py);
    }
    ctx.beginPath(); ctx.rect(PAD.l, PAD.t, c.w - PAD.l - PAD.r, plotH); ctx.clip();
    L.forEach(function (l, k) {
      if (!l || !l.lo) return;
      ctx.beginPath();
      for (var i = i0; i < i1; i++) ctx.lineTo(sx(c, x[i]), sy(l.hi[i]));
      for (var j = i1 - 1; j >= i0; j--) ctx.lineTo(sx(c, x[j]), sy(l.lo[j]));
      ctx.closePath();
      ctx.globalAlpha = 0.8; ctx.fillStyle = s.series[k].c; ctx.fill(); ctx.globalAlpha = 1;
    });
    L.forEach(function (l, k) {
      if (!l || l.lo) return;
      var ser = s.series[k];
      ctx.strokeStyle = ser.c; ctx.lineWidth = 1.5; ctx.setLineDash(ser.d ? [4, 3] : []);
      ctx.beginPath();
      var pen = false;
      for (var i = i0; i < i1; i++) {
        var v = l.hi[i];
        if (v === null) { pen = false; continue; }
        if (pen) ctx.lineTo(sx(c, x[i]), sy(v)); else ctx.moveTo(sx(c, x[i]), sy(v));
        pen = true;
      }
      ctx.stroke(); ctx.setLineDash([]);
    });
    s.limits.forEach(function (lim) {
      var py = Math.round(sy(lim[1])) + 0.5;
      ctx.strokeStyle = "#d62728"; ctx.lineWidth = 1.5; ctx.setLineDash([6, 4]);
      ctx.beginPath(); ctx.moveTo(PAD.l, py); ctx.lineTo(c.w - PAD.r, py); ctx.stroke();
      ctx.setLineDash([]); ctx.fillStyle = "#d62728"; ctx.textAlign = "right"; ctx.textBaseline = "bottom";
      ctx.fillText(lim[0] + " " + fmt(lim[1]), c.w - PAD.r - 4, py - 2);
    });
  }

  function drawLanes(ctx, c) {
    var names = c.lanes.names;
    ctx.restore(); ctx.save();
    ctx.font = "11px system-ui, sans-serif"; ctx.textAlign = "left"; ctx.textBaseline = "middle";
    names.forEach(function (n, i) {
      var y = PAD.t + i * LANE_H;
      ctx.fillStyle = i % 2 ? "rgba(0,0,0,0.025)" : "rgba(0,0,0,0)";
      ctx.fillRect(PAD.l, y, c.w - PAD.l - PAD.r, LANE_H);
      ctx.fillStyle = "#333"; ctx.textAlign = "right"; ctx.fillText(n, PAD.l - 6, y + LANE_H / 2);
    });
    ctx.beginPath(); ctx.rect(PAD.l, PAD.t, c.w - PAD.l - PAD.r, c.height - PAD.t - PAD.b); ctx.clip();
    c.lanes.items.forEach(function (it) {
      if (it[1] < view.x0 || it[0] > view.x1) return;
      var x0 = sx(c, it[0]), x1 = sx(c, it[1]);
      ctx.globalAlpha = 0.85; ctx.fillStyle = it[3];
      ctx.fillRect(x0, PAD.t + it[2] * LANE_H + 3, Math.max(3, x1 - x0), LANE_H - 6);
      ctx.globalAlpha = 1;
    });
  }

  function drawOverlay(c) {
    var ctx = c.over.getContext("2d");
    ctx.setTransform(c.dpr, 0, 0, c.dpr, 0, 0);
    ctx.clearRect(0, 0, c.w, c.height);
    if (hoverX === null || hoverX < view.x0 || hoverX > view.x1) return;
    var px = Math.round(sx(c, hoverX)) + 0.5;
    ctx.strokeStyle = "rgba(0,0,0,0.45)"; ctx.lineWidth = 1;
    ctx.beginPath(); ctx.moveTo(px, PAD.t); ctx.lineTo(px, c.height - PAD.b); ctx.stroke();
  }

  function tooltipFor(c, x, py) {
    var rows = [];
    if (c.lanes) {
      var lane = Math.floor((py - PAD.t) / LANE_H);
      var tol = (view.x1 - view.x0) / (c.w - PAD.l - PAD.r) * 4;
      c.lanes.items.forEach(function (it) {
        if (it[2] === lane && x >= it[0] - tol && x <= it[1] + tol) {
          var dur = it[1] > it[0] ? " (" + (it[1] - it[0]).toFixed(1) + " s)" : "";
          rows.push([it[3], utc(it[0]) + dur + " " + it[4]]);
        }
      });
      return rows.length ? { title: c.lanes.names[lane] || "", rows: rows.slice(0, 8) } : null;
    }
    var s = c.spec, i = lowerBound(s.x, x);
    if (i > 0 && (i >= s.x.length || Math.abs(s.x[i - 1] - x) < Math.abs(s.x[i] - x))) i -= 1;
    if (i >= s.x.length) return null;
    var sum = 0, stacked = 0;
    s.series.forEach(function (ser, k) {
      if (c.hidden[k]) return;
      var v = ser.y[i];
      rows.push([ser.c, ser.n + ": " + fmt(v) + " " + s.unit]);
      if (ser.s) { sum += v || 0; stacked++; }
    });
    if (stacked > 1 && s.id !== "tps") rows.push(["#000", "total: " + fmt(sum) + " " + s.unit]);
    T.stalls.forEach(function (st) { if (s.x[i] >= st[0] && s.x[i] < st[1]) rows.push(["#d9534f", st[2]]); });
    return { title: utc(s.x[i], true) + " UTC", rows: rows };
  }

  function showTip(info, ev) {
    if (!info) { tip.style.display = "none"; return; }
    tip.textContent = "";
    tip.appendChild(el("div", "tip-title", info.title));
    info.rows.forEach(function (r) {
      var line = el("div", "tip-row");
      var sw = el("i", "swatch"); sw.style.background = r[0];
      line.appendChild(sw); line.appendChild(document.createTextNode(r[1]));
      tip.appendChild(line);
    });
    tip.style.display = "block";
    var x = ev.clientX + 14, y = ev.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth - 8) x = ev.clientX - tip.offsetWidth - 14;
    if (y + tip.offsetHeight > window.innerHeight - 8) y = ev.clientY - tip.offsetHeight - 14;
    tip.style.left = x + "px"; tip.style.top = y + "px";
  }

  function setView(x0, x1) {
    var full = Math.max(1, T.xmax), span = Math.min(full, Math.max(5, x1 - x0));
    x0 = Math.max(0, Math.min(x0, full - span));
    view.x0 = x0; view.x1 = x0 + span;
    charts.forEach(function (c) { draw(c); drawOverlay(c); });
    var label = document.getElementById("view-label");
    if (label) label.textContent = utc(view.x0, true) + " – " + utc(view.x1) + " UTC (" + Math.round(view.x1 - view.x0) + " s)";
  }

  function wire(c) {
    var drag = null;
    c.over.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var rect = c.over.getBoundingClientRect(), at = xAt(c, ev.clientX - rect.left);
      var f = ev.deltaY < 0 ? 0.8 : 1.25;
      setView(at - (at - view.x0) * f, at + (view.x1 - at) * f);
    }, { passive: false });
    c.over.addEventListener("mousedown", function (ev) {
      drag = { px: ev.clientX, x0: view.x0, x1: view.x1 };
    });
    window.addEventListener("mouseup", function () { drag = null; });
    c.over.addEventListener("mousemove", function (ev) {
      var rect = c.over.getBoundingClientRect(), px = ev.clientX - rect.left;
      if (drag) {
        var dx = (ev.clientX - drag.px) / (c.w - PAD.l - PAD.r) * (drag.x1 - drag.x0);
        setView(drag.x0 - dx, drag.x1 - dx);
      }
      hoverX = px >= PAD.l && px <= c.w - PAD.r ? xAt(c, px) : null;
      charts.forEach(drawOverlay);
      showTip(hoverX === null ? null : tooltipFor(c, hoverX, ev.clientY - rect.top), ev);
    });
    c.over.addEventListener("mouseleave", function () {
      hoverX = null; charts.forEach(drawOverlay); showTip(null);
    });
    c.over.addEventListener("dblclick", function () { setView(0, T.xmax); });
  }

  function build() {
    var host = document.getElementById("timelines");
    var specs = T.charts.slice();
    var at = specs.findIndex(function (s) { return s.id === "waits"; });
    if (at < 0) at = Math.min(specs.length, 2) - 1;
    // the kernel's view of the same seconds stays next to the waits
    while (at + 1 < specs.length && specs[at + 1].id.indexOf("kernel_") === 0) at++;
    specs.splice(at + 1, 0, { id: "events", title: "Events", unit: "", lanes: T.lanes });
    specs.forEach(function (s) {
      var c = makeChart(s, s.lanes || null);
      host.appendChild(c.box);
      charts.push(c);
    });
    charts.forEach(size);
    setView(0, T.xmax);
    document.querySelectorAll("[data-zoom]").forEach(function (e) {
      e.addEventListener("click", function () {
        var r = e.getAttribute("data-zoom").split(",").map(Number), m = Math.max(10, (r[1] - r[0]));
        setView(r[0] - m, r[1] + m);
        host.scrollIntoView({ behavior: "smooth" });
      });
    });
    var reset = document.getElementById("reset-zoom");
    if (reset) reset.addEventListener("click", function () { setView(0, T.xmax); });
    var pending = null;
    window.addEventListener("resize", function () {
      clearTimeout(pending);
      pending = setTimeout(function () { charts.forEach(size); setView(view.x0, view.x1); }, 100);
    });
    window.pglabReport = {
      view: function () { return [view.x0, view.x1]; },
      setView: setView,
      charts: charts.map(function (c) { return c.spec.id; })
    };
    document.body.setAttribute("data-ready", String(Math.round(performance.now())));
  }
  build();
})();
