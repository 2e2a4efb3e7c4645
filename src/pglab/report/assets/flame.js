/* pglab report: on-CPU flame graphs (os.profile), one per node and kind of process.
   The outermost frame at the bottom, each frame as wide as its share of the samples.
   Click a frame to zoom into it, click "all" (or reset) to zoom out; the search box
   highlights matching frames and says their share. Below them, for each stall window, a
   differential graph per node and kind: the window's frames, red where their share of
   the samples grew against the run's healthy seconds, blue where it shrank. Data:
   DATA.profile, built by pglab/report/html_profile.py: a table of names and trees of
   [name, samples, children] (differential: a fourth item, the healthy share in 1/1000).
   pglab compare draws its differential graphs with the same code (compare/profile_diff.py:
   a section with a `title`, graphs with a `base_note`, the fourth item the base's).
   DATA.profile.off_cpu: os.kernel's blocked kernel stacks per node and kind, drawn alike. */
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("pglab-data").textContent);
  var P = DATA.profile;
  var host = document.getElementById("flames");
  if (!P || !host) return;
  var ROW = 16, PAD = 8;
  var tip = document.querySelector(".tip");
  if (!tip) { tip = document.createElement("div"); tip.className = "tip"; document.body.appendChild(tip); }

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function hash(s) {
    var h = 0;
    for (var i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0;
    return Math.abs(h);
  }
  // warm colours for user code, blue-grey for the kernel, grey for what perf could not name
  function color(name) {
    var h = hash(name);
    if (name.indexOf("[unknown") === 0) return "#c8c8c8";
    if (/_\[k\]$/.test(name)) return "hsl(" + (195 + h % 25) + ",45%," + (62 + h % 12) + "%)";
    return "hsl(" + (h % 50) + ",75%," + (58 + h % 14) + "%)";
  }
  function pct(part, whole) { return whole ? (100 * part / whole).toFixed(1) + "%" : "–"; }
  function depth(node) {
    var d = 0;
    for (var i = 0; i < node[2].length; i++) d = Math.max(d, depth(node[2][i]));
    return d + 1;
  }

  // a differential frame: its share of the window's samples against the healthy seconds'
  function diffColor(node, total) {
    var delta = 1000 * node[1] / total - node[3], k = Math.min(1, Math.abs(delta) / 100);
    if (Math.abs(delta) < 5) return "hsl(40,10%,88%)";
    return delta > 0 ? "hsl(0,80%," + (90 - 42 * k) + "%)" : "hsl(215,70%," + (90 - 38 * k) + "%)";
  }

  function Graph(g, diff) {
    var self = this;
    this.g = g;
    this.diff = diff;
    this.zoom = [g.tree];  // the path from the root to the frame zoomed into
    this.search = null;
    this.boxes = [];
    this.wrap = el("div", "chart flame");
    var head = el("div", "chart-head");
    head.appendChild(el("h3", null, g.node + " · " + g.kind));
    head.appendChild(el("span", "unit", g.samples + " samples" +
      (g.unit_note ? " (" + g.unit_note + ")" :
        P.hz ? " (" + (g.samples / P.hz).toFixed(1) + " CPU s at " + P.hz + " Hz)" : "") +
      (diff ? "; " + (g.base_note || g.healthy_samples + " in the healthy seconds") : "")));
    this.status = el("span", "unit");
    head.appendChild(this.status);
    var reset = el("button", null, "reset zoom");
    reset.onclick = function () { self.zoom = [g.tree]; self.draw(); };
    head.appendChild(reset);
    this.wrap.appendChild(head);
    this.canvas = el("canvas");
    this.canvas.className = "flame-canvas";
    this.wrap.appendChild(this.canvas);
    this.rows = depth(g.tree);
    this.canvas.addEventListener("click", function (ev) {
      var box = self.at(ev);
      if (!box) return;
      self.zoom = box.path;
      self.draw();
    });
    this.canvas.addEventListener("mousemove", function (ev) {
      var box = self.at(ev);
      if (!box) { tip.style.display = "none"; return; }
      var n = box.node, total = g.tree[1];
      tip.innerHTML = "";
      tip.appendChild(el("div", "tip-title", P.names[n[0]]));
      tip.appendChild(el("div", "tip-row", n[1] + " samples, " + pct(n[1], total) + " of " +
        g.kind + " on " + g.node + (self.diff ? " in the window" : "")));
      if (self.diff) tip.appendChild(el("div", "tip-row", (n[3] / 10).toFixed(1) +
        "% " + (P.base_word || "in the healthy seconds")));
      tip.style.display = "block";
      tip.style.left = Math.min(ev.clientX + 14, window.innerWidth - 540) + "px";
      tip.style.top = (ev.clientY + 14) + "px";
    });
    this.canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
  }
  Graph.prototype.at = function (ev) {
    var r = this.canvas.getBoundingClientRect(), x = ev.clientX - r.left, y = ev.clientY - r.top;
    for (var i = 0; i < this.boxes.length; i++) {
      var b = this.boxes[i];
      if (x >= b.x && x < b.x + b.w && y >= b.y && y < b.y + ROW) return b;
    }
    return null;
  };
  Graph.prototype.draw = function () {
    var width = Math.max(300, this.wrap.clientWidth - 2 * PAD);
    var height = this.rows * ROW + 2;
    var ratio = window.devicePixelRatio || 1;
    var c = this.canvas;
    c.width = width * ratio; c.height = height * ratio;
    c.style.width = width + "px"; c.style.height = height + "px";
    var ctx = c.getContext("2d");
    ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
    ctx.clearRect(0, 0, width, height);
    ctx.font = "11px system-ui, sans-serif";
    ctx.textBaseline = "middle";
    this.boxes = [];
    var self = this, focus = this.zoom[this.zoom.length - 1], matched = 0, re = this.search;
    // the frames below the zoomed one, full width, so a click on one zooms back out
    for (var i = 0; i < this.zoom.length - 1; i++) box(this.zoom[i], this.zoom.slice(0, i + 1), 0, width, i, true);
    function box(node, path, x, w, level, ancestor) {
      var y = height - (level + 1) * ROW;
      var name = P.names[node[0]];
      var hit = re && re.test(name);
      ctx.fillStyle = hit ? "#b05cd1" : self.diff ? diffColor(node, self.g.tree[1]) : color(name);
      ctx.globalAlpha = ancestor ? 0.55 : 1;
      ctx.fillRect(x, y, Math.max(0.5, w - 0.5), ROW - 1);
      ctx.globalAlpha = 1;
      if (w > 30) {
        ctx.fillStyle = "#1d2430";
        var label = name, room = Math.floor((w - 6) / 6);
        if (label.length > room) label = label.slice(0, Math.max(0, room - 1)) + "…";
        ctx.fillText(label, x + 3, y + ROW / 2);
      }
      self.boxes.push({ x: x, y: y, w: w, node: node, path: path });
      return hit;
    }
    function walk(node, path, x, w, level, counted) {
      var hit = box(node, path, x, w, level, false);
      if (hit && !counted) { matched += node[1]; counted = true; }
      var cx = x;
      for (var k = 0; k < node[2].length; k++) {
        var child = node[2][k], cw = w * child[1] / node[1];
        if (cw >= 0.3) walk(child, path.concat([child]), cx, cw, level + 1, counted);
        cx += cw;
      }
    }
    walk(focus, this.zoom.slice(), 0, width, this.zoom.length - 1, false);
    var total = this.g.tree[1];
    this.status.textContent = (this.zoom.length > 1 ? "zoomed: " + P.names[focus[0]] + " " +
      pct(focus[1], total) + " · " : "") + (re ? "matched " + pct(matched, focus[1]) +
      (this.zoom.length > 1 ? " of the zoomed frame" : "") : "");
  };

  var bar = el("div", "toolbar");
  bar.appendChild(el("span", null, "search frames"));
  var input = el("input");
  input.type = "search";
  input.placeholder = "regular expression, e.g. XLog|heap_";
  input.className = "flame-search";
  bar.appendChild(input);
  host.appendChild(bar);
  if (P.unresolved) host.appendChild(el("p", "note flame-note", "not named by perf: " + P.unresolved));
  var graphs = P.graphs.map(function (g) { var v = new Graph(g, false); host.appendChild(v.wrap); return v; });
  (P.stalls || []).forEach(function (stall) {
    host.appendChild(el("h3", "flame-stall", stall.title || ("Stall at " +
      stall.start.slice(11, 19) + " UTC (" + stall.seconds + " s" +
      (stall.label ? ", " + stall.label : "") + ") against the " + stall.healthy_seconds +
      " healthy seconds: red grew, blue shrank")));
    stall.graphs.forEach(function (g) { var v = new Graph(g, true); host.appendChild(v.wrap); graphs.push(v); });
  });
  if ((P.off_cpu || []).length) {
    host.appendChild(el("h3", "flame-stall", "Off-CPU: the kernel stacks the processes were " +
      "blocked in (os.kernel), the whole run; latch waits (epoll) left out"));
    P.off_cpu.forEach(function (g) { var v = new Graph(g, false); host.appendChild(v.wrap); graphs.push(v); });
  }
  function drawAll() { graphs.forEach(function (v) { v.draw(); }); }
  input.addEventListener("input", function () {
    var re = null;
    try { re = input.value ? new RegExp(input.value) : null; } catch (e) { re = null; }
    graphs.forEach(function (v) { v.search = re; });
    drawAll();
  });
  window.addEventListener("resize", drawAll);
  drawAll();
})();
