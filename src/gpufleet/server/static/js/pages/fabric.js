// The InfiniBand fabric as UFM shows it: each switch with its links down and erring, and a matrix of every HCA port
// (a row per node, a column per switch, which in a rail-optimised fabric is a rail) coloured by state and error
// count. Clicking a link shows its counters and their history.

import * as api from "../api.js";
import { chartCard, startOf, timeChart } from "../charts.js";
import {
  $, banner, dash, empty, html, incidentLink, nodeLink, num, onRangeClick, pill, rangeOf, RANGES, rangeSeg, raw,
  refresher, set,
} from "../ui.js";

export const title = () => "fabric";

const COUNTERS = [
  { metric: "gpufleet_port_symbol_errors", label: "symbol errors", color: "#d29922" },
  { metric: "gpufleet_port_link_downed", label: "link downed", color: "#f85149" },
  { metric: "gpufleet_port_rcv_errors", label: "receive errors", color: "#f0883e" },
  { metric: "gpufleet_port_xmit_discards", label: "transmit discards", color: "#bc8cff" },
];

const linkKey = (l) => `${l.node}/${l.hca}/${l.port}`;
const errors = (l) => (l.symbol_errors || 0) + (l.rcv_errors || 0) + (l.link_downed || 0);

function errClass(n) {
  if (!n) return "";
  return n < 10 ? "err1" : n < 100 ? "err2" : "err3";
}

function switchCards(switches) {
  if (!switches.length) return empty("no switches known: ports report their peer once agents push inventory");
  return html`${switches.map((s) => html`<div class="switch ${s.down ? "bad" : s.erring ? "warn" : ""}" data-switch="${s.name}">
    <div class="n">${s.name}</div>
    <div class="s">${s.links} links · <span class="${s.down ? "bad" : ""}">${s.down} down</span> · <span class="${s.erring ? "warn" : ""}">${s.erring} erring</span></div></div>`)}`;
}

function matrix(fabric, selected, only) {
  const links = fabric.links.filter((l) => !only || l.node === only);
  if (!links.length) return empty(only ? `no ports reported by ${only}` : "no ports reported yet");
  const columns = [...new Set(links.map((l) => l.switch || "(unknown)"))].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  const nodes = [...new Set(links.map((l) => l.node))].sort((a, b) => a.localeCompare(b, "en", { numeric: true }));
  const at = new Map();
  for (const l of links) {
    const k = `${l.node}|${l.switch || "(unknown)"}`;
    if (!at.has(k)) at.set(k, []);
    at.get(k).push(l);
  }
  const rails = new Map(columns.map((c) => [c, [...new Set(links.filter((l) => (l.switch || "(unknown)") === c).map((l) => l.rail))]]));
  return html`<table class="matrix"><thead><tr><th></th>${columns.map((c) => html`<th title="${c}"><div class="dim" style="font-size:10px">${c.replace(/^leaf-/, "")}</div>rail ${rails.get(c).join(",")}</th>`)}</tr></thead>
    <tbody>${nodes.map((n) => html`<tr><th class="node">${nodeLink(n)}</th>${columns.map((c) => html`<td>${(at.get(`${n}|${c}`) || []).map((l) => {
      const e = errors(l);
      const cls = [l.state, l.state === "Active" ? errClass(e) : "", l.severity ? `sev-${l.severity}` : "", linkKey(l) === selected ? "sel" : ""].join(" ");
      const tip = `${l.node} ${l.hca}/${l.port} (rail ${l.rail}) → ${l.switch || "unknown switch"}: ${l.state}` +
        `${l.speed_gbps ? `, ${l.speed_gbps} Gb/s` : ""}; symbol ${num(l.symbol_errors)}, link downed ${num(l.link_downed)}, rcv ${num(l.rcv_errors)}` +
        `${l.incident ? `; ${l.incident} (${l.severity})` : ""}`;
      return html`<button type="button" class="link ${cls}" data-link="${linkKey(l)}" data-state="${l.state}" data-errors="${e}" title="${tip}">${l.state === "Down" ? "down" : e ? num(e) : ""}</button>`;
    })}</td>`)}</tr>`)}</tbody></table>`;
}

function legend() {
  return html`<div class="hlegend">
    <span><span class="sw" style="background:#1f6f3a"></span>active, no errors</span>
    <span><span class="sw" style="background:#9a7a1c"></span>1–9 errors</span>
    <span><span class="sw" style="background:#d29922"></span>10–99</span>
    <span><span class="sw" style="background:#f0883e"></span>100 or more</span>
    <span><span class="sw" style="background:repeating-linear-gradient(45deg,#f85149 0 4px,#5a1a1c 4px 8px)"></span>down</span>
    <span><span class="sw" style="box-shadow:0 0 0 2px #f85149;background:#1f6f3a"></span>open incident (ring: its severity)</span>
    <span class="dim">numbers: symbol + receive + link-downed errors counted</span></div>`;
}

function problems(links) {
  const bad = links.filter((l) => l.state !== "Active" || errors(l) || l.incident);
  if (!bad.length) return empty("every link is active and clean");
  return html`<table><thead><tr><th>link</th><th>switch</th><th>state</th><th class="num">symbol</th><th class="num">downed</th><th class="num">rcv</th><th>incident</th></tr></thead>
    <tbody>${bad.map((l) => html`<tr><td><a href="#/fabric?link=${encodeURIComponent(linkKey(l))}">${l.node} ${l.hca}/${l.port}</a></td><td>${l.switch || dash}</td>
      <td>${pill(l.state)}</td><td class="num">${num(l.symbol_errors)}</td><td class="num">${num(l.link_downed)}</td><td class="num">${num(l.rcv_errors)}</td>
      <td>${l.incident ? html`${incidentLink(l.incident)} ${pill(l.severity)}` : dash}</td></tr>`)}</tbody></table>`;
}

function detail(l, range) {
  return html`<div class="title" style="margin-bottom:8px"><h2 style="font-size:16px">${l.node} ${l.hca}/${l.port}</h2>${pill(l.state)}
      <span class="right"><a href="#/fabric" title="close">×</a></span></div>
    <dl class="kv"><dt>node</dt><dd>${nodeLink(l.node)}</dd><dt>switch</dt><dd>${l.switch || dash}</dd><dt>rail</dt><dd>${l.rail}</dd>
      <dt>speed</dt><dd>${l.speed_gbps ? `${num(l.speed_gbps)} Gb/s` : dash}</dd><dt>GUID</dt><dd class="mono">${l.guid}</dd>
      <dt>symbol errors</dt><dd>${num(l.symbol_errors)}</dd><dt>link downed</dt><dd>${num(l.link_downed)}</dd><dt>receive errors</dt><dd>${num(l.rcv_errors)}</dd>
      <dt>incident</dt><dd>${l.incident ? html`${incidentLink(l.incident)} ${pill(l.severity)}` : dash}</dd></dl>
    <div style="display:flex;align-items:center;margin:12px 0 6px"><span class="muted">counters over time (totals)</span><span style="margin-left:auto">${rangeSeg(range)}</span></div>
    <div class="grid">${COUNTERS.map((c) => raw(chartCard(`port-${c.metric.replace("gpufleet_port_", "")}`, c.label, "count", { height: 90 })))}</div>`;
}

export async function mount(root, ctx) {
  let selected = ctx.query.get("link") || "";
  let only = ctx.query.get("node") || "";
  let range = rangeOf(ctx.query, "1h");
  root.innerHTML = String(html`
    <div class="title"><h1>InfiniBand fabric</h1><span class="sub" id="fabric-sub"></span><span class="right" id="only"></span></div>
    <section class="kpis" id="fabric-kpis"></section>
    <section class="switches" id="switches"></section>
    <section class="grid g3">
      <div class="panel span2"><h2>links by node and switch <span class="right muted">click a link for its counters</span></h2>
        <div class="scroll" style="max-height:none;overflow-x:auto" id="matrix"></div><div id="matrix-legend"></div></div>
      <div class="panel" id="side"></div>
    </section>`);

  let fabric = null;

  const drawSide = async () => {
    const side = $("#side", root);
    const l = fabric && fabric.links.find((x) => linkKey(x) === selected);
    if (!l) {
      set(side, html`<h2>links down or erring</h2>${fabric ? problems(fabric.links) : ""}`);
      return;
    }
    set(side, detail(l, range));
    onRangeClick(side, ctx);
    const span = RANGES[range];
    const end = api.now() ?? (await api.fetchTime());
    const answers = await Promise.all(
      COUNTERS.map((c) => api.range(api.selector(c.metric, { node: l.node, port: `${l.hca}/${l.port}` }), { end, span, step: Math.max(30, Math.ceil(span / 240 / 30) * 30) })),
    );
    const start = startOf(answers, end, span);
    COUNTERS.forEach((c, i) => {
      const card = $(`#port-${c.metric.replace("gpufleet_port_", "")}`, root);
      if (!card) return;
      timeChart(card, {
        start, end, unit: "", height: 90, y: { floor: 0, ceil: 1, integer: true }, fmt: (v) => num(v),
        empty: "no data yet: port counters are recorded every 30 s",
        series: [{ label: c.label, color: c.color, points: answers[i][0] ? answers[i][0].points : [] }],
      });
    });
  };

  const draw = () => {
    const links = fabric.links;
    const down = links.filter((l) => l.state === "Down").length;
    const erring = links.filter((l) => errors(l)).length;
    set($("#fabric-sub", root), `${fabric.switches.length} switches · ${links.length} ports`);
    set($("#only", root), only ? html`showing ${nodeLink(only)} <a class="btn" href="#/fabric">all nodes</a>` : "");
    const tile = (label, v, cls) => html`<div class="kpi ${cls}"><div class="v">${v}</div><div class="l">${label}</div></div>`;
    set($("#fabric-kpis", root), html`${tile("switches", fabric.switches.length, "")}${tile("links", links.length, "")}
      ${tile("active", links.filter((l) => l.state === "Active").length, "ok")}${tile("down", down, down ? "bad" : "ok")}
      ${tile("erring", erring, erring ? "warn" : "ok")}${tile("with an open incident", links.filter((l) => l.incident).length, links.some((l) => l.incident) ? "warn" : "ok")}`);
    set($("#switches", root), switchCards(fabric.switches));
    set($("#matrix", root), matrix(fabric, selected, only));
    set($("#matrix-legend", root), legend());
  };

  const load = refresher("fabric", async (side) => {
    fabric = await api.get("/api/v1/fabric");
    draw();
    if (side || !selected) await drawSide();
});

  root.querySelector("#matrix").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-link]");
    if (b) ctx.setQuery({ link: b.dataset.link });
  });

  if (api.now() === null) await api.fetchTime();
  await load(true);
  return {
    onSummary: () => load(false),
    onQuery: (q) => {
      selected = q.get("link") || "";
      only = q.get("node") || "";
      range = rangeOf(q, "1h");
      if (fabric) draw();
      drawSide().catch((err) => banner(err, { key: "fabric" }));
    },
  };
}
