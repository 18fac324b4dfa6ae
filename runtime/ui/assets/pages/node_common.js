// Helpers shared by the clients list and a client's page: links, the drivers summary, and
// which allocations count as running on a node (not terminal on the client, still wanted).

import { h } from "../lib.js";

export const nodeHref = (id) => `/ui/clients/${encodeURIComponent(id)}`;

const TERMINAL = new Set(["complete", "failed", "lost"]);

/** An allocation that holds room on its node: not finished, and not being stopped. */
export function isLive(alloc) {
  return !TERMINAL.has(alloc.ClientStatus) && alloc.DesiredStatus === "run";
}

/** "raw_exec, docker (unhealthy)": detected drivers, the unhealthy ones marked. */
export function driversSummary(drivers) {
  const names = Object.keys(drivers || {}).filter((d) => drivers[d].Detected).sort();
  if (!names.length) return h("span", { class: "muted" }, "none detected");
  const healthy = names.filter((d) => drivers[d].Healthy).length;
  return h("span", { class: "drivers", title: `${healthy} of ${names.length} healthy` },
    names.map((d, i) => [i ? ", " : "", drivers[d].Healthy ? d : h("span", { class: "s-unhealthy" }, `${d} (unhealthy)`)]));
}
