// Renderers the job pages share (the job page, the run page, the evaluations list): a job's
// UI path and API query, Nomad's job diff drawn as `nomad job plan` prints it, and placement
// failures (an evaluation's FailedTGAllocs) drawn as Nomad's UI words them.
//
// Pure DOM building from API answers: no fetching, no state. Text is always text (h()).

import { h } from "../lib.js";

/** `web` or `web@prod` (the path segment job pages use) → {id, namespace}. The last `@`
 * splits, since an ID may hold one but a namespace name may not. */
export function splitJobParam(param) {
  const at = param.lastIndexOf("@");
  if (at > 0) return { id: param.slice(0, at), namespace: param.slice(at + 1) || "default" };
  return { id: param, namespace: "default" };
}

export function jobPath(id, namespace) {
  const ns = namespace && namespace !== "default" ? `@${namespace}` : "";
  return `/ui/jobs/${encodeURIComponent(id)}${ns}`;
}

/** `/v1/job/<id><suffix>?namespace=<ns>` (suffix may hold its own query). */
export function jobApi(id, namespace, suffix = "") {
  const sep = suffix.includes("?") ? "&" : "?";
  return `/v1/job/${encodeURIComponent(id)}${suffix}${sep}namespace=${encodeURIComponent(namespace || "default")}`;
}

// ---------- diffs ----------

const MARK = { Added: "+", Deleted: "-", Edited: "+/-", None: "" };
const CLASS = { Added: "add", Deleted: "del", Edited: "edit", None: "" };

function line(type, indent, text) {
  const mark = MARK[type] || "";
  return h("div", { class: `dline ${CLASS[type] || ""}`.trim() },
    " ".repeat(indent), mark ? mark + " " : "", text);
}

function fieldText(f) {
  if (f.Type === "Added") return `${f.Name}: ${JSON.stringify(f.New)}`;
  if (f.Type === "Deleted") return `${f.Name}: ${JSON.stringify(f.Old)}`;
  if (f.Type === "Edited") return `${f.Name}: ${JSON.stringify(f.Old)} => ${JSON.stringify(f.New)}`;
  return `${f.Name}: ${JSON.stringify(f.New)}`;
}

function fieldLines(fields, indent, out) {
  for (const f of fields || []) {
    const note = f.Annotations && f.Annotations.length ? ` (${f.Annotations.join(", ")})` : "";
    out.push(line(f.Type, indent, fieldText(f) + note));
  }
}

function hasContent(o) {
  return (o.Fields && o.Fields.length) || (o.Objects || []).some(hasContent);
}

function objectLines(objects, indent, out) {
  for (const o of objects || []) {
    if (!hasContent(o)) continue; // an empty list added or removed says nothing
    out.push(line(o.Type, indent, `${o.Name} {`));
    fieldLines(o.Fields, indent + 2, out);
    objectLines(o.Objects, indent + 2, out);
    out.push(h("div", { class: "dline" }, " ".repeat(indent), "}"));
  }
}

/** Nomad's plan words for a group's updates: {create: 1, ignore: 2} → "1 create, 2 ignore". */
function updatesText(updates) {
  const parts = Object.entries(updates || {}).filter(([, n]) => n).map(([k, n]) => `${n} ${k}`);
  return parts.length ? ` (${parts.join(", ")})` : "";
}

/** A JobDiff as `nomad job plan` prints it, one line per element, marked + / - / +/-. */
export function diffView(diff, { label } = {}) {
  if (!diff) return h("p", { class: "muted" }, "No diff.");
  const out = [];
  out.push(line(diff.Type, 0, `Job: ${JSON.stringify(diff.ID)}`));
  fieldLines(diff.Fields, 2, out);
  objectLines(diff.Objects, 2, out);
  for (const g of diff.TaskGroups || []) {
    out.push(line(g.Type, 0, `Task Group: ${JSON.stringify(g.Name)}${updatesText(g.Updates)}`));
    fieldLines(g.Fields, 2, out);
    objectLines(g.Objects, 2, out);
    for (const t of g.Tasks || []) {
      const note = t.Annotations && t.Annotations.length ? ` (${t.Annotations.join(", ")})` : "";
      out.push(line(t.Type, 2, `Task: ${JSON.stringify(t.Name)}${note}`));
      fieldLines(t.Fields, 4, out);
      objectLines(t.Objects, 4, out);
    }
  }
  return h("div", { class: "diff", role: "region", "aria-label": label || "Job diff", tabindex: "0" }, out);
}

/** Whether a diff changes anything at all. */
export function diffChanges(diff) {
  return Boolean(diff && diff.Type !== "None");
}

// ---------- placement failures ----------

const plural = (n, word) => `${n} ${word}${n === 1 ? "" : "s"}`;

/** One group's AllocMetric as reasons, in the words of Nomad's UI and CLI. */
export function metricReasons(m) {
  const reasons = [];
  if (!m.NodesEvaluated) reasons.push("No nodes were eligible for evaluation");
  for (const [dc, n] of Object.entries(m.NodesAvailable || {})) {
    if (!n) reasons.push(`No nodes are available in datacenter "${dc}"`);
  }
  for (const [cls, n] of Object.entries(m.ClassFiltered || {})) reasons.push(`Class "${cls}" filtered ${plural(n, "node")}`);
  for (const [c, n] of Object.entries(m.ConstraintFiltered || {})) reasons.push(`Constraint "${c}" filtered ${plural(n, "node")}`);
  if (m.NodesExhausted) reasons.push(`Resources exhausted on ${plural(m.NodesExhausted, "node")}`);
  for (const [cls, n] of Object.entries(m.ClassExhausted || {})) reasons.push(`Class "${cls}" exhausted on ${plural(n, "node")}`);
  for (const [d, n] of Object.entries(m.DimensionExhausted || {})) reasons.push(`Dimension "${d}" exhausted on ${plural(n, "node")}`);
  for (const q of m.QuotaExhausted || []) reasons.push(`Quota limit hit "${q}"`);
  return reasons;
}

/** FailedTGAllocs ({group: AllocMetric}) as one block per group: unplaced count, the node
 * counts, then each reason. Null when nothing failed. */
export function placementFailures(failed) {
  const groups = Object.entries(failed || {});
  if (!groups.length) return null;
  return h("div", { class: "placement-failures" }, groups.map(([group, m]) => {
    const unplaced = (m.CoalescedFailures || 0) + 1;
    return h("div", { class: "pf-group", "data-group": group },
      h("div", { class: "pf-head" },
        h("strong", null, `Task group "${group}"`), " ",
        h("span", { class: "badge s-failed" }, `${unplaced} unplaced`)),
      h("div", { class: "pf-nums muted" },
        `Nodes evaluated ${m.NodesEvaluated || 0} · filtered ${m.NodesFiltered || 0} · exhausted ${m.NodesExhausted || 0}`),
      h("ul", { class: "pf-reasons" }, metricReasons(m).map((r) => h("li", null, r))));
  }));
}

// ---------- live redraws ----------

/** Runs the redraw `fn()` and gives the focus back to the same control (by its data-action,
 * data-group, data-section, data-eval or href), so a live update does not throw a keyboard
 * user back to the top of the page. */
export async function keepingFocus(root, fn) {
  const el = document.activeElement;
  let selector = null;
  if (el && el !== document.body && root.contains(el)) {
    const attrs = ["data-action", "data-group", "data-section", "data-eval", "data-version", "href"].filter((a) => el.hasAttribute(a));
    if (attrs.length) {
      selector = el.tagName.toLowerCase() + attrs.map((a) => `[${a}="${CSS.escape(el.getAttribute(a))}"]`).join("");
    }
  }
  await fn();
  if (selector && !root.contains(document.activeElement)) {
    const again = root.querySelector(selector);
    if (again) again.focus({ preventScroll: true });
  }
}
