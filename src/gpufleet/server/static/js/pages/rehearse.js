// Rehearse a remediation policy: paste a candidate RemediationPolicy, pick how far back, and see what it would have
// done with the recorded incidents, next to what was done (POST /api/v1/remediation/replay; changes nothing): the
// totals (actions, nodes and GPU-hours out of service, breaker trips, refusals, deferrals) and every incident the
// candidate would have handled differently.

import * as api from "../api.js";
import { $, dash, html, incidentLink, nodeLink, num, pill, set } from "../ui.js";

export const title = () => "rehearse a policy";

const WINDOWS = ["1d", "7d", "30d"];
const TEMPLATE = `apiVersion: gpufleet.io/v1
kind: RemediationPolicy
metadata: {name: candidate}
spec:
  budget: {cluster: "20%"}
  breaker: {threshold: "20%", window: 10m, minFailures: 3}
  rateLimits:
    drain: {minInterval: 30s}
    reboot-node: {minInterval: 60s, maxPerHour: 30}
`;
const LABELS = {
  actions: "actions carried out",
  nodes_out: "nodes taken out of service",
  node_hours: "node-hours out of service",
  gpu_hours: "GPU-hours lost",
  breaker_trips: "breaker trips",
  refusals: "steps refused (budget, breaker)",
  deferrals: "steps deferred (rate limits)",
};

const fmt = (v) => (Number.isInteger(v) ? num(v) : num(v, Math.abs(v) >= 100 ? 0 : 2));
const signed = (v) => (v === 0 ? "0" : `${v > 0 ? "+" : ""}${fmt(v)}`);
// fewer of any of these is the candidate doing less; whether that is better is the operator's call
const tone = (v) => (v === 0 ? "" : v < 0 ? "ok" : "warn");

function totals(t) {
  return html`<table id="replay-totals"><thead><tr><th></th><th class="num">current</th><th class="num">candidate</th>
    <th class="num">difference</th></tr></thead><tbody>${Object.entries(t).map(([k, v]) => html`<tr data-total="${k}">
      <td>${LABELS[k] || k}</td><td class="num">${fmt(v.current)}</td><td class="num">${fmt(v.candidate)}</td>
      <td class="num ${tone(v.difference)}">${signed(v.difference)}</td></tr>`)}</tbody></table>`;
}

function stopped(steps) {
  const at = Object.entries(steps).filter(([, how]) => ["refused", "deferred", "waiting", "error"].includes(how));
  return at.length ? at.map(([step, how]) => pill(`${step} ${how}`, how === "refused" ? "bad" : "warn")) : dash;
}

function actions(list) {
  return list.length ? html`${list.map((a, i) => html`${i ? html`<br>` : ""}${a}`)}` : dash;
}

function differences(list, count) {
  const same = html`<p class="muted" id="replay-same">${num(count - list.length)} of ${num(count)} incidents handled the same</p>`;
  if (!list.length) return html`${same}`;
  return html`<div class="scroll"><table id="replay-diffs"><thead><tr><th>incident</th><th>cause</th><th>node</th>
    <th>actions taken</th><th>candidate would take</th><th>candidate stopped at</th><th class="num">node-hours</th></tr></thead>
    <tbody>${list.map((d) => html`<tr data-incident="${d.incident}"><td>${incidentLink(d.incident)}</td><td>${d.cause}</td>
      <td>${d.node ? nodeLink(d.node) : dash}</td><td>${actions(d.current.actions)}</td><td>${actions(d.candidate.actions)}</td>
      <td>${stopped(d.candidate.steps)}</td><td class="num">${signed(Math.round((d.candidate.node_hours - d.current.node_hours) * 1000) / 1000)}</td></tr>`)}
    </tbody></table></div>${same}`;
}

export async function mount(root, ctx) {
  const since = WINDOWS.includes(ctx.query.get("since")) ? ctx.query.get("since") : "30d";
  root.innerHTML = String(html`
    <div class="title"><h1>Rehearse a policy</h1><span class="sub">replays the recorded incidents through the remediation
      engine under a candidate policy, in event time; changes nothing</span>
      <span class="right"><a href="#/incidents">incidents</a></span></div>
    <div class="grid g2" style="margin-bottom:14px">
      <div class="panel"><h2>candidate RemediationPolicy <span class="right muted">YAML or JSON</span></h2>
        <textarea id="replay-policy" rows="14" spellcheck="false" style="width:100%;font-family:monospace">${TEMPLATE}</textarea>
        <p><label>replay the last <select id="replay-since">${WINDOWS.map((w) => html`<option value="${w}" ${w === since ? "selected" : ""}>${w}</option>`)}</select></label>
          <button type="button" id="replay-run">Replay</button> <span id="replay-status" class="muted"></span></p>
        <div id="replay-error"></div></div>
      <div class="panel"><h2>totals <span class="right muted" id="replay-baseline"></span></h2><div id="replay-summary" class="muted">
        replay a policy to compare it with what was done</div><div id="replay-totals-box"></div><div id="replay-notes" class="muted"></div></div>
    </div>
    <div class="panel"><h2>incidents handled differently</h2><div id="replay-diffs-box"></div></div>`);

  const run = async () => {
    const button = $("#replay-run", root);
    button.disabled = true;
    set($("#replay-status", root), "replaying…");
    set($("#replay-error", root), "");
    delete root.dataset.replayed;
    try {
      const r = await api.post("/api/v1/remediation/replay", {
        policy: $("#replay-policy", root).value,
        since: $("#replay-since", root).value,
      });
      set($("#replay-baseline", root), `current = ${r.baseline}`);
      set($("#replay-summary", root), `${num(r.events)} events, ${num(r.incidents)} incidents on ${num(r.nodes)} nodes`);
      set($("#replay-totals-box", root), totals(r.totals));
      set($("#replay-notes", root), html`${r.notes.map((n) => html`<p>${n}</p>`)}`);
      set($("#replay-diffs-box", root), differences(r.differences, r.incidents));
      set($("#replay-status", root), "");
      root.dataset.replayed = "ok"; // the browser tests wait on it
    } catch (err) {
      set($("#replay-status", root), "");
      for (const id of ["#replay-baseline", "#replay-summary", "#replay-totals-box", "#replay-notes", "#replay-diffs-box"]) {
        set($(id, root), ""); // no earlier answer next to the refusal
      }
      set($("#replay-error", root), html`<div class="banner error" data-error="replay"><b>${err.error || err.message}</b>
        ${err.fix ? html`<div class="muted">fix: ${err.fix}</div>` : ""}</div>`);
      root.dataset.replayed = "failed";
    } finally {
      button.disabled = false;
    }
  };
  $("#replay-run", root).addEventListener("click", run);
  $("#replay-since", root).addEventListener("change", (e) => ctx.setQuery({ since: e.target.value }));
  return {
    onQuery: (query) => {
      const w = query.get("since");
      if (WINDOWS.includes(w)) $("#replay-since", root).value = w;
    },
  };
}
