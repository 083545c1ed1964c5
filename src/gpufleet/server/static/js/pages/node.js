// A node: its conditions and software, its GPUs (each linking to its page), its NICs with state and counters,
// per-node history (utilization, hottest GPU, power), its open incidents and its latest kernel-log lines.

import * as api from "../api.js";
import { chartCard, startOf, timeChart } from "../charts.js";
import {
  $, ago, banner, dash, empty, entityLink, gpuLink, html, incidentLink, markRange, mib, notFound, num,
  onRangeClick, pill, portHref, rangeOf, RANGES, rangeSeg, raw, refresher, set, unit,
} from "../ui.js";

export const title = (p) => p.name;

const SEVERE_CLOCK = new Set(["hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"]);

export function clockEventPills(list) {
  if (!list || !list.length) return html`<span class="dim">none</span>`;
  return list.map((c) => html`${pill(c, SEVERE_CLOCK.has(c) ? "warn" : "outline")} `);
}

// --- the MIG layout: the GPU's memory slices, one block per GPU instance at its placement, free slices dashed ----

const sizeClass = (profile) => `g${(/^(\d+)g/.exec(profile || "") || ["", "x"])[1]}`; // 3g.40gb -> g3

/** A MIG GPU's layout as SVG: its memory slices left to right, each GPU instance a block over the slices it spans
 * (labelled with its profile; the GI id, placement and MIG device on hover), free slices outlined and marked.
 * `compact` is the node page's version: one row high, a block labelled by its size (3g) where that fits. */
export function migBar(g, { compact = false } = {}) {
  if (g.mig_mode === false) return html`<span class="mig-off" data-mig="off">MIG off</span>`;
  if (g.mig_mode !== true) {
    return html`<span class="dim" data-mig="none">${compact ? dash : g.slices ? "MIG mode not reported" : "no MIG on this GPU"}</span>`;
  }
  const list = g.mig || [];
  const n = Math.max(g.slices || 0, ...list.map((m) => m.start + m.size), 1); // a model the catalog lacks: what NVML said
  const W = compact ? 160 : 800;
  const H = compact ? 18 : 46;
  const axis = compact ? 0 : 16;
  const cw = W / n;
  const used = new Set(list.flatMap((m) => Array.from({ length: m.size }, (_, k) => m.start + k)));
  const free = Array.from({ length: n }, (_, i) => i).filter((i) => !used.has(i));
  const freeRects = free.map((i) => html`<rect class="mig-free" data-slice="${i}" x="${i * cw + 1.5}" y="1.5" width="${cw - 3}" height="${H - 3}" rx="3"><title>memory slice ${i}: free</title></rect>
    ${compact ? "" : html`<text class="mig-free-label" x="${(i + 0.5) * cw}" y="${H / 2 + 4}" text-anchor="middle">free</text>`}`);
  const blocks = list.map((m) => {
    const x = m.start * cw;
    const w = m.size * cw;
    const tip = `GI ${m.gi_id} · ${m.profile} · slices ${m.start}${m.size > 1 ? `–${m.start + m.size - 1}` : ""}`
      + `${m.ci_id !== null && m.ci_id !== undefined ? ` · CI ${m.ci_id}` : ""}${m.uuid ? ` · ${m.uuid}` : ""}`;
    const label = compact ? (w >= 34 ? m.profile.split(".")[0] : "") : m.profile;
    return html`<g class="mig-block ${sizeClass(m.profile)}" data-profile="${m.profile}" data-gi="${m.gi_id}" data-start="${m.start}" data-size="${m.size}">
      <title>${tip}</title><rect x="${x + 1}" y="1" width="${w - 2}" height="${H - 2}" rx="3"></rect>
      ${label ? html`<text x="${x + w / 2}" y="${H / 2 + (compact ? 4 : 0)}" text-anchor="middle">${label}</text>` : ""}
      ${compact ? "" : html`<text class="gi" x="${x + w / 2}" y="${H / 2 + 14}" text-anchor="middle">GI ${m.gi_id}</text>`}</g>`;
  });
  const ticks = compact ? "" : Array.from({ length: n }, (_, i) => html`<text class="mig-tick" x="${(i + 0.5) * cw}" y="${H + 12}" text-anchor="middle">${i}</text>`);
  const summary = `${list.length} GPU instance${list.length === 1 ? "" : "s"} on ${n} memory slices, ${free.length} free`;
  const size = compact ? raw(`width="${W}" height="${H}"`) : raw('width="100%"');
  return html`<svg class="mig-bar${compact ? " compact" : ""}" data-mig="on" data-slices="${n}" viewBox="0 0 ${W} ${H + axis}"
    ${size} role="img" aria-label="${summary}"><title>${summary}</title>${freeRects}${blocks}${ticks}</svg>`;
}

function statusPills(status) {
  return String(status)
    .split(",")
    .map((s) => s.trim())
    .filter(Boolean)
    .map((s) => html`${pill(s, s === "Ready" ? "ok" : s === "SchedulingDisabled" ? "warn" : "bad")} `);
}

function conditions(list) {
  if (!list.length) return empty("no conditions reported");
  return html`<table><thead><tr><th>condition</th><th>status</th><th>reason</th></tr></thead><tbody>${list.map((c) => {
    const good = c.type === "Ready" ? c.status === "True" : c.status === "False";
    return html`<tr data-condition="${c.type}"><td>${c.type}</td><td>${pill(c.status, c.status === "Unknown" ? "outline" : good ? "ok" : "bad")}</td><td class="${good ? "muted" : "bad"}">${c.reason}</td></tr>`;
  })}</tbody></table>`;
}

function software(s, labels, agent) {
  return html`<dl class="kv">
    <dt>driver</dt><dd>${s.driver || dash}</dd><dt>CUDA</dt><dd>${s.cuda || dash}</dd>
    <dt>kernel</dt><dd>${s.kernel || dash}</dd><dt>fabric manager</dt><dd>${s.fabric_manager || dash}</dd>
    <dt>agent</dt><dd>${agent}</dd>
    ${Object.entries(labels || {}).map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`;
}

function gpuTable(gpus) {
  if (!gpus.length) return empty("no GPUs reported");
  return html`<table><thead><tr><th>GPU</th><th>health</th><th class="num">util</th><th class="num">temp</th><th class="num">power</th>
    <th class="num">SM clock</th><th class="num">memory used</th><th>clock events</th><th class="num">ECC DBE</th><th>PCIe</th>
    <th class="num">last Xid</th><th>held by</th><th>MIG</th></tr></thead><tbody>${gpus.map((g) => html`<tr data-gpu="${g.gpu}">
      <td>${gpuLink(g.node, g.gpu, `GPU ${g.gpu}`)}</td><td>${pill(g.health)}</td>
      <td class="num">${unit(g.util_pct, "%")}</td><td class="num ${g.temp_c >= 85 ? "bad" : g.temp_c >= 80 ? "warn" : ""}">${unit(g.temp_c, "°C")}</td>
      <td class="num">${unit(g.power_w, "W")}</td><td class="num">${unit(g.sm_clock_mhz, "MHz")}</td><td class="num">${mib(g.fb_used_mib)}</td>
      <td>${clockEventPills(g.clock_events)}</td><td class="num ${g.ecc_dbe_volatile ? "bad" : ""}">${num(g.ecc_dbe_volatile)}</td>
      <td class="nowrap">${g.pcie || dash}</td><td class="num ${g.xid_last ? "warn" : ""}">${g.xid_last ? num(g.xid_last) : dash}</td>
      <td class="muted">${g.held_by || dash}</td><td class="mig">${migBar(g, { compact: true })}</td></tr>`)}</tbody></table>`;
}

const errCls = (v) => (v ? "bad" : "");

function nicTable(nics, node) {
  if (!nics.length) return empty("no NICs reported");
  return html`<table><thead><tr><th>port</th><th class="num">rail</th><th>state</th><th class="num">speed</th><th>switch</th>
    <th class="num">symbol errors</th><th class="num">link downed</th><th class="num">rcv errors</th><th>GUID</th></tr></thead>
    <tbody>${nics.map((n) => html`<tr><td><a href="${portHref(node, n.name, n.port)}">${n.name}/${n.port}</a></td>
      <td class="num">${n.rail ?? dash}</td><td>${pill(n.state)}</td><td class="num">${n.speed_gbps ? `${num(n.speed_gbps)} Gb/s` : dash}</td>
      <td>${n.peer || dash}</td><td class="num ${errCls(n.symbol_errors)}">${num(n.symbol_errors)}</td>
      <td class="num ${errCls(n.link_downed)}">${num(n.link_downed)}</td><td class="num ${errCls(n.rcv_errors)}">${num(n.rcv_errors)}</td>
      <td class="mono muted">${n.guid}</td></tr>`)}</tbody></table>`;
}

// the node's GPU<->NIC<->CPU affinity as its agent read it: a GPU whose nearest NIC is not behind its own PCIe switch
// (PIX/PXB) is marked, since its RDMA traffic goes through the CPU's root complex or across sockets
function affinityTable(affinity) {
  if (!affinity || !affinity.gpus.length) return empty("no affinity reported");
  const far = (link) => (link === "SYS" ? "bad" : link === "PIX" || link === "PXB" ? "" : "warn");
  return html`<table data-source="${affinity.source}"><thead><tr><th class="num">GPU</th><th class="num">NUMA</th><th>CPUs</th>
    <th>nearest NIC</th><th>link</th></tr></thead>
    <tbody>${affinity.gpus.map((g) => {
      const link = g.nearest_nics.length ? g.nic_links[g.nearest_nics[0]] : null;
      return html`<tr data-gpu="${g.gpu}"><td class="num">${g.gpu}</td><td class="num">${g.numa_node ?? dash}</td>
        <td class="mono">${g.cpus || dash}</td><td>${g.nearest_nics.join(", ") || dash}</td>
        <td class="${link ? far(link) : ""}">${link || dash}</td></tr>`;
    })}</tbody></table>
    <div class="muted">from ${affinity.source}</div>`;
}

export function incidentRows(list, now, none = "no open incidents") {
  if (!list.length) return empty(none);
  return html`<table><thead><tr><th>severity</th><th>incident</th><th>state</th><th>cause</th><th>where</th><th>opened</th><th>summary</th></tr></thead>
    <tbody>${list.map((i) => html`<tr><td>${pill(i.severity)}</td><td class="nowrap">${incidentLink(i.id)}</td><td>${pill(i.state)}</td>
      <td>${i.cause}</td><td>${entityLink(i.entity)}</td><td class="nowrap">${ago(now - i.first_seen)}</td><td>${i.summary}</td></tr>`)}</tbody></table>`;
}

export async function mount(root, ctx) {
  const name = ctx.params.name;
  let range = rangeOf(ctx.query);
  root.innerHTML = String(html`
    <div class="crumbs"><a href="#/">overview</a> / node</div>
    <div class="title"><h1>${name}</h1><span id="status"></span><span class="sub" id="sub"></span>
      <span class="right"><a class="btn" href="#/incidents?node=${encodeURIComponent(name)}">incidents</a>
      <a class="btn" href="#/fabric?node=${encodeURIComponent(name)}">fabric</a></span></div>
    <section class="grid g3" style="margin-bottom:14px">
      <div class="panel"><h2>conditions</h2><div id="conditions"></div></div>
      <div class="panel"><h2>software</h2><div id="software"></div></div>
      <div class="panel"><h2>at a glance</h2><div id="glance"></div></div>
    </section>
    <div class="panel" style="margin-bottom:14px"><h2>history <span class="right">${rangeSeg(range)}</span></h2>
      <div class="grid g3">
        ${raw(chartCard("node-util", "GPU utilization, mean", "%"))}
        ${raw(chartCard("node-temp", "hottest GPU", "°C"))}
        ${raw(chartCard("node-power", "GPU power", "kW"))}
      </div></div>
    <div class="panel" style="margin-bottom:14px"><h2>GPUs</h2><div id="gpus"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>NICs</h2><div id="nics"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>GPU ↔ NIC ↔ CPU affinity</h2><div id="affinity"></div></div>
    <section class="grid g2">
      <div class="panel"><h2>open incidents</h2><div id="incidents"></div></div>
      <div class="panel"><h2>kernel log <span class="right muted">latest GPU reports, as the driver printed them</span></h2><div id="kmsg"></div></div>
    </section>`);

  let lastCharts = 0;

  const drawDetail = (d) => {
    set($("#status", root), statusPills(d.status));
    set($("#sub", root), `${d.gpus.length} GPUs · ${d.nics.length} NICs${d.labels && d.labels.rack ? ` · ${d.labels.rack}` : ""}`);
    set($("#conditions", root), conditions(d.conditions));
    set($("#software", root), software(d.software, d.labels, d.agent));
    const now = api.now();
    const healthy = d.gpus.filter((g) => g.health === "healthy").length;
    const lost = d.gpus.filter((g) => g.health === "lost").length;
    const up = d.nics.filter((n) => n.state === "Active").length;
    const crit = d.incidents.filter((i) => i.severity === "critical").length;
    const jobs = [...new Set(d.gpus.map((g) => g.held_by).filter(Boolean))];
    const down = Object.entries(d.sources_down || {});
    const blind = /Degraded/.test(d.status);
    set($("#glance", root), html`<dl class="kv">
      ${down.length ? html`<dt>sources down</dt><dd class="bad" data-sources-down="${down.map(([s]) => s).join(",")}">${down.map(([s, why], i) => html`${i ? "; " : ""}<b>${s}</b>: ${why}`)}</dd>` : ""}
      <dt>GPUs healthy</dt><dd class="${blind ? "bad" : healthy < d.gpus.length ? (lost ? "bad" : "warn") : "ok"}" data-k="gpus-healthy">${blind
        ? html`unknown: its GPU source is down${d.gpus.length ? ` (${d.gpus.length} known)` : ""}`
        : html`${healthy} / ${d.gpus.length}${lost ? ` (${lost} lost)` : ""}`}</dd>
      <dt>IB ports active</dt><dd class="${up < d.nics.length ? "bad" : "ok"}">${up} / ${d.nics.length}</dd>
      <dt>open incidents</dt><dd class="${crit ? "bad" : d.incidents.length ? "warn" : "ok"}">${d.incidents.length}${crit ? ` (${crit} critical)` : ""}</dd>
      <dt>held by</dt><dd>${jobs.length ? jobs.join(", ") : html`<span class="dim">nothing</span>`}</dd></dl>`);
    set($("#gpus", root), gpuTable(d.gpus));
    set($("#nics", root), nicTable(d.nics, d.name));
    set($("#affinity", root), affinityTable(d.affinity));
    set($("#incidents", root), incidentRows(d.incidents, now));
    set($("#kmsg", root), d.kernel_log.length
      ? html`<div class="log">${d.kernel_log.map((l) => html`<div>${l}</div>`)}</div>`
      : empty("no GPU reports in the kernel log"));
  };

  const drawCharts = async () => {
    lastCharts = Date.now();
    const span = RANGES[range];
    const end = api.now() ?? (await api.fetchTime());
    const q = (metric) => api.range(api.selector(metric, { node: name }), { end, span, points: 480 });
    const [util, temp, power] = await Promise.all([
      q("gpufleet_node_gpu_utilization_avg"), q("gpufleet_node_gpu_temp_max"), q("gpufleet_node_power_watts"),
    ]);
    const pts = (r, k = 1) => (r[0] ? r[0].points.map(([t, v]) => [t, v === null ? null : v * k]) : []);
    const common = { start: startOf([util, temp, power], end, span), end, empty: "no data yet for this node" };
    timeChart($("#node-util", root), { ...common, unit: "%", y: { min: 0, max: 100 }, series: [{ label: "mean utilization", color: "#58a6ff", area: true, points: pts(util) }] });
    timeChart($("#node-temp", root), { ...common, unit: "°C", y: { floor: 20, ceil: 90 }, series: [{ label: "hottest GPU", color: "#f0883e", points: pts(temp) }] });
    timeChart($("#node-power", root), {
      ...common, unit: "kW", y: { floor: 0 }, fmt: (v) => `${num(v, 2)} kW`,
      series: [{ label: "GPU power", color: "#bc8cff", area: true, points: pts(power, 1 / 1000) }],
    });
  };

  const load = refresher("node", async (charts) => {
    const d = await api.get(`/api/v1/nodes/${encodeURIComponent(name)}`);
    drawDetail(d);
    if (charts) await drawCharts();
  }, (err) => {
    if (err.status === 404) notFound(root, html`<a href="#/">overview</a> / node`, `no node named ${name}`);
  });

  onRangeClick(root, ctx);

  if (api.now() === null) await api.fetchTime();
  await load(true);
  return {
    onSummary: () => load(Date.now() - lastCharts > 30000),
    onQuery: (q) => {
      range = rangeOf(q);
      markRange(root, range);
      drawCharts().catch((err) => banner(err, { key: "node" }));
    },
  };
}
