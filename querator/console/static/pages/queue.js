// One queue: its settings (editable, with confirmation), each partition's counts and owner node, its
// items and scheduled items.
import { call } from "../api.js";
import { h, mount, number, route, time, errorBox, confirmed, say, refreshKeepingFocus } from "../dom.js";
import { itemBrowser } from "../items.js";

const REFRESH_MS = 5000;

export async function render(main, params, ctx) {
  const name = params[0] || "";
  const info = await call("queues.info", { queue_name: name });
  const partitions = h("div", { class: "table-wrap" });
  const problem = h("div");
  const settings = h("div");
  const clearBox = h("div");
  const items = itemBrowser({ id: "items", queue: name, partitions: (info.partitions || []).length, scheduledToggle: true, label: "Items" });
  mount(main,
    h("p", { class: "crumbs" }, h("a", { href: "#/queues" }, "Queues"), " / "),
    h("div", { class: "page-head" }, h("h1", {}, name),
      h("div", { class: "actions" },
        info.dead_queue ? h("a", { class: "button", href: route("dead", name) }, "Dead letters") : null,
        h("button", { type: "button", id: "edit-queue", onclick: () => mount(settings, settingsForm(info, settings, () => show())) }, "Edit settings…"),
        h("button", { type: "button", id: "clear-queue", onclick: () => mount(clearBox, clearForm(name, clearBox, refresh)) }, "Clear…"),
        h("button", { type: "button", id: "reload-queue", onclick: async () => {
          await call("queue.reload", { queue_name: name });
          say("Counts reloaded from storage.");
          refresh();
        } }, "Reload counts"))),
    settings, clearBox,
    h("section", { "aria-labelledby": "s-settings" }, h("h2", { id: "s-settings" }, "Settings"), settingsList(info)),
    h("section", { "aria-labelledby": "s-partitions" }, h("h2", { id: "s-partitions" }, "Partitions"), problem, partitions),
    h("section", { "aria-labelledby": "s-items" }, h("h2", { id: "s-items" }, "Items"), items.element));

  function show() {
    window.dispatchEvent(new HashChangeEvent("hashchange"));
  }

  async function refresh() {
    try {
      const [stats, cluster] = await Promise.all([call("queue.stats", { queue_name: name }), call("cluster.info", { queue_name: name })]);
      const owners = new Map((cluster.partitions || []).map((p) => [p.partition || 0, p.owner]));
      const rows = [];
      for (const logical of stats.logicalQueues || []) for (const p of logical.partitions || []) rows.push(p);
      rows.sort((a, b) => (a.partition || 0) - (b.partition || 0));
      refreshKeepingFocus(partitions, () => mount(partitions, h("table", { class: "data", id: "partitions-table" },
        h("thead", {}, h("tr", {}, ["Partition", "Owner", "Items", "Leased", "Scheduled", "Failures", "Average age", "Average leased age"].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, rows.map((p) => h("tr", { dataset: { partition: String(p.partition || 0) } },
          h("td", { class: "num" }, String(p.partition || 0)),
          h("td", { dataset: { col: "owner" } }, owners.get(p.partition || 0) || "—"),
          h("td", { class: "num", dataset: { col: "total" } }, number(p.total || 0)),
          h("td", { class: "num", dataset: { col: "leased" } }, number(p.total_leased || 0)),
          h("td", { class: "num", dataset: { col: "scheduled" } }, number(p.scheduled || 0)),
          h("td", { class: "num" }, number(p.failures || 0)),
          h("td", {}, p.average_age || "—"),
          h("td", {}, p.average_leased_age || "—")))))));
      mount(problem);
      main.dataset.loaded = String(Number(main.dataset.loaded || 0) + 1);
    } catch (e) {
      if (e.needsKey) return ctx.onAuth(e);
      mount(problem, errorBox(e));
    }
  }

  await refresh();
  const timer = setInterval(() => !document.hidden && refresh(), REFRESH_MS);
  return () => clearInterval(timer);
}

function settingsList(info) {
  const rows = [
    ["Partitions", String(info.requested_partitions || (info.partitions || []).length)],
    ["Lease timeout", info.lease_timeout], ["Expire timeout", info.expire_timeout],
    ["Max attempts", info.max_attempts ? String(info.max_attempts) : "no limit"],
    ["Dead-letter queue", info.dead_queue ? h("a", { href: route("queue", info.dead_queue) }, info.dead_queue) : "none"],
    ["De-duplication window", info.dedup_window || "—"], ["Lease tokens", info.lease_token || "—"],
    ["Reference", info.reference || "—"], ["Created", time(info.created_at)], ["Updated", time(info.updated_at)],
  ];
  return h("dl", { class: "pairs", id: "settings" }, rows.map(([k, v]) => [h("dt", {}, k), h("dd", {}, v)]));
}

function settingsForm(info, container, done) {
  const error = h("div");
  const input = (id, label, value, attrs = {}) => [h("label", { for: id }, label), h("input", { id, name: id, value: String(value ?? ""), ...attrs })];
  const form = h("form", { class: "card grid-form", id: "settings-form", onsubmit: async (e) => {
    e.preventDefault();
    const v = (id) => form.querySelector(`#${id}`).value.trim();
    // queues.update replaces max_attempts, reference and dead_queue: the whole record goes back.
    const update = { ...info, lease_timeout: v("u-lease"), expire_timeout: v("u-expire"), max_attempts: Number(v("u-attempts") || 0),
      dead_queue: v("u-dead"), reference: v("u-reference"), requested_partitions: Number(v("u-partitions") || 0) };
    delete update.partitions;
    if (!confirmed(`Update the settings of queue '${info.queue_name}'?`)) return;
    try {
      await call("queues.update", update);
      say("Settings saved.");
      mount(container);
      done();
    } catch (err) {
      mount(error, errorBox(err));
    }
  } },
  h("h2", {}, "Edit settings"),
  input("u-partitions", "Partitions (can only grow)", info.requested_partitions, { type: "number", min: "1" }),
  input("u-lease", "Lease timeout", info.lease_timeout),
  input("u-expire", "Expire timeout", info.expire_timeout),
  input("u-attempts", "Max attempts (0: no limit)", info.max_attempts || 0, { type: "number", min: "0" }),
  input("u-dead", "Dead-letter queue", info.dead_queue),
  input("u-reference", "Reference", info.reference),
  error,
  h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Save…"), h("button", { type: "button", onclick: () => mount(container) }, "Cancel")));
  setTimeout(() => form.querySelector("input").focus());
  return form;
}

function clearForm(name, container, done) {
  const check = (id, label, checked) => h("label", { class: "check" }, h("input", { type: "checkbox", id, checked }), ` ${label}`);
  const error = h("div");
  const form = h("form", { class: "card", id: "clear-form", onsubmit: async (e) => {
    e.preventDefault();
    const req = { queue_name: name, queue: form.querySelector("#k-queue").checked, scheduled: form.querySelector("#k-scheduled").checked, destructive: form.querySelector("#k-destructive").checked };
    const what = [req.queue && (req.destructive ? "all queued and leased items" : "the items not leased"), req.scheduled && "the scheduled items"].filter(Boolean).join(" and ");
    if (!what || !confirmed(`Delete ${what} of queue '${name}'? This cannot be undone.`)) return;
    try {
      await call("queue.clear", req);
      say(`Queue ${name} cleared.`);
      mount(container);
      done();
    } catch (err) {
      mount(error, errorBox(err));
    }
  } },
  h("h2", {}, "Clear the queue"),
  h("p", {}, check("k-queue", "queued items (not leased)", true)),
  h("p", {}, check("k-destructive", "leased items too", false)),
  h("p", {}, check("k-scheduled", "scheduled items", false)),
  error,
  h("div", { class: "actions" }, h("button", { type: "submit", class: "danger" }, "Clear…"), h("button", { type: "button", onclick: () => mount(container) }, "Cancel")));
  return form;
}
