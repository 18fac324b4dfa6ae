// /ui/jobs/run: run a job from its file. An editor (a textarea with a line-number gutter) takes
// pasted text or an opened file (.hcl, .nomad, .json); "Plan" parses it (the agent's
// /v1/jobs/parse for HCL, the browser for JSON, whose files hold {"Job": {...}} or the job
// itself), lists the parser's complaints against their lines (each one moves the caret there;
// the gutter marks the line), then asks the scheduler for a dry run (/v1/job/:id/plan) and
// shows its diff as `nomad job plan` prints it, with the placements it would fail. "Run"
// registers exactly the job that was planned, after a confirmation, and opens its page.
//
// Invariants: Run is enabled only while the text is the one that was planned (an edit makes
// the plan stale); the text lives in this tab's session storage, so a reload keeps it.

import { api, ApiError, confirmAction, errorBox, failureToast, h, navigate, replace, toast } from "../lib.js";
import { diffView, jobApi, jobPath, placementFailures } from "./job_render.js";

const TEXT_KEY = "yurt.jobrun.text";
const PLACEHOLDER = `# Paste a job file here, or open one. For example:
job "hello" {
  group "app" {
    task "sleep" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}`;

/** The parser's 400 answer, one complaint a line: `JobHCL:4:5: job.x.group.g.count: ...`. */
export function parseProblems(text) {
  return text.split("\n").map((s) => s.trim()).filter(Boolean).map((s) => {
    const m = /^JobHCL:(\d+):(\d+):\s*(.*)$/.exec(s);
    return m ? { line: Number(m[1]), column: Number(m[2]), message: m[3] } : { line: null, column: null, message: s };
  });
}

/** A JSON syntax error's line, from the engine's message ("... at position 42", or
 * "(line 3 column 5)"). */
function jsonProblem(err, text) {
  const msg = String(err.message || err);
  let m = /line (\d+) column (\d+)/.exec(msg);
  if (m) return { line: Number(m[1]), column: Number(m[2]), message: msg };
  m = /position (\d+)/.exec(msg);
  if (m) {
    const before = text.slice(0, Number(m[1])).split("\n");
    return { line: before.length, column: before[before.length - 1].length + 1, message: msg };
  }
  return { line: null, column: null, message: msg };
}

const isJson = (text) => text.trimStart().startsWith("{");

export default async function mount(view, params, ctx) {
  ctx.title("Run a job");
  const textarea = h("textarea", {
    id: "job-text", spellcheck: "false", autocomplete: "off", autocapitalize: "off", wrap: "off",
    "aria-label": "Job file", placeholder: PLACEHOLDER,
  });
  textarea.value = sessionStorage.getItem(TEXT_KEY) || "";
  const gutter = h("div", { class: "gutter", "aria-hidden": "true" });
  const file = h("input", { type: "file", accept: ".hcl,.nomad,.json,.hcl2,text/plain,application/json",
    "aria-label": "Open a job file", id: "job-file" });
  const planButton = h("button", { type: "button", class: "primary", id: "plan", title: "Plan (Ctrl+Enter)" }, "Plan");
  const runButton = h("button", { type: "button", id: "run", disabled: true }, "Run");
  const problems = h("ul", { class: "problems", id: "problems", "aria-live": "polite" });
  const result = h("div", { class: "plan-result", id: "plan-result" });
  replace(view,
    h("div", { class: "crumbs" }, h("a", { href: "/ui/jobs" }, "Jobs"), " / run"),
    h("h1", null, "Run a job"),
    h("p", { class: "muted" }, "Paste a job file (HCL or JSON) or open one. Plan shows what would change and where it would run; Run registers the job as planned."),
    h("div", { class: "run-toolbar" }, file, h("span", { class: "spacer" }), planButton, runButton),
    h("div", { class: "editor" }, gutter, textarea),
    problems, result);

  let bad = new Set();
  let drawnLines = -1;
  let planned = null; // {text, job}

  const drawGutter = (force = false) => {
    const n = Math.max(1, textarea.value.split("\n").length);
    if (n === drawnLines && !force) return;
    drawnLines = n;
    // Size containment keeps the gutter from growing the editor; so its width is ours to set.
    gutter.style.width = `calc(${String(n).length + 1}ch + 12px)`;
    const lines = [];
    for (let i = 1; i <= n; i++) {
      lines.push(bad.has(i) ? h("span", { class: "bad-line", "data-line": i }, String(i)) : String(i), "\n");
    }
    replace(gutter, lines);
    gutter.scrollTop = textarea.scrollTop;
  };

  const goTo = (line, column) => {
    const lines = textarea.value.split("\n");
    let at = 0;
    for (let i = 0; i < Math.min(line - 1, lines.length); i++) at += lines[i].length + 1;
    at += Math.max(0, Math.min((column || 1) - 1, (lines[line - 1] || "").length));
    textarea.focus();
    textarea.setSelectionRange(at, at);
    const lh = parseFloat(getComputedStyle(textarea).lineHeight) || 19.5;
    textarea.scrollTop = Math.max(0, (line - 1) * lh - textarea.clientHeight / 3);
    gutter.scrollTop = textarea.scrollTop;
  };

  const showProblems = (list) => {
    bad = new Set(list.filter((p) => p.line).map((p) => p.line));
    drawGutter(true);
    replace(problems, list.map((p) => h("li", null, p.line
      ? h("button", { type: "button", "data-line": p.line, onclick: () => goTo(p.line, p.column) },
        `Line ${p.line}, column ${p.column}: ${p.message}`)
      : p.message)));
  };

  const stale = () => {
    const fresh = planned && planned.text === textarea.value;
    runButton.disabled = !fresh;
    runButton.classList.toggle("primary", Boolean(fresh));
    result.classList.toggle("stale", Boolean(planned) && !fresh);
  };

  const setText = (text) => {
    textarea.value = text;
    sessionStorage.setItem(TEXT_KEY, text);
    drawGutter();
    stale();
  };

  textarea.addEventListener("input", () => {
    sessionStorage.setItem(TEXT_KEY, textarea.value);
    drawGutter();
    stale();
  });
  textarea.addEventListener("scroll", () => { gutter.scrollTop = textarea.scrollTop; });
  textarea.addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) { e.preventDefault(); plan(); }
  });
  file.addEventListener("change", async () => {
    const f = file.files && file.files[0];
    if (!f) return;
    if (f.size > 4 * 1024 * 1024) { toast(`${f.name} is larger than 4 MiB`, "bad"); return; }
    setText(await f.text());
    showProblems([]);
    replace(result);
    toast(`Opened ${f.name}`, "ok");
  });

  /** The job the text holds, or null with the problems shown. */
  const parse = async (text) => {
    if (isJson(text)) {
      let value;
      try { value = JSON.parse(text); } catch (err) { showProblems([jsonProblem(err, text)]); return null; }
      const job = value && typeof value.Job === "object" && value.Job ? value.Job : value;
      if (!job || typeof job !== "object" || Array.isArray(job) || !job.ID) {
        showProblems([{ line: null, message: 'A JSON job file holds {"Job": {...}} or the job itself, with an "ID".' }]);
        return null;
      }
      return job;
    }
    try {
      return await api.post("/v1/jobs/parse", { JobHCL: text, Canonicalize: true }, { signal: ctx.signal });
    } catch (err) {
      if (err instanceof ApiError && err.status === 400) { showProblems(parseProblems(err.message)); return null; }
      throw err;
    }
  };

  const drawPlan = (job, answer) => {
    const failed = answer.FailedTGAllocs && Object.keys(answer.FailedTGAllocs).length ? answer.FailedTGAllocs : null;
    const updates = Object.entries((answer.Annotations || {}).DesiredTGUpdates || {});
    const words = { Place: "create", Stop: "destroy", InPlaceUpdate: "in-place update",
      DestructiveUpdate: "create/destroy update", Migrate: "migrate", Canary: "canary",
      Preemptions: "preempt", Ignore: "ignore" };
    replace(result,
      h("p", { class: "stale-note", role: "status" }, "The text changed since this plan: plan again to run it."),
      h("h2", null, `Plan for job "${job.ID}"`),
      h("h3", null, "Scheduler dry-run"),
      h("ul", { class: "plan-summary" },
        failed ? h("li", { class: "bad" }, "- WARNING: Failed to place all allocations.")
          : h("li", { class: "ok" }, "- All tasks successfully allocated."),
        updates.map(([group, u]) => {
          const parts = Object.entries(words).filter(([k]) => u[k]).map(([k, w]) => `${u[k]} ${w}`);
          return h("li", null, `  Task group "${group}": ${parts.length ? parts.join(", ") : "no changes"}`);
        })),
      failed ? placementFailures(failed) : null,
      answer.Warnings ? h("p", { class: "muted" }, answer.Warnings) : null,
      h("p", { class: "muted" }, answer.JobModifyIndex
        ? `The job exists (modify index ${answer.JobModifyIndex}): Run updates it as the diff below says.`
        : "The job is new here."),
      h("h3", null, "Changes"),
      diffView(answer.Diff, { label: "Plan diff" }));
  };

  const plan = async () => {
    const text = textarea.value;
    if (!text.trim()) { showProblems([{ line: null, message: "The editor is empty: paste a job file or open one." }]); return; }
    planButton.disabled = true;
    planned = null;
    stale();
    replace(result, h("p", { class: "muted" }, "Planning…"));
    try {
      const job = await parse(text);
      if (!job) { replace(result); return; }
      showProblems([]);
      let answer;
      try {
        answer = await api.put(jobApi(job.ID, job.Namespace, "/plan"), { Job: job, Diff: true }, { signal: ctx.signal });
      } catch (err) {
        if (err instanceof ApiError && err.status === 400) {
          showProblems(parseProblems(err.message));
          replace(result);
          return;
        }
        throw err;
      }
      planned = { text, job };
      drawPlan(job, answer);
      stale();
    } catch (err) {
      if (err.name === "AbortError") return;
      replace(result, errorBox(err));
    } finally {
      planButton.disabled = false;
    }
  };

  const run = async () => {
    if (!planned || planned.text !== textarea.value) return;
    const { job } = planned;
    if (!await confirmAction({ title: `Run job ${job.ID}?`, body: "The job is registered as planned; its allocations start on this node's clients.",
      confirm: "Run" })) return;
    try {
      const answer = await api.post(`/v1/jobs?namespace=${encodeURIComponent(job.Namespace || "default")}`, { Job: job });
      toast(answer.Warnings ? `Registered ${job.ID}: ${answer.Warnings}` : `Registered ${job.ID}`, answer.Warnings ? "info" : "ok");
      navigate(jobPath(job.ID, job.Namespace));
    } catch (err) {
      failureToast("Run", err);
    }
  };

  planButton.addEventListener("click", plan);
  runButton.addEventListener("click", run);
  drawGutter();
}
