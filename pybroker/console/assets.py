"""The console's stylesheet and script, inline: no build step, no CDN (the console must work offline)."""

CSS = """
:root { --fg: #1d2430; --muted: #667085; --line: #d9dee7; --bg: #f6f7f9; --accent: #2357c6; --warn: #b42318; }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { background: #111827; color: #fff; padding: 10px 24px; display: flex; gap: 24px; align-items: center; }
header a { color: #cbd5e1; text-decoration: none; }
header a.active, header a:hover { color: #fff; }
header .brand { font-weight: 700; color: #fff; margin-right: 12px; }
header .mode { margin-left: auto; font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #374151; }
header .mode.admin { background: var(--warn); }
main { padding: 20px 24px; max-width: 1280px; }
h1 { font-size: 20px; margin: 0 0 16px; }
h2 { font-size: 16px; margin: 24px 0 8px; }
table { border-collapse: collapse; width: 100%; background: #fff; border: 1px solid var(--line); }
th, td { text-align: left; padding: 6px 10px; border-bottom: 1px solid var(--line); vertical-align: top; }
th { background: #eef1f5; font-weight: 600; font-size: 12px; text-transform: uppercase; letter-spacing: .03em; color: #475467; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 12px; margin-bottom: 8px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px; min-width: 150px; }
.card .label { color: var(--muted); font-size: 12px; }
.card .value { font-size: 20px; font-weight: 600; font-variant-numeric: tabular-nums; }
.muted { color: var(--muted); }
.null { color: var(--muted); font-style: italic; }
pre { margin: 0; white-space: pre-wrap; word-break: break-all; font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; }
code { font: 12px/1.4 ui-monospace, Menlo, Consolas, monospace; word-break: break-all; }
form.inline { display: inline; }
form.bar { display: flex; flex-wrap: wrap; gap: 10px; align-items: end; background: #fff; border: 1px solid var(--line); padding: 10px; margin-bottom: 12px; }
form.bar label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
input, select, textarea, button { font: inherit; padding: 4px 6px; }
button { cursor: pointer; }
button.danger { color: #fff; background: var(--warn); border: 0; border-radius: 4px; padding: 4px 10px; }
.notice { padding: 8px 12px; background: #ecfdf3; border: 1px solid #abefc6; margin-bottom: 12px; }
.error { padding: 8px 12px; background: #fef3f2; border: 1px solid #fecdca; margin-bottom: 12px; }
.state { display: inline-block; padding: 1px 8px; border-radius: 10px; background: #eef1f5; font-size: 12px; }
.state.Stable { background: #dcfae6; } .state.Empty { background: #eef1f5; }
.state.PreparingRebalance, .state.CompletingRebalance, .state.Assigning, .state.Reconciling { background: #fef0c7; }
svg.chart { background: #fff; border: 1px solid var(--line); }
svg.chart .axis { stroke: #98a2b3; stroke-width: 1; }
svg.chart .line { fill: none; stroke: var(--accent); stroke-width: 2; }
svg.chart .dot { fill: var(--accent); }
svg.chart text { font-size: 11px; fill: #475467; }
"""

# The group page: polls /api/groups/<id> and redraws the lag table and chart from its answer.
GROUP_JS = """
(function () {
  const root = document.getElementById("group");
  const api = root.dataset.api;
  const interval = Math.max(500, parseInt(root.dataset.interval, 10) || 5000);

  function fmt(n) { return n === null || n === undefined ? "-" : n.toLocaleString("en-US"); }

  function drawChart(svg, points) {
    const W = 640, H = 200, L = 56, R = 12, T = 12, B = 28;
    const ns = "http://www.w3.org/2000/svg";
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    function el(name, attrs, text) {
      const e = document.createElementNS(ns, name);
      for (const k in attrs) e.setAttribute(k, attrs[k]);
      if (text !== undefined) e.textContent = text;
      svg.appendChild(e);
      return e;
    }
    el("line", {class: "axis", x1: L, y1: H - B, x2: W - R, y2: H - B});
    el("line", {class: "axis", x1: L, y1: T, x2: L, y2: H - B});
    if (points.length === 0) {
      el("text", {x: L + 10, y: H / 2}, "no samples yet");
      return;
    }
    const t0 = points[0][0], t1 = Math.max(points[points.length - 1][0], t0 + 1);
    const maxLag = Math.max(1, ...points.map(p => p[1]));
    const x = t => L + (W - L - R) * (t - t0) / (t1 - t0);
    const y = v => H - B - (H - B - T) * v / maxLag;
    el("text", {x: 4, y: T + 10}, fmt(maxLag));
    el("text", {x: 4, y: H - B}, "0");
    el("text", {x: L, y: H - 8}, new Date(t0).toISOString().substring(11, 19));
    el("text", {x: W - R - 52, y: H - 8}, new Date(t1).toISOString().substring(11, 19));
    el("polyline", {class: "line", points: points.map(p => x(p[0]).toFixed(1) + "," + y(p[1]).toFixed(1)).join(" ")});
    const last = points[points.length - 1];
    el("circle", {class: "dot", cx: x(last[0]), cy: y(last[1]), r: 3});
    svg.dataset.samples = String(points.length);
    svg.dataset.last = String(last[1]);
  }

  function render(data) {
    document.getElementById("total-lag").textContent = fmt(data.total_lag);
    document.getElementById("group-state").textContent = data.state;
    document.getElementById("group-state").className = "state " + data.state;
    document.getElementById("member-count").textContent = fmt(data.members.length);
    const body = document.getElementById("offsets-body");
    body.innerHTML = "";
    for (const p of data.partitions) {
      const tr = document.createElement("tr");
      tr.dataset.tp = p.topic + "/" + p.partition;
      for (const [v, cls] of [[p.topic, ""], [p.partition, "num"], [p.committed, "num"],
                              [p.log_end, "num"], [p.lag, "num lag"]]) {
        const td = document.createElement("td");
        td.className = cls;
        td.textContent = typeof v === "number" || v === null ? fmt(v) : v;
        tr.appendChild(td);
      }
      body.appendChild(tr);
    }
    drawChart(document.getElementById("lag-chart"), data.history);
    root.dataset.updated = String(Date.now());
  }

  async function poll() {
    try {
      const resp = await fetch(api, {cache: "no-store"});
      if (resp.ok) render(await resp.json());
    } catch (e) { /* the broker may be restarting: try again next tick */ }
    setTimeout(poll, interval);
  }

  render(JSON.parse(document.getElementById("group-data").textContent));
  setTimeout(poll, interval);
})();
"""
