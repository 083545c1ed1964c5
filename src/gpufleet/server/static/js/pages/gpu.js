// One GPU: its inventory and current readings, and timelines of temperature, power, SM clock (with the clock-event
// reasons NVML reported drawn as lanes on the same time axis and the slowdowns shaded), utilization, framebuffer,
// ECC and PCIe replay counters. Incidents on the GPU are marked where they opened.

import * as api from "../api.js";
import { chartCard, spansOf, startOf, timeChart } from "../charts.js";
import {
  $, banner, dash, empty, html, markRange, mib, notFound, num, onRangeClick, pill, rangeOf, RANGES, rangeSeg, raw,
  refresher, set, unit,
} from "../ui.js";
import { clockEventPills, incidentRows, migBar } from "./node.js";

export const title = (p) => `${p.node} GPU ${p.index}`;

// NVML clock-event reasons (DCGM_FI_DEV_CLOCK_THROTTLE_REASONS bits), worst first; `slow` ones are shaded on the
// SM clock chart as well as drawn in their lane.
const REASONS = [
  { bit: 0x40, name: "hw_thermal", color: "#f85149", slow: true },
  { bit: 0x20, name: "sw_thermal", color: "#f0883e", slow: true },
  { bit: 0x80, name: "hw_power_brake", color: "#db61a2", slow: true },
  { bit: 0x8, name: "hw_slowdown", color: "#d29922", slow: true },
  { bit: 0x4, name: "power_cap", color: "#6e7b8b" },
  { bit: 0x2, name: "clocks_setting", color: "#4d6a88" },
  { bit: 0x10, name: "sync_boost", color: "#4d6a88" },
  { bit: 0x1, name: "gpu_idle", color: "#3a4654" },
];

const SERIES = {
  temp: "gpufleet_gpu_temp_c",
  power: "gpufleet_gpu_power_w",
  clock: "gpufleet_gpu_sm_clock_mhz",
  util: "gpufleet_gpu_util_pct",
  fb: "gpufleet_gpu_fb_used_mib",
  events: "gpufleet_gpu_clock_events",
  dbe: "gpufleet_gpu_ecc_dbe_volatile",
  sbe: "gpufleet_gpu_ecc_sbe_volatile",
  replays: "gpufleet_gpu_pcie_replays",
};

function inventory(g) {
  return html`<dl class="kv">
    <dt>model</dt><dd>${g.model || dash}</dd>
    <dt>vendor</dt><dd>${g.vendor || dash}${g.partition ? ` · partition ${g.partition}` : ""}</dd>
    <dt>UUID</dt><dd class="mono">${g.uuid || dash}</dd>
    <dt>serial</dt><dd class="mono">${g.serial || dash}</dd>
    <dt>PCI bus</dt><dd class="mono">${g.pci_bus_id || dash}</dd>
    <dt>PCIe link</dt><dd>${g.pcie || dash}</dd>
    <dt>memory</dt><dd>${mib(g.fb_total_mib)}</dd>
    <dt>power limit</dt><dd>${unit(g.power_limit_w, "W")}</dd>
    <dt>MIG</dt><dd>${g.mig_mode === true ? "on" : g.mig_mode === false ? "off" : dash}</dd>
    <dt>NVLink domain</dt><dd class="mono">${g.clique_id == null ? dash : `${g.cluster_uuid || dash} · clique ${g.clique_id}`}</dd>
    <dt>held by</dt><dd>${g.held_by || html`<span class="dim">nothing</span>`}</dd>
    <dt>last Xid</dt><dd class="${g.xid_last ? "warn" : ""}">${g.xid_last ? num(g.xid_last) : dash}</dd>
    <dt>clock events</dt><dd>${clockEventPills(g.clock_events)}</dd></dl>`;
}

const LOST_WHY = "no reading since the GPU was lost (it fell off the bus or stopped answering); the charts show its readings until then";

function readings(g) {
  const tile = (label, value, cls = "") => html`<div class="kpi ${cls}"><div class="v">${value}</div><div class="l">${label}</div></div>`;
  if (g.readings === "lost") {
    const lost = (label) => html`<div class="kpi bad" data-reading="lost" title="${LOST_WHY}"><div class="v">lost</div><div class="l">${label}</div></div>`;
    return html`${["temperature", "power", "SM clock", "utilization", "memory used", "ECC DBE (volatile)"].map(lost)}`;
  }
  return html`
    ${tile("temperature", unit(g.temp_c, "°C"), g.temp_c >= 85 ? "bad" : g.temp_c >= 80 ? "warn" : "")}
    ${tile("power", unit(g.power_w, "W"))}
    ${tile("SM clock", unit(g.sm_clock_mhz, "MHz"))}
    ${tile("utilization", unit(g.util_pct, "%"))}
    ${tile("memory used", mib(g.fb_used_mib))}
    ${tile("ECC DBE (volatile)", num(g.ecc_dbe_volatile), g.ecc_dbe_volatile ? "bad" : "")}`;
}

// The GPU instances under the bar, as `nvidia-smi mig -lgi` lists them, with each one's MIG device.
function migTable(g) {
  if (g.mig_mode !== true || !(g.mig || []).length) return "";
  return html`<table class="mig-instances"><thead><tr><th>profile</th><th class="num">GI</th><th>placement</th><th class="num">CI</th><th>MIG device</th></tr></thead>
    <tbody>${g.mig.map((m) => html`<tr data-gi="${m.gi_id}"><td>${m.profile}</td><td class="num">${m.gi_id}</td><td class="mono">${m.start}:${m.size}</td>
      <td class="num">${m.ci_id ?? dash}</td><td class="mono muted">${m.uuid || dash}</td></tr>`)}</tbody></table>`;
}

function memoryGiB(model) {
  const m = /(\d+)\s*GB/i.exec(model || "");
  return m ? Number(m[1]) : null;
}

export async function mount(root, ctx) {
  const node = ctx.params.node;
  const index = Number(ctx.params.index);
  let range = rangeOf(ctx.query);
  root.innerHTML = String(html`
    <div class="crumbs"><a href="#/">overview</a> / <a href="#/node/${encodeURIComponent(node)}">${node}</a> / GPU</div>
    <div class="title"><h1>${node} · GPU ${index}</h1><span id="health"></span><span class="sub" id="model"></span>
      <span class="right" id="siblings"></span></div>
    <section class="kpis" id="readings"></section>
    <section class="grid g3" style="margin-bottom:14px">
      <div class="panel"><h2>inventory</h2><div id="inventory"></div></div>
      <div class="panel span2"><h2>incidents on this GPU <span class="right muted">open and past</span></h2><div id="incidents"></div></div>
    </section>
    <div class="panel" style="margin-bottom:14px"><h2>MIG layout <span class="right muted">memory slices, one block per GPU instance</span></h2>
      <div id="mig"></div><div id="mig-instances"></div></div>
    <div class="panel"><h2>timelines <span class="muted" style="text-transform:none;letter-spacing:0;font-weight:400">one point every 30 s of cluster time</span>
      <span class="right">${rangeSeg(range)}</span></h2>
      <div class="grid g2">
        ${raw(chartCard("gpu-temp", "temperature", "°C"))}
        ${raw(chartCard("gpu-power", "power", "W"))}
        <div class="full">${raw(chartCard("gpu-clock", "SM clock and clock-event reasons", "MHz", { height: 170 }))}</div>
        ${raw(chartCard("gpu-util", "utilization", "%"))}
        ${raw(chartCard("gpu-fb", "framebuffer used", "GiB"))}
        ${raw(chartCard("gpu-ecc", "ECC errors (volatile)", "count"))}
        ${raw(chartCard("gpu-pcie", "PCIe replays", "count"))}
      </div></div>`);

  let gpu = null;
  let incidents = [];
  let lastCharts = 0;

  const drawDetail = (d, all) => {
    gpu = d.gpus.find((g) => g.gpu === index) || null;
    incidents = (all || d.incidents).filter((i) => i.entity && i.entity.kind === "gpu" && i.entity.node === node && i.entity.index === index);
    if (!gpu) {
      set($("#readings", root), "");
      set($("#mig", root), "");
      set($("#inventory", root), empty(`${node} has no GPU ${index}`));
      return;
    }
    set($("#health", root), pill(gpu.health));
    set($("#model", root), gpu.model);
    set($("#siblings", root), html`<span class="seg">${d.gpus.map((g) => html`<a class="${g.gpu === index ? "on" : ""}" href="#/gpu/${encodeURIComponent(node)}/${g.gpu}${range !== "4h" ? `?range=${range}` : ""}">${g.gpu}</a>`)}</span>`);
    set($("#readings", root), readings(gpu));
    set($("#inventory", root), inventory(gpu));
    set($("#mig", root), migBar(gpu));
    set($("#mig-instances", root), migTable(gpu));
    set($("#incidents", root), incidentRows(incidents, api.now(), "no incidents on this GPU"));
  };

  const drawCharts = async () => {
    lastCharts = Date.now();
    const span = RANGES[range];
    const end = api.now() ?? (await api.fetchTime());
    const step = Math.max(30, Math.ceil(span / 480 / 30) * 30);
    const names = Object.keys(SERIES);
    const answers = await Promise.all(
      names.map((k) => api.range(api.selector(SERIES[k], { node, gpu: index }), { end, span, step })),
    );
    const pts = {};
    names.forEach((k, i) => {
      pts[k] = answers[i][0] ? answers[i][0].points : [];
    });
    const markers = incidents.map((i) => ({ t: i.first_seen, color: i.severity === "critical" ? "#f85149" : "#d29922", label: `${i.id} ${i.cause}` }));
    const stale = gpu && gpu.readings === "lost" ? { label: "lost", why: LOST_WHY } : null;
    const common = { start: startOf(answers, end, span), end, markers, stale, empty: "no data yet: the control plane records each GPU every 30 s" };

    const lanes = REASONS.map((r) => ({ label: r.name, color: r.color, spans: spansOf(pts.events, (v) => (v & r.bit) !== 0, step) }))
      .filter((l) => l.spans.length);
    // one shaded band wherever any slowdown reason held; the lanes say which
    const slowBits = REASONS.filter((x) => x.slow).reduce((m, r) => m | r.bit, 0);
    const bands = spansOf(pts.events, (v) => (v & slowBits) !== 0, step)
      .map(([a, z]) => ({ t0: a, t1: z, color: "#f85149", label: "clocks slowed (thermal or power brake)" }));
    const scale = (list, k) => list.map(([t, v]) => [t, v === null ? null : v * k]);

    timeChart($("#gpu-temp", root), { ...common, unit: "°C", y: { floor: 20, ceil: 90 }, series: [{ label: "temperature", color: "#f0883e", points: pts.temp }] });
    timeChart($("#gpu-power", root), { ...common, unit: "W", y: { floor: 0 }, series: [{ label: "power", color: "#bc8cff", area: true, points: pts.power }] });
    timeChart($("#gpu-clock", root), {
      ...common, unit: "MHz", y: { floor: 0 }, height: 170, lanes, bands,
      series: [{ label: "SM clock", color: "#39c5cf", points: pts.clock }],
    });
    timeChart($("#gpu-util", root), { ...common, unit: "%", y: { min: 0, max: 100 }, series: [{ label: "utilization", color: "#58a6ff", area: true, points: pts.util }] });
    const total = gpu ? (gpu.fb_total_mib ? gpu.fb_total_mib / 1024 : memoryGiB(gpu.model)) : null;
    timeChart($("#gpu-fb", root), {
      ...common, unit: "GiB", y: { floor: 0, ceil: total || undefined }, fmt: (v) => `${num(v, 1)} GiB`,
      series: [{ label: "framebuffer used", color: "#56d364", area: true, points: scale(pts.fb, 1 / 1024) }],
    });
    timeChart($("#gpu-ecc", root), {
      ...common, unit: "", y: { floor: 0, ceil: 1, integer: true }, fmt: (v) => num(v),
      series: [
        { label: "double-bit (uncorrectable)", color: "#f85149", points: pts.dbe },
        { label: "single-bit (corrected)", color: "#d29922", points: pts.sbe },
      ],
    });
    timeChart($("#gpu-pcie", root), { ...common, unit: "", y: { floor: 0, ceil: 1, integer: true }, fmt: (v) => num(v), series: [{ label: "replays", color: "#db61a2", points: pts.replays }] });
    const legend = $("#gpu-clock .chart-legend", root);
    if (legend && !lanes.length) legend.innerHTML = '<span class="dim">no clock events in this range</span>';
  };

  const load = refresher("gpu", async (charts) => {
    const [d, all] = await Promise.all([
      api.get(`/api/v1/nodes/${encodeURIComponent(node)}`),
      api.get("/api/v1/incidents", { node, limit: 500 }).catch(() => null), // resolved ones too
    ]);
    drawDetail(d, all);
    if (charts) await drawCharts();
  }, (err) => {
    if (err.status === 404) notFound(root, html`<a href="#/">overview</a> / GPU`, `no node named ${node}`);
  });

  onRangeClick(root, ctx);

  if (api.now() === null) await api.fetchTime();
  await load(true);
  return {
    onSummary: () => load(Date.now() - lastCharts > 30000),
    onQuery: (q) => {
      range = rangeOf(q);
      markRange(root, range);
      drawCharts().catch((err) => banner(err, { key: "gpu" }));
    },
  };
}
