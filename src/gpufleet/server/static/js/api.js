// The control plane's API as the dashboard uses it: JSON reads and changes with the operator's token, the
// server's clock (never the browser's: under the twin it is simulated time), metric ranges, and the live stream.

const TOKEN_KEY = "gpufleet.token";

/** A refusal or failure from the API, carrying its `error` and `fix`. */
export class ApiError extends Error {
  constructor(status, error, fix, path) {
    super(error);
    this.status = status;
    this.error = error;
    this.fix = fix || "";
    this.path = path;
  }
}

export const token = {
  get() {
    try {
      return localStorage.getItem(TOKEN_KEY) || "";
    } catch {
      return "";
    }
  },
  set(value) {
    localStorage.setItem(TOKEN_KEY, value.trim());
  },
  clear() {
    localStorage.removeItem(TOKEN_KEY);
  },
};

function headers(extra) {
  const h = { Accept: "application/json", ...extra };
  const t = token.get();
  if (t) h.Authorization = `Bearer ${t}`;
  return h;
}

function url(path, params) {
  const u = new URL(path, location.origin);
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== "") u.searchParams.set(k, v);
  }
  return u.pathname + u.search;
}

async function answer(resp, path) {
  let body = null;
  const text = await resp.text();
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    body = null;
  }
  if (!resp.ok) {
    const error = body && (body.error || (typeof body.detail === "string" ? body.detail : null));
    throw new ApiError(resp.status, error || `HTTP ${resp.status} ${resp.statusText}`, body && body.fix, path);
  }
  return body;
}

/** GET a JSON document; throws ApiError (or a TypeError when the control plane cannot be reached). */
export async function get(path, params) {
  const p = url(path, params);
  let resp;
  try {
    resp = await fetch(p, { headers: headers() });
  } catch (err) {
    throw new ApiError(0, `the control plane cannot be reached (${err.message})`, "check that gpufleet server is running", p);
  }
  return answer(resp, p);
}

/** POST a change with the operator's token. */
export async function post(path, body) {
  let resp;
  try {
    resp = await fetch(path, {
      method: "POST",
      headers: headers({ "Content-Type": "application/json" }),
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (err) {
    throw new ApiError(0, `the control plane cannot be reached (${err.message})`, "check that gpufleet server is running", path);
  }
  return answer(resp, path);
}

// --- the server's clock ------------------------------------------------------------------------------------------

let serverTime = null;

/** The last time the control plane told us (epoch seconds), or null. */
export function now() {
  return serverTime;
}

export function noteTime(t) {
  if (typeof t === "number" && Number.isFinite(t)) serverTime = t;
}

/** The control plane's time from /healthz (answered 200 or 503, both with the time). */
export async function fetchTime() {
  const resp = await fetch("/healthz", { headers: headers() });
  const body = await resp.json();
  noteTime(body.time);
  return serverTime;
}

// --- metrics -----------------------------------------------------------------------------------------------------

/** A metric selector: name{label="value", ...} with values quoted. */
export function selector(name, labels) {
  const parts = Object.entries(labels || {}).map(([k, v]) => `${k}="${String(v).replace(/["\\]/g, "\\$&")}"`);
  return parts.length ? `${name}{${parts.join(",")}}` : name;
}

/** Range query over [end - span, end] with about `points` points: [{labels, points: [[t, v|null]...]}]. */
export async function range(series, { end, span, step, points = 480, op, by } = {}) {
  const stop = end ?? now() ?? (await fetchTime());
  const every = step || Math.max(5, Math.ceil(span / points / 5) * 5);
  return get("/api/v1/metrics/range", { series, start: stop - span, end: stop, step: every, op, by });
}

// --- who the token belongs to ------------------------------------------------------------------------------------

/** Who the stored token acts as: {name, role, known} or null without a token. Throws ApiError when it is refused.
 *
 * The API has no identity endpoint yet; `GET /api/v1/whoami` is used when a control plane has one. Otherwise the
 * guard's answer to an admin-only path tells: 401 for a token that is not valid, 403 naming the token and its role
 * for a viewer or operator, and anything else for an admin token (whose name it does not say). */
export async function whoami() {
  const t = token.get();
  if (!t) return null;
  const ask = async (path) => {
    const resp = await fetch(path, { headers: headers() });
    let body = null;
    try {
      body = await resp.json();
    } catch {
      body = null;
    }
    return { status: resp.status, body };
  };
  const me = await ask("/api/v1/whoami");
  if (me.status === 200 && me.body && me.body.name) return { name: me.body.name, role: me.body.role, known: true };
  if (me.status === 401) throw new ApiError(401, me.body?.error || "the token is not valid", me.body?.fix, "/api/v1/whoami");
  const probe = await ask("/api/v1/tokens");
  if (probe.status === 401) {
    throw new ApiError(401, probe.body?.error || "the token is not valid", probe.body?.fix, "/api/v1/tokens");
  }
  if (probe.status === 403 && probe.body?.error) {
    const m = /the (\w+) token '([^']*)'/.exec(probe.body.error) || /the (\w+) token "([^"]*)"/.exec(probe.body.error);
    if (m) return { name: m[2], role: m[1], known: true };
  }
  return { name: `token …${t.slice(-4)}`, role: "admin", known: false };
}

// --- live updates ------------------------------------------------------------------------------------------------

/** Follow /api/v1/stream: handlers.summary / incident / event get each frame's data, handlers.status("live" |
 * "polling" | "down"). EventSource cannot send a token, so with a token stored (reads from another host need a
 * viewer token) the stream is read through fetch with the token instead; only where the stream is refused even
 * so does this fall back to polling the summary every 5 s. Returns a stop function. */
export function follow(handlers) {
  let source = null;
  let reader = null;
  let poller = null;
  let stopped = false;
  let lastId = null;
  const status = (s) => handlers.status && handlers.status(s);

  const dispatch = (kind, data) => {
    const body = JSON.parse(data);
    if (kind === "summary") {
      noteTime(body.time);
      handlers.summary && handlers.summary(body);
    } else if (handlers[kind]) {
      handlers[kind](body);
    }
  };

  const poll = () => {
    if (poller) return;
    status("polling");
    const once = async () => {
      try {
        const s = await get("/api/v1/summary");
        noteTime(s.time);
        handlers.summary && handlers.summary(s);
        status("polling");
      } catch {
        status("down");
      }
    };
    once();
    poller = setInterval(once, 5000);
  };

  /** The stream through fetch, with the token: frames are blank-line separated `event:`/`data:`/`id:` lines. */
  const openWithToken = async () => {
    const query = lastId === null ? "" : `?after=${encodeURIComponent(lastId)}`;
    let res;
    try {
      res = await fetch(`/api/v1/stream${query}`, { headers: { Authorization: `Bearer ${token.get()}`, Accept: "text/event-stream" } });
    } catch {
      status("down");
      if (!stopped) setTimeout(open, 3000);
      return;
    }
    if (!res.ok || !res.body) return poll(); // refused: the token may not read from here
    status("live");
    reader = res.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          let kind = "message";
          const data = [];
          for (const line of frame.split("\n")) {
            if (line.startsWith("event:")) kind = line.slice(6).trim();
            else if (line.startsWith("data:")) data.push(line.slice(5).trim());
            else if (line.startsWith("id:")) lastId = line.slice(3).trim();
          }
          if (data.length) dispatch(kind, data.join("\n"));
        }
      }
    } catch {
      /* the connection dropped: reconnect below */
    }
    reader = null;
    if (!stopped) {
      status("down");
      setTimeout(open, 3000);
    }
  };

  const open = () => {
    if (stopped) return;
    if (token.get() && typeof fetch !== "undefined" && typeof TextDecoder !== "undefined") return openWithToken();
    if (typeof EventSource === "undefined") return poll();
    source = new EventSource("/api/v1/stream");
    source.addEventListener("open", () => status("live"));
    for (const kind of ["summary", "incident", "event"]) source.addEventListener(kind, (e) => dispatch(kind, e.data));
    source.addEventListener("error", () => {
      if (source.readyState === EventSource.CLOSED) {
        source = null;
        poll(); // refused (401) or not an event stream: poll instead
      } else {
        status("down"); // the browser reconnects by itself
      }
    });
  };
  open();
  return () => {
    stopped = true;
    if (source) source.close();
    if (reader) reader.cancel();
    if (poller) clearInterval(poller);
  };
}
