// /ui/jobs/:id[/:section]: one job. The header (status, type, priority, datacenters, namespace,
// version, submit time) and the actions (stop, start again, purge) are on every section; the
// sections are tabs at Nomad's UI paths: the overview (task groups with their summary counts
// and a scale action, placement failures, the latest deployment, the allocations),
// allocations, evaluations (with placement failures and their reasons), versions (with their
// diffs, and a revert to each older one), deployments, and the definition. A periodic or
// parameterized job shows its children instead of allocations (a periodic one can be launched
// now, a parameterized one dispatched with its meta and payload). A path naming a task group (/ui/jobs/web/cache, as
// Nomad's task group page) shows that group's overview.
//
// `:id` may end in `@namespace`; every API call then carries `?namespace=`. The page redraws
// from the API on each Job, Allocation, Evaluation or Deployment event of this job, and only
// then: there is nothing here to poll. Every action asks first (confirmAction) and says how it
// went (a toast, or the API's refusal).

import { api, ApiError, badge, confirmAction, emptyState, errorBox, failureToast, eventJob, h, link, navigate, replace, shortId, table, timeEl, toast } from "../lib.js";
import {
  diffChanges, diffView, jobApi, jobPath, keepingFocus, placementFailures, splitJobParam,
} from "./job_render.js";

const SECTIONS = [
  ["overview", "Overview"], ["allocations", "Allocations"], ["evaluations", "Evaluations"],
  ["versions", "Versions"], ["deployments", "Deployments"], ["definition", "Definition"],
];
const COUNT_KEYS = ["Queued", "Starting", "Running", "Complete", "Failed", "Lost", "Unknown"];
const TOPICS = new Set(["Job", "Allocation", "Evaluation", "Deployment"]);

function card(label, value) {
  return h("div", { class: "card" }, h("div", { class: "label" }, label), h("div", { class: "value" }, value));
}

function jobStatus(job) {
  return job.Stop && job.Status !== "dead" ? "stopping" : job.Stop ? "stopped" : job.Status;
}

function counts(summary) {
  return h("span", { class: "counts" }, COUNT_KEYS.map((k) =>
    h("span", { class: `count s-${k.toLowerCase()}${summary[k] ? "" : " zero"}`, title: `${summary[k] || 0} ${k.toLowerCase()}` },
      `${k} ${summary[k] || 0}`)));
}

/** The overview lists this many of the newest allocations; the allocations tab lists all. */
const RECENT = 25;

function newest(allocs, n = Infinity) {
  return [...allocs].sort((a, b) => (b.CreateIndex - a.CreateIndex) || a.Name.localeCompare(b.Name)).slice(0, n);
}

function allocTable(allocs, { empty } = {}) {
  const rows = newest(allocs);
  return table([
    { label: "ID", cell: (a) => shortId(a.ID, `/ui/allocations/${a.ID}`) },
    { label: "Group", cell: (a) => a.TaskGroup },
    { label: "Status", cell: (a) => badge(a.ClientStatus) },
    { label: "Desired", cell: (a) => a.DesiredStatus, narrow: false },
    { label: "Node", cell: (a) => a.NodeID ? h("a", { href: `/ui/clients/${a.NodeID}`, title: a.NodeID }, a.NodeName || a.NodeID.slice(0, 8)) : "–", narrow: false },
    { label: "Version", cell: (a) => String(a.JobVersion), narrow: false },
    { label: "Modified", cell: (a) => timeEl(a.ModifyTime) },
  ], rows, {
    empty: empty || emptyState("No allocations", h("p", null, "None placed yet: see the evaluations for why.")),
    rowAttrs: (a) => ({ "data-alloc": a.ID, "data-status": a.ClientStatus }),
  });
}

function evalTable(evals) {
  const rows = [...evals].sort((a, b) => b.CreateIndex - a.CreateIndex);
  return table([
    { label: "ID", cell: (e) => shortId(e.ID) },
    { label: "Status", cell: (e) => badge(e.Status) },
    { label: "Triggered by", cell: (e) => e.TriggeredBy },
    { label: "Placement failures", cell: (e) => Object.keys(e.FailedTGAllocs || {}).length
      ? h("span", { class: "s-failed" }, Object.keys(e.FailedTGAllocs).join(", ")) : "none" },
    { label: "Description", cell: (e) => e.StatusDescription || "–", class: "wrap", narrow: false },
    { label: "Created", cell: (e) => timeEl(e.CreateTime), narrow: false },
  ], rows, { empty: emptyState("No evaluations", h("p", null, "Each register, stop or scale of this job makes one.")),
    rowAttrs: (e) => ({ "data-eval": e.ID }) });
}

function deploymentBlock(d) {
  const groups = Object.entries(d.TaskGroups || {});
  return h("div", { class: "card deployment", "data-deployment": d.ID },
    h("div", { class: "pf-head" }, shortId(d.ID), " ", badge(d.Status), " ",
      h("span", { class: "muted" }, `version ${d.JobVersion}`)),
    d.StatusDescription ? h("p", { class: "muted" }, d.StatusDescription) : null,
    groups.length ? table([
      { label: "Group", cell: ([g]) => g },
      { label: "Desired", cell: ([, s]) => String(s.DesiredTotal ?? 0) },
      { label: "Canaries", cell: ([, s]) => String(s.DesiredCanaries ?? 0), narrow: false },
      { label: "Placed", cell: ([, s]) => String(s.PlacedAllocs ?? 0) },
      { label: "Healthy", cell: ([, s]) => String(s.HealthyAllocs ?? 0) },
      { label: "Unhealthy", cell: ([, s]) => String(s.UnhealthyAllocs ?? 0) },
      { label: "Promoted", cell: ([, s]) => s.Promoted ? "yes" : "no", narrow: false },
    ], groups) : null);
}

/** A periodic or parameterized job's launches: their counts and the newest of them. */
function childJobs(job, counts, children) {
  const rows = [...children].sort((a, b) => (b.SubmitTime || 0) - (a.SubmitTime || 0)).slice(0, RECENT);
  return [
    h("h2", null, job.Periodic ? "Periodic launches" : "Dispatched jobs"),
    h("p", { class: "counts" }, ["Pending", "Running", "Dead"].map((k) =>
      h("span", { class: `count${k === "Dead" ? "" : ` s-${k.toLowerCase()}`}` }, `${k} ${counts[k] || 0}`))),
    table([
      { label: "Name", cell: (c) => link(jobPath(c.ID, c.Namespace), c.ID) },
      { label: "Status", cell: (c) => badge(c.Status) },
      { label: "Submitted", cell: (c) => timeEl(c.SubmitTime) },
    ], rows, { empty: emptyState(job.Periodic ? "Not launched yet" : "Nothing dispatched yet",
      h("p", null, job.Periodic
        ? ["It launches on its schedule; ", h("code", null, `yurt job periodic force ${job.ID}`), " launches one now."]
        : ["Dispatch one: ", h("code", null, `yurt job dispatch ${job.ID}`), "."])) }),
  ];
}

export default async function mount(view, params, ctx) {
  const { id, namespace } = splitJobParam(params.id);
  const base = jobPath(id, namespace);
  ctx.title(`Job ${id}`);
  const known = new Set(SECTIONS.map(([s]) => s));
  // Nomad's job page for a system job lists its clients: here, the allocations (with nodes).
  const asked = ({ clients: "allocations" })[params.section] || params.section || "overview";
  const header = h("div", { id: "job-header" });
  const body = h("div", { id: "job-body" });
  replace(view, header, body);

  let job = null;
  let sectionDrawn = false;
  // Versions whose changes the person unfolded or folded (by version number), kept across the
  // redraws events cause; a version not in it: only the newest is unfolded.
  const unfolded = new Map();

  const act = async (title, bodyText, confirm, danger, run, done) => {
    if (!await confirmAction({ title, body: bodyText, confirm, danger })) return;
    try {
      const answer = await run();
      toast(done(answer), "ok");
    } catch (err) {
      failureToast(title, err);
    }
  };

  const stop = () => act(`Stop job ${id}?`,
    "Its allocations are stopped; the job stays, and can be started again.", "Stop", true,
    () => api.del(jobApi(id, namespace)), (a) => `Stopping ${id} (evaluation ${(a.EvalID || "").slice(0, 8)})`);
  const purge = () => act(`Purge job ${id}?`,
    "Its allocations are stopped and the job with its history is removed for good.", "Purge", true,
    () => api.del(jobApi(id, namespace, "?purge=true")), () => { navigate("/ui/jobs"); return `Purged ${id}`; });
  const start = () => act(`Start job ${id} again?`,
    "Its last version is registered again, as a new version.", "Start", false,
    async () => {
      const spec = await api.get(jobApi(id, namespace));
      spec.Stop = false;
      return api.post(jobApi(id, namespace), { Job: spec });
    }, () => `Started ${id}`);

  const revert = (version) => act(`Revert ${id} to version ${version}?`,
    "That version's spec is registered again, as a new version.", "Revert", false,
    () => api.post(jobApi(id, namespace, "/revert"), { JobID: id, JobVersion: version }),
    () => `Reverting ${id} to version ${version}`);

  const launch = () => act(`Launch ${id} now?`,
    "A child job is launched now, as the schedule would (prohibit_overlap still holds).", "Launch", false,
    () => api.post(jobApi(id, namespace, "/periodic/force")), () => `Launched ${id}`);

  const dispatch = async () => {
    const spec = job.ParameterizedJob || {};
    const field = (key, required) => h("label", { class: "field" },
      h("span", null, `Meta ${key}${required ? " (required)" : ""}`),
      h("input", { type: "text", name: key, "data-meta": key, required: required || null, autocomplete: "off" }));
    const payload = spec.Payload === "forbidden" ? null
      : h("textarea", { name: "payload", rows: "4", "aria-label": "Payload", "data-role": "payload" });
    const extra = h("div", null,
      (spec.MetaRequired || []).map((k) => field(k, true)),
      (spec.MetaOptional || []).map((k) => field(k, false)),
      payload ? h("label", { class: "field" },
        h("span", null, `Payload${spec.Payload === "required" ? " (required)" : ""}`), payload) : null);
    if (!await confirmAction({ title: `Dispatch ${id}`, body: "A child job is registered with this meta and payload.",
      confirm: "Dispatch", extra })) return;
    const meta = {};
    for (const input of extra.querySelectorAll("input[data-meta]")) {
      if (input.value) meta[input.dataset.meta] = input.value;
    }
    const request = { JobID: id, Meta: meta };
    if (payload && payload.value) {
      let bin = "";
      for (const b of new TextEncoder().encode(payload.value)) bin += String.fromCharCode(b);
      request.Payload = btoa(bin);
    }
    try {
      const answer = await api.post(jobApi(id, namespace, "/dispatch"), request);
      toast(`Dispatched ${answer.DispatchedJobID}`, "ok");
      navigate(jobPath(answer.DispatchedJobID, namespace));
    } catch (err) {
      failureToast("Dispatch", err);
    }
  };

  const scale = async (group, current) => {
    const input = h("input", { type: "number", min: "0", step: "1", value: String(current), name: "count",
      "aria-label": `Count of ${group}`, autofocus: true, "data-role": "scale-count",
      // Enter confirms, as in a form (the dialog's buttons are not one).
      onkeydown: (e) => {
        if (e.key === "Enter") { e.preventDefault(); input.closest("dialog").querySelector('[data-role="confirm"]').click(); }
      } });
    const extra = h("label", { class: "field" }, h("span", null, "Count"), input);
    if (!await confirmAction({ title: `Scale group ${group}`, body: `It runs ${current} now.`, confirm: "Scale", extra })) return;
    // An empty field is no count (Number("") is 0: it would stop the whole group).
    const text = input.value.trim();
    const count = /^\d+$/.test(text) ? Number(text) : NaN;
    if (!Number.isInteger(count)) { toast("The count must be a whole number, 0 or more", "bad"); return; }
    try {
      await api.put(jobApi(id, namespace, "/scale"), {
        Count: count, Target: { Group: group }, Message: "scaled from the web UI" });
      toast(`Scaled ${group} to ${count}`, "ok");
    } catch (err) {
      failureToast("Scaling", err);
    }
  };

  const drawHeader = () => {
    const stopped = job.Stop;
    replace(header,
      h("div", { class: "crumbs" }, link("/ui/jobs", "Jobs"), " / ", job.ID,
        namespace !== "default" ? ` @ ${namespace}` : ""),
      h("h1", null, job.ID, badge(jobStatus(job)), h("span", { class: "spacer" }),
        h("span", { class: "actions" },
          job.Periodic && !stopped
            ? h("button", { type: "button", onclick: launch, "data-action": "launch" }, "Launch now") : null,
          job.ParameterizedJob && !stopped
            ? h("button", { type: "button", onclick: dispatch, "data-action": "dispatch" }, "Dispatch") : null,
          stopped
            ? h("button", { type: "button", onclick: start, "data-action": "start" }, "Start")
            : h("button", { type: "button", class: "danger", onclick: stop, "data-action": "stop" }, "Stop"),
          h("button", { type: "button", class: "danger", onclick: purge, "data-action": "purge" }, "Purge"))),
      h("div", { class: "grid job-facts" },
        card("Type", job.Type + (job.Periodic ? " (periodic)" : "") + (job.ParameterizedJob ? " (parameterized)" : "")),
        card("Priority", String(job.Priority)),
        card("Datacenters", (job.Datacenters || []).join(", ") || "–"),
        card("Namespace", job.Namespace),
        card("Version", String(job.Version)),
        card("Submitted", timeEl(job.SubmitTime))),
      job.StatusDescription ? h("p", { class: "muted" }, job.StatusDescription) : null,
      h("nav", { class: "tabs", "aria-label": "Job sections" }, SECTIONS.map(([s, label]) =>
        h("a", { href: s === "overview" ? base : `${base}/${s}`, "aria-current": s === section && (known.has(asked) || groupOnly) ? "page" : null,
          "data-section": s }, label))));
  };

  // A path segment that is no section but a group's name: Nomad's task group page.
  const section = known.has(asked) ? asked : "overview";
  let groupOnly = null;

  const overview = async () => {
    const parent = Boolean(job.Periodic || job.ParameterizedJob);
    const [summary, allocs, evals, deployment, children] = await Promise.all([
      api.get(jobApi(id, namespace, "/summary"), { signal: ctx.signal }),
      api.get(jobApi(id, namespace, "/allocations"), { signal: ctx.signal }),
      api.get(jobApi(id, namespace, "/evaluations"), { signal: ctx.signal }),
      api.get(jobApi(id, namespace, "/deployment"), { signal: ctx.signal }),
      parent ? api.get(`/v1/jobs?prefix=${encodeURIComponent(id + "/")}&namespace=${encodeURIComponent(namespace)}`,
        { signal: ctx.signal }) : null,
    ]);
    const groups = (job.TaskGroups || []).filter((g) => !groupOnly || g.Name === groupOnly);
    // What still fails to place: the blocked evaluation's failures, or the newest
    // evaluation's for the job as it is (Nomad's UI shows the same).
    const current = [...evals].filter((e) => e.JobModifyIndex >= job.JobModifyIndex)
      .sort((a, b) => b.CreateIndex - a.CreateIndex);
    const failing = current.find((e) => e.Status === "blocked") ||
      current.find((e) => Object.keys(e.FailedTGAllocs || {}).length);
    const failed = failing && !job.Stop ? Object.fromEntries(Object.entries(failing.FailedTGAllocs || {})
      .filter(([g]) => !groupOnly || g === groupOnly)) : null;
    const failures = placementFailures(failed);
    const shownAllocs = allocs.filter((a) => !groupOnly || a.TaskGroup === groupOnly);
    replace(body,
      groupOnly ? h("p", { class: "crumbs" }, "Task group ", h("strong", null, groupOnly), " · ", link(base, "all groups")) : null,
      h("h2", null, "Task groups"),
      table([
        { label: "Group", cell: (g) => groupOnly ? g.Name : link(`${base}/${encodeURIComponent(g.Name)}`, g.Name) },
        { label: "Count", cell: (g) => String(g.Count) },
        { label: "Allocations", cell: (g) => counts((summary.Summary || {})[g.Name] || {}) },
        { label: "", cell: (g) => job.Stop || parent ? null : h("button", { type: "button", class: "small", "data-action": "scale",
          "data-group": g.Name, onclick: () => scale(g.Name, g.Count) }, "Scale") },
      ], groups, { empty: emptyState("No such task group", h("p", null, link(base, "See the job's groups"), ".")),
        rowAttrs: (g) => ({ "data-group": g.Name }) }),
      parent ? childJobs(job, summary.Children || {}, children || []) : null,
      failures ? [h("h2", null, "Placement failures"), failures] : null,
      deployment ? [h("h2", null, "Latest deployment"), deploymentBlock(deployment)] : null,
      // A parent only launches: its children hold the allocations.
      parent ? null : [
        h("h2", null, groupOnly ? "Allocations" : "Recent allocations"),
        allocTable(groupOnly ? shownAllocs : newest(shownAllocs, RECENT)),
        !groupOnly && shownAllocs.length > RECENT
          ? h("p", null, link(`${base}/allocations`, `See all ${shownAllocs.length} allocations`)) : null]);
  };

  const sections = {
    overview,
    allocations: async () => {
      const allocs = await api.get(jobApi(id, namespace, "/allocations"), { signal: ctx.signal });
      replace(body, allocTable(allocs));
    },
    evaluations: async () => {
      const evals = await api.get(jobApi(id, namespace, "/evaluations"), { signal: ctx.signal });
      const withFailures = [...evals].sort((a, b) => b.CreateIndex - a.CreateIndex)
        .filter((e) => Object.keys(e.FailedTGAllocs || {}).length);
      replace(body, evalTable(evals),
        withFailures.length ? [h("h2", null, "Placement failures"), withFailures.map((e) =>
          h("section", { class: "eval-failures", "data-eval": e.ID },
            h("h3", null, "Evaluation ", shortId(e.ID), " ", badge(e.Status), " ",
              h("span", { class: "muted" }, e.TriggeredBy), " ", timeEl(e.CreateTime)),
            placementFailures(e.FailedTGAllocs)))] : null);
    },
    versions: async () => {
      const answer = await api.get(jobApi(id, namespace, "/versions?diffs=true"), { signal: ctx.signal });
      const versions = answer.Versions || [];
      const diffs = answer.Diffs || [];
      replace(body, versions.length ? h("ol", { class: "versions" }, versions.map((v, i) => {
        const diff = diffs[i];
        return h("li", { class: "card", "data-version": v.Version },
          h("div", { class: "pf-head" }, h("strong", null, `Version ${v.Version}`), " ",
            v.Stable ? badge("stable") : null, " ", timeEl(v.SubmitTime),
            v.Version === job.Version ? h("span", { class: "muted" }, " (current)")
              : h("button", { type: "button", class: "small", "data-action": "revert", "data-version": v.Version,
                onclick: () => revert(v.Version) }, "Revert to this")),
          diff ? (diffChanges(diff)
            ? h("details", { open: unfolded.get(v.Version) ?? i === 0, "data-fold": `version-${v.Version}` },
              // The click (before the fold changes): only the person's choice is kept, not
              // the default a new version's arrival would otherwise move on.
              h("summary", { onclick: (e) => unfolded.set(v.Version, !e.currentTarget.parentElement.open) },
                "Changes from the version before"), diffView(diff))
            : h("p", { class: "muted" }, "No changes from the version before."))
            : h("p", { class: "muted" }, "The first version."));
      })) : emptyState("No versions", h("p", null, "The job keeps its versions while it exists.")));
    },
    deployments: async () => {
      const list = await api.get(jobApi(id, namespace, "/deployments"), { signal: ctx.signal });
      replace(body, list.length ? list.map(deploymentBlock)
        : emptyState("No deployments", h("p", null, "A service job with an ", h("code", null, "update"),
          " block makes a deployment on each change of its tasks.")));
    },
    definition: async () => {
      replace(body, h("pre", { class: "diff definition", tabindex: "0", "aria-label": "Job definition" },
        JSON.stringify(job, null, 2)));
    },
  };

  const refresh = async () => {
    try {
      job = await api.get(jobApi(id, namespace), { signal: ctx.signal });
    } catch (err) {
      // A job drawn before stays on screen unless it is gone.
      if (err.name === "AbortError" || (job && !(err instanceof ApiError && err.status === 404))) throw err;
      replace(header, h("div", { class: "crumbs" }, link("/ui/jobs", "Jobs"), " / ", id));
      replace(body, err instanceof ApiError && err.status === 404
        ? emptyState(`No job ${id}`, h("p", null, "It was purged, or never ran here. ",
          link("/ui/jobs", "See the jobs"), " or ", link("/ui/jobs/run", "run one"), "."))
        : errorBox(err));
      return;
    }
    if (!known.has(asked) && !groupOnly) {
      if ((job.TaskGroups || []).some((g) => g.Name === asked)) groupOnly = asked;
    }
    drawHeader();
    try {
      if (!known.has(asked) && !groupOnly) {
        replace(body, emptyState(`No section or group "${asked}"`,
          h("p", null, link(base, "See the job's overview"), ".")));
        return;
      }
      await sections[section]();
      sectionDrawn = true;
    } catch (err) {
      if (err.name === "AbortError" || sectionDrawn) throw err;
      replace(body, errorBox(err));
    }
  };

  // A periodic or parameterized job's children ("<id>/periodic-…") change its page too.
  const ours = (job) => job === id || (job || "").startsWith(id + "/");
  await ctx.live((e) => TOPICS.has(e.Topic) && ours(eventJob(e)) &&
    (!e.Namespace || e.Namespace === namespace), () => keepingFocus(view, refresh));
}
