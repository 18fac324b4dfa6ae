// /ui/evaluations: every evaluation the server keeps, newest first: its job (a link), type,
// trigger, status, whether it failed to place anything (with the reasons a click away), and
// when it was made and last changed. A status filter (kept in the URL, as the jobs list keeps
// its own); redrawn on each Evaluation event, never polled.

import { api, badge, emptyState, errorBox, h, link, replace, shortId, table, timeEl } from "../lib.js";
import { jobPath, keepingFocus, placementFailures } from "./job_render.js";

const STATUSES = ["", "pending", "blocked", "complete", "failed", "canceled"];

export default async function mount(view, params, ctx) {
  ctx.title("Evaluations");
  const query = new URLSearchParams(location.search);
  const status = h("select", { "aria-label": "Status", id: "eval-status" },
    STATUSES.map((s) => h("option", { value: s }, s || "Any status")));
  status.value = query.get("status") || "";
  const body = h("div", { id: "evals-list" });
  replace(view, h("h1", null, "Evaluations"), h("div", { class: "toolbar" }, status), body);

  let evals = null;
  const open = new Set(); // evaluations whose failures are shown, kept across redraws

  const draw = () => {
    if (evals === null) return;
    const want = location.pathname + (status.value ? `?status=${encodeURIComponent(status.value)}` : "");
    if (want !== location.pathname + location.search) history.replaceState(null, "", want);
    const shown = evals.filter((e) => !status.value || e.Status === status.value);
    const empty = evals.length
      ? emptyState(`No ${status.value} evaluations`, h("p", null, `Choose "Any status" to see all ${evals.length}.`))
      : emptyState("No evaluations yet", h("p", null, "The server makes one each time a job is run, stopped or scaled, or a node changes. ",
        link("/ui/jobs/run", "Run a job"), " to see one."));
    const rows = [];
    for (const e of shown) {
      rows.push(e);
      if (open.has(e.ID) && Object.keys(e.FailedTGAllocs || {}).length) rows.push({ failuresOf: e });
    }
    replace(body, table([
      { label: "ID", cell: (e) => e.failuresOf ? placementFailures(e.failuresOf.FailedTGAllocs) : shortId(e.ID) },
      { label: "Job", cell: (e) => e.failuresOf ? null : e.JobID ? link(jobPath(e.JobID, e.Namespace), e.JobID) : "–" },
      { label: "Status", cell: (e) => e.failuresOf ? null : badge(e.Status) },
      { label: "Placement failures", cell: (e) => {
        if (e.failuresOf) return null;
        const groups = Object.keys(e.FailedTGAllocs || {});
        if (!groups.length) return "no";
        return h("button", { type: "button", class: "small danger", "aria-expanded": String(open.has(e.ID)),
          "data-action": "failures", "data-eval": e.ID, onclick: () => { if (!open.delete(e.ID)) open.add(e.ID); keepingFocus(body, draw); } },
        `yes (${groups.join(", ")})`);
      } },
      { label: "Triggered by", cell: (e) => e.failuresOf ? null : e.TriggeredBy, narrow: false },
      { label: "Type", cell: (e) => e.failuresOf ? null : e.Type, narrow: false },
      { label: "Created", cell: (e) => e.failuresOf ? null : timeEl(e.CreateTime), narrow: false },
      { label: "Modified", cell: (e) => e.failuresOf ? null : timeEl(e.ModifyTime), narrow: false },
    ], rows, { empty, rowAttrs: (e) => e.failuresOf
      ? { class: "failures-row", "data-failures": e.failuresOf.ID }
      : { "data-eval": e.ID, "data-status": e.Status } }),
    shown.length !== evals.length && shown.length ? h("p", { class: "muted" }, `${shown.length} of ${evals.length} evaluations`) : null);
    // A failures row spans the table: its one cell takes every column.
    for (const td of body.querySelectorAll("tr.failures-row td:first-child")) td.colSpan = 8;
    for (const td of body.querySelectorAll("tr.failures-row td:not(:first-child)")) td.remove();
  };
  status.addEventListener("input", draw);

  await ctx.live((e) => e.Topic === "Evaluation", async () => {
    try {
      const list = await api.get("/v1/evaluations?namespace=*", { signal: ctx.signal });
      evals = list.sort((a, b) => b.CreateIndex - a.CreateIndex || (b.ModifyTime - a.ModifyTime));
      await keepingFocus(body, draw);
    } catch (err) {
      if (err.name === "AbortError" || evals) throw err; // a list drawn before stays
      replace(body, errorBox(err));
    }
  });
}
