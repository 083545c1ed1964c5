// One incident: what it is and where, its evidence, what it caused, every decision and change made on it (the audit
// trail), and the buttons that move it on (acknowledge, mitigate, resolve) with the operator's token.

import * as api from "../api.js";
import { $, banner, clearBanner, dash, empty, entityLink, html, nodeLink, notFound, pill, refresher, set, when } from "../ui.js";

export const title = (p) => p.id;

const ORDER = ["open", "acknowledged", "mitigated", "resolved"];
const VERBS = [
  { verb: "acknowledge", state: "acknowledged", label: "Acknowledge", cls: "primary", hint: "someone is on it" },
  { verb: "mitigate", state: "mitigated", label: "Mitigate", cls: "", hint: "the impact is contained" },
  { verb: "resolve", state: "resolved", label: "Resolve", cls: "danger", hint: "fixed; it cannot change after this" },
];

function facts(i, now) {
  return html`<dl class="kv">
    <dt>where</dt><dd>${entityLink(i.entity)}</dd>
    <dt>node</dt><dd>${i.node ? nodeLink(i.node) : dash}</dd>
    <dt>first seen</dt><dd>${when(i.first_seen, now)}</dd>
    <dt>last seen</dt><dd>${when(i.last_seen, now)}</dd>
    <dt>seen</dt><dd>${i.count} time${i.count === 1 ? "" : "s"}</dd>
    <dt>recommended action</dt><dd id="action">${i.action ? recommended(i) : dash}</dd>
    ${i.xid !== null && i.xid !== undefined ? html`<dt>Xid</dt><dd>${i.xid}</dd>` : ""}
    ${i.serial ? html`<dt>serial</dt><dd class="mono">${i.serial}</dd>` : ""}</dl>`;
}

// the action in words, its steps in order, and where the term comes from (NVIDIA's bucket and the Xid)
function recommended(i) {
  const steps = i.action_steps || [];
  return html`<b>${i.action_title || i.action}</b> <span class="muted">${i.action_reference || i.action}</span>
    ${steps.length ? html`<ol class="steps">${steps.map((s) => html`<li>${s}</li>`)}</ol>` : ""}`;
}

function evidence(list) {
  if (!list.length) return empty("no evidence kept");
  return html`<div class="evidence">${list.map((e) => html`<div class="e"><div class="src">${when(e.time, api.now(), false)} · ${e.source}</div>
    <div class="mono">${e.text}</div></div>`)}</div>`;
}

function effects(list) {
  if (!list.length) return empty("nothing else affected so far");
  return html`<ul class="effects">${list.map((e) => html`<li>${e}</li>`)}</ul>`;
}

function decision(a) {
  const d = a.decision || "";
  const cls = /^(refused|failed|error)/.test(d) ? "bad" : d === "would" ? "info" : /^(skip|defer|block|interrupt)/.test(d) ? "warn" : "ok";
  return pill(d || "—", cls);
}

/** The note a person gave with a change, from the request the audit log kept. */
function noteOf(a) {
  try {
    const body = JSON.parse(a.request || "{}").body;
    return body && body.note ? body.note : "";
  } catch {
    return "";
  }
}

const named = (v) => (v && v !== "-" ? v : "");

function trail(actions) {
  if (!actions.length) return empty("no decisions or changes yet");
  return html`<table class="trail" id="trail"><thead><tr><th>time</th><th>actor</th><th>action</th><th>target</th><th>decision</th><th>reason</th><th>runbook / step</th></tr></thead>
    <tbody>${actions.map((a) => html`<tr data-actor="${a.actor}" data-action="${a.action}"><td class="nowrap">${when(a.time, api.now(), false)}</td>
      <td><b>${a.actor}</b></td><td>${a.action}${a.dry_run ? html` ${pill("dry-run", "outline")}` : ""}</td><td class="nowrap">${a.target}</td>
      <td>${decision(a)}</td><td class="reason">${a.reason}${noteOf(a) ? html`${a.reason ? html`<br>` : ""}<span class="muted">note:</span> ${noteOf(a)}` : ""}</td>
      <td class="muted">${named(a.runbook) ? `${a.runbook}${named(a.step) ? ` / ${a.step}` : ""}` : dash}</td></tr>`)}</tbody></table>`;
}

function outcome(state) {
  const cls = /^(refused|failed|expired|unsupported|interrupted)$/.test(state) ? "bad" : /^(queued|dispatched)$/.test(state) ? "info" : "ok";
  return pill(state, cls);
}

// what the node's own agent was asked to do for this incident (a GPU reset, a reboot, the diagnostics), what it did,
// and the command's own words
function onNode(list) {
  if (!list.length) return empty("nothing asked of the node's agent");
  return html`<table class="trail" id="node-actions"><thead><tr><th>asked</th><th>action</th><th>gpu</th><th>state</th><th>what the agent said</th></tr></thead>
    <tbody>${list.map((a) => html`<tr data-id="${a.id}" data-state="${a.state}"><td class="nowrap">${when(a.created, api.now(), false)}</td>
      <td><b>${a.kind}</b> <span class="muted">${a.id}</span></td><td>${a.gpu === null || a.gpu === undefined ? dash : a.gpu}</td>
      <td>${outcome(a.state)}</td><td class="reason">${a.detail || a.reason}${a.output ? html`<details><summary class="muted">output</summary><pre class="mono">${a.output}</pre></details>` : ""}</td></tr>`)}</tbody></table>`;
}

export async function mount(root, ctx) {
  const id = ctx.params.id;
  root.innerHTML = String(html`
    <div class="crumbs"><a href="#/incidents">incidents</a> / ${id}</div>
    <div class="title"><h1>${id}</h1><span id="pills"></span><span class="sub" id="cause"></span></div>
    <p style="font-size:17px;margin:0 0 14px" id="summary"></p>
    <section class="grid g3" style="margin-bottom:14px">
      <div class="panel"><h2>what and where</h2><div id="facts"></div></div>
      <div class="panel"><h2>what it caused</h2><div id="effects"></div></div>
      <div class="panel"><h2>move it on</h2>
        <div class="actions-bar">
          <div class="muted" id="acting"></div>
          <textarea id="note" maxlength="2000" placeholder="a note for the audit log (optional)"></textarea>
          <div class="btns" id="buttons">${VERBS.map((v) => html`<button type="button" class="${v.cls}" data-verb="${v.verb}" title="${v.hint}">${v.label}</button>`)}</div>
          <div id="result" role="status"></div>
        </div></div>
    </section>
    <div class="panel" style="margin-bottom:14px"><h2>evidence</h2><div id="evidence"></div></div>
    <div class="panel" style="margin-bottom:14px"><h2>on the node <span class="right muted">what its agent was asked to do, and did</span></h2><div id="on-node"></div></div>
    <div class="panel"><h2>actions taken <span class="right muted">remediation's decisions and people's changes, oldest first</span></h2><div id="trail-box"></div></div>`);

  let current = null;

  const acting = () => {
    const who = document.getElementById("who");
    const actor = who && who.dataset.actor;
    set($("#acting", root), api.token.get()
      ? html`Changes are made as <b>${actor || "the token you gave"}</b>${who && who.dataset.role ? ` (${who.dataset.role})` : ""}.`
      : html`<span class="warn">No token given:</span> the API will refuse changes. <a href="#" id="give-token">Paste an operator token</a>.`);
    const give = $("#give-token", root);
    if (give) {
      give.onclick = (e) => {
        e.preventDefault();
        document.getElementById("who").click();
      };
    }
  };

  const draw = (i) => {
    current = i;
    const now = api.now();
    set($("#pills", root), html`${pill(i.severity)} ${pill(i.state)}`);
    set($("#cause", root), i.cause);
    set($("#summary", root), i.summary);
    set($("#facts", root), facts(i, now));
    set($("#effects", root), effects(i.effects));
    set($("#evidence", root), evidence(i.evidence));
    set($("#on-node", root), onNode(i.node_actions || []));
    set($("#trail-box", root), trail(i.actions || []));
    const at = ORDER.indexOf(i.state);
    root.querySelectorAll("#buttons button").forEach((b) => {
      const v = VERBS.find((x) => x.verb === b.dataset.verb);
      b.disabled = ORDER.indexOf(v.state) <= at; // states only move forward
    });
    root.dataset.state = i.state;
  };

  const load = refresher("incident", async () => {
    draw(await api.get(`/api/v1/incidents/${encodeURIComponent(id)}`));
  }, (err) => {
    if (err.status === 404) notFound(root, html`<a href="#/incidents">incidents</a> / ${id}`, `no incident ${id}`);
  });

  root.querySelector("#buttons").addEventListener("click", async (e) => {
    const b = e.target.closest("button[data-verb]");
    if (!b || b.disabled) return;
    const v = VERBS.find((x) => x.verb === b.dataset.verb);
    const note = $("#note", root).value.trim();
    const result = $("#result", root);
    root.querySelectorAll("#buttons button").forEach((x) => {
      x.disabled = true;
    });
    set(result, html`<span class="muted">${v.label.toLowerCase()}…</span>`);
    try {
      const answer = await api.post(`/api/v1/incidents/${encodeURIComponent(id)}/${v.verb}`, note ? { note } : undefined);
      $("#note", root).value = "";
      await load();
      const mine = (current && current.actions ? [...current.actions] : []).reverse().find((a) => a.action === answer.state);
      const by = mine ? mine.actor : null;
      set(result, html`<span class="ok" data-outcome="done">${id} is ${answer.state}${by ? html` (by <b>${by}</b>)` : ""}.</span>`);
      clearBanner("change");
    } catch (err) {
      set(result, html`<div class="bad" data-outcome="refused"><b>${err.status ? `${err.status}: ` : ""}${err.error || err.message}</b></div>${err.fix ? html`<div class="muted">${err.fix}</div>` : ""}`);
      banner(err, { key: "change" });
      if (current) draw(current);
    }
  });

  const onIdentity = () => acting();
  window.addEventListener("gpufleet:identity", onIdentity);
  acting();
  if (api.now() === null) await api.fetchTime();
  await load();
  return {
    onIncident: (i) => {
      if (i.id === id) load();
    },
    onSummary: () => {
      if (current) set($("#facts", root), facts(current, api.now()));
    },
    unmount: () => {
      window.removeEventListener("gpufleet:identity", onIdentity);
    },
  };
}
