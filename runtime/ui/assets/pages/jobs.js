// /ui/jobs: every job with its status, type, priority and per-status allocation counts, filtered
// by a search box and status/type selects (kept in the URL, so a filtered list can be shared),
// refreshed on each Job, Allocation or Evaluation event.

import { api, badge, emptyState, errorBox, h, jobHref, link, replace, table, timeEl } from "../lib.js";

const COUNT_KEYS = ["Queued", "Starting", "Running", "Complete", "Failed", "Lost", "Unknown"];

function counts(job) {
  const total = Object.fromEntries(COUNT_KEYS.map((k) => [k, 0]));
  const summary = (job.JobSummary && job.JobSummary.Summary) || {};
  for (const group of Object.values(summary)) for (const k of COUNT_KEYS) total[k] += group[k] || 0;
  return h("span", { class: "counts" }, COUNT_KEYS.filter((k) => total[k]).map((k) =>
    h("span", { class: `count s-${k.toLowerCase()}`, title: `${total[k]} ${k.toLowerCase()}` }, `${k} ${total[k]}`)));
}

export default async function mount(view, params, ctx) {
  ctx.title("Jobs");
  const query = new URLSearchParams(location.search);
  const search = h("input", { type: "search", placeholder: "Search jobs by name", "aria-label": "Search jobs",
    value: query.get("search") || "" });
  const status = h("select", { "aria-label": "Status" },
    ["", "pending", "running", "dead"].map((s) => h("option", { value: s }, s || "Any status")));
  const type = h("select", { "aria-label": "Type" },
    ["", "service", "batch", "system", "sysbatch"].map((t) => h("option", { value: t }, t || "Any type")));
  status.value = query.get("status") || "";
  type.value = query.get("type") || "";
  const body = h("div", { id: "jobs-list" });
  replace(view,
    h("h1", null, "Jobs", h("span", { class: "spacer" }),
      h("a", { href: "/ui/jobs/run", class: "button primary", id: "run-job" }, "Run job")),
    h("div", { class: "toolbar" }, search, status, type),
    body);

  let jobs = null;
  const draw = () => {
    if (jobs === null) return;
    const needle = search.value.trim().toLowerCase();
    const shown = jobs.filter((j) => (!needle || j.ID.toLowerCase().includes(needle) ||
      (j.Name || "").toLowerCase().includes(needle)) &&
      (!status.value || j.Status === status.value) && (!type.value || j.Type === type.value));
    const q = new URLSearchParams();
    if (search.value.trim()) q.set("search", search.value.trim());
    if (status.value) q.set("status", status.value);
    if (type.value) q.set("type", type.value);
    const want = location.pathname + (q.toString() ? `?${q}` : "");
    if (want !== location.pathname + location.search) history.replaceState(null, "", want);
    const empty = jobs.length
      ? emptyState("No job matches", h("p", null, "Clear the search or the filters to see all ", jobs.length, " jobs."))
      : emptyState("No jobs yet", h("p", null, "Run one: ", link("/ui/jobs/run", "paste a job file"),
        ", or from a shell: ", h("code", null, "yurt job run web.nomad.hcl"), "."));
    replace(body, table([
      { label: "Name", cell: (j) => h("a", { href: jobHref(j.ID, j.Namespace), class: "job-link" }, j.ID) },
      { label: "Status", cell: (j) => badge(j.Stop ? "stopped" : j.Status) },
      { label: "Type", cell: (j) => j.Type + (j.Periodic ? " (periodic)" : j.ParameterizedJob ? " (parameterized)" : ""), narrow: false },
      { label: "Priority", cell: (j) => String(j.Priority), narrow: false },
      { label: "Namespace", cell: (j) => j.Namespace, narrow: false },
      { label: "Allocations", cell: counts },
      { label: "Submitted", cell: (j) => timeEl(j.SubmitTime), narrow: false },
    ], shown, { empty, rowAttrs: (j) => ({ "data-job": j.ID }) }),
    shown.length && shown.length !== jobs.length ? h("p", { class: "muted" }, `${shown.length} of ${jobs.length} jobs`) : null);
  };
  for (const el of [search, status, type]) el.addEventListener("input", draw);

  await ctx.live((e) => e.Topic === "Job" || e.Topic === "Allocation" || e.Topic === "Evaluation", async () => {
    try {
      jobs = await api.get("/v1/jobs?namespace=*&meta=true", { signal: ctx.signal });
      jobs.sort((a, b) => a.ID.localeCompare(b.ID));
      draw();
    } catch (err) {
      if (err.name === "AbortError" || jobs) throw err; // a list drawn before stays
      replace(body, errorBox(err));
    }
  });
}
