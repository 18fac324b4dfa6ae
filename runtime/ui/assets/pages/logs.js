// /ui/allocations/:id/:task/logs — a task's stdout or stderr, read as a stream.
//
// The stream is /v1/client/fs/logs (runtime/api/logs.py): Nomad's framing, one JSON object per
// frame (`{"Offset", "Data": base64, "File", "FileEvent"}`, `{}` heartbeats while idle), written
// back to back with nothing between them. Frames are cut out of the byte stream by tracking
// brace depth outside JSON strings (base64 and file names hold no braces, but a string could).
// Data goes through one TextDecoder with {stream: true}, so a UTF-8 character split between two
// frames is joined, then through one ANSI renderer, so a colour set in one frame carries on.
//
// The DOM keeps at most MAX_CHARS of text: beyond it the oldest chunks are dropped (a chunk is
// a node per frame, counted by its length). The view follows the end only while the person is
// at the bottom; scrolling up stops that, scrolling back down resumes it. Any change of stream,
// origin or Follow aborts the running request and starts a new one; leaving the page aborts it
// through ctx.signal.

import { ansiRenderer } from "../ansi.js";
import { api, askToken, emptyState, errorBox, forbiddenError, h, jobHref, link, refusalReason, replace, token } from "../lib.js";

const MAX_CHARS = 1 << 20;
const AT_BOTTOM_PX = 24;
// From the end, the stream starts this many bytes before it (Nomad's UI tails 50 000 bytes):
// offset 0 from the end would show nothing until the task writes again.
const TAIL_BYTES = 50000;
// A followed stream that breaks (the agent restarted, the network dropped) is opened again
// after this wait, doubled each time up to RETRY_MAX_MS, and at once when the event socket
// comes back.
const RETRY_MS = 1000;
const RETRY_MAX_MS = 5000;

/** Splits a stream of concatenated JSON objects into whole objects (as strings). */
export function frameSplitter() {
  let buf = "", depth = 0, inString = false, escaped = false, start = 0, scanned = 0;
  return (text) => {
    buf += text;
    const out = [];
    for (let i = scanned; i < buf.length; i++) {
      const c = buf[i];
      if (inString) {
        if (escaped) escaped = false;
        else if (c === "\\") escaped = true;
        else if (c === '"') inString = false;
      } else if (c === '"') inString = true;
      else if (c === "{") { if (depth++ === 0) start = i; }
      else if (c === "}" && depth > 0 && --depth === 0) out.push(buf.slice(start, i + 1));
    }
    if (depth === 0) { buf = ""; scanned = 0; } else {
      buf = buf.slice(start); scanned = buf.length; start = 0;
    }
    return out;
  };
}

/** The framed stream's bytes → pieces to show: `{text}` (the log's text, a UTF-8 character
 * cut between two frames joined) or `{event, file}` (a file deleted or truncated). */
export function logDecoder() {
  const framing = new TextDecoder("utf-8"); // the JSON around the data (base64: ASCII)
  const content = new TextDecoder("utf-8"); // the log's own bytes, across frames
  const framesOf = frameSplitter();
  return {
    push(bytes) {
      const out = [];
      for (const frame of framesOf(framing.decode(bytes, { stream: true }))) {
        let obj;
        try { obj = JSON.parse(frame); } catch { continue; }
        if (obj.FileEvent === "file deleted" || obj.FileEvent === "file truncated") {
          out.push({ event: obj.FileEvent, file: obj.File || "" });
        }
        if (obj.Data) {
          const text = content.decode(b64bytes(obj.Data), { stream: true });
          if (text) out.push({ text });
        }
      }
      return out;
    },
    end() {
      const text = content.decode();
      return text ? [{ text }] : [];
    },
  };
}

function b64bytes(data) {
  const bin = atob(data);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

export default async function mount(view, params, ctx) {
  const { id, task } = params;
  const query = new URLSearchParams(location.search);
  const state = {
    type: query.get("type") === "stderr" ? "stderr" : "stdout",
    follow: query.get("follow") !== "false",
    origin: query.get("origin") === "start" ? "start" : "end",
  };
  ctx.title(`${task} logs`);
  const allocHref = `/ui/allocations/${encodeURIComponent(id)}`;
  const note = h("div", { id: "log-note" });
  const pre = h("pre", { class: "log", id: "log", tabindex: "0", "aria-label": `${task} ${state.type}`, "aria-live": "off" });
  const status = h("span", { class: "muted", id: "log-status", role: "status" });
  const streamTabs = h("div", { class: "tabs", role: "tablist", "aria-label": "Stream" });
  const followBox = h("input", { type: "checkbox", id: "log-follow", checked: state.follow });
  const originSel = h("select", { id: "log-origin", "aria-label": "Where to start" },
    h("option", { value: "end" }, "From the end"), h("option", { value: "start" }, "From the start"));
  originSel.value = state.origin;
  const jump = h("button", { type: "button", class: "small", id: "log-bottom", hidden: true,
    onclick: () => { pre.scrollTop = pre.scrollHeight; stick = true; jump.hidden = true; } }, "↓ Jump to the end");

  const crumbs = h("div", { class: "crumbs" }, link("/ui/jobs", "Jobs"), " / ", link(allocHref, id.slice(0, 8)), " / ",
    link(`${allocHref}/${encodeURIComponent(task)}`, task));
  // The allocation's job and name, as its own page shows them (not needed to read the logs).
  api.get(`/v1/allocation/${encodeURIComponent(id)}`, { signal: ctx.signal }).then((alloc) => {
    replace(crumbs, link("/ui/jobs", "Jobs"), " / ", link(jobHref(alloc.JobID, alloc.Namespace), alloc.JobID),
      " / ", link(allocHref, alloc.Name || id.slice(0, 8)), " / ", link(`${allocHref}/${encodeURIComponent(task)}`, task));
  }, () => {});
  replace(view,
    crumbs,
    h("h1", null, `Logs of ${task}`),
    h("div", { class: "toolbar log-toolbar" }, streamTabs,
      h("label", { class: "field", for: "log-follow" }, followBox, "Follow"),
      originSel, h("span", { class: "spacer" }), status, jump),
    note, pre);

  let stick = true; // following the bottom
  pre.addEventListener("scroll", () => {
    stick = pre.scrollHeight - pre.scrollTop - pre.clientHeight < AT_BOTTOM_PX;
    jump.hidden = stick;
  });

  let stream = null; // the running request's AbortController
  let waiting = false; // the task had not started: its Started event starts the stream
  let chars = 0;

  const drawTabs = () => replace(streamTabs, ["stdout", "stderr"].map((t) =>
    h("button", { type: "button", role: "tab", "aria-selected": String(state.type === t), "data-stream": t,
      onclick: () => { if (state.type !== t) { state.type = t; restart(); } } }, t)));

  const keepUrl = () => {
    const q = new URLSearchParams();
    if (state.type !== "stdout") q.set("type", state.type);
    if (!state.follow) q.set("follow", "false");
    if (state.origin !== "end") q.set("origin", state.origin);
    history.replaceState(null, "", location.pathname + (q.toString() ? `?${q}` : ""));
  };

  const append = (nodes) => {
    if (!nodes.length) return;
    const chunk = h("span", { class: "chunk" }, nodes);
    chars += chunk.textContent.length;
    pre.appendChild(chunk);
    while (chars > MAX_CHARS && pre.firstChild && pre.firstChild !== chunk) {
      chars -= pre.firstChild.textContent.length;
      pre.firstChild.remove();
    }
    if (stick) pre.scrollTop = pre.scrollHeight;
  };

  // The stream's own state, in words of its own: "failed" or "complete" would read as the task's.
  const STREAM_BADGES = { live: "s-running", ended: "s-other", disconnected: "s-pending" };
  const setStatus = (text, word) => replace(status,
    word ? h("span", { class: `badge ${STREAM_BADGES[word]}`, "data-stream-state": word }, word) : null,
    word ? " " : null, text);
  let retryMs = RETRY_MS;
  let retryTimer = null;

  async function read(controller, opened) {
    const logs = logDecoder();
    const ansi = ansiRenderer(); // one per stream: a colour never leaks into the next
    const q = new URLSearchParams({ task, type: state.type, origin: state.origin,
      offset: String(state.origin === "end" ? TAIL_BYTES : 0) });
    if (state.follow) q.set("follow", "true");
    const headers = {};
    const sent = token();
    if (sent) headers["X-Nomad-Token"] = sent;
    setStatus(state.follow ? "connecting…" : "loading…");
    const path = `/v1/client/fs/logs/${encodeURIComponent(id)}`;
    const response = await fetch(`${path}?${q}`, { headers, signal: controller.signal });
    if (!response.ok) {
      const text = (await response.text()).trim();
      if (response.status === 403) {
        // A valid token that may not read logs: said on the page, never asked for again.
        const forbidden = await forbiddenError(sent, text, path);
        if (forbidden) throw forbidden;
        const given = await askToken(refusalReason(sent, text));
        // Asked while the person may have left or switched: only this stream's own page and
        // choices start another (nothing would abort one started after the page is gone).
        if (given && !ctx.signal.aborted && !controller.signal.aborted) return restart();
      }
      const err = new Error(text || `HTTP ${response.status}`);
      err.status = response.status;
      throw err;
    }
    setStatus(state.follow ? "following" : "reading", state.follow ? "live" : null);
    retryMs = RETRY_MS;
    opened();
    const reader = response.body.getReader();
    const show = (piece) => append(piece.event
      ? [document.createTextNode(`\n[${piece.event}: ${piece.file}]\n`)] : ansi.feed(piece.text));
    for (;;) {
      const { value, done } = await reader.read();
      // A chunk read just before a switch of stream, origin or Follow resolves after it: the
      // view now belongs to the next stream, so this one's text is dropped.
      if (controller.signal.aborted) return;
      if (done) break;
      for (const piece of logs.push(value)) show(piece);
    }
    for (const piece of logs.end()) show(piece);
    setStatus(state.follow ? "the task's output is complete" : "end of the log", state.follow ? "ended" : null);
  }

  /** Starts a stream with the current choices (ending the one before); resolves once it is
   * open (or failed), while the stream itself runs on until it ends or is aborted. */
  function restart() {
    if (stream) stream.abort();
    clearTimeout(retryTimer);
    retryTimer = null;
    keepUrl();
    drawTabs();
    pre.replaceChildren();
    pre.hidden = false;
    replace(note);
    waiting = false;
    chars = 0;
    // From the start, the person reads from the top: the view follows only once they scroll
    // to the bottom. From the end, it follows at once.
    stick = state.origin === "end";
    jump.hidden = true;
    pre.setAttribute("aria-label", `${task} ${state.type}`);
    const controller = new AbortController();
    stream = controller;
    const off = () => controller.abort();
    ctx.signal.addEventListener("abort", off, { once: true });
    let opened;
    const started = new Promise((resolve) => { opened = resolve; });
    run(controller, opened, off);
    return started;
  }

  async function run(controller, opened, off) {
    try {
      await read(controller, opened);
    } catch (err) {
      if (err.name === "AbortError" || controller.signal.aborted) return;
      if (err.forbidden) { // no retry: the same token would be refused the same way
        pre.hidden = true;
        replace(note, errorBox(err));
        setStatus("");
      } else if (err.status === 404 || err.status === 400) {
        // Not in the dark log box: an empty state there would not read.
        pre.hidden = true;
        waiting = /not started/.test(err.message);
        replace(note, emptyState(waiting ? "The task has not started yet" : "No logs to show",
          h("p", null, err.message, ". ", waiting ? "Its logs appear here once it starts. " : "",
            link(allocHref, "See the allocation"), " to check the task's state.")));
        setStatus("");
      } else if (state.follow) {
        // Reopened from the end: what was shown stays until the new stream replaces it.
        setStatus(`reconnecting in ${Math.round(retryMs / 1000)} s (${err.message})`, "disconnected");
        retryTimer = setTimeout(() => { if (stream === controller) restart(); }, retryMs);
        retryMs = Math.min(RETRY_MAX_MS, retryMs * 2);
      } else {
        setStatus(`the agent did not answer: ${err.message}`, "disconnected");
      }
    } finally {
      opened();
      ctx.signal.removeEventListener("abort", off);
    }
  }

  ctx.onEvent((e) => {
    if (waiting && e.Topic === "Task" && e.Key === id && e.Payload && e.Payload.Task === task &&
        e.Payload.Event && e.Payload.Event.Type === "Started") restart();
  });
  // The event socket is back (the agent restarted): a broken stream need not wait its turn.
  window.addEventListener("yurt:resync", () => { if (retryTimer) restart(); }, { signal: ctx.signal });
  ctx.signal.addEventListener("abort", () => clearTimeout(retryTimer));
  followBox.addEventListener("change", () => { state.follow = followBox.checked; restart(); });
  originSel.addEventListener("change", () => { state.origin = originSel.value; restart(); });
  drawTabs();
  await restart(); // the page is ready once its stream is open; the stream runs on
}
