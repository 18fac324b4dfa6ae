// The UI's toolkit, shared by every page: DOM building (text is always set as text, never
// parsed as HTML), the API client (token in session storage, sent as X-Nomad-Token), the
// listeners of the one event socket (the socket itself is live.js's), and the small widgets
// (relative times, short IDs with copy buttons, badges, tables, empty states, confirmation
// dialogs, toasts). The sparkline and the ANSI renderer live in sparkline.js and ansi.js; the
// token, the identity it stands for and the one-time sign-in link in session.js.
//
// A refusal is one of two things, and the UI treats them apart: the token itself is refused
// (none, unknown, expired): the token dialog asks for one; or a valid token may not do this
// (`Permission denied`): the request fails with an ApiError whose `forbidden` is true, shown
// where it happened (errorBox, failureToast) with a way to change the token, never asked again.

import { identify, secretRefused, setToken, token } from "./session.js";

export { setToken, token };

// ---------- DOM ----------

/** h("a", {href: "/ui"}, "text", node, [more]) — attributes starting with "on" are listeners. */
export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  if (attrs) {
    for (const [key, value] of Object.entries(attrs)) {
      if (value === undefined || value === null || value === false) continue;
      if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
      else if (key === "class") el.className = value;
      else if (key === "dataset") Object.assign(el.dataset, value);
      else if (key === "value") el.value = value;
      else el.setAttribute(key, value === true ? "" : String(value));
    }
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const child of children) {
    if (child === undefined || child === null || child === false) continue;
    if (Array.isArray(child)) append(el, child);
    else if (child instanceof Node) el.appendChild(child);
    else el.appendChild(document.createTextNode(String(child)));
  }
}

export function replace(el, ...children) {
  el.replaceChildren();
  append(el, children);
}

/** Opens a UI page without a reload (app.js's router; lib.js cannot import it: app.js imports
 * lib.js). */
export function navigate(href) {
  window.dispatchEvent(new CustomEvent("yurt:navigate", { detail: href }));
}

export function link(href, ...children) {
  return h("a", { href }, ...children);
}

/** A job's page, as Nomad's UI writes it: `/ui/jobs/<id>@<namespace>`, the namespace left out
 * for `default` unless the ID holds an `@` itself (the page splits at the last one). */
export function jobHref(id, namespace) {
  const ns = namespace && namespace !== "default" ? namespace : id.includes("@") ? "default" : "";
  return `/ui/jobs/${encodeURIComponent(id)}${ns ? `@${encodeURIComponent(ns)}` : ""}`;
}

// ---------- the API ----------

export class ApiError extends Error {
  constructor(status, text, path, { forbidden = false, tokenName = "" } = {}) {
    super(text || `HTTP ${status}`);
    this.status = status;
    this.path = path;
    /** A valid token that may not do this (not a token refused), and that token's Name. */
    this.forbidden = forbidden;
    this.tokenName = tokenName || "";
  }
}

let askingToken = null;

/** Ask the person for the token once, however many requests were refused at the same time. */
export function askToken(reason) {
  if (!askingToken) {
    askingToken = tokenDialog(reason).finally(() => { askingToken = null; });
  }
  return askingToken;
}

async function request(method, path, body, { signal, raw } = {}) {
  for (let asked = false; ;) {
    const headers = {};
    const t = token();
    if (t) headers["X-Nomad-Token"] = t;
    if (body !== undefined && typeof body !== "string") headers["Content-Type"] = "application/json";
    let response;
    try {
      response = await fetch(path, {
        method, headers, signal,
        body: body === undefined ? undefined : typeof body === "string" ? body : JSON.stringify(body),
      });
    } catch (err) {
      if (err.name === "AbortError") throw err;
      // The browser's own words ("Failed to fetch") say nothing to a person.
      throw new ApiError(0, "the agent did not answer: is it running, and reachable from here?", path);
    }
    // Sent with a token the person has replaced meanwhile (in another dialog): no need to ask,
    // the one kept now is tried. Otherwise the token is asked for once per request, and only
    // when the token itself was refused: a valid one that may not do this fails as forbidden.
    if (response.status === 403 && token() !== t) continue;
    if (response.status === 403) {
      const text = (await response.text()).trim();
      if (token() !== t) continue; // replaced while the refusal was read
      const forbidden = await forbiddenError(t, text, path);
      if (forbidden) throw forbidden;
      if (token() !== t) continue;
      if (!asked) {
        asked = true;
        const given = await askToken(refusalReason(t, text));
        if (given) continue;
        setLive("denied"); // refused, and no token given: the page says so, not "offline"
      }
      throw new ApiError(403, text, path);
    }
    if (!response.ok) throw new ApiError(response.status, (await response.text()).trim(), path);
    if (raw) return response;
    const text = await response.text();
    return text ? JSON.parse(text) : null;
  }
}

/** A 403 (or a 1008 close) with `text`, for a request sent with the token `t`: the error to
 * show when `t` is a valid token that may not do this (its `forbidden` set, its Name known);
 * null when the token itself is refused, and is to be asked for (session.js `secretRefused`). */
export async function forbiddenError(t, text, path) {
  if (await secretRefused(t, text)) return null;
  const who = await identify(t); // known by now: secretRefused asked
  return new ApiError(403, text, path, { forbidden: true, tokenName: who.token && who.token.Name });
}

/** What the token dialog says of a refused token: the agent's own words where they tell more. */
export function refusalReason(t, text) {
  if (!t) return "This agent needs a token.";
  if (text === "ACL token expired") return "The token has expired.";
  if (text === "ACL token not found") return "The agent knows no such token.";
  return "The token was refused.";
}

export const api = {
  get: (path, opts) => request("GET", path, undefined, opts),
  put: (path, body, opts) => request("PUT", path, body ?? {}, opts),
  post: (path, body, opts) => request("POST", path, body ?? {}, opts),
  del: (path, opts) => request("DELETE", path, undefined, opts),
  raw: (method, path, body, opts) => request(method, path, body, { ...opts, raw: true }),
};

// ---------- live events: what the socket (live.js) hears, handed to the pages ----------

const listeners = new Set();

/** The socket's state, for the header (app.js): on, off, denied, forbidden, connecting. */
export function setLive(state) {
  window.dispatchEvent(new CustomEvent("yurt:live", { detail: state }));
}

/** Hands a record the socket received to every listener (live.js). */
export function deliver(record) {
  const events = record.Events || [];
  if (!events.length) return;
  const at = performance.now();
  for (const event of events) {
    event.receivedAt = at;
    for (const fn of listeners) {
      try { fn(event); } catch (err) { console.error(err); }
    }
  }
}

/** Calls fn(event) for every event until the returned function is called. */
export function onEvent(fn) {
  listeners.add(fn);
  return () => listeners.delete(fn);
}

/** An event's job, whatever its topic. */
export function eventJob(event) {
  const p = event.Payload || {};
  if (event.Topic === "Job") return event.Key;
  return (p.Allocation && p.Allocation.JobID) || (p.Evaluation && p.Evaluation.JobID) ||
    (p.Deployment && p.Deployment.JobID) || null;
}

// ---------- formatting ----------

/** Nomad's times are nanoseconds since the epoch; some fields are RFC 3339 strings. */
export function toDate(value) {
  if (value === undefined || value === null || value === 0 || value === "") return null;
  if (typeof value === "string") {
    const d = new Date(value);
    return isNaN(d) || d.getFullYear() < 1971 ? null : d;
  }
  return new Date(value > 1e14 ? value / 1e6 : value);
}

export function relative(date, now = Date.now()) {
  const s = Math.round((now - date.getTime()) / 1000);
  const abs = Math.abs(s);
  const unit = abs < 60 ? [abs, "s"] : abs < 3600 ? [Math.floor(abs / 60), "m"] :
    abs < 86400 ? [Math.floor(abs / 3600), "h"] : [Math.floor(abs / 86400), "d"];
  if (abs < 5) return "just now";
  return s >= 0 ? `${unit[0]}${unit[1]} ago` : `in ${unit[0]}${unit[1]}`;
}

/** A relative time, the absolute one on hover; every such element refreshes each 5 s. */
export function timeEl(value) {
  const d = toDate(value);
  if (!d) return h("span", { class: "muted" }, "–");
  return h("time", { datetime: d.toISOString(), title: d.toLocaleString() }, relative(d));
}

setInterval(() => {
  const now = Date.now();
  for (const el of document.querySelectorAll("time[datetime]")) {
    el.textContent = relative(new Date(el.getAttribute("datetime")), now);
  }
}, 5000);

export function shortId(id, href) {
  if (!id) return h("span", { class: "muted" }, "–");
  const text = id.length > 8 && /^[0-9a-f-]{36}$/.test(id) ? id.slice(0, 8) : id;
  const label = href ? h("a", { href, class: "id", title: id }, text) : h("span", { class: "id", title: id }, text);
  const copy = h("button", {
    type: "button", class: "copy", title: "Copy " + id, "aria-label": "Copy " + id,
    onclick: async (e) => {
      e.preventDefault();
      e.stopPropagation();
      try { await navigator.clipboard.writeText(id); toast("Copied " + id, "ok"); }
      catch { toast("Copy failed: select and copy " + id, "bad"); }
    },
  }, copyIcon());
  return h("span", { class: "idwrap" }, label, copy);
}

/** Two overlapping sheets, drawn (a font's copy glyph is missing from many systems' fonts). */
function copyIcon() {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", "0 0 16 16");
  svg.setAttribute("width", "13");
  svg.setAttribute("height", "13");
  svg.setAttribute("aria-hidden", "true");
  svg.setAttribute("class", "copy-icon");
  for (const [x, y] of [[5, 1], [1, 5]]) {
    const rect = document.createElementNS(ns, "rect");
    for (const [k, v] of Object.entries({ x, y, width: 10, height: 10, rx: 1.5 })) rect.setAttribute(k, String(v));
    svg.appendChild(rect);
  }
  return svg;
}

export function badge(status) {
  const s = String(status || "unknown").toLowerCase();
  return h("span", { class: `badge s-${s.replace(/[^a-z]/g, "")}` }, s);
}

export function bytes(n) {
  if (n === undefined || n === null) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}

export function duration(ns) {
  if (!ns) return "0s";
  const s = ns / 1e9;
  if (s < 1) return `${Math.round(s * 1000)}ms`;
  if (s < 60) return `${+s.toFixed(1)}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${Math.round(s % 60)}s`;
  return `${Math.floor(s / 3600)}h${Math.round((s % 3600) / 60)}m`;
}

// ---------- widgets ----------

/** columns: [{label, cell: row => node|string, class?, narrow?: false to hide on phones}] */
export function table(columns, rows, { empty, rowAttrs } = {}) {
  if (!rows.length && empty) return empty;
  const cls = (c) => [c.class, c.narrow === false ? "hide-narrow" : ""].filter(Boolean).join(" ") || undefined;
  return h("div", { class: "table-wrap" }, h("table", null,
    h("thead", null, h("tr", null, columns.map((c) => h("th", { scope: "col", class: cls(c) }, c.label)))),
    h("tbody", null, rows.map((row) => h("tr", rowAttrs ? rowAttrs(row) : null,
      columns.map((c) => h("td", { class: cls(c) }, c.cell(row))))))));
}

export function emptyState(title, ...next) {
  return h("div", { class: "empty" }, h("strong", null, title), ...next);
}

/** An error as a person reads it: the agent's status and words, or what went wrong; a
 * forbidden one says whose token may not. */
export function describe(err) {
  if (err instanceof ApiError && err.forbidden) {
    const whose = err.tokenName ? `the token “${err.tokenName}”` : "this tab's token";
    return `not allowed: ${whose} may not do this (${err.status}: ${err.message})`;
  }
  return err instanceof ApiError && err.status ? `${err.status}: ${err.message}`
    : String(err && err.message || err);
}

/** The way out of a forbidden error: a button opening the token dialog. */
function changeTokenButton() {
  return h("button", { type: "button", class: "small", "data-role": "change-token",
    onclick: () => editToken("This token may not do that: enter another, or Cancel to keep it.") },
  "Change token");
}

export function errorBox(err) {
  const text = describe(err);
  const forbidden = err instanceof ApiError && err.forbidden;
  return h("div", { class: forbidden ? "error-box forbidden" : "error-box", role: "alert" },
    forbidden ? [text[0].toUpperCase() + text.slice(1), ". ", changeTokenButton()] : text);
}

/** An action that failed, told in a toast; a forbidden one offers to change the token. */
export function failureToast(label, err) {
  if (err && err.name === "AbortError") return;
  const forbidden = err instanceof ApiError && err.forbidden;
  toast(`${label} failed: ${describe(err)}`, "bad", forbidden ? changeTokenButton() : null);
}

/** A live page could not re-read what it shows: it keeps the last answer on screen, and this
 * notice says so and since when, until a refresh succeeds or the page is left. */
export function markStale(err) {
  const el = document.getElementById("stale");
  if (!el.hidden) return; // the first failure's time is the one that matters
  el.textContent = `Could not refresh (${describe(err)}); showing what the agent said before ${new Date().toLocaleTimeString()}.`;
  el.hidden = false;
}

export function markFresh() {
  const el = document.getElementById("stale");
  el.hidden = true;
  el.textContent = "";
}

/** A passing message; `action`: a button kept in it (the toast then stays until it is used,
 * or for 15 s). */
export function toast(text, kind = "info", action = null) {
  const box = document.getElementById("toasts");
  const el = h("div", { class: `toast ${kind}` }, text, action ? [" ", action] : null);
  if (action) action.addEventListener("click", () => el.remove());
  box.appendChild(el);
  setTimeout(() => el.remove(), action ? 15000 : kind === "bad" ? 8000 : 3500);
}

function modal(build) {
  return new Promise((resolve) => {
    const dialog = h("dialog", null);
    let result = null;
    const done = (value) => { result = value; dialog.close(); };
    dialog.addEventListener("close", () => { dialog.remove(); resolve(result); });
    build(dialog, done);
    document.body.appendChild(dialog);
    dialog.showModal();
    const first = dialog.querySelector("[autofocus]") || dialog.querySelector("input, textarea, select, button");
    if (first) first.focus();
  });
}

/** Resolves true only when the person confirms; Escape or Cancel resolve false. */
export async function confirmAction({ title, body, confirm = "Confirm", danger = false, extra }) {
  const result = await modal((dialog, done) => {
    dialog.setAttribute("aria-label", title);
    append(dialog, [
      h("h2", null, title),
      body ? h("p", null, body) : null,
      extra,
      h("div", { class: "buttons" },
        h("button", { type: "button", onclick: () => done(false), "data-role": "cancel" }, "Cancel"),
        h("button", { type: "button", class: danger ? "danger primary" : "primary", "data-role": "confirm",
          onclick: () => done(true) }, confirm))]);
  });
  return result === true;
}

async function tokenDialog(reason) {
  const value = await modal((dialog, done) => {
    const input = h("input", { type: "password", name: "token", autocomplete: "off", autofocus: true,
      "aria-label": "Token", placeholder: "X-Nomad-Token" });
    dialog.setAttribute("aria-label", "Token");
    dialog.append(h("form", { method: "dialog", onsubmit: (e) => { e.preventDefault(); done(input.value.trim()); } },
      h("h2", null, "Token"),
      h("p", null, reason || "Enter the agent's token."),
      h("p", { class: "muted" }, "It is kept in this tab's session storage only, and sent as X-Nomad-Token."),
      input,
      h("div", { class: "buttons" },
        h("button", { type: "button", onclick: () => done(null) }, "Cancel"),
        token() ? h("button", { type: "button", onclick: () => done("") }, "Forget token") : null,
        h("button", { type: "submit", class: "primary", "data-role": "save-token" }, "Save"))));
  });
  if (value === null) return false;
  setToken(value);
  return Boolean(value);
}

export function editToken(reason = "") {
  return askToken(reason);
}
