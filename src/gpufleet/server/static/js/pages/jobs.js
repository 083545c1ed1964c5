// Training jobs: running or stalled, their step time and how long since the last step, restarts, and the incident
// that stalled one when the control plane knows it.

import * as api from "../api.js";
import { $, ago, banner, causeLinks, clearBanner, empty, html, nodeLink, num, pill, set } from "../ui.js";

export const title = () => "jobs";

function nodesOf(list) {
  if (list.length <= 4) return list.map((n, i) => html`${i ? ", " : ""}${nodeLink(n)}`);
  return html`${list.slice(0, 3).map((n) => html`${nodeLink(n)}, `)}<span class="muted" title="${list.join(", ")}">and ${list.length - 3} more</span>`;
}

function table(rows) {
  if (!rows.length) return empty("no training jobs reported");
  const order = { Stalled: 0, Running: 1 };
  const sorted = [...rows].sort((a, b) => order[a.state] - order[b.state] || a.name.localeCompare(b.name));
  return html`<table id="jobs-table"><thead><tr><th>job</th><th>state</th><th class="num">nodes</th><th class="num">ranks</th><th class="num">step</th>
    <th class="num">step time</th><th>last step</th><th class="num">restarts</th><th>cause of the stall</th><th>on</th></tr></thead>
    <tbody>${sorted.map((j) => {
      const late = j.last_step_age_s > 3 * Math.max(1, j.step_time_s);
      return html`<tr data-job="${j.name}" data-state="${j.state}"><td><b>${j.name}</b></td><td>${pill(j.state)}</td><td class="num">${j.nodes}</td>
        <td class="num">${j.ranks}</td><td class="num">${num(j.step)}</td><td class="num">${num(j.step_time_s, 2)} s</td>
        <td class="nowrap ${j.state === "Stalled" ? "bad" : late ? "warn" : ""}">${ago(j.last_step_age_s)}</td>
        <td class="num ${j.restarts ? "warn" : ""}">${j.restarts}</td>
        <td>${j.cause ? causeLinks(j.cause) : j.state === "Stalled" ? html`<span class="muted">not known yet</span>` : html`<span class="dim">–</span>`}</td>
        <td>${nodesOf(j.node_list)}</td></tr>`;
    })}</tbody></table>`;
}

export async function mount(root) {
  root.innerHTML = String(html`
    <div class="title"><h1>Training jobs</h1><span class="sub" id="jobs-sub"></span></div>
    <section class="kpis" id="jobs-kpis"></section>
    <div class="panel"><div id="jobs"></div></div>`);
  let busy = false;

  const load = async () => {
    if (busy) return;
    busy = true;
    try {
      const rows = await api.get("/api/v1/jobs");
      const running = rows.filter((j) => j.state === "Running").length;
      const stalled = rows.length - running;
      const tile = (label, v, cls) => html`<div class="kpi ${cls}"><div class="v">${v}</div><div class="l">${label}</div></div>`;
      set($("#jobs-kpis", root), html`${tile("running", running, "ok")}${tile("stalled", stalled, stalled ? "bad" : "ok")}
        ${tile("ranks", num(rows.reduce((n, j) => n + j.ranks, 0)), "")}${tile("restarts", num(rows.reduce((n, j) => n + j.restarts, 0)), "")}`);
      set($("#jobs-sub", root), `${rows.length} job${rows.length === 1 ? "" : "s"}`);
      set($("#jobs", root), table(rows));
      clearBanner("jobs");
    } catch (err) {
      banner(err, { key: "jobs" });
    } finally {
      busy = false;
    }
  };

  await load();
  return { onSummary: () => load() };
}
