// Incidents, one per root cause, newest first, filtered by state, severity, cause and node (the filters live in the
// page's address, so a filtered list can be shared).

import * as api from "../api.js";
import { $, ago, banner, clearBanner, empty, entityLink, html, incidentLink, pill, set, when } from "../ui.js";

export const title = () => "incidents";

const STATES = ["open", "acknowledged", "mitigated", "resolved"];
const SEVERITIES = ["critical", "warning", "info"];
const FILTERS = ["state", "severity", "cause", "node"];

function select(name, options, value, any) {
  return html`<select name="${name}" data-filter="${name}"><option value="">${any}</option>${options.map(
    (o) => html`<option value="${o}" ${o === value ? "selected" : ""}>${o}</option>`,
  )}</select>`;
}

function table(rows, now) {
  if (!rows.length) return empty("no incidents match");
  return html`<table id="incident-table"><thead><tr><th>severity</th><th>incident</th><th>state</th><th>cause</th><th>where</th><th>summary</th>
    <th>opened</th><th>last seen</th><th class="num">count</th><th>what it caused</th></tr></thead>
    <tbody>${rows.map((i) => html`<tr data-id="${i.id}"><td>${pill(i.severity)}</td><td class="nowrap">${incidentLink(i.id)}</td><td>${pill(i.state)}</td>
      <td class="nowrap">${i.cause}</td><td class="nowrap">${entityLink(i.entity)}</td><td>${i.summary}</td>
      <td class="nowrap" title="${when(i.first_seen, now, false)}">${ago(now - i.first_seen)}</td><td class="nowrap">${ago(now - i.last_seen)}</td>
      <td class="num">${i.count}</td><td>${i.effects.length ? i.effects.join("; ") : html`<span class="dim">–</span>`}</td></tr>`)}</tbody></table>`;
}

export async function mount(root, ctx) {
  let query = ctx.query;
  root.innerHTML = String(html`
    <div class="title"><h1>Incidents</h1><span class="sub" id="count"></span>
      <span class="right"><a href="#/rehearse" id="rehearse-link">rehearse a remediation policy</a></span></div>
    <form class="filters" id="filters" onsubmit="return false"></form>
    <div class="panel"><div id="list"></div></div>`);

  let causes = [];
  let nodes = [];
  let busy = false;
  let again = false;

  const drawFilters = () => {
    const v = (k) => query.get(k) || "";
    set($("#filters", root), html`
      <label>state ${select("state", STATES, v("state"), "any")}</label>
      <label>severity ${select("severity", SEVERITIES, v("severity"), "any")}</label>
      <label>cause ${select("cause", [...new Set([...causes, v("cause")].filter(Boolean))].sort(), v("cause"), "any")}</label>
      <label>node <input name="node" data-filter="node" list="node-names" value="${v("node")}" placeholder="any" size="12">
        <datalist id="node-names">${nodes.map((n) => html`<option value="${n}"></option>`)}</datalist></label>
      ${FILTERS.some((k) => v(k)) ? html`<a class="btn" href="#/incidents">clear filters</a>` : ""}`);
  };

  const load = async () => {
    if (busy) {
      again = true;
      return;
    }
    busy = true;
    try {
      const params = { limit: 500 };
      for (const k of FILTERS) if (query.get(k)) params[k] = query.get(k);
      const rows = await api.get("/api/v1/incidents", params);
      const now = api.now() ?? (await api.fetchTime());
      set($("#list", root), table(rows, now));
      set($("#count", root), `${rows.length} shown${rows.length === 500 ? " (the newest 500)" : ""}`);
      clearBanner("incidents");
    } catch (err) {
      banner(err, { key: "incidents" });
    } finally {
      busy = false;
      if (again) {
        again = false;
        load();
      }
    }
  };

  // what the filters can choose from: the causes and nodes of every incident kept
  const options = async () => {
    try {
      const [all, ns] = await Promise.all([api.get("/api/v1/incidents", { limit: 5000 }), api.get("/api/v1/nodes")]);
      causes = [...new Set(all.map((i) => i.cause))].sort();
      nodes = ns.map((n) => n.name);
      drawFilters();
    } catch {
      /* the filters still work by typing */
    }
  };

  root.querySelector("#filters").addEventListener("change", (e) => {
    const f = e.target.closest("[data-filter]");
    if (f) ctx.setQuery({ [f.dataset.filter]: f.value.trim() });
  });

  drawFilters();
  await Promise.all([load(), options()]);
  return {
    onIncident: () => load(),
    onSummary: () => load(),
    onQuery: (q) => {
      query = q;
      drawFilters();
      load();
    },
  };
}
