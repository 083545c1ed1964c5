// Time-series charts drawn as SVG, and the colour ramps of the heat maps. See app.js for why they are hand-written.
//
// timeChart(card, opts) draws one chart into a card made by chartCard(): one y axis with one unit, a time axis in
// UTC from the control plane's clock, optional threshold lines, shaded bands (e.g. throttling), lanes under the
// plot (e.g. one per clock-event reason), vertical markers (e.g. an incident opening), and a crosshair tooltip.
// Gaps (null values) break the line rather than being drawn as zero. A chart whose entity has no current value
// (opts.stale: {label, why}, e.g. a lost GPU) heads with that label, never with the last point as if it were now.

import { esc, hhmm, num } from "./ui.js";

const SVGNS = "http://www.w3.org/2000/svg";
const drawn = new WeakMap(); // chart element -> the options it was last drawn with, to redraw on resize

/** The markup of a chart card; draw into it with timeChart(). */
export function chartCard(id, title, unit, { height = 150 } = {}) {
  return `<div class="chart-card" id="${esc(id)}" data-unit="${esc(unit)}">
    <div class="chart-head"><h3>${esc(title)}${unit ? ` <span class="dim">(${esc(unit)})</span>` : ""}</h3>
      <span class="now"></span></div>
    <div class="chart-legend"></div>
    <div class="chart" style="min-height:${height + 30}px"></div></div>`;
}

// --- scales ------------------------------------------------------------------------------------------------------

/** Round tick values covering [lo, hi]: about `count` of them, at 1, 2, 2.5 or 5 times a power of ten. */
export function niceTicks(lo, hi, count = 4, integer = false) {
  if (!(hi > lo)) {
    const pad = Math.abs(lo) > 1 ? Math.abs(lo) * 0.1 : 1;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / Math.max(1, count);
  const mag = 10 ** Math.floor(Math.log10(raw));
  let step = [1, 2, 2.5, 5, 10].map((m) => m * mag).find((s) => s >= raw) || 10 * mag;
  if (integer) step = Math.max(1, Math.round(step));
  const start = Math.floor(lo / step) * step;
  const stop = Math.ceil(hi / step) * step;
  const ticks = [];
  for (let v = start; v <= stop + step / 2; v += step) ticks.push(Math.round(v / step) * step);
  return { lo: start, hi: stop, step, ticks };
}

const TIME_STEPS = [10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800];
const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** Time ticks on round UTC boundaries, at most `max` of them, with labels. */
export function timeTicks(t0, t1, max) {
  const span = Math.max(1, t1 - t0);
  const step = TIME_STEPS.find((s) => span / s <= max) || TIME_STEPS[TIME_STEPS.length - 1];
  const ticks = [];
  for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) {
    const d = new Date(t * 1000);
    let label;
    if (step >= 86400) label = `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
    else if (d.getUTCHours() === 0 && d.getUTCMinutes() === 0 && d.getUTCSeconds() === 0 && step >= 3600) {
      label = `${MONTHS[d.getUTCMonth()]} ${d.getUTCDate()}`;
    } else label = hhmm(t, step < 60);
    ticks.push({ t, label });
  }
  return ticks;
}

/** Decimal places a tick step needs: 0.25 -> 2, 0.5 -> 1, 20 -> 0. */
function decimals(step) {
  if (step >= 1) return 0;
  const text = String(+step.toFixed(6));
  return text.includes(".") ? text.split(".")[1].length : 0;
}

/** A number for an axis: 1.2M, 34k, 12.5, 3. */
export function compact(v, step = 1) {
  const a = Math.abs(v);
  if (a >= 1e6) return `${+(v / 1e6).toFixed(a >= 1e7 ? 0 : 1)}M`;
  if (a >= 1e4) return `${+(v / 1e3).toFixed(a >= 1e5 ? 0 : 1)}k`;
  return (+v.toFixed(decimals(step))).toString();
}

// --- colour ramps for the heat maps ------------------------------------------------------------------------------

export const RAMPS = {
  util: ["#172036", "#253f78", "#1f6f8b", "#20a386", "#79d151", "#f4e34a"],
  temp: ["#1b3a5a", "#24787f", "#5fb36a", "#e0c23a", "#f0883e", "#f85149"],
  power: ["#1d1936", "#362a73", "#5f45b0", "#9a74e8", "#d6b4ff"],
  mem: ["#10241b", "#1c4f33", "#2a874c", "#4cc463", "#b4f0bd"],
};

function hex(c) {
  const n = parseInt(c.slice(1), 16);
  return [(n >> 16) & 255, (n >> 8) & 255, n & 255];
}

/** The colour at x in [0, 1] of a ramp. */
export function rampColor(name, x) {
  const stops = RAMPS[name].map(hex);
  const f = Math.min(1, Math.max(0, Number.isFinite(x) ? x : 0)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(f));
  const k = f - i;
  const c = stops[i].map((a, j) => Math.round(a + (stops[i + 1][j] - a) * k));
  return `rgb(${c[0]},${c[1]},${c[2]})`;
}

export const rampCss = (name) => `linear-gradient(90deg, ${RAMPS[name].join(", ")})`;

// --- the chart ---------------------------------------------------------------------------------------------------

function el(tag, attrs, parent) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

const finite = (v) => v !== null && v !== undefined && Number.isFinite(v);

function lastValue(points) {
  for (let i = points.length - 1; i >= 0; i--) if (finite(points[i][1])) return points[i][1];
  return null;
}

/** The first time a chart drew data, for the page's time-to-first-chart figure. */
function markFirstChart() {
  if (window.__gpufleetFirstChart === undefined || window.__gpufleetFirstChart === null) {
    window.__gpufleetFirstChart = performance.now();
    try {
      performance.mark("gpufleet:first-chart");
    } catch {
      /* marks are a nicety */
    }
  }
}

/**
 * Draw a time chart into `card` (an element made by chartCard, or one holding a `.chart`).
 * opts: series [{label, color, points: [[t, v|null]...], area}], start, end (epoch s), unit, fmt (v -> text),
 * y {min, max, floor, ceil, integer}, thresholds [{v, color, label}], bands [{t0, t1, color, label}],
 * lanes [{label, color, spans: [[t0, t1]...]}], markers [{t, color, label}], height, empty (text), now (bool).
 */
export function timeChart(card, opts) {
  const box = card.classList.contains("chart") ? card : card.querySelector(".chart");
  if (!box) return;
  drawn.set(box, { card, opts });
  observe(box);
  draw(card, box, opts);
}

function draw(card, box, opts) {
  const series = (opts.series || []).filter((s) => s && s.points);
  const unit = opts.unit || "";
  const fmt = opts.fmt || ((v) => `${num(v, Math.abs(v) < 10 && !Number.isInteger(v) ? 1 : 0)}${unit ? (unit === "%" ? "%" : ` ${unit}`) : ""}`);
  const lanes = opts.lanes || [];
  const W = Math.max(240, Math.floor(box.clientWidth || box.getBoundingClientRect().width || 600));
  const plotH = opts.height || 150;
  const ML = lanes.length ? 96 : 46; // lane labels need more room than tick labels
  const MR = 12;
  const MT = 8;
  const laneH = lanes.length ? lanes.length * 11 + 6 : 0;
  const MB = 20;
  const H = MT + plotH + laneH + MB;

  // legend and the latest value
  const legend = card.querySelector ? card.querySelector(".chart-legend") : null;
  if (legend) {
    legend.innerHTML = series.length > 1 || lanes.length
      ? series.map((s) => `<span><i style="background:${esc(s.color)}"></i>${esc(s.label)}</span>`).join("") +
        lanes.filter((l) => l.spans.length).map((l) => `<span><i style="background:${esc(l.color)};height:8px"></i>${esc(l.label)}</span>`).join("")
      : "";
  }
  const nowEl = card.querySelector ? card.querySelector(".chart-head .now") : null;

  let t0 = opts.start;
  let t1 = opts.end;
  const values = [];
  let total = 0;
  for (const s of series) {
    for (const [t, v] of s.points) {
      if (!finite(v)) continue;
      values.push(v);
      total += 1;
      if (opts.start === undefined) t0 = t0 === undefined ? t : Math.min(t0, t);
      if (opts.end === undefined) t1 = t1 === undefined ? t : Math.max(t1, t);
    }
  }
  if (nowEl) {
    const v = series.length ? lastValue(series[0].points) : null;
    if (opts.stale) {
      // no current value (a lost GPU): say so, and what the last one was, rather than show it as now
      const last = v === null ? "" : `; its last reading: ${fmt(v)}`;
      nowEl.innerHTML = `<span class="bad" data-stale="${esc(opts.stale.label)}" title="${esc(opts.stale.why + last)}">${esc(opts.stale.label)}</span>`;
    } else {
      nowEl.innerHTML = opts.now === false || v === null ? "" : esc(fmt(v));
    }
  }

  const svg = el("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, role: "img", "data-series": series.length, "data-points": total });
  svg.setAttribute("aria-label", `${card.id || "chart"}: ${total} points`);
  if (!total || t0 === undefined || t1 === undefined) {
    el("text", { x: W / 2, y: MT + plotH / 2, "text-anchor": "middle", class: "empty-text" }, svg).textContent = opts.empty || "no data yet";
    box.replaceChildren(svg);
    return;
  }
  if (t1 <= t0) t1 = t0 + 60;

  // y scale
  let lo = Math.min(...values);
  let hi = Math.max(...values);
  const y = opts.y || {};
  if (finite(y.floor)) lo = Math.min(lo, y.floor);
  if (finite(y.ceil)) hi = Math.max(hi, y.ceil);
  for (const th of opts.thresholds || []) if (th.within !== false) hi = Math.max(hi, th.v);
  const ticks = niceTicks(finite(y.min) ? y.min : lo, finite(y.max) ? y.max : hi, Math.max(2, Math.floor(plotH / 34)), y.integer);
  const ylo = finite(y.min) ? y.min : ticks.lo;
  const yhi = finite(y.max) ? y.max : ticks.hi;
  const X = (t) => ML + ((t - t0) / (t1 - t0)) * (W - ML - MR);
  const Y = (v) => MT + plotH - ((Math.min(yhi, Math.max(ylo, v)) - ylo) / (yhi - ylo || 1)) * plotH;

  // grid and axes
  const axis = el("g", { class: "axis" }, svg);
  for (const v of ticks.ticks) {
    if (v < ylo - 1e-9 || v > yhi + 1e-9) continue;
    el("line", { x1: ML, x2: W - MR, y1: Y(v), y2: Y(v), class: "gridline" }, axis);
    el("text", { x: ML - 6, y: Y(v) + 3.5, "text-anchor": "end" }, axis).textContent = compact(v, ticks.step);
  }
  const tt = timeTicks(t0, t1, Math.max(2, Math.floor((W - ML - MR) / 80)));
  for (const { t, label } of tt) {
    el("line", { x1: X(t), x2: X(t), y1: MT + plotH, y2: MT + plotH + 4, class: "axisline" }, axis);
    el("text", { x: X(t), y: H - 5, "text-anchor": "middle" }, axis).textContent = label;
  }
  el("line", { x1: ML, x2: W - MR, y1: MT + plotH, y2: MT + plotH, class: "axisline" }, axis);

  // bands behind the data
  for (const b of opts.bands || []) {
    const a = Math.max(X(t0), X(b.t0));
    const z = Math.min(X(t1), X(b.t1));
    if (z <= a) continue;
    const r = el("rect", { x: a, y: MT, width: Math.max(1, z - a), height: plotH, fill: b.color, class: "band" }, svg);
    if (b.label) el("title", {}, r).textContent = b.label;
  }
  for (const th of opts.thresholds || []) {
    if (th.v < ylo || th.v > yhi) continue;
    el("line", { x1: ML, x2: W - MR, y1: Y(th.v), y2: Y(th.v), stroke: th.color, class: "threshold" }, svg);
    if (th.label) {
      el("text", { x: W - MR - 2, y: Y(th.v) - 3, "text-anchor": "end", style: `fill:${th.color}` }, svg).textContent = th.label;
    }
  }

  // the series: a path per series, broken at gaps; an area under those that ask for one
  series.forEach((s, i) => {
    let d = "";
    let area = "";
    let run = [];
    const flush = () => {
      if (!run.length) return;
      d += run.map(([t, v], k) => `${k ? "L" : "M"}${X(t).toFixed(1)},${Y(v).toFixed(1)}`).join("");
      if (s.area && run.length > 1) {
        area += `M${X(run[0][0]).toFixed(1)},${Y(ylo).toFixed(1)}` + run.map(([t, v]) => `L${X(t).toFixed(1)},${Y(v).toFixed(1)}`).join("") +
          `L${X(run[run.length - 1][0]).toFixed(1)},${Y(ylo).toFixed(1)}Z`;
      }
      if (run.length === 1) el("circle", { cx: X(run[0][0]), cy: Y(run[0][1]), r: 2, fill: s.color, class: "dot" }, svg);
      run = [];
    };
    for (const p of s.points) {
      if (finite(p[1]) && p[0] >= t0 - 1e-6 && p[0] <= t1 + 1e-6) run.push(p);
      else flush();
    }
    flush();
    if (area) el("path", { d: area, fill: s.color, class: "area" }, svg);
    if (d) el("path", { d, stroke: s.color, class: "series", "data-label": s.label, "data-index": i }, svg);
  });

  // lanes under the plot: when each reason was active
  lanes.forEach((lane, i) => {
    const ly = MT + plotH + 6 + i * 11;
    el("text", { x: ML - 6, y: ly + 7.5, "text-anchor": "end", class: "lane-label" }, svg).textContent = lane.label;
    el("rect", { x: ML, y: ly, width: W - ML - MR, height: 8, fill: "#161e28" }, svg);
    for (const [a, z] of lane.spans) {
      const xa = Math.max(ML, X(a));
      const xz = Math.min(W - MR, X(z));
      if (xz <= xa) continue;
      const r = el("rect", { x: xa, y: ly, width: Math.max(2, xz - xa), height: 8, fill: lane.color, class: "lane", "data-lane": lane.label }, svg);
      el("title", {}, r).textContent = `${lane.label}: ${hhmm(a, true)}Z – ${hhmm(z, true)}Z`;
    }
  });
  if (lanes.length) {
    for (const { t } of tt) el("line", { x1: X(t), x2: X(t), y1: MT + plotH, y2: MT + plotH + laneH, class: "gridline" }, svg);
  }

  // markers: a dashed vertical line with a short label
  for (const m of opts.markers || []) {
    if (m.t < t0 || m.t > t1) continue;
    el("line", { x1: X(m.t), x2: X(m.t), y1: MT, y2: MT + plotH, stroke: m.color || "#f85149", class: "marker" }, svg);
    if (m.label) {
      const right = X(m.t) > W - 120;
      el("text", { x: X(m.t) + (right ? -4 : 4), y: MT + 10, "text-anchor": right ? "end" : "start", style: `fill:${m.color || "#f85149"}` }, svg).textContent = m.label;
    }
  }

  // crosshair and tooltip
  const cross = el("line", { y1: MT, y2: MT + plotH + laneH, class: "cross", visibility: "hidden" }, svg);
  const hit = el("rect", { x: ML, y: MT, width: W - ML - MR, height: plotH + laneH, fill: "transparent" }, svg);
  box.replaceChildren(svg);
  const tip = document.createElement("div");
  tip.className = "tip";
  box.appendChild(tip);
  hit.addEventListener("mouseleave", () => {
    cross.setAttribute("visibility", "hidden");
    tip.style.display = "none";
  });
  hit.addEventListener("mousemove", (ev) => {
    const rect = svg.getBoundingClientRect();
    const px = ((ev.clientX - rect.left) / rect.width) * W;
    const t = t0 + ((px - ML) / (W - ML - MR)) * (t1 - t0);
    let near = null;
    const rows = series.map((s) => {
      const p = nearest(s.points, t);
      if (p && (near === null || Math.abs(p[0] - t) < Math.abs(near - t))) near = p[0];
      return { s, v: p ? p[1] : null };
    });
    if (near === null) return;
    cross.setAttribute("x1", X(near));
    cross.setAttribute("x2", X(near));
    cross.setAttribute("visibility", "visible");
    const active = lanes.filter((l) => l.spans.some(([a, z]) => near >= a && near < z)).map((l) => l.label);
    tip.innerHTML = `<b>${esc(hhmm(near, true))}Z</b><br>` +
      rows.map(({ s, v }) => `<i style="background:${esc(s.color)}"></i>${esc(s.label)}: <b>${finite(v) ? esc(fmt(v)) : "no data"}</b>`).join("<br>") +
      (active.length ? `<br><span class="warn">${esc(active.join(", "))}</span>` : "");
    tip.style.display = "block";
    const left = (X(near) / W) * rect.width;
    tip.style.left = `${left + 12 + tip.offsetWidth > rect.width ? left - tip.offsetWidth - 12 : left + 12}px`;
    tip.style.top = "4px";
  });
  markFirstChart();
}

function nearest(points, t) {
  let lo = 0;
  let hi = points.length - 1;
  if (hi < 0) return null;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (points[mid][0] < t) lo = mid + 1;
    else hi = mid;
  }
  const a = points[Math.max(0, lo - 1)];
  const b = points[lo];
  return Math.abs(a[0] - t) <= Math.abs(b[0] - t) ? a : b;
}

// redraw on resize (the SVG is drawn at its pixel width so text is never stretched)
let observer = null;
function observe(box) {
  if (typeof ResizeObserver === "undefined") return;
  if (!observer) {
    const widths = new WeakMap();
    observer = new ResizeObserver((entries) => {
      for (const entry of entries) {
        if (!entry.target.isConnected) {
          observer.unobserve(entry.target); // its page was left
          continue;
        }
        const w = Math.floor(entry.contentRect.width);
        if (widths.get(entry.target) === w) continue;
        const first = !widths.has(entry.target);
        widths.set(entry.target, w);
        const last = drawn.get(entry.target);
        if (!first && last && entry.target.isConnected) draw(last.card, entry.target, last.opts);
      }
    });
  }
  observer.observe(box);
}

/** Where a page's charts start: `span` before `end`, or the first recorded point when history is shorter, so a
 * cluster that started ten minutes ago is not drawn as a sliver at the right of a four-hour axis. */
export function startOf(answers, end, span) {
  let first = Infinity;
  for (const list of answers) {
    for (const s of list || []) {
      const p = s.points.find((x) => x[1] !== null && x[1] !== undefined);
      if (p) first = Math.min(first, p[0]);
    }
  }
  return Number.isFinite(first) ? Math.max(end - span, first) : end - span;
}

/** Spans [t0, t1) where `test(value)` held, from points one `step` apart (a point covers [t, t + step)). */
export function spansOf(points, test, step) {
  const spans = [];
  let open = null;
  for (const [t, v] of points) {
    const on = v !== null && v !== undefined && test(v);
    if (on && open === null) open = t;
    if (!on && open !== null) {
      spans.push([open, t]);
      open = null;
    }
  }
  if (open !== null && points.length) spans.push([open, points[points.length - 1][0] + step]);
  return spans;
}
