// Fleet overview: headline figures, the per-GPU heat map (utilization, temperature, power or memory), fleet history
// on three charts (%, °C, kW each on its own axis), idle GPUs held by a job, open incidents, jobs and recent events.

import * as api from "../api.js";
import { chartCard, niceTicks, rampColor, rampCss, timeChart } from "../charts.js";
import {
  $, ago, causeLinks, clock, empty, entityLink, entityTextLink, gpuHref, gpuLink, html, incidentLink, num, pill,
  raw, refresher, set, unit,
} from "../ui.js";

export const title = () => "overview";

const MODES = {
  util: { label: "utilization", unit: "%", ramp: "util" },
  temp: { label: "temperature", unit: "°C", ramp: "temp" },
  power: { label: "power", unit: "W", ramp: "power" },
  mem: { label: "memory", unit: "GiB", ramp: "mem" },
};
const MODE_KEY = "gpufleet.heatmap";
const EVENT_KINDS = "kmsg,link,incident,action,agent";

/** Framebuffer size in GiB from the model name ("NVIDIA H100 80GB HBM3" -> 80), or null. */
function memoryGiB(model) {
  const m = /(\d+)\s*GB/i.exec(model || "");
  return m ? Number(m[1]) : null;
}

/** A headline figure: its value with a short unit, and a label that may carry a detail ("6 critical"). */
function kpi(label, value, { cls = "", href, suffix, sub, title } = {}) {
  const inner = html`<div class="v">${value}${suffix ? html`<small>${suffix}</small>` : ""}</div>
    <div class="l">${label}${sub ? html` · <b>${sub}</b>` : ""}</div>`;
  return href
    ? html`<a class="kpi ${cls}" href="${href}" title="${title || ""}">${inner}</a>`
    : html`<div class="kpi ${cls}" title="${title || ""}">${inner}</div>`;
}

function kpis(s) {
  const hot = s.temp_max === null ? "" : s.temp_max >= 85 ? "bad" : s.temp_max >= 80 ? "warn" : "ok";
  return html`
    ${kpi("GPUs", num(s.gpus), { sub: `${s.nodes} nodes${s.nodes_lost ? `, ${s.nodes_lost} lost` : ""}`, cls: s.nodes_lost ? "bad" : "ok" })}
    ${kpi("mean utilization", num(s.util_mean, 1), { suffix: "%" })}
    ${kpi("power", num(s.power_kw, 1), { suffix: "kW" })}
    ${kpi("hottest GPU", s.temp_max === null ? "–" : num(s.temp_max), { suffix: s.temp_max === null ? "" : "°C", cls: hot })}
    ${kpi("GPUs lost / throttled", `${s.gpus_lost} / ${s.gpus_throttled}`, {
      cls: s.gpus_lost ? "bad" : s.gpus_throttled ? "warn" : "ok", href: "#/incidents?state=open",
    })}
    ${kpi("idle GPUs held", num(s.gpus_idle_held), { cls: s.gpus_idle_held ? "warn" : "ok", title: "allocated to a job but under 5 % busy" })}
    ${kpi("jobs running / stalled", `${s.jobs.Running || 0} / ${s.jobs.Stalled || 0}`, { cls: s.jobs.Stalled ? "warn" : "ok", href: "#/jobs" })}
    ${kpi("IB links down", num(s.links_down), { cls: s.links_down ? "bad" : "ok", href: "#/fabric" })}
    ${kpi("incidents open", num(s.incidents_open), {
      cls: s.incidents_critical ? "bad" : s.incidents_open ? "warn" : "ok", href: "#/incidents?state=open",
      sub: s.incidents_critical ? `${s.incidents_critical} critical` : "",
    })}`;
}

/** Every GPU's cell state and value under `mode`, from the summary's grid and (when fetched) the GPU rows. */
function cells(s, gpus, mode) {
  const rows = new Map((gpus || []).map((g) => [`${g.node}/${g.gpu}`, g]));
  let max = 0;
  const nodes = s.grid.map((n) => {
    const agentLost = /AgentLost/.test(n.status);
    const list = n.util.map((u, i) => {
      const g = rows.get(`${n.node}/${i}`);
      const lost = g ? g.health === "lost" : u === null && !agentLost;
      let v = null;
      if (mode === "util") v = g ? g.util_pct : u;
      else if (mode === "temp") v = g ? g.temp_c : n.temp[i];
      else if (mode === "power") v = g ? g.power_w : null;
      else if (mode === "mem") v = g && g.fb_used_mib !== null ? g.fb_used_mib / 1024 : null;
      if (v !== null && v !== undefined) max = Math.max(max, v);
      const idle = n.allocated[i] && u !== null && u < 5;
      return { i, v, lost, thr: n.throttled[i], idle, g };
    });
    return { n, agentLost, list };
  });
  return { nodes, max };
}

function scale(mode, max, gpus) {
  if (mode === "util") return [0, 100];
  if (mode === "temp") return [25, 95];
  if (mode === "power") return [0, niceTicks(0, Math.max(300, max), 4).hi];
  // the inventory's memory where the agent reported it; else the size in the model's name
  const total = Math.max(0, ...(gpus || []).map((g) => (g.fb_total_mib ? g.fb_total_mib / 1024 : memoryGiB(g.model)) || 0));
  return [0, total || niceTicks(0, Math.max(8, max), 4).hi];
}

function fmtValue(mode, v) {
  if (v === null || v === undefined) return "no data";
  if (mode === "mem") return `${num(v, 1)} GiB`;
  return unit(v, MODES[mode].unit, mode === "power" ? 0 : 0);
}

function heatmap(s, gpus, mode) {
  const { nodes, max } = cells(s, gpus, mode);
  const [lo, hi] = scale(mode, max, gpus);
  if (!nodes.length && !(s.nodes_degraded || []).length) return { body: empty("no nodes have reported yet"), lo, hi };
  const body = html`<div class="heat">${nodes.map(({ n, agentLost, list }) => {
    const cls = [agentLost ? "agentlost" : "", n.cordoned ? "cordoned" : ""].join(" ");
    return html`<div class="hrow ${cls}" data-node="${n.node}" title="${n.node}: ${n.status}">
      <a class="name" href="#/node/${encodeURIComponent(n.node)}">${n.node}${n.cordoned ? " ⊘" : ""}</a>
      <div class="cells" style="--n:${list.length}">${list.map((c) => {
        const state = c.lost ? "lost" : agentLost || c.v === null || c.v === undefined ? "nodata" : c.thr ? "throttled" : "ok";
        const bg = state === "ok" || state === "throttled" ? `background:${rampColor(MODES[mode].ramp, (c.v - lo) / (hi - lo || 1))}` : "";
        const what = c.lost ? "lost (off the bus)" : agentLost ? "agent lost" : fmtValue(mode, c.v);
        const extra = [c.thr ? "throttled" : "", c.idle ? "held but idle" : "", c.g && c.g.held_by ? `held by ${c.g.held_by}` : ""].filter(Boolean).join(", ");
        return html`<a class="hcell ${c.lost ? "lost" : state === "nodata" ? "nodata" : ""} ${c.thr ? "thr" : ""} ${c.idle ? "idle" : ""}"
          href="${gpuHref(n.node, c.i)}" data-node="${n.node}" data-gpu="${c.i}" data-state="${state}" style="${bg}"
          title="${n.node} GPU ${c.i}: ${what}${extra ? ` (${extra})` : ""}"></a>`;
      })}</div></div>`;
  })}${(s.nodes_degraded || []).map((d) => html`<div class="hrow degraded" data-node="${d.node}" data-degraded="1">
      <a class="name" href="#/node/${encodeURIComponent(d.node)}">${d.node}</a>
      <div class="bad blind">GPU source down: ${Object.entries(d.sources_down).map(([k, why]) => `${k}: ${why}`).join("; ")}</div></div>`)}</div>`;
  return { body, lo, hi };
}

function legend(mode, lo, hi) {
  const u = mode === "mem" ? "GiB" : MODES[mode].unit;
  return html`<span>${num(lo)}<span class="ramp" style="background:${rampCss(MODES[mode].ramp)}"></span>${num(hi)} ${u}</span>
    <span><span class="sw" style="background:repeating-linear-gradient(45deg,#f85149 0 3px,#3a1214 3px 6px)"></span>lost (off the bus)</span>
    <span><span class="sw" style="box-shadow:inset 0 0 0 2px #d29922;background:#1c2430"></span>throttled (thermal or power brake)</span>
    <span><span class="sw" style="background:#1c2430;position:relative"></span>● held by a job but idle</span>
    <span><span class="sw" style="border-left:3px solid #d29922;background:#1d1a10"></span>node cordoned ⊘</span>
    <span><span class="sw" style="background:repeating-linear-gradient(45deg,#2a3340 0 2px,#161c24 2px 5px)"></span>no data</span>`;
}

function incidentsTable(list, now) {
  if (!list.length) return empty("no open incidents");
  const order = { critical: 0, warning: 1, info: 2 };
  const rows = [...list].sort((a, b) => order[a.severity] - order[b.severity] || b.first_seen - a.first_seen).slice(0, 10);
  return html`<table><thead><tr><th>severity</th><th>incident</th><th>cause</th><th>where</th><th>opened</th><th>what it caused</th></tr></thead>
    <tbody>${rows.map((i) => html`<tr><td>${pill(i.severity)}</td><td class="nowrap">${incidentLink(i.id)} ${i.state !== "open" ? pill(i.state) : ""}</td>
      <td>${i.cause}</td><td>${entityLink(i.entity)}</td><td class="nowrap">${ago(now - i.first_seen)}</td>
      <td>${i.effects.length ? i.effects.join("; ") : html`<span class="dim">–</span>`}</td></tr>`)}</tbody></table>
    ${list.length > rows.length ? html`<div class="muted" style="margin-top:6px"><a href="#/incidents?state=open">all ${list.length} open incidents →</a></div>` : ""}`;
}

function idleTable(gpus, s) {
  let rows;
  if (gpus) rows = gpus.filter((g) => g.held_by && g.util_pct !== null && g.util_pct < 5);
  else {
    rows = [];
    for (const n of s.grid) n.util.forEach((u, i) => n.allocated[i] && u !== null && u < 5 && rows.push({ node: n.node, gpu: i, util_pct: u, held_by: "" }));
  }
  if (!rows.length) return empty("none: every GPU a job holds is busy");
  return html`<table><thead><tr><th>GPU</th><th>held by</th><th class="num">util</th></tr></thead><tbody>${rows.map(
    (g) => html`<tr><td>${gpuLink(g.node, g.gpu)}</td><td>${g.held_by || "–"}</td><td class="num">${unit(g.util_pct, "%")}</td></tr>`,
  )}</tbody></table>`;
}

function jobsTable(rows) {
  if (!rows.length) return empty("no training jobs");
  return html`<table><thead><tr><th>job</th><th>state</th><th class="num">ranks</th><th class="num">step time</th><th>last step</th><th>cause</th></tr></thead>
    <tbody>${rows.map((j) => html`<tr><td class="nowrap">${j.name}</td><td>${pill(j.state)}</td><td class="num">${j.ranks}</td>
      <td class="num">${num(j.step_time_s, 2)} s</td><td class="nowrap ${j.state === "Stalled" ? "warn" : ""}">${ago(j.last_step_age_s)}</td>
      <td>${causeLinks(j.cause)}</td></tr>`)}</tbody></table>`;
}

function eventLine(e) {
  return html`<div><span class="t">${clock(e.time).slice(11)}</span> <span class="k">${e.kind}</span> ${entityTextLink(e.entity)}  ${e.message}</div>`;
}

export async function mount(root, ctx) {
  let mode = ctx.query.get("map") || localStorage.getItem(MODE_KEY) || "util";
  if (!MODES[mode]) mode = "util";
  root.innerHTML = String(html`
    <section class="kpis" id="kpis"></section>
    <section class="panel" style="margin-bottom:14px">
      <h2>GPUs by node <span class="muted" style="text-transform:none;letter-spacing:0;font-weight:400">each square is one GPU; click for its page</span>
        <span class="right seg" id="modes">${Object.entries(MODES).map(([k, m]) => html`<button type="button" data-mode="${k}">${m.label}</button>`)}</span></h2>
      <div id="heat"></div><div class="hlegend" id="heat-legend"></div>
    </section>
    <section class="grid g3" style="margin-bottom:14px">
      ${raw(chartCard("chart-util", "fleet utilization, mean", "%"))}
      ${raw(chartCard("chart-temp", "hottest GPU", "°C"))}
      ${raw(chartCard("chart-power", "fleet power", "kW"))}
    </section>
    <section class="grid g3">
      <div class="panel span2"><h2>open incidents <span class="right"><a href="#/incidents">all incidents →</a></span></h2><div id="incidents"></div></div>
      <div class="panel"><h2>idle GPUs held by a job</h2><div id="idle"></div></div>
      <div class="panel"><h2>training jobs <span class="right"><a href="#/jobs">jobs →</a></span></h2><div id="jobs"></div></div>
      <div class="panel span2"><h2>recent events</h2><div class="log" id="events"></div></div>
    </section>`);

  let summary = null;
  let gpus = null;
  let events = [];

  const drawHeat = () => {
    if (!summary) return;
    const { body, lo, hi } = heatmap(summary, gpus, mode);
    set($("#heat", root), body);
    set($("#heat-legend", root), legend(mode, lo, hi));
    root.querySelectorAll("#modes button").forEach((b) => b.classList.toggle("on", b.dataset.mode === mode));
  };

  const drawHistory = (s) => {
    const h = s.history || [];
    const start = h.length ? Math.min(h[0].t, s.time - 600) : s.time - 3600;
    const common = { start, end: s.time, empty: "no data yet: the control plane records fleet history every minute" };
    timeChart($("#chart-util", root), {
      ...common, unit: "%", y: { min: 0, max: 100 },
      series: [{ label: "mean utilization", color: "#58a6ff", area: true, points: h.map((p) => [p.t, p.util]) }],
    });
    timeChart($("#chart-temp", root), {
      ...common, unit: "°C", y: { floor: 20, ceil: 90 },
      series: [{ label: "hottest GPU", color: "#f0883e", points: h.map((p) => [p.t, p.temp]) }],
    });
    timeChart($("#chart-power", root), {
      ...common, unit: "kW", y: { floor: 0 },
      fmt: (v) => `${num(v, 1)} kW`,
      series: [{ label: "fleet power", color: "#bc8cff", area: true, points: h.map((p) => [p.t, p.power]) }],
    });
  };

  const drawEvents = () => set($("#events", root), events.length ? events.slice(0, 40).map(eventLine) : empty("no events yet"));

  const render = (s) => {
    summary = s;
    api.noteTime(s.time);
    ctx.header(s);
    set($("#kpis", root), kpis(s));
    drawHeat();
    drawHistory(s);
    set($("#incidents", root), incidentsTable(s.incidents || [], s.time));
    set($("#idle", root), idleTable(gpus, s));
    set($("#jobs", root), jobsTable(s.job_rows || []));
  };

  const load = refresher("overview", async () => {
    // the summary draws the figures and charts; the GPU rows (power, memory, who holds what) follow
    const rows = api.get("/api/v1/gpus").catch(() => null);
    render(await api.get("/api/v1/summary"));
    const g = await rows;
    if (g) {
      gpus = g;
      drawHeat();
      set($("#idle", root), idleTable(gpus, summary));
    }
});

  root.querySelector("#modes").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-mode]");
    if (!b) return;
    mode = b.dataset.mode;
    localStorage.setItem(MODE_KEY, mode);
    drawHeat();
  });

  // the summary first (it draws the charts), events after
  await load();
  api.get("/api/v1/events", { kind: EVENT_KINDS, limit: 40 })
    .then((ev) => {
      events = ev;
      drawEvents();
    })
    .catch((err) => set($("#events", root), html`<span class="bad">${err.error || err.message}</span>`));

  return {
    onSummary: () => load(),
    onEvent: (e) => {
      if (!EVENT_KINDS.split(",").includes(e.kind)) return;
      events = [e, ...events.filter((x) => x.id !== e.id)].slice(0, 40);
      drawEvents();
    },
    onQuery: (q) => {
      if (q.get("map") && MODES[q.get("map")]) {
        mode = q.get("map");
        drawHeat();
      }
    },
  };
}
