// /ui/allocations/:id and /ui/allocations/:id/:task — one allocation: its header (job, group,
// node, statuses), preemption and reschedule links, every task with its full event history
// (newest first, as Nomad's UI lists it), resource usage charts and the actions.
//
// Live: the allocation is read again on each Allocation event keyed by it and on each Task
// event of it (yurt publishes both: `AllocationUpdated` carries the client view, `TaskEvent`
// one event as it happens). Resource usage has no event, so it is polled every 5 s (the UI's
// floor), only while this page is shown, and the samples (~10 minutes per task) live in this
// module's closure: leaving the page drops them. With `:task`, only that task is shown, with a
// link back to the whole allocation.

import { api, badge, confirmAction, emptyState, errorBox, failureToast, h, link, relative, replace, shortId, timeEl, toDate, toast, jobHref as jobPage, markStale } from "../lib.js";
import { drawUsage, usageTracker } from "./alloc_usage.js";
import { buttonCache, keepFocus } from "./alloc_widgets.js";

const SIGNALS = ["SIGHUP", "SIGINT", "SIGTERM", "SIGUSR1", "SIGUSR2", "SIGKILL"];
const STATS_EVERY_MS = 5000;

const allocHref = (id) => `/ui/allocations/${encodeURIComponent(id)}`;

function jobHref(alloc) {
  return jobPage(alloc.JobID, alloc.Namespace);
}

/** A dl of [label, value] pairs, skipping those whose value is null. */
function kv(pairs, cls = "kv") {
  return h("dl", { class: cls }, pairs.filter((p) => p[1] !== null && p[1] !== undefined)
    .map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
}

function relatedLinks(alloc) {
  const rows = [];
  if (alloc.PreviousAllocation) rows.push(["Rescheduled from", shortId(alloc.PreviousAllocation, allocHref(alloc.PreviousAllocation))]);
  if (alloc.NextAllocation) rows.push(["Rescheduled to", shortId(alloc.NextAllocation, allocHref(alloc.NextAllocation))]);
  if (alloc.PreemptedByAllocation) rows.push(["Preempted by", shortId(alloc.PreemptedByAllocation, allocHref(alloc.PreemptedByAllocation))]);
  if (alloc.PreemptedAllocations && alloc.PreemptedAllocations.length) {
    rows.push(["Preempted", h("span", { class: "id-list" }, alloc.PreemptedAllocations.map((id) => shortId(id, allocHref(id))))]);
  }
  const tracked = (alloc.RescheduleTracker && alloc.RescheduleTracker.Events) || [];
  const section = [];
  if (rows.length) section.push(kv(rows));
  if (tracked.length) {
    section.push(h("h3", null, "Reschedule attempts"), h("ol", { class: "reschedules" },
      [...tracked].reverse().map((ev) => h("li", null, timeEl(ev.RescheduleTime), " from ",
        shortId(ev.PrevAllocID, allocHref(ev.PrevAllocID)),
        ev.PrevNodeID ? [" on node ", shortId(ev.PrevNodeID, `/ui/clients/${encodeURIComponent(ev.PrevNodeID)}`)] : null,
        ev.Delay ? h("span", { class: "muted" }, ` (after ${Math.round(ev.Delay / 1e9)}s)`) : null))));
  }
  return section.length ? [h("h2", null, "Related allocations"), ...section] : [];
}

/** An event's clock time (to the second, with the date when not today), relative on hover.
 * Not a <time datetime>: lib.js rewrites those as relative every 5 s, and events a few
 * milliseconds apart would all read "just now". */
function clockEl(value) {
  const d = toDate(value);
  if (!d) return h("span", { class: "muted" }, "–");
  const today = d.toDateString() === new Date().toDateString();
  const text = (today ? "" : d.toLocaleDateString() + " ") + d.toLocaleTimeString();
  return h("span", { class: "clock", title: `${d.toLocaleString()} (${relative(d)})` }, text);
}

/** Nomad's API signal puts the signal in Details only (its message reads "Task being sent a
 * signal"): named beside the message, so a person sees which one was sent. */
function detailNote(ev) {
  const sig = ev.Details && ev.Details.signal;
  const msg = ev.DisplayMessage || "";
  return sig && !msg.includes(sig) && ev.Type === "Signaling" ? h("span", { class: "muted" }, ` (${sig})`) : null;
}

/** The task's events, newest first: time, Type, DisplayMessage (Nomad's UI columns). */
function eventList(state) {
  // Reversed first: the sort is stable, so events of the same instant stay newest first.
  const evs = [...(state.Events || [])].reverse().sort((a, b) => (b.Time || 0) - (a.Time || 0));
  if (!evs.length) return h("p", { class: "muted" }, "No events yet: the task has not been set up.");
  return h("ol", { class: "events task-events", reversed: true }, evs.map((ev) =>
    h("li", { "data-event-type": ev.Type },
      h("span", { class: "etime" }, clockEl(ev.Time)),
      h("span", { class: "etype" }, ev.Type),
      h("span", { class: "emsg" }, ev.DisplayMessage || ev.Message || h("span", { class: "muted" }, "no message"),
        detailNote(ev)))));
}

async function act(label, fn, refresh) {
  try {
    await fn();
  } catch (err) {
    failureToast(label, err);
    return;
  }
  toast(label, "ok");
  await refresh().catch((err) => { if (err.name !== "AbortError") markStale(err); });
}

function signalPicker() {
  const select = h("select", { "aria-label": "Signal", name: "signal", "data-role": "signal" },
    SIGNALS.map((s) => h("option", { value: s }, s)));
  return { select, extra: h("label", { class: "field" }, "Signal ", select) };
}

export default async function mount(view, params, ctx) {
  const id = params.id;
  const onlyTask = params.task || null;
  ctx.title(`Allocation ${id.slice(0, 8)}`);
  const header = h("div", { id: "alloc-header" });
  const actions = h("div", { class: "actions", id: "alloc-actions" });
  const related = h("div", { id: "alloc-related" });
  const tasks = h("div", { id: "alloc-tasks" });
  const usage = h("section", { id: "alloc-usage", "aria-label": "Resource usage" });
  replace(view, header, actions, related, tasks, usage);

  let alloc = null;
  let node = null; // for CPU MHz (cpu.frequency): read once, best effort
  const tracker = usageTracker();
  // Tasks whose Events list the person folded: kept folded across the redraws events cause.
  const folded = new Set();
  const button = buttonCache();

  const post = (path, body) => api.post(path, body, { signal: ctx.signal });
  const refresh = () => load();

  const restartAlloc = async () => {
    if (await confirmAction({ title: "Restart allocation", body: `Restart the running tasks of ${alloc.Name}? They are stopped and started again in place.`, confirm: "Restart" })) {
      await act("Allocation restarting", () => post(`/v1/client/allocation/${alloc.ID}/restart`, {}), refresh);
    }
  };
  const restartAll = async () => {
    if (await confirmAction({ title: "Restart all tasks", body: `Restart every task of ${alloc.Name}, prestart and poststart ones included (Nomad's AllTasks)?`, confirm: "Restart all" })) {
      await act("All tasks restarting", () => post(`/v1/client/allocation/${alloc.ID}/restart`, { AllTasks: true }), refresh);
    }
  };
  const restartTask = async (task) => {
    if (await confirmAction({ title: `Restart task ${task}`, body: `Restart the task ${task} of ${alloc.Name}?`, confirm: "Restart task" })) {
      await act(`Task ${task} restarting`, () => post(`/v1/client/allocation/${alloc.ID}/restart`, { TaskName: task }), refresh);
    }
  };
  const signal = async (task) => {
    const picker = signalPicker();
    const what = task ? `the task ${task}` : `every running task of ${alloc.Name}`;
    if (await confirmAction({ title: task ? `Signal task ${task}` : "Signal allocation", body: `Send a signal to ${what}.`, confirm: "Send signal", extra: picker.extra })) {
      const sig = picker.select.value;
      await act(`${sig} sent`, () => post(`/v1/client/allocation/${alloc.ID}/signal`, task ? { Signal: sig, Task: task } : { Signal: sig }), refresh);
    }
  };
  const stop = async () => {
    if (await confirmAction({ title: "Stop allocation", body: `Stop ${alloc.Name}? The scheduler places a replacement if the job still wants one.`, confirm: "Stop", danger: true })) {
      await act("Allocation stopping", () => post(`/v1/allocation/${alloc.ID}/stop`, {}), refresh);
    }
  };

  const drawHeader = () => {
    const terminal = ["complete", "failed", "lost"].includes(alloc.ClientStatus) || alloc.DesiredStatus !== "run";
    replace(header,
      h("div", { class: "crumbs" }, link("/ui/jobs", "Jobs"), " / ", link(jobHref(alloc), alloc.JobID), " / ",
        alloc.TaskGroup, onlyTask ? [" / ", link(allocHref(alloc.ID), alloc.ID.slice(0, 8))] : null),
      h("h1", null, h("span", { class: "alloc-name" }, alloc.Name), badge(alloc.ClientStatus), shortId(alloc.ID)),
      kv([
        ["Job", link(jobHref(alloc), alloc.JobID)],
        ["Task group", alloc.TaskGroup],
        ["Node", alloc.NodeID ? h("span", null, link(`/ui/clients/${encodeURIComponent(alloc.NodeID)}`, alloc.NodeName || alloc.NodeID.slice(0, 8)), " ", shortId(alloc.NodeID)) : null],
        ["Client status", h("span", null, badge(alloc.ClientStatus), alloc.ClientDescription ? h("span", { class: "muted" }, " ", alloc.ClientDescription) : null)],
        ["Desired", h("span", null, alloc.DesiredStatus, alloc.DesiredDescription ? h("span", { class: "muted" }, ` — ${alloc.DesiredDescription}`) : null)],
        ["Created", timeEl(alloc.CreateTime)],
        ["Modified", timeEl(alloc.ModifyTime)],
      ], "kv facts header-facts"));
    replace(actions,
      button("restart", { "data-action": "restart", onclick: restartAlloc, disabled: terminal, label: "Restart" }),
      button("restart-all", { "data-action": "restart-all", onclick: restartAll, disabled: terminal, label: "Restart all tasks" }),
      button("signal", { "data-action": "signal", onclick: () => signal(null), disabled: terminal, label: "Signal" }),
      button("stop", { class: "danger", "data-action": "stop", onclick: stop, disabled: alloc.DesiredStatus !== "run", label: "Stop" }));
    replace(related, ...relatedLinks(alloc));
  };

  const drawTasks = () => {
    const states = alloc.TaskStates || {};
    const lifecycles = (alloc.AllocatedResources && alloc.AllocatedResources.TaskLifecycles) || {};
    // In the order they run, as Nomad's UI lists them: prestart, main, poststart, poststop.
    const stage = (n) => ({ prestart: 0, poststart: 2, poststop: 3 }[(lifecycles[n] || {}).Hook] ?? 1);
    const byStage = (a, b) => stage(a) - stage(b) || a.localeCompare(b);
    let names = Object.keys(states).sort(byStage);
    if (!names.length) names = Object.keys(lifecycles).sort(byStage);
    if (onlyTask) names = names.filter((n) => n === onlyTask);
    if (!names.length) {
      replace(tasks, h("h2", null, "Tasks"), onlyTask
        ? emptyState(`No task ${onlyTask} in this allocation`, h("p", null, link(allocHref(alloc.ID), "See all its tasks"), "."))
        : emptyState("No task has started yet", h("p", null, "The client has not picked this allocation up; its tasks appear here as they are set up.")));
      return;
    }
    replace(tasks, h("h2", null, onlyTask ? `Task ${onlyTask}` : "Tasks",
      onlyTask ? h("a", { href: allocHref(alloc.ID), class: "button small" }, "All tasks") : null),
    names.map((name) => {
      const st = states[name] || { State: "pending", Events: [] };
      const hook = lifecycles[name];
      const base = `${allocHref(alloc.ID)}/${encodeURIComponent(name)}`;
      return h("section", { class: "task card", "data-task": name, id: `task-${name}` },
        h("h3", null, onlyTask ? name : link(base, name), badge(st.State), st.Failed ? badge("failed") : null,
          h("span", { class: "spacer" }),
          h("a", { href: `${base}/logs`, class: "button small", "data-action": "logs" }, "Logs"),
          button(`restart-task:${name}`, { class: "small", "data-action": "restart-task", onclick: () => restartTask(name),
            disabled: st.State !== "running", label: "Restart" }),
          button(`signal-task:${name}`, { class: "small", "data-action": "signal-task", onclick: () => signal(name),
            disabled: st.State !== "running", label: "Signal" })),
        kv([
          ["Lifecycle", hook ? `${hook.Hook}${hook.Sidecar ? " (sidecar)" : ""}` : "main"],
          ["Restarts", String(st.Restarts || 0)],
          ["Last restart", toDate(st.LastRestart) ? timeEl(st.LastRestart) : null],
          ["Started", timeEl(st.StartedAt)],
          ["Finished", toDate(st.FinishedAt) ? timeEl(st.FinishedAt) : null],
        ], "kv facts"),
        h("details", { class: "task-history", open: !folded.has(name), "data-fold": name,
          ontoggle: (e) => { if (e.target.open) folded.delete(name); else folded.add(name); } },
          h("summary", null, `Events (${(st.Events || []).length})`),
          eventList(st)));
    }));
  };

  // An action's own refresh may run beside a live one: only the latest read is drawn, so an
  // older answer never overwrites a newer one.
  let reads = 0;
  const load = async () => {
    const mine = ++reads;
    try {
      const fetched = await api.get(`/v1/allocation/${encodeURIComponent(id)}`, { signal: ctx.signal });
      if (mine !== reads) return;
      alloc = fetched;
    } catch (err) {
      if (err.name === "AbortError") throw err;
      if (!alloc) {
        replace(header, h("h1", null, `Allocation ${id.slice(0, 8)}`), err.status === 404
          ? emptyState("No such allocation", h("p", null, "It may have been garbage collected. ", link("/ui/jobs", "See the jobs"), "."))
          : errorBox(err));
      } else throw err;
      return;
    }
    ctx.title(`${alloc.Name} · allocation`);
    keepFocus(() => { drawHeader(); drawTasks(); });
  };

  let polling = false; // a slow answer never overlaps the next tick
  const pollStats = async () => {
    if (!alloc || ctx.signal.aborted || polling) return;
    if (["complete", "failed", "lost"].includes(alloc.ClientStatus)) {
      // Nothing runs any more: no usage to read. The samples kept stay drawn.
      if (!tracker.tasks.size) replace(usage, h("h2", null, "Resource usage"),
        h("p", { class: "muted" }, "The allocation is no longer running: no usage to show."));
      return;
    }
    polling = true;
    try { await readStats(); } finally { polling = false; }
  };
  const readStats = async () => {
    if (node === null && alloc.NodeID) {
      node = await api.get(`/v1/node/${encodeURIComponent(alloc.NodeID)}`, { signal: ctx.signal }).catch(() => ({}));
    }
    try {
      const stats = await api.get(`/v1/client/allocation/${encodeURIComponent(alloc.ID)}/stats`, { signal: ctx.signal });
      tracker.add(stats);
      drawUsage(usage, tracker, { alloc, onlyTask, node });
    } catch (err) {
      if (err.name === "AbortError") return;
      drawUsage(usage, tracker, { alloc, onlyTask, node, error: err });
    }
  };

  await ctx.live((e) => (e.Topic === "Allocation" || e.Topic === "Task") && (e.Key === id || e.Key === alloc?.ID), load);
  if (onlyTask) document.getElementById(`task-${onlyTask}`)?.scrollIntoView({ block: "start" });
  if (alloc) {
    drawUsage(usage, tracker, { alloc, onlyTask, node });
    pollStats();
    const timer = setInterval(pollStats, STATS_EVERY_MS);
    ctx.signal.addEventListener("abort", () => clearInterval(timer));
  }
}
