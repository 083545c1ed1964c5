// The InfiniBand fabric as UFM shows it.
//
// On top, the fabric as the subnet's watcher discovered it (/api/v1/fabric/*): a drawing in tiers (core, spines,
// leaves, and the HCAs under their leaf), a line per cable coloured by its state and error rate; hovering a cable
// names its ends, clicking it (`#/fabric?cable=leaf1/35`) shows both ends' counters over time and its alarms. Then
// what is wrong now (alarms, worst first) and what happened (events, newest first).
//
// Below, the fabric as the nodes' agents see it (/api/v1/fabric): each switch with its links down and erring, and a
// matrix of every HCA port (a row per node, a column per switch, which in a rail-optimised fabric is a rail)
// coloured by state and error count. Clicking a port shows its counters and their history.

import * as api from "../api.js";
import { chartCard, startOf, timeChart } from "../charts.js";
import {
  $, $$, ago, banner, dash, empty, esc, html, incidentLink, nodeLink, num, onRangeClick, pill, rangeOf, RANGES,
  rangeSeg, raw, refresher, set, when,
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
    <div class="s">${plural(s.links, "HCA port")} · <span class="${s.down ? "bad" : ""}">${s.down} down</span> · <span class="${s.erring ? "warn" : ""}">${s.erring} erring</span></div></div>`)}`;
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

// --- the discovered fabric: its tiers, its cables, and a drawing of them ------------------------------------------

const TRAFFIC = new Set(["PortXmitData", "PortRcvData", "PortXmitPkts", "PortRcvPkts", "PortXmitWait"]);
const isErrorCounter = (name) => name !== "time" && !TRAFFIC.has(name) && !/^Port(Unicast|Multicast)/.test(name);
const PMA = {
  SymbolErrorCounter: "symbol errors",
  LinkErrorRecoveryCounter: "link error recoveries",
  LinkDownedCounter: "link downed",
  PortRcvErrors: "receive errors",
  PortRcvRemotePhysicalErrors: "remote physical errors",
  PortRcvSwitchRelayErrors: "switch relay errors",
  PortXmitDiscards: "transmit discards",
  PortXmitConstraintErrors: "transmit constraint errors",
  PortRcvConstraintErrors: "receive constraint errors",
  LocalLinkIntegrityErrors: "local link integrity errors",
  ExcessiveBufferOverrunErrors: "buffer overruns",
  VL15Dropped: "VL15 dropped",
};
const ALWAYS = ["SymbolErrorCounter", "LinkDownedCounter", "PortRcvErrors"]; // charted even when still zero
const END_COLORS = ["#58a6ff", "#f0883e"]; // the cable's first end, its second
const RANK = { critical: 2, warning: 1, info: 0 };
const TIERS = ["core", "spine", "leaf"];
const FAST_PER_MIN = 10; // from this many errors a minute a cable is drawn orange rather than amber
const EXPAND_ENDS = 256; // with more HCAs than this, or too many under one leaf, each leaf's are drawn as one box
const MAX_END_ROWS = 6;
const natural = (a, b) => String(a).localeCompare(String(b), "en", { numeric: true });
const cableKey = (c) => `${c.a}|${c.b}`;
const portOf = (end) => Number(String(end).slice(String(end).lastIndexOf("/") + 1)) || 0;
const r1 = (v) => Math.round(v * 10) / 10;
const plural = (n, one, many = `${one}s`) => `${num(n)} ${n === 1 ? one : many}`;

/** How a cable is drawn: down (red, dashed), err2 (orange: many errors a minute), err1 (amber: some errors, or a
 * warning on it), clean (green). */
export function cableState(c) {
  if (!c.up) return "down";
  const perMin = (c.error_rate_per_s || 0) * 60;
  if (perMin >= FAST_PER_MIN) return "err2";
  if (perMin > 0 || (RANK[c.worst] ?? -1) >= RANK.warning) return "err1";
  return "clean";
}
const BADNESS = { clean: 0, err1: 1, err2: 2, down: 3 };

function rateText(r) {
  if (!r) return "no errors counting";
  if (r * 60 < 1) return `${num(r * 3600, r * 3600 < 10 ? 1 : 0)} errors/h`;
  if (r < 1) return `${num(r * 60, r * 60 < 10 ? 1 : 0)} errors/min`;
  return `${num(r, r < 10 ? 1 : 0)} errors/s`;
}

const speedText = (c) => [c.width, c.speed].filter(Boolean).join(" ") + (c.rate_gbps ? ` · ${num(c.rate_gbps)} Gb/s` : "");

/** The nodes of the drawing: every switch with its tier (as the fabric says, else as its place says: a switch with
 * HCAs is a leaf, each hop above the leaves a tier up), and every HCA with the leaf it hangs from. */
function nodesOf(systems, cables) {
  const nodes = new Map();
  for (const s of systems) nodes.set(s.name, { ...s, isSwitch: s.type === "switch" });
  for (const c of cables) {
    for (const n of [c.a_node, c.b_node]) {
      if (!nodes.has(n)) {
        const hca = n.includes("/");
        nodes.set(n, { name: n, type: hca ? "hca" : "switch", tier: "", host: hca ? n.split("/")[0] : "", isSwitch: !hca, undiscovered: true });
      }
    }
  }
  const adjacent = new Map();
  const below = new Map(); // switch -> the ends (HCAs, routers) cabled to it
  for (const n of nodes.values()) if (n.isSwitch) adjacent.set(n.name, new Set());
  for (const c of cables) {
    const a = nodes.get(c.a_node);
    const b = nodes.get(c.b_node);
    if (a.isSwitch && b.isSwitch) {
      adjacent.get(a.name).add(b.name);
      adjacent.get(b.name).add(a.name);
    } else if (a.isSwitch || b.isSwitch) {
      const [sw, end] = a.isSwitch ? [a, b] : [b, a];
      if (!below.has(sw.name)) below.set(sw.name, new Set());
      below.get(sw.name).add(end.name);
    }
  }
  const depth = new Map();
  let frontier = [...below.keys()];
  for (const n of frontier) depth.set(n, 0);
  while (frontier.length) {
    const next = [];
    for (const n of frontier) {
      for (const o of adjacent.get(n)) {
        if (!depth.has(o)) {
          depth.set(o, depth.get(n) + 1);
          next.push(o);
        }
      }
    }
    frontier = next;
  }
  for (const n of nodes.values()) {
    if (!n.isSwitch) continue;
    n.row = TIERS.includes(n.tier) ? n.tier : ["leaf", "spine", "core"][Math.min(2, depth.get(n.name) ?? 1)];
  }
  // each HCA under the first leaf it is cabled to
  for (const [sw, ends] of [...below.entries()].sort((x, y) => natural(x[0], y[0]))) {
    if (nodes.get(sw).row !== "leaf") continue;
    for (const e of ends) {
      const end = nodes.get(e);
      if (!end.leaf) end.leaf = sw;
    }
  }
  return nodes;
}

/** Leaves in scalable units: as the fabric groups them, else as their names say (leaf-su3-r1), else the leaves
 * that share hosts (in a rail-optimised unit every leaf has one HCA of each host). */
function unitsOf(leaves, nodes, ends) {
  const parent = new Map(leaves.map((l) => [l, l]));
  const find = (x) => {
    while (parent.get(x) !== x) x = parent.get(x);
    return x;
  };
  const hostLeaf = new Map();
  for (const leaf of leaves) {
    for (const e of ends.get(leaf) || []) {
      const host = e.host || e.name.split("/")[0];
      if (hostLeaf.has(host)) parent.set(find(leaf), find(hostLeaf.get(host)));
      else hostLeaf.set(host, leaf);
    }
  }
  const keyOf = (leaf) => {
    const n = nodes.get(leaf);
    if (n.group !== undefined && n.group !== null && n.group !== "") return { key: `g${n.group}`, label: `group ${n.group}` };
    const m = /(?:^|[-_.])su(\d+)(?=[-_.]|$)/i.exec(leaf);
    if (m) return { key: `su${Number(m[1])}`, label: `SU ${Number(m[1])}` };
    return { key: `h:${find(leaf)}`, label: "" };
  };
  const units = new Map();
  for (const leaf of [...leaves].sort(natural)) {
    const { key, label } = keyOf(leaf);
    if (!units.has(key)) units.set(key, { key, label, leaves: [] });
    units.get(key).leaves.push(leaf);
  }
  const out = [...units.values()].sort((x, y) => natural(x.leaves[0], y.leaves[0]));
  for (const u of out) {
    u.prefix = u.leaves.length > 1 ? commonPrefix(u.leaves) : "";
    if (!u.label) u.label = u.prefix.replace(/[-_.]+$/, "") || u.leaves[0];
    u.hosts = new Set(u.leaves.flatMap((l) => (ends.get(l) || []).map((e) => e.host || e.name.split("/")[0]))).size;
  }
  return out;
}

function commonPrefix(names) {
  let p = names[0];
  for (const n of names) while (!n.startsWith(p)) p = p.slice(0, -1);
  const cut = Math.max(p.lastIndexOf("-"), p.lastIndexOf("_"), p.lastIndexOf("."));
  return cut >= 0 ? p.slice(0, cut + 1) : "";
}

const CHAR_W = 6.2; // a character of the 10.5 px labels
function fit(text, width) {
  const room = Math.floor((width - 6) / CHAR_W);
  if (room < 2) return "";
  return text.length <= room ? text : `${text.slice(0, Math.max(1, room - 1))}…`;
}

/** Where everything goes. `width` is what the panel has; a fabric with many leaves is drawn wider and scrolls. */
export function layout(systems, cables, width, mode = "auto") {
  const M = 18;
  const SW_H = 24;
  const SLOT = 26; // the least room a switch gets across: more leaves than fit make the drawing wider (it scrolls)
  const END_GAP = 62;
  const END_H = 14;
  const PITCH = 18;
  const nodes = nodesOf(systems, cables);
  const rows = { core: [], spine: [], leaf: [] };
  for (const n of nodes.values()) if (n.isSwitch) rows[n.row].push(n.name);
  for (const t of TIERS) rows[t].sort(natural);
  const ends = new Map(); // leaf -> its HCAs
  const unplaced = [];
  for (const n of nodes.values()) {
    if (n.isSwitch) continue;
    if (!n.leaf) {
      unplaced.push(n.name);
      continue;
    }
    if (!ends.has(n.leaf)) ends.set(n.leaf, []);
    ends.get(n.leaf).push(n);
  }
  for (const list of ends.values()) list.sort((x, y) => natural(x.name, y.name));
  const units = unitsOf(rows.leaf, nodes, ends);

  // leaves across, unit by unit with a gap between units
  const L = Math.max(1, rows.leaf.length);
  const G = Math.max(1, units.length);
  const unitGap = 22;
  const slot = Math.max(SLOT, Math.min(150, (width - 2 * M - (G - 1) * unitGap) / L));
  const leavesW = rows.leaf.length * slot + (G - 1) * unitGap;
  const W = Math.max(width, 2 * M + leavesW, ...["core", "spine"].map((t) => 2 * M + rows[t].length * SLOT));
  // the more cables between switches, the more room between their tiers
  const trunks = cables.filter((c) => nodes.get(c.a_node).isSwitch && nodes.get(c.b_node).isSwitch).length;
  const TIER_GAP = Math.round(Math.max(118, Math.min(240, 60 + 6 * Math.sqrt(trunks))));
  const boxes = new Map();
  let y = 22;
  const rowY = {};
  for (const t of ["core", "spine"]) {
    if (!rows[t].length) continue;
    rowY[t] = y;
    const pitch = Math.max(SLOT, Math.min(160, (W - 2 * M) / rows[t].length));
    const x0 = (W - pitch * rows[t].length) / 2;
    const prefix = rows[t].length > 1 ? commonPrefix(rows[t]) : "";
    rows[t].forEach((name, i) => {
      const w = Math.max(10, pitch - 6);
      boxes.set(name, { name, kind: "switch", tier: t, x: x0 + i * pitch + (pitch - w) / 2, y, w, h: SW_H, prefix });
    });
    y += SW_H + TIER_GAP;
  }
  rowY.leaf = y;
  let x = (W - leavesW) / 2;
  for (const u of units) {
    u.x0 = x;
    for (const leaf of u.leaves) {
      const w = Math.max(12, slot - 6);
      boxes.set(leaf, { name: leaf, kind: "switch", tier: "leaf", x: x + (slot - w) / 2, y, w, h: SW_H, unit: u, prefix: u.prefix });
      x += slot;
    }
    u.x1 = x;
    x += unitGap;
  }
  y += SW_H;

  // the HCAs under their leaf: each as a box in a grid when they fit, else one box per leaf with their count
  const totalEnds = [...ends.values()].reduce((n, l) => n + l.length, 0);
  const colsFor = (leaf) => Math.max(1, Math.min(ends.get(leaf).length, Math.floor(boxes.get(leaf).w / 16)));
  const rowsNeeded = Math.max(0, ...[...ends.keys()].map((leaf) => Math.ceil(ends.get(leaf).length / colsFor(leaf))));
  const each = mode === "each" || (mode !== "leaf" && totalEnds <= EXPAND_ENDS && rowsNeeded <= MAX_END_ROWS);
  const aggregates = [];
  if (totalEnds) {
    rowY.hca = y + END_GAP;
    for (const [leaf, list] of ends) {
      const lb = boxes.get(leaf);
      if (each) {
        const cols = colsFor(leaf);
        const cell = lb.w / cols;
        list.forEach((n, i) => {
          const c = i % cols;
          const r = Math.floor(i / cols);
          boxes.set(n.name, { name: n.name, kind: "hca", x: lb.x + c * cell + 1, y: rowY.hca + r * PITCH, w: Math.max(4, cell - 2), h: END_H, leaf });
        });
      } else {
        const box = { name: `hcas:${leaf}`, kind: "group", x: lb.x, y: rowY.hca, w: lb.w, h: 18, leaf, count: list.length, cables: [] };
        boxes.set(box.name, box);
        aggregates.push(box);
      }
    }
    y = rowY.hca + (each ? Math.max(1, rowsNeeded) * PITCH : 22);
  }
  const H = y + 34;

  // cables: each end at its own spot along its box's side, ordered by where the far end is (fewer crossings)
  const where = (name) => {
    const n = nodes.get(name);
    if (!n) return null;
    if (!n.isSwitch && !each && n.leaf) return boxes.get(`hcas:${n.leaf}`);
    return boxes.get(name) || null;
  };
  const placed = [];
  const notDrawn = [];
  const sides = new Map();
  for (const c of cables) {
    const a = where(c.a_node);
    const b = where(c.b_node);
    if (!a || !b) {
      notDrawn.push(c);
      continue;
    }
    if (a.kind === "group" || b.kind === "group") {
      (a.kind === "group" ? a : b).cables.push(c);
      continue;
    }
    const p = { c, a, b, state: cableState(c) };
    placed.push(p);
    for (const [end, box, other] of [[c.a, a, b], [c.b, b, a]]) {
      const side = other.y + other.h / 2 < box.y ? "up" : other.y > box.y + box.h / 2 ? "down" : "side";
      const key = `${box.name}|${side}`;
      if (!sides.has(key)) sides.set(key, []);
      sides.get(key).push({ p, end, other, side, box });
    }
  }
  for (const list of sides.values()) {
    list.sort((x, y2) => x.other.x + x.other.w / 2 - (y2.other.x + y2.other.w / 2) || portOf(x.end) - portOf(y2.end));
    list.forEach((s, k) => {
      const { box, side } = s;
      const px = side === "side" ? (s.other.x < box.x ? box.x : box.x + box.w) : box.x + ((k + 0.5) / list.length) * box.w;
      const py = side === "up" ? box.y : side === "down" ? box.y + box.h : box.y + box.h / 2;
      if (s.end === s.p.c.a) Object.assign(s.p, { x1: px, y1: py });
      else Object.assign(s.p, { x2: px, y2: py });
    });
  }
  for (const g of aggregates) {
    const states = g.cables.map(cableState);
    g.state = states.reduce((w, s) => (BADNESS[s] > BADNESS[w] ? s : w), "clean");
    g.down = states.filter((s) => s === "down").length;
    g.erring = states.filter((s) => s === "err1" || s === "err2").length;
    g.critical = g.cables.some((c) => c.worst === "critical");
    const lb = boxes.get(g.leaf);
    Object.assign(g, { x1: lb.x + lb.w / 2, y1: lb.y + lb.h, x2: g.x + g.w / 2, y2: g.y });
  }
  return { W, H, M, nodes, rows, rowY, units, boxes, placed, aggregates, each, totalEnds, unplaced, notDrawn };
}

/** The drawing: SVG, every element a test or a person needs named by a data attribute. */
export function drawTopology(t, selected) {
  const f = (v) => r1(v);
  const stats = new Map(); // switch -> {down, erring}
  const note = (name, s) => {
    if (!stats.has(name)) stats.set(name, { cables: 0, down: 0, erring: 0 });
    const st = stats.get(name);
    st.cables += 1;
    if (s === "down") st.down += 1;
    else if (s !== "clean") st.erring += 1;
  };
  for (const p of t.placed) {
    note(p.c.a_node, p.state);
    note(p.c.b_node, p.state);
  }
  for (const g of t.aggregates) for (const c of g.cables) note(g.leaf, cableState(c));
  const order = [...t.placed].sort((x, y) => BADNESS[x.state] - BADNESS[y.state] || (RANK[x.c.worst] ?? -1) - (RANK[y.c.worst] ?? -1));
  const sel = (p) => selected && (p.c.a === selected || p.c.b === selected);
  const lines = order.map((p) => {
    const key = cableKey(p.c);
    const crit = p.c.worst === "critical";
    const xy = `x1="${f(p.x1)}" y1="${f(p.y1)}" x2="${f(p.x2)}" y2="${f(p.y2)}"`;
    return raw(
      (crit ? `<line class="halo" ${xy}/>` : "") +
      `<line class="cable st-${p.state}${crit ? " crit" : ""}${sel(p) ? " sel" : ""}" ${xy} data-cable="${esc(key)}" ` +
      `data-a="${esc(p.c.a)}" data-b="${esc(p.c.b)}" data-state="${esc(p.c.state)}" data-class="${p.state}" ` +
      `data-worst="${esc(p.c.worst || "")}" data-rate="${p.c.error_rate_per_s || 0}"/>`,
    );
  });
  const hits = order.map((p) => raw(`<line class="hit" x1="${f(p.x1)}" y1="${f(p.y1)}" x2="${f(p.x2)}" y2="${f(p.y2)}" data-hit="${esc(cableKey(p.c))}"/>`));
  const aggs = t.aggregates.map((g) => {
    const xy = `x1="${f(g.x1)}" y1="${f(g.y1)}" x2="${f(g.x2)}" y2="${f(g.y2)}"`;
    return raw(
      (g.critical ? `<line class="halo" ${xy}/>` : "") +
      `<line class="cable agg st-${g.state}${g.critical ? " crit" : ""}" ${xy} data-leaf="${esc(g.leaf)}" data-cables="${g.cables.length}"/>` +
      `<line class="hit" ${xy} data-group="${esc(g.leaf)}"/>`,
    );
  });
  const switchBox = (b) => {
    const n = t.nodes.get(b.name);
    const st = stats.get(b.name) || { down: 0, erring: 0 };
    // a name that does not fit goes without what its row or unit shares (leaf-su1-r3 -> r3, spine-12 -> 12)
    const label = fit(b.name, b.w) === b.name || !b.prefix ? fit(b.name, b.w) : fit(b.name.slice(b.prefix.length), b.w);
    return html`<g class="sw ${st.down ? "bad" : st.erring ? "warn" : ""}${n.undiscovered ? " missing" : ""}" data-node="${b.name}" data-tier="${b.tier}">
      <rect x="${f(b.x)}" y="${f(b.y)}" width="${f(b.w)}" height="${b.h}" rx="3"/>
      ${label ? html`<text x="${f(b.x + b.w / 2)}" y="${f(b.y + b.h / 2 + 3.5)}" text-anchor="middle">${label}</text>` : ""}</g>`;
  };
  const hcaBox = (b) => {
    const n = t.nodes.get(b.name);
    const label = fit(n.host || b.name, b.w);
    return html`<g class="hca${n.undiscovered ? " missing" : ""}" data-node="${b.name}" data-leaf="${b.leaf}">
      <rect x="${f(b.x)}" y="${f(b.y)}" width="${f(b.w)}" height="${b.h}" rx="2"/>
      ${label ? html`<text x="${f(b.x + b.w / 2)}" y="${f(b.y + b.h / 2 + 3)}" text-anchor="middle">${label}</text>` : ""}</g>`;
  };
  const groupBox = (g) => {
    const bad = g.down ? `${g.down} down` : g.erring ? `${g.erring} erring` : "";
    const texts = [`${g.count} HCAs${bad ? ` · ${bad}` : ""}`, `${g.count}${bad ? ` · ${bad}` : " HCAs"}`, `${g.count}`];
    const label = texts.find((x) => fit(x, g.w) === x) || "";
    return html`<g class="hcas st-${g.state}" data-group="${g.leaf}" data-count="${g.count}">
      <rect x="${f(g.x)}" y="${f(g.y)}" width="${f(g.w)}" height="${g.h}" rx="3"/>
      <text x="${f(g.x + g.w / 2)}" y="${f(g.y + 12.5)}" text-anchor="middle">${label}</text></g>`;
  };
  const boxes = [...t.boxes.values()];
  const bottom = t.H - 14;
  const units = t.units.map((u) => html`<g class="unit" data-unit="${u.key}">
    <rect x="${f(u.x0 - 5)}" y="${f(t.rowY.leaf - 10)}" width="${f(u.x1 - u.x0 + 10)}" height="${f(bottom - t.rowY.leaf - 2)}" rx="6"/>
    <text x="${f((u.x0 + u.x1) / 2)}" y="${f(bottom + 8)}" text-anchor="middle">${fit(`${u.label} · ${u.leaves.length} ${u.leaves.length === 1 ? "leaf" : "leaves"}${u.hosts ? ` · ${plural(u.hosts, "host")}` : ""}`, Math.max(u.x1 - u.x0 + 40, 90))}</text></g>`);
  const count = (t2) => (t2 === "hca" ? t.totalEnds : t.rows[t2].length);
  const names = { core: "core", spine: "spines", leaf: "leaves", hca: "HCAs" };
  const tierLabels = Object.entries(t.rowY).filter(([k]) => count(k)).map(([k, y]) => html`<text class="tier-label" x="4" y="${f(y - 7)}">${names[k]} (${count(k)})</text>`);
  return html`<svg class="topo${t.placed.length > 300 ? " dense" : ""}" id="topology-svg" width="${f(t.W)}" height="${f(t.H)}" viewBox="0 0 ${f(t.W)} ${f(t.H)}" role="img"
      aria-label="the fabric: ${t.rows.spine.length} spines, ${t.rows.leaf.length} leaves, ${t.totalEnds} HCAs, ${t.placed.length} cables"
      data-cables="${t.placed.length}" data-mode="${t.each ? "each" : "leaf"}">
    <g class="units">${units}</g><g class="tier-labels">${tierLabels}</g>
    <g class="cables">${lines}${aggs}</g><g class="hits">${hits}</g>
    <g class="nodes">${boxes.filter((b) => b.kind === "switch").map(switchBox)}${boxes.filter((b) => b.kind === "hca").map(hcaBox)}${t.aggregates.map(groupBox)}</g>
  </svg>`;
}

function topologyLegend(t) {
  const sw = (cls) => raw(`<svg class="topo" width="30" height="10"><line class="cable ${cls}" x1="1" y1="5" x2="29" y2="5"/></svg>`);
  const halo = raw(`<svg class="topo" width="30" height="12"><line class="halo" x1="3" y1="6" x2="27" y2="6"/><line class="cable st-err1 crit" x1="3" y1="6" x2="27" y2="6"/></svg>`);
  const left = [];
  if (t && t.unplaced.length) left.push(`${t.unplaced.length} HCAs without a cable to a leaf are not drawn`);
  if (t && t.notDrawn.length) left.push(`${t.notDrawn.length} cables to ports not in the drawing`);
  return html`<div class="hlegend">
    <span>${sw("st-clean")}active, no errors</span>
    <span>${sw("st-err1")}errors under ${FAST_PER_MIN}/min, or a warning</span>
    <span>${sw("st-err2")}${FAST_PER_MIN}/min or more</span>
    <span>${sw("st-down")}down</span>
    <span>${halo}a critical alarm</span>
    <span class="dim">hover a cable for its ends; click it for its counters${t && !t.each ? "; HCAs are counted per leaf" : ""}</span>
    ${left.length ? html`<span class="warn">${left.join("; ")}</span>` : ""}</div>`;
}

function cableTip(c) {
  const st = cableState(c);
  return html`<div class="ends"><b>${c.a}</b> ↔ <b>${c.b}</b></div>
    <div class="muted">${(c.tiers || []).map((x) => x || "HCA").join(" → ")}${speedText(c) ? ` · ${speedText(c)}` : ""}</div>
    <div><span class="${st === "down" ? "bad" : st === "clean" ? "ok" : "warn"}">${c.state}</span> · ${rateText(c.error_rate_per_s)}${c.worst ? html` · ${pill(c.worst)}` : ""}</div>`;
}

function nodeTip(n, t, cables) {
  const mine = cables.filter((c) => c.a_node === n.name || c.b_node === n.name);
  const down = mine.filter((c) => !c.up).length;
  const erring = mine.filter((c) => c.up && cableState(c) !== "clean").length;
  return html`<div class="ends"><b>${n.name}</b> ${n.isSwitch ? n.row : n.type}${n.undiscovered ? html` <span class="bad">not discovered</span>` : ""}</div>
    <div class="muted">${n.lid !== undefined && n.lid !== null ? `LID ${n.lid} · ` : ""}${n.guid || ""}${n.ports ? ` · ${n.ports} ports` : ""}</div>
    <div>${mine.length} cables · <span class="${down ? "bad" : ""}">${down} down</span> · <span class="${erring ? "warn" : ""}">${erring} erring</span></div>`;
}

function groupTip(g) {
  return html`<div class="ends"><b>${g.count} HCAs</b> under <b>${g.leaf}</b></div>
    <div><span class="${g.down ? "bad" : ""}">${g.down} down</span> · <span class="${g.erring ? "warn" : ""}">${g.erring} erring</span></div>
    <div class="muted">${g.down || g.erring ? "click for the worst of them" : "all clean"}</div>`;
}

// --- what the watcher says: subnets, alarms, events, and one cable's detail ----------------------------------------

const smState = (s) => String(s || "").replace(/^SMINFO_/, "").toLowerCase();

function subnetLine(sum, now) {
  if (!sum || !sum.subnets.length) {
    return html`<div class="subnet dim" data-subnet="">no fabric watcher has reported: run <code>gpufleet agent --fabric</code>
      on a host of the fabric (the digital twin reports every 30 s)</div>`;
  }
  return sum.subnets.map((s) => {
    const age = now !== null && now !== undefined ? now - s.time : null;
    const stale = age !== null && s.poll_s && age > 3 * s.poll_s;
    const sm = s.subnet_manager;
    const f = s.findings || {};
    return html`<div class="subnet" data-subnet="${s.subnet}">
      <b>subnet ${s.subnet}</b> <span class="dim">(${s.source})</span> ·
      <span data-k="switches">${plural(s.switches, "switch", "switches")}</span> · <span data-k="hcas">${plural(s.hcas, "HCA")}</span> ·
      <span data-k="links">${plural(s.links, "link")}</span> ·
      <span data-k="down" class="${s.links_down ? "bad" : "ok"}">${num(s.links_down)} down</span> ·
      <span data-k="sm">${sm ? html`SM LID ${sm.lid} ${pill(smState(sm.state), smState(sm.state) === "master" ? "ok" : "warn")} activity ${num(sm.activity)}` : html`<span class="warn">no subnet manager reported</span>`}</span> ·
      <span data-k="age" class="${stale ? "warn" : ""}" title="${when(s.time, now)}">last poll ${ago(age)}</span> <span class="dim">(every ${num(s.poll_s)} s, took ${num(s.took_s, 1)} s, ${plural(s.polls, "poll")})</span> ·
      <span data-k="findings">${f.critical ? html`<span class="bad">${f.critical} critical</span> ` : ""}${f.warning ? html`<span class="warn">${f.warning} warning</span> ` : ""}${!f.critical && !f.warning ? html`<span class="ok">no alarms</span>` : ""}</span>
      <span class="dim">· checked against the ${s.expected}</span>
      ${(s.errors || []).length ? html`<div class="warn" data-k="errors">poll errors: ${s.errors.join("; ")}</div>` : ""}</div>`;
  });
}

const cableHref = (end) => `#/fabric?cable=${encodeURIComponent(end)}`;
const endLink = (end) => html`<a href="${cableHref(end)}" data-end="${end}">${end}</a>`;

function alarmWhere(a) {
  if (a.ends && a.ends.length) return html`${endLink(a.ends[0])} ↔ ${endLink(a.ends[1])}`;
  if (a.port) return endLink(a.port);
  return dash;
}

export function worstFirst(alarms) {
  return [...alarms].sort((x, y) => (RANK[y.severity] ?? -1) - (RANK[x.severity] ?? -1) || natural(x.kind, y.kind));
}

function alarmTable(alarms, id = "") {
  if (!alarms.length) return empty("no alarms: every cable and port is as expected");
  const multi = new Set(alarms.map((a) => a.subnet)).size > 1;
  return html`<table class="alarms" ${id ? raw(`id="${esc(id)}"`) : ""}><thead><tr><th>severity</th><th>kind</th><th>where</th><th>what</th><th>fix</th>${multi ? html`<th>subnet</th>` : ""}</tr></thead>
    <tbody>${worstFirst(alarms).map((a) => html`<tr data-severity="${a.severity}" data-kind="${a.kind}" data-ends="${(a.ends || [a.port || ""]).join("|")}">
      <td>${pill(a.severity)}</td><td class="nowrap">${a.kind}${a.action ? html` ${pill(a.action, "outline")}` : ""}</td><td class="nowrap">${alarmWhere(a)}</td>
      <td>${a.message}</td><td class="muted fix">${a.fix}</td>${multi ? html`<td>${a.subnet}</td>` : ""}</tr>`)}</tbody></table>`;
}

const EVENT_CLASS = { "link-down": "bad", "link-up": "ok", "sm-sweep": "info", "sm-change": "warn", "poll-error": "warn" };

function eventTable(events, now) {
  if (!events.length) return empty("nothing has happened on the fabric yet: links going down or up, subnet-manager sweeps and poll errors show here");
  const multi = new Set(events.map((e) => e.subnet)).size > 1;
  return html`<table class="events"><thead><tr><th>when</th><th>what</th><th>message</th>${multi ? html`<th>subnet</th>` : ""}</tr></thead>
    <tbody>${events.map((e) => html`<tr data-kind="${e.kind}" data-ends="${(e.ends || []).join("|")}" data-time="${e.time}">
      <td class="nowrap">${when(e.time, now)}</td><td>${pill(e.kind, EVENT_CLASS[e.kind] || e.severity)}</td>
      <td>${e.message}${(e.ends || []).length ? html` <span class="nowrap">${e.ends.map((x, i) => html`${i ? " ↔ " : ""}${endLink(x)}`)}</span>` : ""}</td>
      ${multi ? html`<td>${e.subnet}</td>` : ""}</tr>`)}</tbody></table>`;
}

/** The cable a selected end belongs to (the end is one of its two ports). */
function findCable(cables, end) {
  return end ? cables.find((c) => c.a === end || c.b === end) || null : null;
}

function cableDetail(c, alarms) {
  const st = cableState(c);
  const mine = alarms.filter((a) => (a.ends || []).some((e) => e === c.a || e === c.b) || a.port === c.a || a.port === c.b);
  return html`<h2>cable <span class="right"><button type="button" class="close-cable" data-close="cable" title="close">×</button></span></h2>
    <div class="title" style="margin-bottom:8px"><h2 style="font-size:16px" class="mono">
      <span style="color:${END_COLORS[0]}">${c.a}</span> ↔ <span style="color:${END_COLORS[1]}">${c.b}</span></h2>
      ${pill(c.state, c.up ? "Active" : "Down")} ${c.worst ? pill(c.worst) : ""}</div>
    <dl class="kv"><dt>ends</dt><dd>${c.a_node} (${c.tiers?.[0] || "HCA"}) ↔ ${c.b_node} (${c.tiers?.[1] || "HCA"})</dd>
      <dt>width, speed</dt><dd>${speedText(c) || dash}</dd><dt>state</dt><dd class="${st === "down" ? "bad" : ""}">${c.state}</dd>
      <dt>error rate</dt><dd class="${st === "clean" || st === "down" ? "" : "warn"}">${rateText(c.error_rate_per_s)} <span class="dim">(both ends, over the last poll)</span></dd>
      <dt>subnet</dt><dd>${c.subnet}</dd></dl>
    <div class="sub-h">alarms on this cable</div>
    <div id="cable-alarms">${mine.length ? alarmTable(mine) : empty("no alarm on this cable")}</div>
    <div class="sub-h">counters over time <span class="dim">(totals at each poll; ${html`<span style="color:${END_COLORS[0]}">${c.a}</span>`} and ${html`<span style="color:${END_COLORS[1]}">${c.b}</span>`})</span></div>
    <div class="grid g3" id="cable-charts"><div class="empty">loading the counters…</div></div>`;
}

/** Both ends' series from /telemetry: one call names the port and its peer; a cable that is down has no peer in the
 * fabric any more, so its other end is asked for on its own. */
async function cableSeries(c) {
  const ask = async (port) => {
    try {
      return await api.get("/api/v1/fabric/telemetry", { port });
    } catch (err) {
      if (err && err.status === 404) return { port, peer: null, series: [{ port, points: [] }] };
      throw err;
    }
  };
  const first = await ask(c.a);
  const series = new Map(first.series.map((s) => [s.port, s.points]));
  if (!series.has(c.b)) {
    const second = await ask(c.b);
    for (const s of second.series) if (s.port === c.b) series.set(s.port, s.points);
  }
  return [c.a, c.b].map((port) => ({ port, points: series.get(port) || [] }));
}

function drawCableCharts(box, c, ends, now) {
  const seen = new Set(ALWAYS);
  for (const e of ends) for (const p of e.points) for (const [k, v] of Object.entries(p)) if (isErrorCounter(k) && v) seen.add(k);
  const counters = [...seen].sort((x, y) => {
    const ix = ALWAYS.indexOf(x);
    const iy = ALWAYS.indexOf(y);
    return (ix < 0 ? 99 : ix) - (iy < 0 ? 99 : iy) || natural(x, y);
  });
  if (!ends.some((e) => e.points.length)) {
    set(box, html`<div class="empty full" data-empty="no-history">neither end has counted an error: the fabric keeps counters over time for
      ports that have (the error query lists only those)</div>`);
    return;
  }
  set(box, raw(counters.map((k) => chartCard(`cable-${k}`, PMA[k] || k, "count", { height: 90 })).join("")));
  const times = [...new Set(ends.flatMap((e) => e.points.map((p) => p.time)))].sort((x, y) => x - y);
  const start = times[0];
  const end = Math.max(now ?? times[times.length - 1], times[times.length - 1]);
  for (const k of counters) {
    const card = $(`#cable-${k}`, box);
    timeChart(card, {
      start, end, unit: "", height: 90, y: { floor: 0, ceil: 1, integer: true }, fmt: (v) => num(v),
      empty: "no data", now: false,
      series: ends.map((e, i) => {
        // a port the error query never listed counted no errors: zero at each poll the other end was listed
        const listed = e.points.length > 0;
        const points = listed ? e.points.map((p) => [p.time, p[k] ?? null]) : times.map((t) => [t, 0]);
        return { label: listed ? e.port : `${e.port} (never listed: no errors)`, color: END_COLORS[i], points };
      }),
    });
  }
}

const HCA_MODES = { auto: "auto", each: "each HCA", leaf: "per leaf" };

export async function mount(root, ctx) {
  let selected = ctx.query.get("link") || "";
  let only = ctx.query.get("node") || "";
  let range = rangeOf(ctx.query, "1h");
  let cable = ctx.query.get("cable") || "";
  let hcaMode = HCA_MODES[ctx.query.get("hcas")] ? ctx.query.get("hcas") : "auto";
  root.innerHTML = String(html`
    <div class="title"><h1>InfiniBand fabric</h1><span class="sub" id="fabric-sub"></span><span class="right" id="only"></span></div>
    <section class="subnets" id="fabric-subnets"></section>
    <section class="kpis" id="fabric-kpis"></section>
    <section class="panel topo-panel"><h2>topology <span class="muted" id="topology-note" style="text-transform:none;letter-spacing:0;font-weight:400"></span>
        <span class="right">HCAs <span class="seg" id="topology-mode">${Object.entries(HCA_MODES).map(([k, v]) => html`<button type="button" data-hcas="${k}" class="${k === hcaMode ? "on" : ""}">${v}</button>`)}</span></span></h2>
      <div class="topo-wrap" id="topology"><div id="topology-draw"></div><div class="topo-tip" id="topology-tip" role="tooltip"></div></div>
      <div id="topology-legend"></div></section>
    <section class="panel cable-panel" id="cable" hidden></section>
    <section class="panel fabric-lists"><h2>alarms <span class="muted" style="text-transform:none;letter-spacing:0;font-weight:400">worst first</span>
      <span class="right muted" id="fabric-alarm-count"></span></h2><div class="scroll" id="fabric-alarms"></div></section>
    <section class="panel fabric-lists"><h2>events <span class="muted" style="text-transform:none;letter-spacing:0;font-weight:400">newest first</span></h2>
      <div class="scroll" id="fabric-events" style="max-height:280px"></div></section>
    <h2 class="sub-h" style="margin:4px 0 10px">as the nodes' agents see their HCA ports: the leaf switches they face</h2>
    <section class="switches" id="switches"></section>
    <section class="grid g3">
      <div class="panel span2"><h2>HCA ports by node and switch <span class="right muted">click a port for its counters</span></h2>
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
    const erring = links.filter((l) => errors(l)).length;
    // the fabric's one count of switches and links (the API's: the watcher's when one reports), everywhere on the page;
    // what the nodes' agents see below is their HCA ports, and is named so
    const c = fabric.counts;
    set($("#fabric-sub", root), html`<span data-count="switches">${plural(c.switches, "switch", "switches")}</span> ·
      <span data-count="links">${plural(c.links, "link")}</span> · <span data-count="hca-ports">${plural(c.hca_ports, "HCA port")}</span>
      <span class="dim">(counted by the ${c.source})</span>`);
    set($("#only", root), only ? html`showing ${nodeLink(only)} <a class="btn" href="#/fabric">all nodes</a>` : "");
    const tile = (label, v, cls, key) => html`<div class="kpi ${cls}" data-kpi="${key}"><div class="v">${v}</div><div class="l">${label}</div></div>`;
    set($("#fabric-kpis", root), html`${tile("switches", c.switches, "", "switches")}${tile("links", c.links, "", "links")}
      ${tile("links down", c.links_down, c.links_down ? "bad" : "ok", "links-down")}${tile("HCA ports", c.hca_ports, "", "hca-ports")}
      ${tile("HCA ports erring", erring, erring ? "warn" : "ok", "ports-erring")}${tile("HCA ports with an open incident", links.filter((l) => l.incident).length, links.some((l) => l.incident) ? "warn" : "ok", "ports-incident")}`);
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

  // --- the discovered fabric ---------------------------------------------------------------------------------------

  const topo = { summary: null, systems: [], cables: [], alarms: [], events: [], isolated: [], layout: null, drawnAs: "", polled: null };
  const wrap = $("#topology", root);
  const tip = $("#topology-tip", root);

  const drawTopo = (force = false) => {
    const width = Math.max(600, Math.floor(wrap.clientWidth || 1200));
    const signature = JSON.stringify([width, hcaMode, topo.systems.map((s) => [s.name, s.tier]),
      topo.cables.map((c) => [c.a, c.b, c.state, cableState(c), c.worst])]);
    if (!force && signature === topo.drawnAs) return;
    topo.drawnAs = signature;
    const box = $("#topology-draw", root);
    if (!topo.systems.length && !topo.cables.length) {
      topo.layout = null;
      set(box, empty("no fabric discovered yet: the topology is drawn from the fabric watcher's polls"));
      set($("#topology-legend", root), "");
      set($("#topology-note", root), "");
      return;
    }
    topo.layout = layout(topo.systems, topo.cables, width, hcaMode);
    const t = topo.layout;
    set(box, drawTopology(t, cable));
    set($("#topology-legend", root), topologyLegend(t));
    const down = topo.cables.filter((c) => !c.up).length;
    const erring = topo.cables.filter((c) => c.up && cableState(c) !== "clean").length;
    set($("#topology-note", root), html`· ${t.rows.core.length ? `${t.rows.core.length} core · ` : ""}${plural(t.rows.spine.length, "spine")} · ${plural(t.rows.leaf.length, "leaf", "leaves")} · ${plural(t.totalEnds, "HCA")} ·
      ${plural(topo.cables.length, "cable")}${down ? html` · <span class="bad">${down} down</span>` : ""}${erring ? html` · <span class="warn">${erring} erring</span>` : ""}`);
  };

  const markSelected = () => {
    $$("line.cable.sel", wrap).forEach((l) => l.classList.remove("sel"));
    const c = findCable(topo.cables, cable);
    if (!c) return;
    const line = wrap.querySelector(`line[data-cable="${CSS.escape(cableKey(c))}"]`);
    if (line) {
      line.classList.add("sel");
      line.parentNode.appendChild(line); // drawn over the others
    }
  };

  const drawLists = () => {
    const now = api.now();
    set($("#fabric-subnets", root), html`${subnetLine(topo.summary, now)}${topo.isolated.length ? html`<div class="subnet" id="fabric-isolated">isolated switch ports:
      ${topo.isolated.map((p, i) => html`${i ? ", " : ""}${endLink(p.port)} <span class="dim">since ${when(p.since, now)}</span>`)}</div>` : ""}`);
    set($("#fabric-alarms", root), alarmTable(topo.alarms, "fabric-alarm-table"));
    const crit = topo.alarms.filter((a) => a.severity === "critical").length;
    const warn = topo.alarms.filter((a) => a.severity === "warning").length;
    set($("#fabric-alarm-count", root), topo.alarms.length ? html`<span class="${crit ? "bad" : ""}">${crit} critical</span> · <span class="${warn ? "warn" : ""}">${warn} warning</span> · ${topo.alarms.length} in all` : "");
    set($("#fabric-events", root), eventTable(topo.events, now));
  };

  const drawCable = async (refetch = true) => {
    const panel = $("#cable", root);
    if (!cable) {
      panel.hidden = true;
      panel.dataset.cable = "";
      set(panel, "");
      return;
    }
    panel.hidden = false;
    const c = findCable(topo.cables, cable);
    if (!c) {
      panel.dataset.cable = "";
      set(panel, html`<h2>cable <span class="right"><button type="button" class="close-cable" data-close="cable" title="close">×</button></span></h2>
        ${empty(`no cable at ${cable} in the discovered fabric`)}`);
      return;
    }
    panel.dataset.cable = cableKey(c);
    set(panel, cableDetail(c, topo.alarms));
    if (!refetch) return;
    const ends = await cableSeries(c);
    const box = $("#cable-charts", root);
    if (cableKey(c) !== panel.dataset.cable || !box) return; // closed, or another cable chosen meanwhile
    drawCableCharts(box, c, ends, api.now());
  };

  const loadTopo = refresher("fabric-topology", async (force) => {
    const [summary, systems, cables, alarms, events] = await Promise.all([
      api.get("/api/v1/fabric/subnets"),
      api.get("/api/v1/fabric/systems"),
      api.get("/api/v1/fabric/links"),
      api.get("/api/v1/fabric/alarms"),
      api.get("/api/v1/fabric/events", { limit: 200 }),
    ]);
    const isolated = summary.isolated_ports ? await api.get("/api/v1/fabric/isolated_ports") : [];
    Object.assign(topo, { summary, systems, cables, alarms, events, isolated });
    drawTopo(force);
    markSelected();
    drawLists();
    // the selected cable's counters again after each new poll
    const polled = Math.max(0, ...summary.subnets.map((s) => s.time));
    const fresh = polled !== topo.polled;
    topo.polled = polled;
    if (force || (cable && fresh)) await drawCable(true);
  });

  const chooseEnd = (c) => {
    // the switch's end names a cable the way the tools do (leaf1/35); an HCA-to-HCA cable by its first end
    const n = topo.layout && topo.layout.nodes.get(c.a_node);
    return n && n.isSwitch ? c.a : topo.layout && topo.layout.nodes.get(c.b_node)?.isSwitch ? c.b : c.a;
  };

  const pick = (target) => {
    const hit = target.closest("[data-hit],[data-cable],[data-group],g.sw,g.hca");
    if (!hit) return null;
    const key = hit.dataset.hit || hit.dataset.cable;
    if (key) return { cable: topo.cables.find((c) => cableKey(c) === key) };
    const group = hit.dataset.group;
    if (group) return { group: topo.layout.aggregates.find((g) => g.leaf === group) };
    return { node: topo.layout.nodes.get(hit.dataset.node), el: hit };
  };

  let hovered = null;
  wrap.addEventListener("mousemove", (e) => {
    const found = topo.layout ? pick(e.target) : null;
    const line = found && found.cable ? wrap.querySelector(`line[data-cable="${CSS.escape(cableKey(found.cable))}"]`) : null;
    if (hovered && hovered !== line) hovered.classList.remove("hover");
    hovered = line;
    if (line) line.classList.add("hover");
    if (!found || (!found.cable && !found.group && !found.node)) {
      tip.style.display = "none";
      return;
    }
    set(tip, found.cable ? cableTip(found.cable) : found.group ? groupTip(found.group) : nodeTip(found.node, topo.layout, topo.cables));
    tip.dataset.for = found.cable ? cableKey(found.cable) : found.group ? `hcas:${found.group.leaf}` : found.node.name;
    tip.style.display = "block";
    const r = wrap.getBoundingClientRect();
    let left = e.clientX - r.left + wrap.scrollLeft + 14;
    if (left + tip.offsetWidth > wrap.scrollLeft + r.width) left = e.clientX - r.left + wrap.scrollLeft - tip.offsetWidth - 14;
    tip.style.left = `${Math.max(0, left)}px`;
    tip.style.top = `${e.clientY - r.top + 14}px`;
  });
  wrap.addEventListener("mouseleave", () => {
    tip.style.display = "none";
    if (hovered) hovered.classList.remove("hover");
    hovered = null;
  });
  wrap.addEventListener("click", (e) => {
    const found = topo.layout ? pick(e.target) : null;
    if (!found) return;
    if (found.cable) ctx.setQuery({ cable: chooseEnd(found.cable) });
    else if (found.group) {
      const worst = [...found.group.cables].sort((x, y) => BADNESS[cableState(y)] - BADNESS[cableState(x)])[0];
      if (worst && cableState(worst) !== "clean") ctx.setQuery({ cable: chooseEnd(worst) });
    }
  });
  $("#topology-mode", root).addEventListener("click", (e) => {
    const b = e.target.closest("button[data-hcas]");
    if (b) ctx.setQuery({ hcas: b.dataset.hcas === "auto" ? "" : b.dataset.hcas });
  });
  $("#cable", root).addEventListener("click", (e) => {
    if (e.target.closest("[data-close=cable]")) ctx.setQuery({ cable: "" });
  });
  let resizing = null;
  const onResize = () => {
    clearTimeout(resizing);
    resizing = setTimeout(() => {
      drawTopo();
      markSelected();
    }, 200);
  };
  window.addEventListener("resize", onResize);

  if (api.now() === null) await api.fetchTime();
  await Promise.all([load(true), loadTopo(true)]);
  return {
    onSummary: () => {
      load(false);
      loadTopo(false);
    },
    onQuery: (q) => {
      selected = q.get("link") || "";
      only = q.get("node") || "";
      range = rangeOf(q, "1h");
      const nextCable = q.get("cable") || "";
      const nextMode = HCA_MODES[q.get("hcas")] ? q.get("hcas") : "auto";
      if (nextMode !== hcaMode) {
        hcaMode = nextMode;
        $$("#topology-mode button", root).forEach((b) => b.classList.toggle("on", b.dataset.hcas === hcaMode));
        drawTopo();
        markSelected();
      }
      if (nextCable !== cable) {
        cable = nextCable;
        markSelected();
        drawCable(true).catch((err) => banner(err, { key: "fabric-topology" }));
      }
      if (fabric) draw();
      drawSide().catch((err) => banner(err, { key: "fabric" }));
    },
    unmount: () => {
      window.removeEventListener("resize", onResize);
      clearTimeout(resizing);
    },
  };
}
