// Durable workflows by id (workflows.list, without their journals), of one status or any, of one app
// version or any and holding the search attributes of a typed filter, a page at a time from the last id
// (the pivot is included, so it is dropped); above them, the running and failed runs of each app
// version; refreshed every few seconds.
import { call, listAll } from "../api.js";
import { h, mount, route, time, number, errorBox, refreshKeepingFocus } from "../dom.js";
import { parseSearchFilter, typable } from "../search.js";

const PAGE = 50;
const REFRESH_MS = 5000;
export const STATUSES = ["running", "completed", "failed", "cancelled"];
// The statuses counted per version, and how many runs of each are read at most (pages of 1,000).
const COUNTED = ["running", "failed"];
const COUNT_MAX = 5000;

export function statusBadge(status) {
  return h("span", { class: `badge status-${status}` }, status || "—");
}

// A run's app version (docs/durable.md, "App versions"); "" is none, which any worker claims.
export function versionText(version) {
  return version ? h("span", { class: "mono" }, version) : h("span", { class: "muted" }, "none");
}

// The list of a status ("" any), a version ("" any) and a search filter as typed ("" none), as a hash:
// a reload or a shared link shows it.
function listHash(status, version, where = "") {
  if (where) return route("workflows", status || "any", version, where);
  if (version) return route("workflows", status || "any", version);
  return status ? route("workflows", status) : "#/workflows";
}

// A run's search attributes (docs/durable.md, "Search attributes") by key, each as text; one that the
// filter can express links to the runs of any status that hold it too.
export function searchAttributesView(attributes) {
  const keys = Object.keys(attributes || {}).sort();
  if (!keys.length) return h("span", { class: "muted" }, "none");
  return h("ul", { class: "attributes" }, keys.map((k) => {
    const v = attributes[k];
    const pair = [h("span", { class: "mono" }, k), " = ", h("span", { class: "mono" }, v)];
    return h("li", { dataset: { key: k } }, typable(k + v) ? h("a", { href: listHash("", "", `${k}=${v}`) }, pair) : pair);
  }));
}

export async function render(main, params, ctx) {
  const state = { status: STATUSES.includes(params[0]) ? params[0] : "", version: params[1] || "", where: params[2] || "", pivots: [""], rows: [] };
  const status = h("select", { id: "workflow-status", onchange: () => (location.hash = listHash(status.value, state.version, state.where)) },
    h("option", { value: "" }, "any"), STATUSES.map((s) => h("option", { value: s, selected: s === state.status }, s)));
  const versionsSeen = h("datalist", { id: "versions-seen" });
  const version = h("input", { id: "workflow-version", type: "search", value: state.version, list: "versions-seen",
    placeholder: "any", autocomplete: "off", spellcheck: "false",
    onchange: () => (location.hash = listHash(state.status, version.value.trim(), state.where)) });
  const where = h("input", { id: "workflow-search", type: "search", value: state.where, placeholder: "customer=c-1 amount=30",
    autocomplete: "off", spellcheck: "false", "aria-describedby": "workflow-search-help",
    onchange: () => (location.hash = listHash(state.status, state.version, where.value.trim())) });
  const summary = h("div", { class: "table-wrap" });
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
      h("label", { for: "workflow-version" }, "App version "), version, versionsSeen,
      h("label", { for: "workflow-search" }, "Search attributes "), where,
      h("span", { class: "muted", id: "workflow-search-help" }, "KEY=VALUE, space-separated, all must hold"),
      h("label", { class: "check" }, live, " Refresh live"),
      h("button", { type: "button", onclick: () => load() }, "Refresh now")),
    problem,
    h("section", { "aria-labelledby": "s-versions" }, h("h2", { id: "s-versions" }, "Runs by app version"), summary),
    table, h("div", { class: "pager" }, prev, pageInfo, next));

  async function load() {
    const pivot = state.pivots[state.pivots.length - 1];
    try {
      const search = parseSearchFilter(state.where);
      const reply = await call("workflows.list", { status: state.status, pivot, limit: PAGE + (pivot ? 1 : 0), app_version: state.version, search });
      const rows = reply.workflows || [];
      state.rows = pivot ? rows.filter((w) => w.workflow_id !== pivot) : rows;
      // Every run of the counted statuses, of every version: how an operator sees an old version drain.
      const counted = await Promise.all(COUNTED.map((s) =>
        listAll("workflows.list", "workflows", "workflow_id", { endsEarly: true, max: COUNT_MAX, fields: { status: s } })));
      draw();
      drawSummary(counted);
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
      h("thead", {}, h("tr", {}, ["Id", "Name", "Status", "Version", "Queue", "Created", "Finished", "Parent"].map((t) => h("th", { scope: "col" }, t)))),
      h("tbody", {}, state.rows.length ? state.rows.map((w) => h("tr", { dataset: { id: w.workflow_id } },
        h("th", { scope: "row", class: "mono" }, h("a", { href: route("workflow", w.workflow_id) }, w.workflow_id)),
        h("td", {}, w.name),
        h("td", { dataset: { col: "status" } }, statusBadge(w.status), w.cancel_requested && w.status === "running" ? h("span", { class: "tag" }, "cancelling") : null),
        h("td", { dataset: { col: "version" } }, versionText(w.app_version)),
        h("td", {}, h("a", { href: route("queue", w.queue_name) }, w.queue_name)),
        h("td", {}, time(w.created_at)),
        h("td", {}, time(w.finished_at)),
        h("td", { class: "mono" }, w.parent_id ? h("a", { href: route("workflow", w.parent_id) }, w.parent_id) : h("span", { class: "muted" }, "—"))))
        : h("tr", {}, h("td", { colspan: "8", class: "muted" },
          `No ${state.pivots.length > 1 ? "more " : ""}${state.status ? `${state.status} ` : ""}workflows${state.version ? ` of version ${state.version}` : ""}${state.where ? ` with ${state.where}` : ""}.`))))));
  }

  // `counted`: the runs of each of COUNTED, at most COUNT_MAX each (then the count says "or more").
  function drawSummary(counted) {
    const byVersion = new Map();
    counted.forEach((runs, i) => {
      for (const w of runs) {
        const counts = byVersion.get(w.app_version || "") || COUNTED.map(() => 0);
        counts[i] += 1;
        byVersion.set(w.app_version || "", counts);
      }
    });
    const versions = [...byVersion.keys()].sort();
    mount(versionsSeen, versions.filter((v) => v).map((v) => h("option", { value: v })));
    const cell = (v, i) => {
      const n = byVersion.get(v)[i];
      const text = counted[i].length >= COUNT_MAX ? [number(n), "+"] : number(n);
      // Runs of no version cannot be listed alone: workflows.list's "" is any version.
      return h("td", { dataset: { col: COUNTED[i] } }, v && n ? h("a", { href: listHash(COUNTED[i], v) }, text) : text);
    };
    refreshKeepingFocus(summary, () => mount(summary, h("table", { class: "data", id: "versions-table" },
      h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "App version"), COUNTED.map((s) => h("th", { scope: "col" }, s)))),
      h("tbody", {}, versions.length ? versions.map((v) => h("tr", { dataset: { version: v } },
        h("th", { scope: "row" }, v ? h("a", { href: listHash("", v) }, versionText(v)) : versionText(v)),
        COUNTED.map((_, i) => cell(v, i))))
        : h("tr", {}, h("td", { colspan: String(COUNTED.length + 1), class: "muted" }, "No running or failed workflows."))))));
  }

  await load();
  const timer = setInterval(() => live.checked && !document.hidden && load(), REFRESH_MS);
  return () => clearInterval(timer);
}
