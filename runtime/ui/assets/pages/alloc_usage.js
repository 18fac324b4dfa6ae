// The allocation page's resource usage: samples of /v1/client/allocation/:id/stats kept in
// memory (the last ~10 minutes per task, bounded: at one sample per 5 s, 120 of them) and drawn
// as CPU and memory sparklines with the current values, plus device stats when a task holds
// devices.
//
// CPU is answered as Nomad's collector does (runtime/client/taskusage.py): `Percent` of one core and
// `TotalTicks` in MHz, over the task's whole process tree, measured between the agent's readings
// (the first one is the average since the task started).

import { bytes, h, replace } from "../lib.js";
import { sparkline } from "../sparkline.js";

const KEEP_MS = 10 * 60 * 1000;

export function usageTracker() {
  const tasks = new Map(); // name -> {samples: [{at, cpuPct, mhz, rss}], devices}
  return {
    tasks,
    add(stats) {
      const at = (stats.Timestamp || Date.now() * 1e6) / 1e6;
      for (const [name, t] of Object.entries(stats.Tasks || {})) {
        const usage = t.ResourceUsage || {};
        const cpu = usage.CpuStats || {};
        const mem = usage.MemoryStats || {};
        let entry = tasks.get(name);
        if (!entry) { entry = { samples: [], devices: [] }; tasks.set(name, entry); }
        entry.devices = usage.DeviceStats || [];
        const measured = (cpu.Measured || []).includes("Percent");
        const cpuPct = measured ? cpu.Percent || 0 : null;
        const mhz = measured ? cpu.TotalTicks || 0 : null;
        if (cpuPct !== null || entry.samples.length || mem.RSS) {
          entry.samples.push({ at, cpuPct, mhz, cores: cpuPct === null ? null : cpuPct / 100, rss: mem.RSS || 0 });
        }
        while (entry.samples.length && entry.samples[0].at < at - KEEP_MS) entry.samples.shift();
      }
    },
  };
}

function frequency(node) {
  const mhz = node && node.Attributes && parseFloat(node.Attributes["cpu.frequency"]);
  return mhz > 0 ? mhz : null;
}

function cpuText(sample, freq) {
  if (!sample || sample.cpuPct === null) return "measuring…";
  const mhz = sample.mhz !== null ? sample.mhz : freq ? sample.cores * freq : null;
  return `${mhz !== null ? `${Math.round(mhz)} MHz · ` : ""}${sample.cpuPct.toFixed(1)}% of a core`;
}

const STAT_VALUE_KEYS = ["IntNumeratorVal", "FloatNumeratorVal", "StringVal", "BoolVal", "Unit", "Desc"];

/** One instance's summary as text. Nomad answers a StatValue ({FloatNumeratorVal, Unit, …});
 * yurt's plugins answer a map of named numbers ({utilization_percent: 3, …}): both read. */
function summaryText(s) {
  if (!s || typeof s !== "object") return "–";
  if (STAT_VALUE_KEYS.some((k) => k in s)) {
    const num = s.IntNumeratorVal ?? s.FloatNumeratorVal;
    const den = s.IntDenominatorVal ?? s.FloatDenominatorVal;
    const value = num !== undefined && num !== null ? `${num}${den ? ` / ${den}` : ""}`
      : s.StringVal || (s.BoolVal !== undefined && s.BoolVal !== null ? String(s.BoolVal) : "–");
    return `${value}${s.Unit ? ` ${s.Unit}` : ""}${s.Desc ? ` (${s.Desc})` : ""}`;
  }
  const parts = Object.entries(s).map(([k, v]) => `${k.replace(/_/g, " ")}: ${typeof v === "number" ? +v.toFixed(2) : v}`);
  return parts.length ? parts.join(", ") : "–";
}

function deviceRows(devices) {
  const rows = [];
  for (const group of devices) {
    for (const [instance, stat] of Object.entries(group.InstanceStats || {})) {
      rows.push(h("li", { "data-device": instance }, h("span", { class: "id" }, `${group.Vendor}/${group.Type}/${group.Name}`), " ",
        h("span", { class: "id", title: instance }, instance), ": ", summaryText(stat && stat.Summary)));
    }
  }
  return rows;
}

/** Draws the usage section into `el` (one card per task, or only `onlyTask`). */
export function drawUsage(el, tracker, { alloc, onlyTask, node, error } = {}) {
  const reserved = (alloc && alloc.AllocatedResources && alloc.AllocatedResources.Tasks) || {};
  const freq = frequency(node);
  let names = [...tracker.tasks.keys()].sort();
  if (onlyTask) names = names.filter((n) => n === onlyTask);
  const cards = names.map((name) => {
    const entry = tracker.tasks.get(name);
    const samples = entry.samples;
    const lastCpu = [...samples].reverse().find((s) => s.cpuPct !== null);
    const last = samples[samples.length - 1];
    const devs = deviceRows(entry.devices);
    // Memory is drawn against the task's reservation, so a flat line reads as "how full".
    const memMB = (reserved[name] && reserved[name].Memory && reserved[name].Memory.MemoryMB) || 0;
    const minutes = samples.length > 1 ? Math.max(1, Math.round((last.at - samples[0].at) / 60000)) : 0;
    return h("div", { class: "card usage", "data-task": name },
      h("h3", null, name),
      h("div", { class: "usage-row" },
        h("div", { class: "label" }, "CPU"), h("div", { class: "value", "data-metric": "cpu" }, cpuText(lastCpu, freq)),
        sparkline(samples.map((s) => s.cpuPct || 0), { label: `CPU of ${name}` })),
      h("div", { class: "usage-row" },
        h("div", { class: "label" }, "Memory (RSS)"), h("div", { class: "value", "data-metric": "memory" }, last ? bytes(last.rss) : "–",
          memMB ? h("span", { class: "muted" }, ` of ${memMB} MiB reserved`) : null),
        sparkline(samples.map((s) => s.rss), { label: `Memory of ${name}`, max: memMB * 1048576 })),
      devs.length ? [h("div", { class: "label" }, "Devices"), h("ul", { class: "devices" }, devs)] : null,
      h("div", { class: "muted small" }, samples.length ? `last ${minutes || "<1"} min, every 5 s` : "no sample yet"));
  });
  replace(el, h("h2", null, "Resource usage"),
    error ? h("p", { class: "muted" }, `Usage is not available: ${error.message}`) : null,
    cards.length ? h("div", { class: "grid" }, cards)
      : error ? null : h("p", { class: "muted" }, "Waiting for the first sample…"));
}
