// GPU cost over a period (24 h, 7 d or 30 d; `since` in the hash): headline money, GPUs held / idle / unallocated
// over time, cost bars per team, namespace and GPU model (the idle share in amber, capacity nobody held in grey),
// the idle-cost table, every workload's bill, the waste report (nodes left idle, big low-utilization holders, MIG
// slices held and unused) and the scale-to-zero recommendations with the Karpenter and cluster-autoscaler settings.

import * as api from "../api.js";
import { chartCard, startOf, timeChart } from "../charts.js";
import { $, dash, empty, html, nodeLink, num, pill, raw, refresher, set } from "../ui.js";

export const title = () => "cost";

const PERIODS = ["24h", "7d", "30d"];
const BAR_W = 420;
const BAR_H = 16;
const RELOAD_MS = 30000; // the report reads the whole period from the metric store: not on every summary

const usd = (v) => (v === null || v === undefined ? dash : `$${num(v, v >= 100 ? 0 : 2)}`);
const hours = (v) => num(v, v >= 100 ? 0 : 1);
const pct = (v) => (v === null || v === undefined ? dash : `${num(v)}%`);

function periodOf(query) {
  const p = query.get("since");
  return PERIODS.includes(p) ? p : "7d";
}

/** One row per group: a bar of what its held GPUs cost, the idle part of it in amber (and, for models, the capacity
 * nobody held in grey), scaled to the largest row. */
function bars(id, rows, { label, held, idle, spare }) {
  if (!rows.length) return empty("nothing held in this period");
  const totals = rows.map((r) => held(r) + (spare ? spare(r) : 0));
  const scale = Math.max(1e-9, ...totals);
  const x = (v) => (Math.max(0, v) / scale) * BAR_W;
  const line = (r) => {
    const h = held(r);
    const i = Math.min(h, idle(r));
    const s = spare ? spare(r) : 0;
    const tip = `${label(r)}: ${usd(h)} held (${usd(i)} of it idle)${spare ? `, ${usd(s)} unallocated` : ""}`;
    return html`<tr data-bar="${label(r)}"><td class="bar-name" title="${label(r)}">${label(r)}</td>
      <td><svg class="cost-bar" viewBox="0 0 ${BAR_W} ${BAR_H}" width="${BAR_W}" height="${BAR_H}" role="img" aria-label="${tip}"
        data-held="${h}" data-idle="${i}" data-spare="${s}"><title>${tip}</title>
        <rect class="track" x="0" y="2" width="${BAR_W}" height="${BAR_H - 4}" rx="3"></rect>
        <rect class="held" x="0" y="2" width="${x(h - i)}" height="${BAR_H - 4}"></rect>
        <rect class="idle" x="${x(h - i)}" y="2" width="${x(i)}" height="${BAR_H - 4}"></rect>
        ${spare ? html`<rect class="spare" x="${x(h)}" y="2" width="${x(s)}" height="${BAR_H - 4}"></rect>` : ""}
      </svg></td><td class="num">${usd(h + s)}</td></tr>`;
  };
  return html`<table class="cost-bars" id="${id}"><tbody>${rows.map(line)}</tbody></table>`;
}

function tile(label, value, cls = "", sub = "") {
  return html`<div class="kpi ${cls}"><div class="v">${value}</div><div class="l">${label}${sub ? html` · <b>${sub}</b>` : ""}</div></div>`;
}

function kpis(r) {
  const t = r.totals;
  const waste = r.waste.idle_allocated_cost_usd + r.waste.unallocated_cost_usd;
  const saved = r.recommendations.reduce((n, x) => n + x.saved_usd, 0);
  return html`${tile("GPU cost (held)", usd(t.cost_usd), "ok", `${hours(t.held_gpu_hours)} GPU-h`)}
    ${tile("idle allocated", usd(t.idle_cost_usd), t.idle_cost_usd > 0 ? "warn" : "ok", `${hours(t.idle_gpu_hours)} GPU-h`)}
    ${tile("unallocated", usd(t.unallocated_cost_usd), t.unallocated_cost_usd > 0 ? "warn" : "ok", `${hours(t.unallocated_gpu_hours)} GPU-h`)}
    ${tile("utilization held", pct(t.util_avg_pct))}
    ${tile("waste", usd(waste), waste > 0 ? "bad" : "ok")}
    ${tile("scale-to-zero saves", usd(saved), saved > 0 ? "warn" : "ok", `${r.recommendations.length} pool${r.recommendations.length === 1 ? "" : "s"}`)}`;
}

function workloadRows(list) {
  return list.map((w) => html`<tr data-workload="${w.workload}" data-namespace="${w.namespace}"><td><b>${w.workload}</b></td>
    <td>${w.namespace}</td><td>${w.team}</td><td>${pill(w.kind, "outline")}</td><td class="num">${num(w.peak_gpus, w.peak_gpus % 1 ? 2 : 0)}</td>
    <td class="num">${hours(w.gpu_hours)}</td><td class="num ${w.idle_gpu_hours ? "warn" : ""}">${hours(w.idle_gpu_hours)}</td>
    <td class="num">${pct(w.util_avg_pct)}</td><td class="num">${usd(w.cost_usd)}</td>
    <td class="num ${w.idle_cost_usd ? "warn" : ""}">${usd(w.idle_cost_usd)}</td></tr>`);
}

function workloadTable(id, list, none) {
  if (!list.length) return html`<div class="empty" data-empty="${id}">${none}</div>`;
  return html`<div class="scroll"><table id="${id}"><thead><tr><th>workload</th><th>namespace</th><th>team</th><th>kind</th>
    <th class="num">peak GPUs</th><th class="num">GPU-h</th><th class="num">idle GPU-h</th><th class="num">util</th>
    <th class="num">cost</th><th class="num">idle cost</th></tr></thead><tbody>${workloadRows(list)}</tbody></table></div>`;
}

function waste(w) {
  const nodes = w.idle_nodes.length
    ? html`<table id="idle-nodes"><thead><tr><th>node</th><th>pool</th><th class="num">GPUs</th><th class="num">reported h</th>
      <th class="num">idle h</th><th class="num">empty h</th><th class="num">longest idle h</th><th class="num">idle cost</th></tr></thead>
      <tbody>${w.idle_nodes.map((n) => html`<tr data-node="${n.node}"><td>${nodeLink(n.node)}</td><td>${n.pool}</td>
        <td class="num">${num(n.gpus)}</td><td class="num">${hours(n.covered_hours)}</td><td class="num warn">${hours(n.idle_hours)}</td>
        <td class="num">${hours(n.empty_hours)}</td><td class="num">${hours(n.longest_idle_h)}</td><td class="num">${usd(n.idle_cost_usd)}</td></tr>`)}</tbody></table>`
    : html`<div class="empty" data-empty="idle-nodes">no node sat idle long</div>`;
  const low = w.low_util_workloads.length
    ? html`<table id="low-util"><thead><tr><th>workload</th><th>namespace</th><th>team</th><th class="num">peak GPUs</th>
      <th class="num">util</th><th class="num">GPU-h</th><th class="num">cost</th><th class="num">wasted</th></tr></thead>
      <tbody>${w.low_util_workloads.map((x) => html`<tr data-workload="${x.workload}"><td><b>${x.workload}</b></td><td>${x.namespace}</td>
        <td>${x.team}</td><td class="num">${num(x.peak_gpus)}</td><td class="num warn">${pct(x.util_avg_pct)}</td><td class="num">${hours(x.gpu_hours)}</td>
        <td class="num">${usd(x.cost_usd)}</td><td class="num bad">${usd(x.wasted_usd)}</td></tr>`)}</tbody></table>`
    : html`<div class="empty" data-empty="low-util">no workload holds many GPUs at low utilization</div>`;
  const mig = w.idle_mig_slices.length
    ? html`<table id="idle-mig"><thead><tr><th>node</th><th>GPU</th><th>instance</th><th>profile</th><th>held by</th>
      <th class="num">held h</th><th class="num">idle</th><th class="num">idle cost</th></tr></thead>
      <tbody>${w.idle_mig_slices.map((s) => html`<tr data-slice="${s.node}/${s.gpu}/${s.gi_id}"><td>${nodeLink(s.node)}</td><td>${s.gpu}</td>
        <td>GI ${s.gi_id}</td><td>${s.profile}</td><td>${s.workload ? `${s.namespace}/${s.workload}` : dash}</td>
        <td class="num">${hours(s.held_hours)}</td><td class="num warn">${num(100 * s.idle_share)}%</td><td class="num">${usd(s.idle_cost_usd)}</td></tr>`)}</tbody></table>`
    : html`<div class="empty" data-empty="idle-mig">no MIG slice held and unused</div>`;
  return html`<p class="muted">${hours(w.idle_allocated_gpu_hours)} idle allocated GPU-hours (${usd(w.idle_allocated_cost_usd)}) and
      ${hours(w.unallocated_gpu_hours)} unallocated (${usd(w.unallocated_cost_usd)}).</p>
    <h3 class="sub-h">nodes left idle</h3>${nodes}
    <h3 class="sub-h">workloads holding many GPUs at low utilization</h3>${low}
    <h3 class="sub-h">MIG slices held and unused</h3>${mig}`;
}

function recommendations(list) {
  if (!list.length) return html`<div class="empty" data-empty="recommendations">no node pool sat empty long enough to scale down</div>`;
  return list.map((r) => html`<div class="recommendation" data-pool="${r.pool}">
    <h3><span class="pool">${r.pool}</span> ${pill(r.consolidation_policy, "info")}
      <span class="right">saves <b>${usd(r.saved_usd)}</b> · ${hours(r.saved_gpu_hours)} GPU-h</span></h3>
    <p>${r.why}</p>
    <p class="muted">nodes that could go: ${r.removable_nodes.slice(0, 12).map((n, i) => html`${i ? ", " : ""}${nodeLink(n)}`)}${r.removable_nodes.length > 12 ? ` and ${r.removable_nodes.length - 12} more` : ""}</p>
    ${Object.keys(r.out_of_service_nodes || {}).length ? html`<p class="held-back">left out, out of service and not idle capacity:
      ${Object.entries(r.out_of_service_nodes).map(([n, why], i) => html`${i ? "; " : ""}<span data-node="${n}">${nodeLink(n)} <span class="warn">${why}</span></span>`)}</p>` : ""}
    <div class="grid g2"><div><div class="muted">Karpenter NodePool</div><pre class="settings karpenter">${r.karpenter}</pre></div>
      <div><div class="muted">cluster-autoscaler</div><pre class="settings autoscaler">${r.cluster_autoscaler}</pre></div></div></div>`);
}

function prices(list) {
  return html`<table id="prices"><thead><tr><th>model</th><th>provider</th><th>offering</th><th class="num">$/GPU-h</th><th>source</th></tr></thead>
    <tbody>${list.map((p) => html`<tr><td>${p.model}</td><td>${p.provider}</td><td>${p.offering}</td>
      <td class="num ${p.usd_per_gpu_hour === null ? "bad" : ""}">${p.usd_per_gpu_hour === null ? "no price" : usd(p.usd_per_gpu_hour)}</td>
      <td class="source">${p.source}</td></tr>`)}</tbody></table>`;
}

export async function mount(root, ctx) {
  let since = periodOf(ctx.query);
  root.innerHTML = String(html`
    <div class="title"><h1>Cost</h1><span class="sub" id="cost-sub"></span>
      <span class="right"><span class="seg" id="periods">${PERIODS.map((p) => html`<button type="button" data-since="${p}" class="${p === since ? "on" : ""}">${p}</button>`)}</span></span></div>
    <section class="kpis" id="cost-kpis"></section>
    <div class="panel" style="margin-bottom:14px"><h2>GPUs held, idle and unallocated</h2>${raw(chartCard("cost-gpus", "held · held and idle · unallocated", "GPUs", { height: 140 }))}</div>
    <div class="grid g3" style="margin-bottom:14px">
      <div class="panel"><h2>by team</h2><div id="by-team"></div></div>
      <div class="panel"><h2>by namespace</h2><div id="by-namespace"></div></div>
      <div class="panel"><h2>by GPU model <span class="right muted">grey: nobody held it</span></h2><div id="by-model"></div></div>
    </div>
    <div class="panel" style="margin-bottom:14px"><h2>idle cost of allocated GPUs <span class="right muted">held below the idle threshold</span></h2><div id="idle-cost"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>workloads <span class="right muted">costliest first</span></h2><div id="workloads"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>waste report</h2><div id="waste"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>scale to zero</h2><div id="recommendations"></div></div>
    <div class="panel"><h2>prices</h2><div id="prices-used"></div><div id="cost-notes" class="muted"></div></div>`);

  let loadedAt = 0;
  const load = refresher("cost", async () => {
    loadedAt = Date.now();
    const r = await api.get("/api/v1/cost", { since });
    api.noteTime(r.end);
    const covered = r.asked_hours ? ` (the metric history covers ${hours(r.hours)} h of it)` : "";
    set($("#cost-sub", root), `last ${since}${covered} · a point every ${num(r.step_s / 60)} min · idle below ${num(r.idle_below_pct)}% · ${r.currency}`);
    set($("#cost-kpis", root), kpis(r));
    const tl = r.usage.timeline;
    const pts = (key) => tl.times.map((t, i) => [t, tl[key][i]]);
    const series = [
      { label: "held", color: "#58a6ff", points: pts("held"), area: true },
      { label: "held, idle", color: "#d29922", points: pts("idle") },
      { label: "unallocated", color: "#8796a8", points: pts("unallocated") },
    ];
    timeChart($("#cost-gpus", root), {
      start: startOf([series], r.end, r.end - r.start), end: r.end, unit: "GPUs", y: { floor: 0 }, series,
      empty: "no GPU reported in this period",
    });
    const byModel = r.by_model.map((m) => ({ ...m, label: `${m.model} (${m.provider} ${m.offering})` }));
    set($("#by-team", root), bars("team-bars", r.by_team, { label: (g) => g.name, held: (g) => g.cost_usd, idle: (g) => g.idle_cost_usd }));
    set($("#by-namespace", root), bars("namespace-bars", r.by_namespace, { label: (g) => g.name, held: (g) => g.cost_usd, idle: (g) => g.idle_cost_usd }));
    set($("#by-model", root), bars("model-bars", byModel, {
      label: (m) => m.label, held: (m) => m.cost_usd, idle: (m) => m.idle_cost_usd, spare: (m) => m.unallocated_cost_usd,
    }));
    const idle = r.by_workload.filter((w) => w.idle_gpu_hours > 0).sort((a, b) => b.idle_cost_usd - a.idle_cost_usd || b.idle_gpu_hours - a.idle_gpu_hours);
    set($("#idle-cost", root), workloadTable("idle-table", idle, "no allocated GPU sat idle"));
    set($("#workloads", root), workloadTable("workload-table", r.by_workload, "no workload held a GPU in this period"));
    set($("#waste", root), waste(r.waste));
    set($("#recommendations", root), html`${recommendations(r.recommendations)}`);
    set($("#prices-used", root), prices(r.prices));
    set($("#cost-notes", root), html`${r.notes.map((n) => html`<p>${n}</p>`)}`);
    root.dataset.costSince = since; // the period drawn (the browser tests wait on it)
  });

  root.querySelector("#periods").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-since]");
    if (b) ctx.setQuery({ since: b.dataset.since });
  });

  await load();
  return {
    onQuery: async (query) => {
      since = periodOf(query);
      root.querySelectorAll("#periods button").forEach((b) => b.classList.toggle("on", b.dataset.since === since));
      await load();
    },
    onSummary: () => {
      if (Date.now() - loadedAt > RELOAD_MS) load();
    },
  };
}
