// Small pieces every page uses: HTML that escapes what it interpolates, formatting with units, pills, links to
// the page of an entity, empty states and error banners.

export class Raw {
  constructor(s) {
    this.s = s;
  }
  toString() {
    return this.s;
  }
}

/** Trusted markup, inserted as it is. */
export const raw = (s) => new Raw(String(s));

export function esc(value) {
  return String(value).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c]);
}

function part(v) {
  if (v === null || v === undefined || v === false) return "";
  if (v instanceof Raw) return v.s;
  if (Array.isArray(v)) return v.map(part).join("");
  return esc(v);
}

/** A tagged template: html`<td>${name}</td>` escapes `name`; arrays are joined; raw() and nested html`` pass. */
export function html(strings, ...values) {
  let out = strings[0];
  values.forEach((v, i) => {
    out += part(v) + strings[i + 1];
  });
  return new Raw(out);
}

export const $ = (sel, root = document) => root.querySelector(sel);
export const $$ = (sel, root = document) => Array.from(root.querySelectorAll(sel));

export function set(el, markup) {
  if (el) el.innerHTML = part(markup);
}

// --- numbers and times -------------------------------------------------------------------------------------------

export const dash = "–";

export function num(v, digits = 0) {
  if (v === null || v === undefined || Number.isNaN(v)) return dash;
  return Number(v).toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
}

/** A value with its unit, e.g. unit(71.4, "°C") -> "71 °C"; a dash when missing. */
export function unit(v, u, digits = 0) {
  if (v === null || v === undefined || Number.isNaN(v)) return dash;
  return `${num(v, digits)}${u === "%" ? "" : " "}${u}`;
}

export function mib(v) {
  if (v === null || v === undefined) return dash;
  return v >= 1024 ? `${num(v / 1024, 1)} GiB` : `${num(v)} MiB`;
}

/** How long: 42 s, 7 min, 3 h 05 min, 2 d 4 h. */
export function duration(s) {
  if (s === null || s === undefined || Number.isNaN(s)) return dash;
  s = Math.max(0, s);
  if (s < 60) return `${Math.floor(s)} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  if (s < 86400) return `${Math.floor(s / 3600)} h ${String(Math.floor((s % 3600) / 60)).padStart(2, "0")} min`;
  return `${Math.floor(s / 86400)} d ${Math.floor((s % 86400) / 3600)} h`;
}

export function ago(s) {
  return s === null || s === undefined ? dash : `${duration(s)} ago`;
}

const pad = (n) => String(n).padStart(2, "0");

/** The cluster clock, in UTC: 2026-01-01 12:04:05Z. */
export function clock(epoch) {
  if (epoch === null || epoch === undefined) return dash;
  const d = new Date(epoch * 1000);
  return `${d.getUTCFullYear()}-${pad(d.getUTCMonth() + 1)}-${pad(d.getUTCDate())} ${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}:${pad(d.getUTCSeconds())}Z`;
}

export function hhmm(epoch, seconds = false) {
  const d = new Date(epoch * 1000);
  return `${pad(d.getUTCHours())}:${pad(d.getUTCMinutes())}${seconds ? `:${pad(d.getUTCSeconds())}` : ""}`;
}

const MONTHS = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/** A time, with its date unless it is within the last day of the server's `now`, and how long ago:
 * "12:04:05Z (3 min ago)", "Jan 01 03:00:01Z (1 d 8 h ago)". */
export function when(epoch, now, relative = true) {
  if (epoch === null || epoch === undefined) return dash;
  const d = new Date(epoch * 1000);
  const ref = now ?? epoch;
  const date = ref - epoch > 72000 || ref - epoch < 0 ? `${MONTHS[d.getUTCMonth()]} ${pad(d.getUTCDate())} ` : "";
  const rel = now && relative ? ` (${ago(now - epoch)})` : "";
  return `${date}${hhmm(epoch, true)}Z${rel}`;
}

// --- pills and links ---------------------------------------------------------------------------------------------

export const pill = (text, cls = text) => html`<span class="pill ${cls}">${text}</span>`;

export const nodeLink = (name) => html`<a href="#/node/${encodeURIComponent(name)}">${name}</a>`;
export const gpuHref = (node, index) => `#/gpu/${encodeURIComponent(node)}/${index}`;
export const gpuLink = (node, index, text) => html`<a href="${gpuHref(node, index)}">${text ?? `${node}/gpu${index}`}</a>`;
export const portHref = (node, hca, port) => `#/fabric?link=${encodeURIComponent(`${node}/${hca}/${port}`)}`;
export const incidentLink = (id) => html`<a href="#/incident/${encodeURIComponent(id)}">${id}</a>`;

/** An incident's entity as a link to its page: gpu, port, node or job. */
export function entityLink(e) {
  if (!e) return dash;
  if (typeof e === "string") return e;
  switch (e.kind) {
    case "gpu":
      if (e.index === null || e.index === undefined) {
        // a GPU NVML does not list (no index): named as the API names it (its PCI address or UUID); its node's page
        const text = e.text || `gpu/${e.node}/${e.name || "?"}`;
        return html`<a href="#/node/${encodeURIComponent(e.node)}" data-entity="${text}">${text}</a>`;
      }
      return gpuLink(e.node, e.index, e.text || `gpu/${e.node}/${e.index}`);
    case "port":
      return html`<a href="${portHref(e.node, e.name, e.index)}">port/${e.node}/${e.name}/${e.index}</a>`;
    case "node":
      return html`<a href="#/node/${encodeURIComponent(e.node || e.name)}">node/${e.node || e.name}</a>`;
    case "job":
      return html`<a href="#/jobs">job/${e.name || e.node}</a>`;
    default:
      return e.text || [e.kind, e.node, e.index, e.name].filter((x) => x !== null && x !== undefined && x !== "").join("/");
  }
}

/** Turn `gpu/n-001/5`, `port/n-000/1/mlx5_3` or `node/n-001` in an event's entity into a link. */
export function entityTextLink(text) {
  const p = String(text).split("/");
  if (p[0] === "gpu" && p.length === 3) {
    return /^\d+$/.test(p[2]) ? gpuLink(p[1], p[2], text) : html`<a href="#/node/${encodeURIComponent(p[1])}">${text}</a>`;
  }
  if (p[0] === "port" && p.length === 4) return html`<a href="${portHref(p[1], p[3], p[2])}">${text}</a>`;
  if (p[0] === "node" && p.length === 2) return html`<a href="#/node/${encodeURIComponent(p[1])}">${text}</a>`;
  return text;
}

export const empty = (text = "no data yet") => html`<div class="empty">${text}</div>`;

/** What a page shows when the API answers 404 for what it is about (the banner carries the API's words). */
export function notFound(root, crumbs, text) {
  set(root, html`<div class="crumbs">${crumbs}</div><div class="panel empty" data-empty="not-found">${text}
    · <a href="#/">back to the overview</a></div>`);
}

// --- banners -----------------------------------------------------------------------------------------------------

const errors = { count: 0, last: null }; // every error banner shown, for the page state (app.js)

/** How many error banners were shown so far, and the last one's {what, fix, status}. */
export function errorsShown() {
  return { count: errors.count, last: errors.last };
}

/** Show the API's `error` and `fix` (or any error) at the top of the page; `key` replaces an earlier one. */
export function banner(err, { kind = "error", key, timeout } = {}) {
  const box = document.getElementById("banners");
  if (!box) return;
  const what = err && err.error ? err.error : String(err && err.message ? err.message : err);
  const fix = err && err.fix ? err.fix : "";
  const status = err && err.status ? `${err.status}` : "";
  if (kind === "error") {
    errors.count += 1;
    errors.last = { what, fix, status, key: key || "" };
  }
  if (key) clearBanner(key);
  const div = document.createElement("div");
  div.className = `banner ${kind}`;
  div.setAttribute("role", kind === "error" ? "alert" : "status");
  if (key) div.dataset.key = key;
  div.innerHTML = part(html`${status ? html`<span class="pill bad">${status}</span>` : ""}
    <span class="what">${what}</span>${fix ? html`<span class="fix">${fix}</span>` : ""}
    <button class="close" title="dismiss">×</button>`);
  div.querySelector(".close").onclick = () => div.remove();
  box.appendChild(div);
  if (timeout) setTimeout(() => div.remove(), timeout);
}

export function clearBanner(key) {
  document.querySelectorAll(`#banners .banner[data-key="${key}"]`).forEach((b) => b.remove());
}

/** A page's refresh: one at a time (a call while one runs is dropped, the next summary brings another), its error
 * shown as the page's banner under `key` and cleared by the next success; `onError(err)` runs after the banner
 * (a 404's not-found page). */
export function refresher(key, fn, onError) {
  let busy = false;
  return async (...args) => {
    if (busy) return;
    busy = true;
    try {
      await fn(...args);
      clearBanner(key);
      window.dispatchEvent(new CustomEvent("gpufleet:refreshed", { detail: key }));
    } catch (err) {
      banner(err, { key });
      if (onError) onError(err);
    } finally {
      busy = false;
    }
  };
}

export function clearBanners() {
  const box = document.getElementById("banners");
  if (box) box.innerHTML = "";
}

/** "INC-000003 gpu-lost on gpu/n-001/5" with the incident and the entity as links. */
export function causeLinks(text) {
  if (!text) return "";
  return String(text)
    .split(" ")
    .map((w, i) => html`${i ? " " : ""}${/^INC-[\w.:-]+$/.test(w) ? incidentLink(w) : /^(gpu|port|node)\//.test(w) ? entityTextLink(w) : w}`);
}

// --- time ranges of the history charts ----------------------------------------------------------------------------

export const RANGES = { "1h": 3600, "4h": 14400, "12h": 43200, "24h": 86400 };

export function rangeOf(query, fallback = "4h") {
  const r = query.get("range");
  return RANGES[r] ? r : fallback;
}

/** A click on one of `root`'s range buttons puts that range in the page's hash (so the choice deep-links). */
export function onRangeClick(root, ctx) {
  root.querySelector("#ranges").addEventListener("click", (e) => {
    const b = e.target.closest("button[data-range]");
    if (b) ctx.setQuery({ range: b.dataset.range });
  });
}

/** Show `range` as the chosen one among `root`'s range buttons. */
export function markRange(root, range) {
  root.querySelectorAll("#ranges button").forEach((b) => b.classList.toggle("on", b.dataset.range === range));
}

/** Buttons choosing the charts' time range; each sets `range` in the page's hash. */
export function rangeSeg(current) {
  return html`<span class="seg" id="ranges">${Object.keys(RANGES).map(
    (r) => html`<button type="button" data-range="${r}" class="${r === current ? "on" : ""}">${r}</button>`,
  )}</span>`;
}
