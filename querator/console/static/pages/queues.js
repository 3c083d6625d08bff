// The queues: settings from queues.list, depth, oldest age and rates from this node's /metrics (the
// queues whose engines run here: in a cluster, this node's partitions). Sorted and filtered in the page,
// refreshed every few seconds while the box is ticked.
import { allQueues, call, metrics } from "../api.js";
import { h, mount, number, route, ageText, errorBox, confirmed, say, refreshKeepingFocus } from "../dom.js";

const REFRESH_MS = 5000;
const COLUMNS = [
  { key: "name", label: "Queue", text: true },
  { key: "partitions", label: "Partitions" },
  { key: "queued", label: "Queued" },
  { key: "leased", label: "Leased" },
  { key: "scheduled", label: "Scheduled" },
  { key: "age", label: "Oldest" },
  { key: "produced", label: "Produced/s" },
  { key: "delivered", label: "Leased/s" },
  { key: "completed", label: "Completed/s" },
  { key: "dead", label: "Dead-letter queue", text: true },
];
const RATES = { produced: "querator_items_produced_total", delivered: "querator_items_delivered_total", completed: "querator_items_completed_total" };
const GAUGES = { queued: "querator_items_queued", leased: "querator_items_leased", scheduled: "querator_items_scheduled", age: "querator_oldest_item_age_seconds" };

function byQueue(samples) {
  const out = new Map();
  for (const s of samples || []) out.set(s.labels.queue, s.value);
  return out;
}

export async function render(main, _params, ctx) {
  const state = { sort: "name", descending: false, filter: sessionStorage.getItem("querator.queueFilter") || "", rows: [], previous: null };
  const filter = h("input", { type: "search", id: "queue-filter", value: state.filter, placeholder: "part of a name", oninput: () => {
    state.filter = filter.value;
    sessionStorage.setItem("querator.queueFilter", filter.value);
    draw();
  } });
  const live = h("input", { type: "checkbox", id: "live", checked: true });
  const summary = h("p", { class: "muted", id: "queues-summary" });
  const table = h("div", { class: "table-wrap" });
  const problem = h("div");
  const creator = h("div");
  mount(main,
    h("div", { class: "page-head" }, h("h1", {}, "Queues"),
      h("button", { type: "button", id: "new-queue", onclick: () => mount(creator, createForm(creator, load)) }, "New queue…")),
    creator,
    h("div", { class: "toolbar" },
      h("label", { for: "queue-filter" }, "Filter "), filter,
      h("label", { class: "check" }, live, " Refresh live"),
      h("button", { type: "button", onclick: () => load() }, "Refresh now")),
    problem, summary, table);

  function draw() {
    const needle = state.filter.toLowerCase();
    const rows = state.rows.filter((r) => r.name.toLowerCase().includes(needle));
    const column = COLUMNS.find((c) => c.key === state.sort);
    rows.sort((a, b) => {
      const x = a[state.sort], y = b[state.sort];
      const order = column.text ? String(x ?? "").localeCompare(String(y ?? "")) : (x ?? -1) - (y ?? -1);
      return state.descending ? -order : order;
    });
    const head = h("tr", {}, COLUMNS.map((c) => h("th", { scope: "col", "aria-sort": c.key === state.sort ? (state.descending ? "descending" : "ascending") : false },
      h("button", { type: "button", class: "sort", onclick: () => {
        state.descending = state.sort === c.key ? !state.descending : false;
        state.sort = c.key;
        draw();
      } }, c.label, c.key === state.sort ? (state.descending ? " ▼" : " ▲") : ""))));
    const body = rows.map((r) => h("tr", { dataset: { queue: r.name } },
      h("th", { scope: "row" }, h("a", { href: route("queue", r.name) }, r.name)),
      h("td", { class: "num" }, number(r.partitions)),
      h("td", { class: "num", dataset: { col: "queued" } }, number(r.queued)),
      h("td", { class: "num", dataset: { col: "leased" } }, number(r.leased)),
      h("td", { class: "num", dataset: { col: "scheduled" } }, number(r.scheduled)),
      h("td", { class: "num" }, r.age === undefined ? number(undefined) : r.age > 0 ? ageText(r.age) : "—"),
      h("td", { class: "num" }, rate(r.produced)),
      h("td", { class: "num" }, rate(r.delivered)),
      h("td", { class: "num" }, rate(r.completed)),
      h("td", {}, r.dead ? h("a", { href: route("dead", r.name), title: `dead letters of ${r.name}` }, r.dead) : h("span", { class: "muted" }, "none"))));
    refreshKeepingFocus(table, () => mount(table, h("table", { class: "data", id: "queues-table" }, h("caption", { class: "sr-only" }, "Queues, sortable by each column"), h("thead", {}, head), h("tbody", {}, body))));
    summary.textContent = `${rows.length} of ${state.rows.length} queues. Depth, age and rates are this node's (its partitions in a cluster).`;
  }

  async function load() {
    try {
      const started = performance.now();
      const [queues, m] = await Promise.all([allQueues(), metrics()]);
      const now = performance.now();
      const gauges = Object.fromEntries(Object.entries(GAUGES).map(([k, name]) => [k, byQueue(m?.[name])]));
      const counters = Object.fromEntries(Object.entries(RATES).map(([k, name]) => [k, byQueue(m?.[name])]));
      const prev = state.previous;
      state.rows = queues.map((q) => {
        const row = { name: q.queue_name, partitions: q.requested_partitions || (q.partitions || []).length, dead: q.dead_queue || "" };
        for (const k of Object.keys(GAUGES)) row[k] = gauges[k].get(q.queue_name);
        for (const k of Object.keys(RATES)) {
          const total = counters[k].get(q.queue_name);
          const before = prev?.counters[k].get(q.queue_name);
          row[k] = total !== undefined && before !== undefined ? Math.max(total - before, 0) / ((now - prev.at) / 1000) : undefined;
        }
        return row;
      });
      state.previous = { at: now, counters };
      draw();
      mount(problem);
      main.dataset.renderMs = String(Math.round(performance.now() - started));
      main.dataset.loaded = String(Number(main.dataset.loaded || 0) + 1);
    } catch (e) {
      if (e.needsKey) return ctx.onAuth(e);
      mount(problem, errorBox(e));
    }
  }

  await load();
  const timer = setInterval(() => live.checked && !document.hidden && load(), REFRESH_MS);
  return () => clearInterval(timer);
}

function rate(perSecond) {
  if (perSecond === undefined) return h("span", { class: "muted", title: "known after the next refresh" }, "—");
  return perSecond < 10 ? perSecond.toFixed(1) : Math.round(perSecond).toLocaleString("en");
}

// Creating a queue, confirmed before it is sent.
export function createForm(container, done) {
  const field = (id, label, attrs = {}) => [h("label", { for: id }, label), h("input", { id, name: id, ...attrs })];
  const error = h("div");
  const form = h("form", { class: "card grid-form", id: "create-form", onsubmit: async (e) => {
    e.preventDefault();
    const v = (id) => form.querySelector(`#${id}`).value.trim();
    const info = {
      queue_name: v("c-name"),
      requested_partitions: Number(v("c-partitions") || 1),
      lease_timeout: v("c-lease"),
      expire_timeout: v("c-expire"),
      max_attempts: Number(v("c-attempts") || 0),
      dead_queue: v("c-dead"),
    };
    if (!confirmed(`Create queue '${info.queue_name}' with ${info.requested_partitions} partition(s)?`)) return;
    try {
      await call("queues.create", info);
      say(`Queue ${info.queue_name} created.`);
      mount(container);
      await done();
    } catch (err) {
      mount(error, errorBox(err));
    }
  } },
  h("h2", {}, "New queue"),
  field("c-name", "Name", { required: true, autocomplete: "off" }),
  field("c-partitions", "Partitions", { type: "number", min: "1", value: "1" }),
  field("c-lease", "Lease timeout", { placeholder: "1m", value: "1m" }),
  field("c-expire", "Expire timeout", { placeholder: "24h", value: "24h" }),
  field("c-attempts", "Max attempts (0: no limit)", { type: "number", min: "0", value: "0" }),
  field("c-dead", "Dead-letter queue", { placeholder: "none" }),
  error,
  h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create…"),
    h("button", { type: "button", onclick: () => mount(container) }, "Cancel")));
  setTimeout(() => form.querySelector("#c-name").focus());
  return form;
}
