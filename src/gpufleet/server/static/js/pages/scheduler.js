// The workload manager's view: for each manager that reports (an agent run with --workload slurm|kubernetes, or
// the twin), its queues as bars of GPUs in use and asked for against quota and borrowing limit, and the work it has
// not placed, longest-waiting first, with the reason and message in the manager's own words.

import * as api from "../api.js";
import { $, ago, dash, duration, empty, html, num, pill, refresher, set } from "../ui.js";

export const title = () => "scheduler";

const BAR_W = 360;
const BAR_H = 18;

// How worrying a reason is: waiting its turn is normal, a node or partition out is an operator's problem.
const REASON_PILL = {
  Priority: "info",
  Resources: "warn",
  Unschedulable: "warn",
  Pending: "warn",
  ReqNodeNotAvail: "bad",
  NodeDown: "bad",
  PartitionDown: "bad",
  PartitionInactive: "bad",
  BadConstraints: "bad",
  DependencyNeverSatisfied: "bad",
  JobHeldUser: "outline",
  JobHeldAdmin: "outline",
  SchedulingGated: "outline",
};

const reasonPill = (r) => (r ? pill(r, REASON_PILL[r] || (/^(QOS|Assoc)/.test(r) ? "warn" : "outline")) : html`<span class="dim">${dash}</span>`);

/** One queue as a bar: in use (red past quota: borrowed), asked for by pending work, the quota and the borrowing limit. */
function quotaBar(q) {
  const quota = q.quota ?? null;
  const ceiling = quota !== null && q.borrowing_limit !== null && q.borrowing_limit !== undefined ? quota + q.borrowing_limit : null;
  const scale = Math.max(1, quota ?? 0, ceiling ?? 0, q.gpus_used + q.gpus_pending);
  const x = (v) => (Math.max(0, v) / scale) * BAR_W;
  const usedIn = quota === null ? q.gpus_used : Math.min(q.gpus_used, quota);
  const borrowed = quota === null ? 0 : Math.max(0, q.gpus_used - quota);
  const tip = `${q.name}: ${q.gpus_used} GPUs in use${quota !== null ? ` of ${quota}` : ""}, ${q.gpus_pending} asked for by pending work` +
    `${ceiling !== null ? `, may borrow up to ${q.borrowing_limit}` : ""}`;
  return html`<svg class="quota-bar" viewBox="0 0 ${BAR_W} ${BAR_H}" width="${BAR_W}" height="${BAR_H}" role="img" aria-label="${tip}"
      data-queue="${q.name}" data-used="${q.gpus_used}" data-pending="${q.gpus_pending}" data-quota="${quota ?? ""}" data-scale="${scale}">
    <title>${tip}</title>
    <rect class="track" x="0" y="3" width="${BAR_W}" height="${BAR_H - 6}" rx="3"></rect>
    ${quota !== null ? html`<rect class="quota" x="0" y="3" width="${x(quota)}" height="${BAR_H - 6}" rx="3"></rect>` : ""}
    <rect class="used" x="0" y="3" width="${x(usedIn)}" height="${BAR_H - 6}"></rect>
    ${borrowed ? html`<rect class="borrowed" x="${x(usedIn)}" y="3" width="${x(borrowed)}" height="${BAR_H - 6}"></rect>` : ""}
    ${q.gpus_pending ? html`<rect class="pending" x="${x(q.gpus_used)}" y="3" width="${x(q.gpus_pending)}" height="${BAR_H - 6}"></rect>` : ""}
    ${quota !== null ? html`<line class="quota-line" x1="${x(quota)}" x2="${x(quota)}" y1="0" y2="${BAR_H}"></line>` : ""}
    ${ceiling !== null && q.borrowing_limit > 0 ? html`<line class="borrow-line" x1="${x(ceiling)}" x2="${x(ceiling)}" y1="0" y2="${BAR_H}"></line>` : ""}
  </svg>`;
}

function queues(m) {
  if (!m.queues.length) return empty("no queues reported");
  return html`<table class="queue-table" data-manager="${m.manager}"><thead><tr><th>queue</th><th>GPUs: in use · pending · quota</th>
    <th class="num">in use</th><th class="num">quota</th><th class="num">use</th><th class="num">pending GPUs</th><th class="num">borrowing limit</th>
    <th class="num">running</th><th class="num">pending</th></tr></thead>
    <tbody>${m.queues.map((q) => html`<tr data-queue="${q.name}"><td><b>${q.name}</b></td><td>${quotaBar(q)}</td>
      <td class="num">${num(q.gpus_used)}</td><td class="num">${q.quota === null ? html`<span class="dim">none</span>` : num(q.quota)}</td>
      <td class="num ${q.use_pct !== null && q.use_pct > 100 ? "warn" : ""}">${q.use_pct === null ? dash : `${num(q.use_pct)}%`}</td>
      <td class="num ${q.gpus_pending ? "warn" : ""}">${num(q.gpus_pending)}</td>
      <td class="num">${q.borrowing_limit === null || q.quota === null ? dash : num(q.borrowing_limit)}</td>
      <td class="num">${num(q.running)}</td><td class="num">${num(q.pending)}</td></tr>`)}</tbody></table>
    <div class="quota-legend muted"><span class="sw used"></span>in use <span class="sw borrowed"></span>borrowed beyond quota
      <span class="sw pending"></span>asked for by pending work <span class="sw quota-mark"></span>quota <span class="sw borrow-mark"></span>borrowing limit</div>`;
}

function pendingTable(m) {
  // the API pages pending work (longest-waiting first across managers): this page holds the longest-waiting rows
  const rest = m.pending_count - m.pending.length;
  const more = rest > 0 ? html`<div class="muted" data-more="${rest}">${num(rest)} more waiting less long: <code>gpufleet get pending</code> lists them all</div>` : "";
  if (!m.pending.length) return more || html`<div class="empty" data-empty="nothing-pending">nothing pending</div>`;
  return html`<table class="pending-table" data-manager="${m.manager}"><thead><tr><th>name</th><th>queue</th><th>namespace</th>
    <th class="num">GPUs</th><th>waiting</th><th>reason</th><th>message</th></tr></thead>
    <tbody>${m.pending.map((p) => html`<tr data-pending="${p.name}" data-reason="${p.reason}"><td><b>${p.name}</b></td>
      <td>${p.queue || dash}</td><td>${p.namespace || dash}</td><td class="num">${num(p.gpus)}</td>
      <td class="nowrap" title="${p.since ? new Date(p.since * 1000).toISOString() : "start not known"}">${p.waiting_s === null ? dash : duration(p.waiting_s)}</td>
      <td>${reasonPill(p.reason)}</td><td class="message">${p.message || html`<span class="dim">${dash}</span>`}</td></tr>`)}</tbody></table>${more}`;
}

function manager(m) {
  const stale = m.stale ? html` ${pill("stale", "bad")}` : "";
  return html`<div class="panel manager" data-manager="${m.manager}" style="margin-bottom:14px">
    <h2>${m.manager} <span class="right muted">reported by ${m.node} · ${ago(m.age_s)}${stale}</span></h2>
    <h3 class="sub-h">queues</h3>${queues(m)}
    <h3 class="sub-h">pending work <span class="muted">(${m.pending_count}, ${num(m.gpus_pending)} GPUs; longest-waiting first)</span></h3>${pendingTable(m)}
  </div>`;
}

export async function mount(root) {
  root.innerHTML = String(html`
    <div class="title"><h1>Scheduler</h1><span class="sub" id="sched-sub"></span></div>
    <section class="kpis" id="sched-kpis"></section>
    <div id="managers"></div>`);

  const load = refresher("scheduler", async () => {
    const view = await api.get("/api/v1/scheduler");
    const ms = view.managers;
    if (!ms.length) {
      set($("#sched-kpis", root), "");
      set($("#sched-sub", root), "");
      set($("#managers", root), html`<div class="panel empty" data-empty="no-managers">no workload manager reports to this control plane:
        run <code>gpufleet agent --workload slurm|kubernetes</code></div>`);
    } else {
      const pending = ms.reduce((n, m) => n + m.pending_count, 0);
      const gpus = ms.reduce((n, m) => n + m.gpus_pending, 0);
      const longest = Math.max(0, ...ms.flatMap((m) => m.pending.map((p) => p.waiting_s || 0)));
      const over = ms.reduce((n, m) => n + m.queues.filter((q) => q.use_pct !== null && q.use_pct > 100).length, 0);
      const tile = (label, v, cls) => html`<div class="kpi ${cls}"><div class="v">${v}</div><div class="l">${label}</div></div>`;
      set($("#sched-kpis", root), html`${tile("pending", num(pending), pending ? "warn" : "ok")}${tile("GPUs asked for", num(gpus), gpus ? "warn" : "ok")}
        ${tile("longest wait", pending ? duration(longest) : dash, "")}${tile("queues borrowing", num(over), "")}`);
      set($("#sched-sub", root), ms.map((m) => `${m.manager} (${m.queues.length} queue${m.queues.length === 1 ? "" : "s"})`).join(", "));
      set($("#managers", root), html`${ms.map(manager)}`);
    }
});

  await load();
  return { onSummary: () => load() };
}
