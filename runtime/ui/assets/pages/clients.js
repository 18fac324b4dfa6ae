// /ui/clients — every node: name, short ID, status, eligibility, drain, datacenter, class, a
// summary of its drivers (healthy of detected) and how many allocations it runs. Read again on
// each Node event (a node's status, drain or eligibility changed) and each Allocation event
// (the counts moved); the two reads run side by side. A token that may not read allocations
// sees the nodes without their counts.

import { api, badge, emptyState, errorBox, h, link, replace, shortId, table } from "../lib.js";
import { driversSummary, isLive, nodeHref } from "./node_common.js";

export default async function mount(view, params, ctx) {
  ctx.title("Clients");
  const body = h("div", { id: "clients-list" });
  replace(view, h("h1", null, "Clients"), body);

  let drawn = false;
  await ctx.live((e) => e.Topic === "Node" || e.Topic === "Allocation", async () => {
    let nodes, allocs;
    try {
      [nodes, allocs] = await Promise.all([
        api.get("/v1/nodes", { signal: ctx.signal }),
        // A token that reads nodes but no namespace's allocations still sees the nodes.
        api.get("/v1/allocations?task_states=false&namespace=*", { signal: ctx.signal })
          .catch((err) => { if (err.forbidden) return null; throw err; }),
      ]);
    } catch (err) {
      if (err.name === "AbortError" || drawn) throw err; // a list drawn before stays
      replace(body, errorBox(err));
      return;
    }
    const running = new Map();
    for (const a of allocs || []) if (isLive(a)) running.set(a.NodeID, (running.get(a.NodeID) || 0) + 1);
    nodes.sort((a, b) => (a.Name || "").localeCompare(b.Name || "") || a.ID.localeCompare(b.ID));
    replace(body, table([
      { label: "Name", cell: (n) => link(nodeHref(n.ID), n.Name || n.ID.slice(0, 8)) },
      { label: "ID", cell: (n) => shortId(n.ID, nodeHref(n.ID)), narrow: false },
      { label: "Status", cell: (n) => badge(n.Status) },
      { label: "Eligibility", cell: (n) => badge(n.SchedulingEligibility) },
      { label: "Drain", cell: (n) => n.Drain ? badge("draining") : h("span", { class: "muted" }, "no"), narrow: false },
      { label: "Allocations", cell: (n) => allocs ? String(running.get(n.ID) || 0)
        : h("span", { class: "muted", title: "This tab's token may not read allocations" }, "–") },
      { label: "Drivers", cell: (n) => driversSummary(n.Drivers), narrow: false },
      { label: "Datacenter", cell: (n) => n.Datacenter, narrow: false },
      { label: "Class", cell: (n) => n.NodeClass || h("span", { class: "muted" }, "–"), narrow: false },
    ], nodes, {
      empty: emptyState("No client has registered",
        h("p", null, "Start one: ", h("code", null, "yurt agent"), ", or join a node to this server with ",
          h("code", null, "yurt agent --servers ADDRESS"), ".")),
      rowAttrs: (n) => ({ "data-node": n.ID }),
    }));
    drawn = true;
  });
}
