// /ui/clients/:id — one node: status, eligibility and drain with their actions, the attributes
// a person looks for (CPU, memory, kernel, OS, addresses; the rest folded away), drivers and
// devices with their health, resources (reserved / allocated / total, and the host's own use
// from /v1/client/stats) and the allocations placed on it.
//
// Live: read again on each Node event keyed by this node and each Allocation event whose
// allocation is on it. The allocations are read as /v1/allocations' stubs (no task states,
// with their resources), not the node's whole allocations: the page shows none of the rest. The host's usage has no event: it is read with the node and again every
// 10 s while the page is shown (slower than the UI's 5 s floor: it moves slowly).

import { api, badge, bytes, confirmAction, emptyState, errorBox, failureToast, h, link, replace, shortId, table, timeEl, toast, jobHref as jobPage, markStale } from "../lib.js";
import { buttonCache, keepFocus } from "./alloc_widgets.js";
import { isLive } from "./node_common.js";

const HOST_STATS_EVERY_MS = 10000;
const INTERESTING = ["cpu.modelname", "cpu.numcores", "cpu.frequency", "cpu.totalcompute", "cpu.arch",
  "memory.totalbytes", "kernel.name", "kernel.version", "os.name", "os.version", "unique.hostname",
  "unique.network.ip-address", "nomad.advertise.address", "nomad.version"];

const allocHref = (id) => `/ui/allocations/${encodeURIComponent(id)}`;

function kv(pairs, cls = "kv") {
  return h("dl", { class: cls }, pairs.filter((p) => p[1] !== null && p[1] !== undefined && p[1] !== "")
    .map(([k, v]) => h("div", null, h("dt", null, k), h("dd", null, v))));
}

/** "1h30m", "45m", "90s", "2h" → nanoseconds; "" or "0" → 0 (no deadline); null if unreadable. */
export function parseDeadline(text) {
  const t = text.trim();
  if (t === "" || t === "0") return 0;
  const re = /(\d+(?:\.\d+)?)(h|m|s)/gy;
  const unit = { h: 3600, m: 60, s: 1 };
  let total = 0, m, end = 0;
  while ((m = re.exec(t))) { total += parseFloat(m[1]) * unit[m[2]]; end = re.lastIndex; }
  if (end !== t.length || total <= 0) return null;
  return Math.round(total * 1e9);
}

function jobHref(a) {
  return jobPage(a.JobID, a.Namespace);
}

/** CPU MHz and memory MB an allocation holds, whichever shape it is answered in. */
function held(alloc) {
  let cpu = 0, mem = 0, disk = 0;
  const tasks = (alloc.AllocatedResources && alloc.AllocatedResources.Tasks) || null;
  if (tasks) {
    for (const t of Object.values(tasks)) { cpu += (t.Cpu && t.Cpu.CpuShares) || 0; mem += (t.Memory && t.Memory.MemoryMB) || 0; }
    disk = (alloc.AllocatedResources.Shared && alloc.AllocatedResources.Shared.DiskMB) || 0;
  } else {
    for (const t of Object.values(alloc.TaskResources || {})) { cpu += t.CpuShares || 0; mem += t.MemoryMB || 0; }
  }
  return { cpu, mem, disk };
}

function meter(label, used, total, fmt) {
  const pct = total ? Math.min(100, (100 * used) / total) : 0;
  const bar = h("div", { class: "meter-bar" });
  bar.style.width = `${pct.toFixed(1)}%`;
  return h("div", { class: "card meter", "data-resource": label.toLowerCase() },
    h("div", { class: "label" }, label),
    h("div", { class: "value" }, total ? `${fmt(used)} of ${fmt(total)}` : fmt(used)),
    h("div", { class: "meter-track", role: "img", "aria-label": `${label}: ${pct.toFixed(0)}%` }, bar));
}

export default async function mount(view, params, ctx) {
  const id = params.id;
  ctx.title(`Client ${id.slice(0, 8)}`);
  const header = h("div", { id: "node-header" });
  const actions = h("div", { class: "actions", id: "node-actions" });
  const resources = h("section", { id: "node-resources" });
  const drivers = h("section", { id: "node-drivers" });
  const devices = h("section", { id: "node-devices" });
  const allocsEl = h("section", { id: "node-allocations" });
  const attrs = h("section", { id: "node-attributes" });
  const events = h("section", { id: "node-events" });
  replace(view, header, actions, resources, allocsEl, drivers, devices, attrs, events);

  let node = null, allocs = [], host = null;
  // Whether "All N attributes" is unfolded: kept across the redraws each event causes.
  let allAttrsOpen = false;
  const button = buttonCache();

  const put = (path, body) => api.put(path, body, { signal: ctx.signal });
  const run = async (label, fn) => {
    try { await fn(); } catch (err) {
      failureToast(label, err);
      return;
    }
    toast(label, "ok");
    await load().catch((err) => { if (err.name !== "AbortError") markStale(err); });
  };

  const drain = async () => {
    const deadline = h("input", { type: "text", name: "deadline", value: "1h", id: "drain-deadline",
      "aria-describedby": "drain-deadline-help", autocomplete: "off" });
    const ignoreSystem = h("input", { type: "checkbox", name: "ignore-system", id: "drain-ignore-system" });
    const problem = h("p", { class: "problems", role: "alert" });
    const extra = h("div", { class: "drain-form" },
      h("label", { class: "field", for: "drain-deadline" }, "Deadline", deadline),
      h("p", { class: "muted small", id: "drain-deadline-help" },
        "How long allocations may take to move (1h, 30m, 90s). 0: no deadline. After it, the rest are stopped."),
      h("label", { class: "field", for: "drain-ignore-system" }, ignoreSystem, "Leave system jobs running"),
      problem);
    for (;;) {
      if (!await confirmAction({ title: `Drain ${node.Name}`, body: "Marks the node ineligible and moves its allocations elsewhere.",
        confirm: "Drain", danger: true, extra })) return;
      const ns = parseDeadline(deadline.value);
      if (ns !== null) {
        await run("Drain started", () => put(`/v1/node/${node.ID}/drain`,
          { DrainSpec: { Deadline: ns, IgnoreSystemJobs: ignoreSystem.checked }, MarkEligible: false }));
        return;
      }
      replace(problem, `"${deadline.value}" is not a duration such as 1h, 30m or 90s.`);
    }
  };
  const cancelDrain = async () => {
    if (await confirmAction({ title: "Cancel the drain", body: `Stop draining ${node.Name}? It stays ineligible until you make it eligible.`, confirm: "Cancel drain" })) {
      await run("Drain cancelled", () => put(`/v1/node/${node.ID}/drain`, { DrainSpec: null, MarkEligible: false }));
    }
  };
  const toggleEligibility = async () => {
    const to = node.SchedulingEligibility === "eligible" ? "ineligible" : "eligible";
    if (await confirmAction({ title: `Make ${node.Name} ${to}`, body: to === "ineligible"
      ? "No new allocation is placed on it; those running stay." : "New allocations may be placed on it again.",
    confirm: `Make ${to}` })) {
      await run(`Node is ${to}`, () => put(`/v1/node/${node.ID}/eligibility`, { NodeID: node.ID, Eligibility: to }));
    }
  };

  const drawHeader = () => {
    const ds = node.DrainStrategy;
    replace(header,
      h("div", { class: "crumbs" }, link("/ui/clients", "Clients")),
      h("h1", null, node.Name || node.ID.slice(0, 8), badge(node.Status), badge(node.SchedulingEligibility),
        ds ? badge("draining") : null, shortId(node.ID)),
      kv([
        ["Datacenter", node.Datacenter], ["Class", node.NodeClass || "–"], ["Pool", node.NodePool],
        ["Address", node.HTTPAddr], ["Version", node.Attributes && node.Attributes["nomad.version"]],
        ["Status", node.StatusDescription || null],
        ["Drain deadline", ds ? (ds.Deadline > 0 ? timeEl(ds.ForceDeadline) : ds.Deadline < 0 ? "forced" : "none") : null],
        ["Drain started", ds && ds.StartedAt ? timeEl(ds.StartedAt) : null],
        ["Last drain", !ds && node.LastDrain ? h("span", null, node.LastDrain.Status, " ", timeEl(node.LastDrain.UpdatedAt)) : null],
      ], "kv facts header-facts"));
    replace(actions,
      ds ? button("cancel-drain", { "data-action": "cancel-drain", onclick: cancelDrain, label: "Cancel drain" })
        : button("drain", { class: "danger", "data-action": "drain", onclick: drain, label: "Drain" }),
      button("eligibility", { "data-action": "eligibility", onclick: toggleEligibility,
        label: node.SchedulingEligibility === "eligible" ? "Make ineligible" : "Make eligible" }));
  };

  const drawResources = () => {
    const nr = node.NodeResources || {}, rr = node.ReservedResources || {};
    const live = allocs.filter(isLive).map(held);
    const sum = (k) => live.reduce((t, x) => t + x[k], 0);
    const cpuTotal = (nr.Cpu && nr.Cpu.CpuShares) || 0, memTotal = (nr.Memory && nr.Memory.MemoryMB) || 0;
    const diskTotal = (nr.Disk && nr.Disk.DiskMB) || 0;
    const cpuRes = (rr.Cpu && rr.Cpu.CpuShares) || 0, memRes = (rr.Memory && rr.Memory.MemoryMB) || 0;
    const diskRes = (rr.Disk && rr.Disk.DiskMB) || 0;
    const mhz = (v) => `${Math.round(v)} MHz`, mb = (v) => bytes(v * 1048576);
    const hostCards = [];
    if (host && host.Memory) hostCards.push(meter("Host memory used", host.Memory.Used, host.Memory.Total, bytes));
    for (const d of (host && host.DiskStats) || []) hostCards.push(meter(`Disk at ${d.Mountpoint}`, d.Used, d.Size, bytes));
    replace(resources, h("h2", null, "Resources"),
      h("div", { class: "grid" },
        meter("CPU allocated", sum("cpu"), cpuTotal - cpuRes, mhz),
        meter("Memory allocated", sum("mem"), memTotal - memRes, mb),
        meter("Disk allocated", sum("disk"), diskTotal - diskRes, mb),
        ...hostCards),
      h("p", { class: "muted small" }, `Reserved for the system: ${mhz(cpuRes)} CPU, ${mb(memRes)} memory, ${mb(diskRes)} disk. `,
        `Totals: ${mhz(cpuTotal)}, ${mb(memTotal)}, ${mb(diskTotal)}.`));
  };

  const drawDrivers = () => {
    const names = Object.keys(node.Drivers || {}).sort();
    replace(drivers, h("h2", null, "Drivers"), table([
      { label: "Driver", cell: (d) => d },
      { label: "Detected", cell: (d) => node.Drivers[d].Detected ? "yes" : h("span", { class: "muted" }, "no") },
      { label: "Health", cell: (d) => badge(!node.Drivers[d].Detected ? "other" : node.Drivers[d].Healthy ? "healthy" : "unhealthy") },
      { label: "Description", cell: (d) => node.Drivers[d].HealthDescription || "–", class: "wrap" },
      { label: "Updated", cell: (d) => timeEl(node.Drivers[d].UpdateTime), narrow: false },
    ], names, { empty: emptyState("No driver fingerprinted", h("p", null, "Check the agent's log and its plugin configuration.")),
      rowAttrs: (d) => ({ "data-driver": d }) }));
  };

  const drawDevices = () => {
    const groups = (node.NodeResources && node.NodeResources.Devices) || [];
    const rows = [];
    for (const g of groups) for (const inst of g.Instances || []) rows.push({ g, inst });
    replace(devices, h("h2", null, "Devices"), table([
      { label: "Device", cell: (r) => `${r.g.Vendor}/${r.g.Type}/${r.g.Name}` },
      { label: "Instance", cell: (r) => h("span", { class: "id" }, r.inst.ID) },
      { label: "Health", cell: (r) => badge(r.inst.Healthy ? "healthy" : "unhealthy") },
      { label: "Description", cell: (r) => r.inst.HealthDescription || "–", class: "wrap" },
    ], rows, { empty: h("p", { class: "muted" }, "No device plugin reports a device on this node.") }));
  };

  const drawAllocs = () => {
    const shown = [...allocs].sort((a, b) => (b.CreateIndex || 0) - (a.CreateIndex || 0));
    replace(allocsEl, h("h2", null, `Allocations (${allocs.filter(isLive).length} running)`), table([
      // On a phone: ID, status and name fit the width (the status is what a person looks for,
      // so it comes before the long name); the rest is on the allocation's page.
      { label: "ID", cell: (a) => shortId(a.ID, allocHref(a.ID)) },
      { label: "Status", cell: (a) => badge(a.ClientStatus) },
      { label: "Name", cell: (a) => link(allocHref(a.ID), a.Name) },
      { label: "Job", cell: (a) => link(jobHref(a), a.JobID), narrow: false },
      { label: "Desired", cell: (a) => a.DesiredStatus, narrow: false },
      { label: "Created", cell: (a) => timeEl(a.CreateTime), narrow: false },
      { label: "Modified", cell: (a) => timeEl(a.ModifyTime), narrow: false },
    ], shown, { empty: emptyState("Nothing placed here", h("p", null, "Run a job: ", link("/ui/jobs/run", "paste a job file"), ".")),
      rowAttrs: (a) => ({ "data-alloc": a.ID }) }));
  };

  const drawAttrs = () => {
    const all = node.Attributes || {};
    const meta = node.Meta || {};
    replace(attrs, h("h2", null, "Attributes"),
      kv(INTERESTING.filter((k) => all[k]).map((k) => [k, k === "memory.totalbytes" ? bytes(+all[k]) : all[k]]), "kv attrs"),
      h("details", { open: allAttrsOpen, "data-fold": "attributes",
        ontoggle: (e) => { allAttrsOpen = e.target.open; } },
      h("summary", null, `All ${Object.keys(all).length} attributes`),
        kv(Object.keys(all).sort().map((k) => [k, all[k]]), "kv attrs")),
      Object.keys(meta).length ? [h("h3", null, "Meta"), kv(Object.keys(meta).sort().map((k) => [k, meta[k]]), "kv attrs")] : null);
    const evs = [...(node.Events || [])].reverse();
    replace(events, evs.length ? [h("h2", null, "Node events"), h("ol", { class: "events node-events" },
      evs.map((e) => h("li", null, h("span", { class: "etime" }, timeEl(e.Timestamp)), h("span", { class: "etype" }, e.Subsystem || ""),
        h("span", { class: "emsg" }, e.Message))))] : null);
  };

  const readHost = async () => {
    try {
      host = await api.get(`/v1/client/stats?node_id=${encodeURIComponent(node.ID)}`, { signal: ctx.signal });
    } catch (err) {
      if (err.name === "AbortError") throw err;
      host = null; // a node whose agent cannot answer: its usage is left out
    }
  };

  // An action's own refresh may run beside a live one: only the latest read is drawn.
  let reads = 0;
  const load = async () => {
    const mine = ++reads;
    try {
      const [n, a] = await Promise.all([
        api.get(`/v1/node/${encodeURIComponent(id)}`, { signal: ctx.signal }),
        // Stubs with their resources and without task states (a quarter of the node's whole
        // allocations, which this reads again on each of their events), kept to this node's.
        api.get("/v1/allocations?namespace=*&task_states=false&resources=true", { signal: ctx.signal }),
      ]);
      if (mine !== reads) return;
      node = n; allocs = (a || []).filter((x) => x.NodeID === n.ID);
    } catch (err) {
      if (err.name === "AbortError") throw err;
      if (!node) {
        replace(header, h("div", { class: "crumbs" }, link("/ui/clients", "Clients")), h("h1", null, `Client ${id.slice(0, 8)}`),
          err.status === 404 ? emptyState("No such client", h("p", null, link("/ui/clients", "See the clients"), ".")) : errorBox(err));
      } else throw err;
      return;
    }
    if (host === null) await readHost();
    ctx.title(`${node.Name} · client`);
    keepFocus(() => { drawHeader(); drawResources(); drawAllocs(); drawDrivers(); drawDevices(); drawAttrs(); });
  };

  await ctx.live((e) => (e.Topic === "Node" && (e.Key === id || e.Key === node?.ID)) ||
    (e.Topic === "Allocation" && node !== null && e.Payload && e.Payload.Allocation && e.Payload.Allocation.NodeID === node.ID), load);
  if (node) {
    const timer = setInterval(async () => {
      try { await readHost(); drawResources(); } catch { /* aborted */ }
    }, HOST_STATS_EVERY_MS);
    ctx.signal.addEventListener("abort", () => clearInterval(timer));
  }
}
