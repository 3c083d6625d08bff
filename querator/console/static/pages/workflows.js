// Durable workflows by id (workflows.list, without their journals), of one status or any, a page at a
// time from the last id (the pivot is included, so it is dropped); refreshed every few seconds.
import { call } from "../api.js";
import { h, mount, route, time, errorBox, refreshKeepingFocus } from "../dom.js";

const PAGE = 50;
const REFRESH_MS = 5000;
export const STATUSES = ["running", "completed", "failed", "cancelled"];

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status || "—");
}

export async function render(main, params, ctx) {
  const state = { status: STATUSES.includes(params[0]) ? params[0] : "", pivots: [""], rows: [] };
  const status = h("select", { id: "workflow-status", onchange: () => {
    // The status is in the hash, so a reload or a shared link shows the same list.
    location.hash = status.value ? route("workflows", status.value) : "#/workflows";
  } }, h("option", { value: "" }, "any"), STATUSES.map((s) => h("option", { value: s, selected: s === state.status }, s)));
  const live = h("input", { type: "checkbox", id: "live", checked: true });
  const table = h("div", { class: "table-wrap" });
  const problem = h("div");
  const prev = h("button", { type: "button", onclick: () => { state.pivots.pop(); load(); } }, "← Previous");
  const next = h("button", { type: "button", onclick: () => { state.pivots.push(state.rows[state.rows.length - 1].workflow_id); load(); } }, "Next →");
  const pageInfo = h("span", { class: "muted", id: "workflows-page" });
  mount(main,
    h("div", { class: "page-head" }, h("h1", {}, "Workflows")),
    h("p", { class: "muted" }, "Durable workflows kept by this cluster (docs/durable.md), by id. A child's id is its parent's, a slash and the step that started it."),
    h("div", { class: "toolbar" },
      h("label", { for: "workflow-status" }, "Status "), status,
      h("label", { class: "check" }, live, " Refresh live"),
      h("button", { type: "button", onclick: () => load() }, "Refresh now")),
    problem, table, h("div", { class: "pager" }, prev, pageInfo, next));

  async function load() {
    const pivot = state.pivots[state.pivots.length - 1];
    try {
      const reply = await call("workflows.list", { status: state.status, pivot, limit: PAGE + (pivot ? 1 : 0) });
      const rows = reply.workflows || [];
      state.rows = pivot ? rows.filter((w) => w.workflow_id !== pivot) : rows;
      draw();
      mount(problem);
      main.dataset.loaded = String(Number(main.dataset.loaded || 0) + 1);
    } catch (e) {
      if (e.needsKey) return ctx.onAuth(e);
      mount(problem, errorBox(e));
    }
  }

  function draw() {
    prev.disabled = state.pivots.length <= 1;
    // A page may end before PAGE (at 4 MiB of stored records), so only an empty page is surely the last.
    next.disabled = state.rows.length === 0;
    pageInfo.textContent = ` page ${state.pivots.length} · ${state.rows.length} workflow(s) `;
    refreshKeepingFocus(table, () => mount(table, h("table", { class: "data", id: "workflows-table" },
      h("thead", {}, h("tr", {}, ["Id", "Name", "Status", "Queue", "Created", "Finished", "Parent"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, state.rows.length ? state.rows.map((w) => h("tr", { dataset: { id: w.workflow_id } },
        h("th", { scope: "row", class: "mono" }, h("a", { href: route("workflow", w.workflow_id) }, w.workflow_id)),
        h("td", {}, w.name),
        h("td", { dataset: { col: "status" } }, statusBadge(w.status), w.cancel_requested && w.status === "running" ? h("span", { class: "tag" }, "cancelling") : null),
        h("td", {}, h("a", { href: route("queue", w.queue_name) }, w.queue_name)),
        h("td", {}, time(w.created_at)),
        h("td", {}, time(w.finished_at)),
        h("td", { class: "mono" }, w.parent_id ? h("a", { href: route("workflow", w.parent_id) }, w.parent_id) : h("span", { class: "muted" }, "—"))))
        : h("tr", {}, h("td", { colspan: "7", class: "muted" }, `No ${state.pivots.length > 1 ? "more " : ""}${state.status ? `${state.status} ` : ""}workflows.`))))));
  }

  await load();
  const timer = setInterval(() => live.checked && !document.hidden && load(), REFRESH_MS);
  return () => clearInterval(timer);
}
