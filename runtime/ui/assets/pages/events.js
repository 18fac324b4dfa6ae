// /ui/events — the live event stream, newest first, from the page's one shared socket
// (ctx.onEvent: no connection of its own, so it sees exactly what every other page sees).
//
// Kept: the last KEEP events received while the page is open, in memory, whether shown or
// filtered out, so changing a filter shows what already arrived. Paused: events still arrive
// and are kept, the list does not move (a person reading a row does not lose it); resuming
// draws what came meanwhile. Drawing is batched to one frame, and only prepends the rows of
// what is new (a filter change redraws all). The topic filter and the key filter live in the URL.

import { emptyState, h, link, replace } from "../lib.js";

const KEEP = 500;
const TOPICS = ["Job", "Allocation", "Task", "Evaluation", "Deployment", "Node", "Service"];

/** A UUID's first 8 characters (the whole is in the title); any other key as it is. */
const short = (key) => /^[0-9a-f]{8}-[0-9a-f-]{27}$/.test(key || "") ? key.slice(0, 8) : key || "";

/** Where an event's key leads in the UI, or null. */
function keyHref(e) {
  const k = encodeURIComponent(e.Key || "");
  const ns = e.Namespace && e.Namespace !== "default" ? `@${e.Namespace}` : "";
  switch (e.Topic) {
    case "Job": return `/ui/jobs/${k}${ns}`;
    case "Allocation": return `/ui/allocations/${k}`;
    case "Task": {
      const task = e.Payload && e.Payload.Task;
      return task ? `/ui/allocations/${k}/${encodeURIComponent(task)}` : `/ui/allocations/${k}`;
    }
    case "Node": return `/ui/clients/${k}`;
    case "Evaluation": return "/ui/evaluations";
    case "Deployment": {
      const job = e.Payload && e.Payload.Deployment && e.Payload.Deployment.JobID;
      return job ? `/ui/jobs/${encodeURIComponent(job)}${ns}` : null;
    }
    default: return null;
  }
}

/** A one-line summary of what the event says (a task event's message, a status). */
function summary(e) {
  const p = e.Payload || {};
  if (e.Topic === "Task" && p.Event) return `${p.Task}: ${p.Event.Type}${p.Event.DisplayMessage ? ` — ${p.Event.DisplayMessage}` : ""}`;
  if (p.Allocation) return `${p.Allocation.Name || ""} ${p.Allocation.ClientStatus || ""}`.trim();
  if (p.Evaluation) return `${p.Evaluation.JobID || ""} ${p.Evaluation.Status || ""} (${p.Evaluation.TriggeredBy || ""})`;
  if (p.Job) return `${p.Job.Status || ""} v${p.Job.Version ?? ""}`;
  if (p.Deployment) return `${p.Deployment.JobID || ""} ${p.Deployment.Status || ""}`;
  if (p.Node) return `${p.Node.Name || ""} ${p.Node.Status || ""}`;
  return "";
}

export default async function mount(view, params, ctx) {
  ctx.title("Events");
  const query = new URLSearchParams(location.search);
  const wanted = new Set((query.get("topic") || "").split(",").filter(Boolean));
  const kept = [];
  let paused = false, unseen = 0, scheduled = false;

  const boxes = TOPICS.map((t) => h("input", { type: "checkbox", value: t, checked: !wanted.size || wanted.has(t), "data-topic": t }));
  const keyInput = h("input", { type: "search", placeholder: "Filter by key or text", "aria-label": "Filter events by key",
    value: query.get("key") || "", id: "events-key" });
  const pauseBtn = h("button", { type: "button", id: "events-pause", "aria-pressed": "false" }, "Pause");
  const clearBtn = h("button", { type: "button", id: "events-clear" }, "Clear");
  const count = h("span", { class: "muted", id: "events-count", role: "status" });
  const list = h("ol", { class: "events stream", id: "events-list", reversed: true });
  const empty = h("div", { id: "events-empty" });
  replace(view,
    h("h1", null, "Events"),
    h("fieldset", { class: "topics" }, h("legend", null, "Topics"),
      boxes.map((b) => h("label", null, b, b.value))),
    h("div", { class: "toolbar" }, keyInput, pauseBtn, clearBtn, count),
    empty, list);

  const topicsOn = () => new Set(boxes.filter((b) => b.checked).map((b) => b.value));
  const shows = (e, on, needle) => (on.has(e.Topic) || !TOPICS.includes(e.Topic) && on.size === TOPICS.length) &&
    (!needle || (e.Key || "").toLowerCase().includes(needle) || e.Type.toLowerCase().includes(needle) ||
      (e.summary || "").toLowerCase().includes(needle));

  const row = (e) => {
    const href = keyHref(e);
    return h("li", { "data-topic": e.Topic, "data-event-type": e.Type },
      // A clock time, not a <time datetime> (lib.js would rewrite it as relative).
      h("span", { class: "etime clock", title: e.at.toLocaleString() }, e.at.toLocaleTimeString()),
      h("span", { class: "etopic badge" }, e.Topic),
      h("span", { class: "etype" }, e.Type),
      h("span", { class: "ekey" }, href ? h("a", { href, title: e.Key, class: "id" }, short(e.Key)) : h("span", { class: "id", title: e.Key }, short(e.Key)),
        e.summary ? h("span", { class: "muted" }, ` ${e.summary}`) : null),
      h("span", { class: "eindex muted" }, `#${e.Index}`));
  };

  // Full redraw: on a filter change, a clear, a resume. Otherwise new events are only
  // prepended (and the oldest rows trimmed): a busy stream costs rows for what is new, not 500
  // rows per frame.
  let fresh = []; // arrived since the last draw, oldest first
  let needFull = true;
  const drawCount = (shownCount) => replace(count, paused ? `paused · ${unseen} new`
    : `${shownCount} of ${kept.length} kept (last ${KEEP})`);
  const drawEmpty = (shownCount) => replace(empty, shownCount ? null : kept.length
    ? emptyState("No event matches", h("p", null, "Tick more topics or clear the key filter."))
    : emptyState("Waiting for events", h("p", null, "They appear here as they happen: ", link("/ui/jobs/run", "run a job"),
      " or restart an allocation to see some.")));
  const draw = () => {
    scheduled = false;
    const on = topicsOn(), needle = keyInput.value.trim().toLowerCase();
    if (needFull) {
      needFull = false;
      fresh = [];
      // kept is oldest first; the list shows newest first.
      replace(list, kept.filter((e) => shows(e, on, needle)).reverse().map(row));
    } else {
      const rows = fresh.filter((e) => shows(e, on, needle)).reverse().map(row);
      fresh = [];
      list.prepend(...rows);
      const shownKept = kept.filter((e) => shows(e, on, needle)).length;
      while (list.children.length > shownKept) list.lastElementChild.remove();
    }
    drawCount(list.children.length);
    drawEmpty(list.children.length);
  };
  const redraw = () => { needFull = true; draw(); };
  const schedule = () => { if (!scheduled && !paused) { scheduled = true; requestAnimationFrame(draw); } };
  const keepUrl = () => {
    const q = new URLSearchParams();
    const on = topicsOn();
    if (on.size !== TOPICS.length) q.set("topic", [...on].join(","));
    if (keyInput.value.trim()) q.set("key", keyInput.value.trim());
    history.replaceState(null, "", location.pathname + (q.toString() ? `?${q}` : ""));
  };
  for (const b of boxes) b.addEventListener("change", () => { keepUrl(); redraw(); });
  keyInput.addEventListener("input", () => { keepUrl(); redraw(); });
  pauseBtn.addEventListener("click", () => {
    paused = !paused;
    unseen = 0;
    pauseBtn.textContent = paused ? "Resume" : "Pause";
    pauseBtn.setAttribute("aria-pressed", String(paused));
    redraw();
  });
  clearBtn.addEventListener("click", () => { kept.length = 0; unseen = 0; redraw(); });

  ctx.onEvent((e) => {
    const entry = { Topic: e.Topic, Type: e.Type, Key: e.Key, Namespace: e.Namespace, Index: e.Index,
      Payload: e.Topic === "Task" || e.Topic === "Deployment" ? e.Payload : undefined,
      summary: summary(e), at: new Date() };
    kept.push(entry);
    if (kept.length > KEEP) kept.splice(0, kept.length - KEEP);
    if (!paused) fresh.push(entry);
    // A hidden tab runs no animation frame: what waits is bounded as what is kept.
    if (fresh.length > KEEP) fresh.splice(0, fresh.length - KEEP);
    if (paused) { unseen++; replace(count, `paused · ${unseen} new`); } else schedule();
  });
  draw();
}
