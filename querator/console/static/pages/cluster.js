// The cluster as this node sees it: the members and their state, the ring's revision, which node owns
// each partition, this node's hand-offs by reason (from its /metrics) and its recent hand-offs (its own
// log, from cluster.info: the page asks the node that serves it, never the other members).
import { call, metrics } from "../api.js";
import { h, mount, number, route, time, errorBox, refreshKeepingFocus } from "../dom.js";

const REFRESH_MS = 3000;
// Partitions listed at most (a filter narrows them): thousands of rows would slow every refresh.
const MAX_ROWS = 2000;
const STATES = { serving: "serving", grace: "gone, in its grace period", joining: "joining" };
const DIRECTIONS = { given: "given to", taken: "taken from" };
const REASONS = { ring: "the ring changed", lease: "this node's lease was uncertain", fenced: "storage refused a write" };

export async function render(main, _params, ctx) {
  const body = h("div");
  const owners = h("div");
  const count = h("span", { class: "muted" });
  const problem = h("div");
  const filter = h("input", { type: "search", id: "owner-filter", placeholder: "part of a queue name", oninput: () => load() });
  mount(main, h("div", { class: "page-head" }, h("h1", {}, "Cluster")), problem, body,
    h("section", { "aria-labelledby": "s-owners" }, h("h2", { id: "s-owners" }, "Partition owners"),
      h("div", { class: "toolbar" }, h("label", { for: "owner-filter" }, "Queue "), filter, count), owners));

  async function load() {
    try {
      const [info, m] = await Promise.all([call("cluster.info", { queue_name: "", namespace: "" }), metrics().catch(() => null)]);
      const owned = new Map();
      for (const p of info.partitions || []) owned.set(p.owner, (owned.get(p.owner) || 0) + 1);
      const handOffs = (m?.querator_cluster_hand_offs_total || []).map((s) => `${s.labels.reason}: ${s.value}`).join(", ");
      const byQueue = new Map();
      const needle = filter.value.toLowerCase();
      const shown = (info.partitions || []).filter((p) => p.queue_name.toLowerCase().includes(needle));
      for (const p of shown.slice(0, MAX_ROWS)) {
        if (!byQueue.has(p.queue_name)) byQueue.set(p.queue_name, []);
        byQueue.get(p.queue_name).push(p);
      }
      refreshKeepingFocus(body, () => mount(body,
        h("dl", { class: "pairs" },
          h("dt", {}, "This node"), h("dd", { id: "this-node" }, info.node_id || "—"),
          h("dt", {}, "Ring revision"), h("dd", { id: "revision" }, String(info.revision || 0)),
          h("dt", {}, "Hand-offs by this node"), h("dd", {}, handOffs || "—")),
        h("section", { "aria-labelledby": "s-members" }, h("h2", { id: "s-members" }, "Members"),
          h("div", { class: "table-wrap" }, h("table", { class: "data", id: "members-table" },
            h("thead", {}, h("tr", {}, ["Node", "Address", "State", "Partitions owned"].map((t) => h("th", { scope: "col" }, t)))),
            h("tbody", {}, (info.members || []).map((mem) => h("tr", { dataset: { node: mem.node_id } },
              h("th", { scope: "row" }, mem.node_id, mem.node_id === info.node_id ? h("span", { class: "tag" }, "this node") : null),
              h("td", { class: "mono" }, mem.address || "—"),
              h("td", {}, h("span", { class: `state state-${mem.state}` }, STATES[mem.state] || mem.state || "—")),
              h("td", { class: "num" }, number(owned.get(mem.node_id) || 0)))))))),
        handOffsSection(info)));
      count.textContent = shown.length > MAX_ROWS ? `the first ${MAX_ROWS} of ${shown.length} partitions` : `${shown.length} partitions`;
      refreshKeepingFocus(owners, () => mount(owners, byQueue.size ? h("div", { class: "table-wrap" }, h("table", { class: "data", id: "owners-table" },
        h("thead", {}, h("tr", {}, ["Queue", "Partition", "Owner"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, [...byQueue.entries()].map(([queue, parts]) => parts.map((p) => h("tr", { dataset: { queue, partition: String(p.partition || 0) } },
          h("th", { scope: "row" }, h("a", { href: route("queue", queue) }, queue)),
          h("td", { class: "num" }, String(p.partition || 0)),
          h("td", { dataset: { col: "owner" } }, p.owner || "—")))))))
        : h("p", { class: "muted" }, "No partitions.")));
      mount(problem);
      main.dataset.loaded = String(Number(main.dataset.loaded || 0) + 1);
    } catch (e) {
      if (e.needsKey) return ctx.onAuth(e);
      mount(problem, errorBox(e));
    }
  }

  await load();
  const timer = setInterval(() => !document.hidden && load(), REFRESH_MS);
  return () => clearInterval(timer);
}

// This node's log (the last 100, newest first, of the queues this page lists), so each partition it gave
// or took shows when, from or to which node and why.
function handOffsSection(info) {
  const rows = info.hand_offs || [];
  return h("section", { "aria-labelledby": "s-hand-offs" }, h("h2", { id: "s-hand-offs" }, "Recent hand-offs"),
    h("p", { class: "muted" }, `What ${info.node_id || "this node"} gave and took, newest first: this node's own log, since it started (at most 100).`),
    rows.length ? h("div", { class: "table-wrap" }, h("table", { class: "data", id: "hand-offs-table" },
      h("thead", {}, h("tr", {}, ["Time", "Queue", "Partition", "Direction", "Other node", "Reason", "Engine"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, rows.map((e) => h("tr", { dataset: { direction: e.direction || "", queue: e.queue_name || "", partition: String(e.partition || 0) } },
        h("td", {}, time(e.at)),
        h("th", { scope: "row" }, h("a", { href: route("queue", e.queue_name) }, e.queue_name)),
        h("td", { class: "num", dataset: { col: "partition" } }, String(e.partition || 0)),
        h("td", { dataset: { col: "direction" } }, DIRECTIONS[e.direction] || e.direction || "—"),
        h("td", { dataset: { col: "other" } }, e.other_node || h("span", { class: "muted" }, "not known yet")),
        h("td", { title: e.reason || "" }, REASONS[e.reason] || e.reason || "—"),
        h("td", {}, e.outcome || "—"))))))
      : h("p", { class: "muted", id: "no-hand-offs" }, "No hand-offs since this node started."));
}
