// gpufleet dashboard: the router, the header (navigation, cluster clock, live indicator, who you act as) and the
// live stream that keeps every page current.
//
// Charts are hand-written SVG (charts.js, about 300 lines) rather than a vendored library. The series here are
// small (at most a few hundred points: per-GPU timelines are one point every 30 s, fleet history one a minute over
// 4 h), so drawing speed is never the limit, and SVG gives what a canvas library would not: every line, band and
// lane is an element the browser tests can count and inspect, styles come from the same CSS as the rest of the
// page, and there is no third-party code to vet, vendor and keep updated for an air-gapped cluster. What a
// library would add (zoom, pan, thousands of points) these pages do not need; the time axis, units, gaps, lanes
// for clock-event reasons and the crosshair are written for exactly what the control plane records.
//
// Pages are ES modules in pages/, each exporting mount(root, ctx) that draws the page and returns hooks the app
// calls on live updates (onSummary every 5 s, onIncident, onEvent) and on leaving (unmount). No build step.

import * as api from "./api.js";
import { $, banner, clearBanners, clock, errorsShown, esc } from "./ui.js";

const ROUTES = [
  { re: /^\/?$/, page: "overview", nav: "overview" },
  { re: /^\/node\/([^/]+)$/, page: "node", nav: "overview", keys: ["name"] },
  { re: /^\/gpu\/([^/]+)\/(\d+)$/, page: "gpu", nav: "overview", keys: ["node", "index"] },
  { re: /^\/fabric$/, page: "fabric", nav: "fabric" },
  { re: /^\/incidents$/, page: "incidents", nav: "incidents" },
  { re: /^\/incident\/([^/]+)$/, page: "incident", nav: "incidents", keys: ["id"] },
  { re: /^\/rehearse$/, page: "rehearse", nav: "incidents" },
  { re: /^\/jobs$/, page: "jobs", nav: "jobs" },
  { re: /^\/scheduler$/, page: "scheduler", nav: "scheduler" },
  { re: /^\/cost$/, page: "cost", nav: "cost" },
];

const state = { key: null, page: null, controller: null, summary: null, seq: 0 };

function parseHash() {
  const h = location.hash.replace(/^#/, "") || "/";
  const [path, qs] = h.split("?");
  const query = new URLSearchParams(qs || "");
  for (const r of ROUTES) {
    const m = r.re.exec(path);
    if (m) {
      const params = {};
      (r.keys || []).forEach((k, i) => {
        params[k] = decodeURIComponent(m[i + 1]);
      });
      return { route: r, params, query, path };
    }
  }
  return { route: null, params: {}, query, path };
}

/** Change the query of the current page's hash (filters, selection, ranges) without a reload. */
export function setQuery(changes) {
  const { path, query } = parseHash();
  for (const [k, v] of Object.entries(changes)) {
    if (v === null || v === undefined || v === "") query.delete(k);
    else query.set(k, v);
  }
  const qs = query.toString();
  location.hash = `#${path}${qs ? `?${qs}` : ""}`;
}

// --- the page's state: loading until its first load is done, and what failed if it did ------------------------------

/** The line above the page that says it is loading, or that its first load failed and why. */
function pageState() {
  let el = document.getElementById("page-state");
  if (!el) {
    el = document.createElement("div");
    el.id = "page-state";
    el.setAttribute("role", "status");
    el.setAttribute("aria-live", "polite");
    const view = $("#view");
    view.parentNode.insertBefore(el, view);
  }
  return el;
}

function showLoading(page) {
  const el = pageState();
  el.className = "page-state loading";
  el.dataset.state = "loading";
  el.innerHTML = `<span class="spinner" aria-hidden="true"></span> Loading ${esc(page)}…`;
  el.hidden = false;
}

function showLoaded(failure) {
  const el = pageState();
  if (!failure) {
    el.hidden = true;
    el.dataset.state = "ready";
    el.innerHTML = "";
    return;
  }
  el.className = "page-state failed";
  el.dataset.state = "failed";
  el.setAttribute("role", "alert");
  el.innerHTML = `<b>This page could not load${failure.status ? ` (${esc(failure.status)})` : ""}:</b> ${esc(failure.what)}` +
    `${failure.fix ? ` <span class="fix">${esc(failure.fix)}</span>` : ""} <span class="muted">It tries again with the next update.</span>`;
  el.hidden = false;
}

async function route() {
  const { route: r, params, query, path } = parseHash();
  const view = $("#view");
  const key = `${path}`;
  document.querySelectorAll(".nav a").forEach((a) => a.classList.toggle("on", r && a.dataset.nav === r.nav));
  if (r && state.key === key && state.controller && state.controller.onQuery) {
    view.dataset.route = location.hash || "#/";
    state.controller.onQuery(query); // same page, new filters or selection
    return;
  }
  if (state.controller && state.controller.unmount) state.controller.unmount();
  state.controller = null;
  state.key = key;
  const seq = ++state.seq;
  clearBanners();
  view.innerHTML = "";
  view.removeAttribute("data-ready");
  view.dataset.route = location.hash || "#/"; // with data-ready: this route has drawn (the browser tests wait on it)
  if (!r) {
    showLoaded(null);
    view.dataset.page = "missing";
    view.innerHTML = `<div class="panel empty">no page at ${esc(location.hash)}; <a href="#/">back to the overview</a></div>`;
    return;
  }
  view.dataset.page = r.page;
  const before = errorsShown().count;
  let failure = null;
  showLoading(r.page);
  try {
    const mod = await import(`./pages/${r.page}.js`);
    if (seq !== state.seq) return;
    const controller = await mod.mount(view, { params, query, setQuery, summary: state.summary, header });
    if (seq !== state.seq) {
      if (controller && controller.unmount) controller.unmount();
      return;
    }
    state.controller = controller || {};
    document.title = `gpufleet · ${mod.title ? mod.title(params) : r.page}`;
  } catch (err) {
    if (seq === state.seq) banner(err);
  } finally {
    if (seq === state.seq) {
      const shown = errorsShown();
      if (shown.count > before && shown.last && !["token", "summary"].includes(shown.last.key)) failure = shown.last;
      showLoaded(failure);
      view.dataset.ready = "1";
    }
  }
}

// --- header ------------------------------------------------------------------------------------------------------

function header(s) {
  state.summary = s;
  const el = $("#clock");
  const simulated = s.simulated_time === true;
  el.dataset.clock = simulated ? "simulated" : "wall";
  el.innerHTML = simulated
    ? `<span class="pill info clock-kind">simulated</span> ${esc(clock(s.time))}`
    : esc(clock(s.time));
  el.title = simulated
    ? "the digital twin's clock (UTC), not the wall clock: this control plane runs on the twin, whose time runs at its own speed"
    : "the control plane's clock (UTC)";
  const inc = $("#nav-incidents");
  inc.textContent = s.incidents_open ? String(s.incidents_open) : "";
  inc.className = `count${s.incidents_critical ? "" : " warn"}`;
  const jobs = $("#nav-jobs");
  jobs.textContent = s.jobs && s.jobs.Stalled ? String(s.jobs.Stalled) : "";
  const fab = $("#nav-fabric");
  fab.textContent = s.links_down ? String(s.links_down) : "";
}

function live(status) {
  const el = $("#live");
  el.className = `live ${status === "live" ? "on" : status === "polling" ? "poll" : ""}`;
  el.textContent = status === "live" ? "live" : status === "polling" ? "polling" : "reconnecting";
  el.title = status === "live" ? "following /api/v1/stream" : status === "polling" ? "the stream was refused; polling every 5 s" : "the control plane does not answer";
}

// --- who you act as ----------------------------------------------------------------------------------------------

/** Ask who the stored token is and show it; pages hear of it through the `gpufleet:identity` event. */
async function identity() {
  const me = await whoIs();
  window.dispatchEvent(new CustomEvent("gpufleet:identity", { detail: me }));
  return me;
}

async function whoIs() {
  const who = $("#who");
  const status = $("#token-status");
  if (!api.token.get()) {
    who.className = "who anon";
    who.innerHTML = "read-only · <span class=\"role\">paste a token</span>";
    who.dataset.actor = "";
    status.textContent = "No token: you can look, not change. Reads are open from the control plane's own host.";
    return null;
  }
  try {
    const me = await api.whoami();
    who.className = "who";
    who.innerHTML = `acting as <b>${esc(me.name)}</b> <span class="role">${esc(me.role)}</span>`;
    who.dataset.actor = me.known ? me.name : "";
    who.dataset.role = me.role;
    status.innerHTML = me.known
      ? `Acting as <b>${esc(me.name)}</b> (${esc(me.role)}).${me.role === "viewer" ? " A viewer token can look, not change." : ""}`
      : "An admin token (this control plane does not say its name).";
    return me;
  } catch (err) {
    who.className = "who anon";
    who.innerHTML = `<span class="bad">token refused</span>`;
    who.dataset.actor = "";
    status.innerHTML = `<span class="bad">${esc(err.error || err.message)}</span> ${esc(err.fix || "")}`;
    banner(err, { key: "token" });
    return null;
  }
}

function tokenDialog() {
  const dlg = $("#token-dialog");
  const input = $("#token-input");
  $("#who").onclick = () => {
    dlg.hidden = !dlg.hidden;
    if (!dlg.hidden) input.focus();
  };
  $("#token-save").onclick = async () => {
    if (!input.value.trim()) return;
    api.token.set(input.value);
    input.value = "";
    follow();
    const me = await identity();
    if (me) dlg.hidden = true;
  };
  input.addEventListener("keydown", (e) => {
    if (e.key === "Enter") $("#token-save").click();
    if (e.key === "Escape") dlg.hidden = true;
  });
  $("#token-forget").onclick = async () => {
    api.token.clear();
    follow();
    await identity();
  };
  $("#token-close").onclick = () => {
    dlg.hidden = true;
  };
}

// --- start -------------------------------------------------------------------------------------------------------

let unfollow = null;

/** Follow the live stream, anew when the stored token changes (with a token it is read with that token). */
function follow() {
  if (unfollow) unfollow();
  unfollow = api.follow({
    status: live,
    summary: (s) => {
      header(s);
      if (state.controller && state.controller.onSummary) state.controller.onSummary(s);
    },
    incident: (i) => state.controller && state.controller.onIncident && state.controller.onIncident(i),
    event: (e) => state.controller && state.controller.onEvent && state.controller.onEvent(e),
  });
}

function start() {
  // a page left for another (or kept in the back-forward cache) lets go of its stream: the browser allows a few
  // connections to one host, and streams held by pages out of sight would leave the next page's reads waiting
  window.addEventListener("pagehide", () => {
    if (unfollow) unfollow();
    unfollow = null;
  });
  window.addEventListener("pageshow", (e) => {
    if (e.persisted) follow();
  });
  // a page whose first load failed and whose refresh then worked is no longer failed
  window.addEventListener("gpufleet:refreshed", () => {
    const el = document.getElementById("page-state");
    if (el && el.dataset.state === "failed") showLoaded(null);
  });
  tokenDialog();
  identity();
  window.addEventListener("hashchange", route);
  follow();
  route().then(() => {
    if (state.summary) return; // the page fetched the summary and filled the header
    api
      .get("/api/v1/summary")
      .then((s) => {
        api.noteTime(s.time);
        if (!state.summary) header(s);
      })
      .catch((err) => banner(err, { key: "summary" }));
  });
}

start();
