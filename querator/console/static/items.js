// A partition's items, a page at a time through storage/items.list or storage/scheduled.list, with an
// item's details and payload. Pages go on from the last id (the pivot is included, so it is dropped).
import { call } from "./api.js";
import { h, mount, number, time, payloadView, errorBox } from "./dom.js";

const PAGE = 50;

// `options`: queue, partitions (count), scheduled (bool), selectable (bool), rowActions(item) -> nodes.
export function itemBrowser(options) {
  const state = { partition: 0, scheduled: !!options.scheduled, pivots: [""], items: [], selected: new Set() };
  const box = h("section", { class: "items", "aria-label": options.label || "Items" });
  const list = h("div", { class: "table-wrap" });
  const detail = h("div", { class: "detail" });
  const problem = h("div");
  const partition = h("select", { id: `${options.id}-partition`, onchange: () => {
    state.partition = Number(partition.value);
    state.pivots = [""];
    load();
  } }, Array.from({ length: Math.max(options.partitions, 1) }, (_, i) => h("option", { value: String(i) }, String(i))));
  const kind = options.scheduledToggle ? h("select", { id: `${options.id}-kind`, onchange: () => {
    state.scheduled = kind.value === "scheduled";
    state.pivots = [""];
    load();
  } }, h("option", { value: "items" }, "queued and leased"), h("option", { value: "scheduled" }, "scheduled")) : null;
  const prev = h("button", { type: "button", onclick: () => { state.pivots.pop(); load(); } }, "← Previous");
  const next = h("button", { type: "button", onclick: () => { state.pivots.push(state.items[state.items.length - 1].id); load(); } }, "Next →");
  const pageInfo = h("span", { class: "muted" });

  mount(box,
    h("div", { class: "toolbar" },
      h("label", { for: `${options.id}-partition` }, "Partition "), partition,
      kind ? [h("label", { for: `${options.id}-kind` }, "Show "), kind] : null,
      h("button", { type: "button", onclick: () => load() }, "Refresh")),
    options.toolbar ? options.toolbar(state) : null,
    problem, list, h("div", { class: "pager" }, prev, pageInfo, next), detail);

  async function load() {
    const pivot = state.pivots[state.pivots.length - 1];
    try {
      const reply = await call(state.scheduled ? "storage/scheduled.list" : "storage/items.list",
        { queue_name: options.queue, partition: state.partition, pivot, limit: PAGE + (pivot ? 1 : 0) });
      const items = reply.items || [];
      state.items = pivot ? items.filter((i) => i.id !== pivot) : items;
      mount(problem);
    } catch (e) {
      state.items = [];
      mount(problem, errorBox(e));
    }
    state.selected.clear();
    draw();
  }

  function draw() {
    prev.disabled = state.pivots.length <= 1;
    // A page may end before PAGE (at 4 MiB of payloads), so only an empty page is surely the last.
    next.disabled = state.items.length === 0;
    pageInfo.textContent = ` page ${state.pivots.length} · ${state.items.length} item(s) `;
    const all = options.selectable ? h("input", { type: "checkbox", "aria-label": "Select every item of this page", onchange: () => {
      for (const i of state.items) all.checked ? state.selected.add(i.id) : state.selected.delete(i.id);
      draw();
    } }) : null;
    if (all) all.checked = state.items.length > 0 && state.items.every((i) => state.selected.has(i.id));
    mount(list, h("table", { class: "data", id: `${options.id}-table` },
      h("thead", {}, h("tr", {}, options.selectable ? h("th", { scope: "col" }, all) : null,
        ["Id", "Created", state.scheduled ? "Enqueue at" : "Leased until", "Attempts", "Kind", "Size", "Last failure", ""].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, state.items.length ? state.items.map((item) => h("tr", { dataset: { id: item.id } },
        options.selectable ? h("td", {}, h("input", { type: "checkbox", "aria-label": `Select ${item.id}`, checked: state.selected.has(item.id), onchange: (e) => {
          e.target.checked ? state.selected.add(item.id) : state.selected.delete(item.id);
        } })) : null,
        h("td", { class: "mono" }, h("button", { type: "button", class: "linkish", onclick: () => showItem(item) }, item.id)),
        h("td", {}, time(item.created_at)),
        h("td", {}, state.scheduled ? time(item.enqueue_at) : item.is_leased ? time(item.lease_deadline) : h("span", { class: "muted" }, "not leased")),
        h("td", { class: "num" }, `${number(item.attempts || 0)}${item.max_attempts ? ` / ${item.max_attempts}` : ""}`),
        h("td", {}, item.kind || ""),
        h("td", { class: "num" }, number(atob(item.payload || "").length)),
        h("td", { class: "failure" }, lastFailure(item)),
        h("td", {}, options.rowActions ? options.rowActions(item, state) : null)))
        : h("tr", {}, h("td", { colspan: "10", class: "muted" }, "No items.")))));
  }

  // The first line of the newest failure's error: what an item (a dead letter above all) last died of.
  function lastFailure(item) {
    const failures = item.failures || [];
    if (!failures.length) return h("span", { class: "muted" }, "—");
    const last = failures[failures.length - 1];
    return `${(last.error || "failed").split("\n")[0].slice(0, 120)}`;
  }

  function showItem(item) {
    const rows = [["Id", item.id], ["Job id", item.job_id || item.id], ["Source id", item.source_id || "—"], ["Created", time(item.created_at)], ["Updated", time(item.updated_at)],
      ["Leased", item.is_leased ? "yes" : "no"], ["Lease deadline", time(item.lease_deadline)], ["Expire deadline", time(item.expire_deadline)],
      ["Enqueue at", time(item.enqueue_at)], ["Attempts", `${item.attempts || 0} of ${item.max_attempts || "∞"}`],
      ["Kind", item.kind || "—"], ["Encoding", item.encoding || "—"], ["Reference", item.reference || "—"]];
    mount(detail, h("div", { class: "card", id: "item-detail", tabindex: "-1" },
      h("div", { class: "page-head" }, h("h3", {}, `Item ${item.id}`), h("button", { type: "button", onclick: () => mount(detail) }, "Close")),
      h("dl", { class: "pairs" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)])),
      failuresView(item.failures || []),
      payloadView(item.payload)));
    detail.firstChild.focus();
  }

  // Each failed attempt, oldest first, with its whole error (a traceback's last lines from a worker).
  function failuresView(failures) {
    if (!failures.length) return null;
    return h("section", { class: "failures", id: "item-failures", "aria-label": "Failures" },
      h("h4", {}, `Failures (${failures.length})`),
      h("ol", {}, failures.map((f) => h("li", {},
        h("p", {}, `Attempt ${f.attempt || 0} · `, time(f.at)),
        h("pre", { class: "mono" }, f.error || "retried, no reason given")))));
  }

  load();
  return { element: box, reload: load, state };
}
