// Training jobs: running or stalled, their step time and how long since the last step, stragglers, restarts, and
// the incident that stalled one when the control plane knows it. Inference services: traffic, errors and latency
// percentiles against their objective, drawn on a log scale, with the p99 history.

import * as api from "../api.js";
import { chartCard, startOf, timeChart } from "../charts.js";
import { $, ago, causeLinks, dash, empty, gpuLink, html, nodeLink, num, pill, raw, refresher, set } from "../ui.js";

export const title = () => "jobs";

const SVGNS = "http://www.w3.org/2000/svg";
const LAT_MIN = 0.005; // the latency axis spans 5 ms .. 20 s, log scale
const LAT_MAX = 20;
const SERVICE_PILL = { Serving: "ok", "SLO breached": "bad", "Too little traffic": "warn", Idle: "outline" };

function ms(v) {
  if (v === null || v === undefined) return dash;
  return v < 1 ? `${num(v * 1000)} ms` : `${num(v, 2)} s`;
}

/** p50, p95, p99 as ticks on a log axis with the objective as a line: how far from the SLO, at a glance. */
function latencyBar(svc) {
  const W = 220;
  const H = 22;
  const x = (v) => (Math.log(Math.min(LAT_MAX, Math.max(LAT_MIN, v)) / LAT_MIN) / Math.log(LAT_MAX / LAT_MIN)) * (W - 2) + 1;
  const svg = document.createElementNS(SVGNS, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("width", W);
  svg.setAttribute("height", H);
  svg.setAttribute("class", "latency-bar");
  const add = (tag, attrs, text) => {
    const e = document.createElementNS(SVGNS, tag);
    for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
    if (text) e.textContent = text;
    svg.appendChild(e);
    return e;
  };
  add("rect", { x: 0, y: 8, width: W, height: 6, rx: 3, class: "track" });
  const marks = [["p50", svc.p50_s, 0.45], ["p95", svc.p95_s, 0.7], ["p99", svc.p99_s, 1]];
  const known = marks.filter(([, v]) => v !== null && v !== undefined);
  if (known.length) {
    const x0 = x(known[0][1]);
    const x1 = x(known[known.length - 1][1]);
    const over = svc.slo_p99_s && svc.p99_s > svc.slo_p99_s;
    add("rect", { x: x0, y: 8, width: Math.max(2, x1 - x0), height: 6, rx: 3, class: `span ${over ? "bad" : "ok"}` });
    for (const [label, v, o] of known) {
      add("line", { x1: x(v), x2: x(v), y1: 5, y2: 17, class: "q", "data-q": label, "stroke-opacity": o }).appendChild(
        Object.assign(document.createElementNS(SVGNS, "title"), { textContent: `${label} ${ms(v)}` }),
      );
    }
  }
  if (svc.slo_p99_s) {
    const line = add("line", { x1: x(svc.slo_p99_s), x2: x(svc.slo_p99_s), y1: 1, y2: 21, class: "slo" });
    line.appendChild(Object.assign(document.createElementNS(SVGNS, "title"), { textContent: `objective: p99 under ${ms(svc.slo_p99_s)}` }));
  }
  return svg.outerHTML;
}

function gpusOf(list) {
  const links = list.slice(0, 4).map((g, i) => {
    const [node, index] = g.split("/");
    return html`${i ? ", " : ""}${gpuLink(node, index, g)}`;
  });
  return list.length > 4 ? html`${links}<span class="muted" title="${list.join(", ")}"> and ${list.length - 4} more</span>` : links;
}

function services(rows) {
  if (!rows.length) return empty("no inference services reported");
  return html`<table id="services-table"><thead><tr><th>service</th><th>state</th><th class="num">replicas</th><th class="num">req/s</th>
    <th class="num">p50</th><th class="num">p95</th><th class="num">p99</th><th>latency <span class="muted">(5 ms … 20 s, log)</span></th>
    <th class="num">objective</th><th class="num">errors</th><th>on</th></tr></thead>
    <tbody>${rows.map((r) => {
      const over = r.slo_p99_s && r.p99_s !== null && r.p99_s > r.slo_p99_s;
      return html`<tr data-service="${r.name}" data-state="${r.state}"><td><b>${r.name}</b></td><td>${pill(r.state, SERVICE_PILL[r.state] || "")}</td>
        <td class="num">${r.replicas}</td><td class="num">${num(r.requests_per_s, 1)}</td><td class="num">${ms(r.p50_s)}</td><td class="num">${ms(r.p95_s)}</td>
        <td class="num ${over ? "bad" : ""}">${ms(r.p99_s)}</td><td>${raw(latencyBar(r))}</td><td class="num">${r.slo_p99_s ? html`p99 &lt; ${ms(r.slo_p99_s)}` : dash}</td>
        <td class="num ${r.errors ? "warn" : ""}" title="${num(r.requests)} requests since the servers started">${r.error_ratio === null ? dash : `${num(r.errors)} (${num(r.error_ratio * 100, 2)}%)`}</td>
        <td>${gpusOf(r.gpus)}</td></tr>`;
    })}</tbody></table>`;
}

function loss(v) {
  if (v === null || v === undefined) return dash;
  return typeof v === "string" ? v : num(v, 3);
}

function stragglers(j) {
  if (!j.stragglers || !j.stragglers.length) return html`<span class="dim">${dash}</span>`;
  const first = j.stragglers.slice(0, 2).map((x, i) => html`${i ? ", " : ""}<span class="warn" title="rank ${x.rank}: ${num(x.compute_s, 2)} s per step vs the median ${num(j.rank_compute_median_s, 2)} s">${gpuLink(x.node, x.gpu, `rank ${x.rank}`)} ×${num(x.ratio, 2)}</span>`);
  return j.stragglers.length > 2 ? html`${first} <span class="muted">+${j.stragglers.length - 2}</span>` : first;
}

function nodesOf(list) {
  if (list.length <= 4) return list.map((n, i) => html`${i ? ", " : ""}${nodeLink(n)}`);
  return html`${list.slice(0, 3).map((n) => html`${nodeLink(n)}, `)}<span class="muted" title="${list.join(", ")}">and ${list.length - 3} more</span>`;
}

function table(rows) {
  if (!rows.length) return empty("no training jobs reported");
  const order = { Stalled: 0, Running: 1 };
  const sorted = [...rows].sort((a, b) => order[a.state] - order[b.state] || a.name.localeCompare(b.name));
  return html`<table id="jobs-table"><thead><tr><th>job</th><th>state</th><th class="num">nodes</th><th class="num">ranks</th><th class="num">step</th>
    <th class="num">step time</th><th>last step</th><th class="num">loss</th><th class="num">samples/s</th><th class="num">ckpt fails</th>
    <th>stragglers</th><th class="num">restarts</th><th>cause of the stall</th><th>on</th></tr></thead>
    <tbody>${sorted.map((j) => {
      const late = j.last_step_age_s > 3 * Math.max(1, j.step_time_s);
      return html`<tr data-job="${j.name}" data-state="${j.state}"><td><b>${j.name}</b></td><td>${pill(j.state)}</td><td class="num">${j.nodes}</td>
        <td class="num">${j.ranks}</td><td class="num">${num(j.step)}</td><td class="num">${num(j.step_time_s, 2)} s</td>
        <td class="nowrap ${j.state === "Stalled" ? "bad" : late ? "warn" : ""}">${ago(j.last_step_age_s)}</td>
        <td class="num ${typeof j.loss === "string" ? "bad" : ""}" data-col="loss" title="${j.validation_loss === null || j.validation_loss === undefined ? "" : `validation ${j.validation_loss}`}">${loss(j.loss)}</td>
        <td class="num" data-col="samples" title="${j.tokens_per_s ? `${num(j.tokens_per_s)} tokens/s` : ""}">${j.samples_per_s === null || j.samples_per_s === undefined ? dash : num(j.samples_per_s, 1)}</td>
        <td class="num ${j.checkpoints_failed ? "bad" : ""}" title="${num(j.checkpoints_ok || 0)} written">${j.checkpoints_failed || (j.checkpoints_ok ? 0 : dash)}</td>
        <td>${stragglers(j)}</td>
        <td class="num ${j.restarts ? "warn" : ""}">${j.restarts}</td>
        <td>${j.cause ? causeLinks(j.cause) : j.state === "Stalled" ? html`<span class="muted">not known yet</span>` : html`<span class="dim">–</span>`}</td>
        <td>${nodesOf(j.node_list)}</td></tr>`;
    })}</tbody></table>`;
}

export async function mount(root) {
  root.innerHTML = String(html`
    <div class="title"><h1>Jobs and inference services</h1><span class="sub" id="jobs-sub"></span></div>
    <section class="kpis" id="jobs-kpis"></section>
    <div class="panel" style="margin-bottom:14px"><h2>training jobs</h2><div id="jobs"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>inference services <span class="right muted">percentiles over the last minute; the worst replica's</span></h2><div id="services"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>training, last hour</h2><div class="grid g2">${raw(chartCard("job-loss", "loss by job", ""))}${raw(chartCard("job-samples", "samples/s by job", "/s"))}</div></div>
    <div class="panel"><h2>p99 latency, last hour</h2><div class="grid g1">${raw(chartCard("svc-p99", "p99 latency by service", "s"))}</div></div>`);
  let drawnAt = 0;
  const COLORS = ["#58a6ff", "#f0883e", "#bc8cff", "#3fb950", "#d29922", "#ff7b72"];

  const history = async (svcs) => {
    const span = 3600;
    const end = api.now() ?? (await api.fetchTime());
    const answer = await api.range("gpufleet_service_latency_p99_seconds", { end, span, points: 240, op: "max", by: "service" });
    const slo = Math.min(...svcs.map((r) => r.slo_p99_s).filter((v) => v));
    timeChart($("#svc-p99", root), {
      start: startOf([answer], end, span), end, unit: "s", y: { floor: 0 },
      fmt: (v) => ms(v), empty: "no latency history yet",
      thresholds: Number.isFinite(slo) ? [{ v: slo, color: "#f85149", label: `objective ${ms(slo)}` }] : [],
      series: answer.map((r, i) => ({ label: r.labels.service || "all", color: COLORS[i % COLORS.length], points: r.points })),
    });
  };

  const training = async () => {
    const span = 3600;
    const end = api.now() ?? (await api.fetchTime());
    const [lossSeries, rate] = await Promise.all([
      api.range("training_loss", { end, span, points: 240, op: "max", by: "job" }),
      api.range("training_samples_per_second", { end, span, points: 240, op: "max", by: "job" }),
    ]);
    const draw = (id, answer, unit, fmt, emptyText) =>
      timeChart($(id, root), {
        start: startOf([answer], end, span), end, unit, y: { floor: 0 }, fmt, empty: emptyText,
        series: answer.slice(0, 12).map((r, i) => ({ label: r.labels.job || "all", color: COLORS[i % COLORS.length], points: r.points })),
      });
    draw("#job-loss", lossSeries, "", (v) => num(v, 3), "no loss reported yet");
    draw("#job-samples", rate, "/s", (v) => num(v, 0), "no throughput reported yet");
  };

  const load = refresher("jobs", async () => {
    const [rows, svcs] = await Promise.all([api.get("/api/v1/jobs"), api.get("/api/v1/services")]);
    const running = rows.filter((j) => j.state === "Running").length;
    const stalled = rows.length - running;
    const breached = svcs.filter((r) => r.state === "SLO breached").length;
    const tile = (label, v, cls) => html`<div class="kpi ${cls}"><div class="v">${v}</div><div class="l">${label}</div></div>`;
    set($("#jobs-kpis", root), html`${tile("running", running, "ok")}${tile("stalled", stalled, stalled ? "bad" : "ok")}
      ${tile("ranks", num(rows.reduce((n, j) => n + j.ranks, 0)), "")}${tile("stragglers", num(rows.reduce((n, j) => n + (j.stragglers || []).length, 0)), "")}
      ${tile("services", svcs.length, "")}${tile("over objective", breached, breached ? "bad" : "ok")}
      ${tile("requests/s", num(svcs.reduce((n, r) => n + r.requests_per_s, 0)), "")}`);
    set($("#jobs-sub", root), `${rows.length} training job${rows.length === 1 ? "" : "s"}, ${svcs.length} inference service${svcs.length === 1 ? "" : "s"}`);
    set($("#jobs", root), table(rows));
    set($("#services", root), services(svcs));
    if (Date.now() - drawnAt > 15000) {
      drawnAt = Date.now();
      await Promise.all([history(svcs), training()]);
    }
});

  await load();
  return { onSummary: () => load() };
}
