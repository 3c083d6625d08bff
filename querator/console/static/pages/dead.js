// The dead letters of a queue: the items of its dead-letter queue, to browse, redrive (all, through the
// queue.redrive extension), retry (the selected ones) or delete.
import { call } from "../api.js";
import { h, mount, route, errorBox, confirmed, say, durationMs } from "../dom.js";
import { itemBrowser } from "../items.js";

export async function render(main, params) {
  const name = params[0] || "";
  const info = await call("queues.info", { queue_name: name });
  if (!info.dead_queue) {
    mount(main, h("h1", {}, `Dead letters of ${name}`), h("p", {}, "This queue has no dead-letter queue: its dead items are dropped. Set one in ",
      h("a", { href: route("queue", name) }, "its settings"), "."));
    return null;
  }
  const deadQueue = info.dead_queue;
  const deadInfo = await call("queues.info", { queue_name: deadQueue });
  const problem = h("div");

  // Runs an action and says how it went (`work` may return its own message).
  async function act(work, message) {
    try {
      const said = await work();
      say(typeof said === "string" ? said : message);
      mount(problem);
    } catch (e) {
      mount(problem, errorBox(e));
    }
    browser.reload();
  }

  // Retrying items: each is imported into the queue as a new item (attempts 0; its dead id kept as
  // source_id, so a repeat imports it once), the queue's counts are reloaded, then it leaves the dead
  // queue. A failure in between leaves a copy in both queues, never none.
  async function retry(items) {
    // An import keeps the deadlines it is given: the queue's expire timeout starts now, as for a produce.
    const expire = new Date(Date.now() + durationMs(info.expire_timeout)).toISOString();
    const fresh = items.map((i) => ({ payload: i.payload, kind: i.kind, encoding: i.encoding, reference: i.reference,
      source_id: i.id, max_attempts: info.max_attempts, expire_deadline: expire, job_id: i.job_id || i.id, failures: i.failures }));
    await call("storage/items.import", { queue_name: name, partition: 0, items: fresh });
    await call("queue.reload", { queue_name: name });
    await call("storage/items.delete", { queue_name: deadQueue, partition: browser.state.partition, ids: items.map((i) => i.id) });
  }

  const selected = (state) => browser.state.items.filter((i) => state.selected.has(i.id));
  const browser = itemBrowser({
    id: "dead", queue: deadQueue, partitions: (deadInfo.partitions || []).length, selectable: true, label: "Dead letters",
    toolbar: (state) => h("div", { class: "toolbar" },
      h("button", { type: "button", id: "redrive-all", class: "primary", onclick: () => {
        if (!confirmed(`Move every queued item of '${deadQueue}' back to '${name}'?`)) return;
        act(async () => {
          const reply = await call("queue.redrive", { queue_name: deadQueue, target_queue: name, request_timeout: "1m" });
          return `${reply.moved || 0} item(s) moved to ${name}.`;
        });
      } }, `Redrive all to ${name}…`),
      h("button", { type: "button", id: "retry-selected", onclick: () => {
        const items = selected(state);
        if (!items.length || !confirmed(`Put ${items.length} selected item(s) back in '${name}'?`)) return;
        act(() => retry(items), `${items.length} item(s) put back in ${name}.`);
      } }, "Retry selected…"),
      h("button", { type: "button", id: "delete-selected", class: "danger", onclick: () => {
        const items = selected(state);
        if (!items.length || !confirmed(`Delete ${items.length} selected item(s) of '${deadQueue}' for good?`)) return;
        act(() => call("storage/items.delete", { queue_name: deadQueue, partition: state.partition, ids: items.map((i) => i.id) }), `${items.length} item(s) deleted.`);
      } }, "Delete selected…")),
    rowActions: (item) => h("button", { type: "button", class: "small", "aria-label": `Retry ${item.id}`, onclick: () => {
      if (!confirmed(`Put item ${item.id} back in '${name}'?`)) return;
      act(() => retry([item]), `Item put back in ${name}.`);
    } }, "Retry"),
  });

  mount(main,
    h("p", { class: "crumbs" }, h("a", { href: "#/queues" }, "Queues"), " / ", h("a", { href: route("queue", name) }, name), " / "),
    h("div", { class: "page-head" }, h("h1", {}, `Dead letters of ${name}`)),
    h("p", { class: "muted" }, "Items that died in ", h("a", { href: route("queue", name) }, name), " (attempts used up, or expired) wait in ",
      h("a", { href: route("queue", deadQueue) }, deadQueue), "."),
    problem, browser.element);
  return null;
}
