// Cron schedules (docs/schedules.md): each with its cron, time zone, queue, last and next tick, the node
// that fires it and whether it is paused; paused, resumed and deleted from their row, created from a
// form whose mistakes come back as the server's 400 message. Refreshed every few seconds.
import { call, listAll, base64Of } from "../api.js";
import { h, mount, route, time, errorBox, confirmed, say, refreshKeepingFocus } from "../dom.js";

const REFRESH_MS = 5000;
// schedules.list takes at most 1,000 a page.
const LIST_PAGE = 1000;

export async function render(main, _params, ctx) {
  const table = h("div", { class: "table-wrap" });
  const problem = h("div");
  const creator = h("div");
  const live = h("input", { type: "checkbox", id: "live", checked: true });
  mount(main,
    h("div", { class: "page-head" }, h("h1", {}, "Schedules"),
      h("button", { type: "button", id: "new-schedule", onclick: () => mount(creator, createForm(creator, load)) }, "New schedule…")),
    h("p", { class: "muted" }, "Each tick of a schedule produces one item into its queue; the owner is the node that fires it now."),
    creator,
    h("div", { class: "toolbar" },
      h("label", { class: "check" }, live, " Refresh live"),
      h("button", { type: "button", onclick: () => load() }, "Refresh now")),
    problem, table);

  // Runs an action on a schedule and says how it went.
  async function act(work, message) {
    try {
      await work();
      say(message);
      mount(problem);
    } catch (e) {
      if (e.needsKey) return ctx.onAuth(e);
      mount(problem, errorBox(e));
    }
    await load();
  }

  function row(s) {
    const name = s.name;
    return h("tr", { dataset: { schedule: name } },
      h("th", { scope: "row", class: "mono" }, name),
      h("td", { class: "mono" }, s.cron),
      h("td", {}, s.time_zone || "UTC"),
      h("td", {}, h("a", { href: route("queue", s.queue_name) }, s.queue_name)),
      h("td", { dataset: { col: "last" } }, time(s.last_tick)),
      h("td", { dataset: { col: "next" } }, time(s.next_tick)),
      h("td", { dataset: { col: "owner" } }, s.owner || "—"),
      h("td", { dataset: { col: "state" } }, h("span", { class: `badge ${s.paused ? "off" : "on"}` }, s.paused ? "paused" : "active")),
      h("td", {}, h("div", { class: "row-actions" },
        s.paused
          ? h("button", { type: "button", class: "small", "aria-label": `Resume ${name}`, onclick: () => act(() => call("schedules.resume", { name }), `Schedule ${name} resumed.`) }, "Resume")
          : h("button", { type: "button", class: "small", "aria-label": `Pause ${name}`, onclick: () => act(() => call("schedules.pause", { name }), `Schedule ${name} paused.`) }, "Pause"),
        h("button", { type: "button", class: "small danger", "aria-label": `Delete ${name}`, onclick: () => {
          if (!confirmed(`Delete schedule '${name}'? Its ticks stop; the items it produced stay.`)) return;
          act(() => call("schedules.delete", { name }), `Schedule ${name} deleted.`);
        } }, "Delete…"))));
  }

  async function load() {
    try {
      const schedules = await listAll("schedules.list", "items", "name", { pageSize: LIST_PAGE, endsEarly: true });
      refreshKeepingFocus(table, () => mount(table, h("table", { class: "data", id: "schedules-table" },
        h("thead", {}, h("tr", {}, ["Name", "Cron", "Time zone", "Queue", "Last tick", "Next tick", "Owner", "State", ""].map((t) => h("th", { scope: "col" }, t)))),
        h("tbody", {}, schedules.length ? schedules.map(row) : h("tr", {}, h("td", { colspan: "9", class: "muted" }, "No schedules."))))));
      mount(problem);
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

// Creating a schedule; the server checks everything (cron, zone, queue...) and says what is wrong.
function createForm(container, done) {
  const field = (id, label, attrs = {}) => [h("label", { for: id }, label), h("input", { id, name: id, autocomplete: "off", spellcheck: "false", ...attrs })];
  const error = h("div");
  const catchUp = h("select", { id: "s-catch-up", name: "s-catch-up" },
    [["one", "one: the newest missed tick"], ["skip", "skip: none"], ["all", "all: each missed tick"]].map(([v, t]) => h("option", { value: v }, t)));
  const form = h("form", { class: "card grid-form", id: "schedule-form", onsubmit: async (e) => {
    e.preventDefault();
    const v = (id) => form.querySelector(`#${id}`).value.trim();
    const schedule = { name: v("s-name"), cron: v("s-cron"), time_zone: v("s-zone"), queue_name: v("s-queue"),
      kind: v("s-kind"), catch_up: catchUp.value, jitter: v("s-jitter") };
    const payload = form.querySelector("#s-payload").value;
    if (payload) schedule.payload = base64Of(payload);
    try {
      await call("schedules.create", schedule);
      say(`Schedule ${schedule.name} created.`);
      mount(container);
      await done();
    } catch (err) {
      mount(error, errorBox(err));
    }
  } },
  h("h2", {}, "New schedule"),
  field("s-name", "Name", { required: true }),
  field("s-cron", "Cron", { required: true, placeholder: "30 2 * * * (or 6 fields, seconds first)" }),
  field("s-zone", "Time zone", { value: "UTC", placeholder: "Europe/Berlin" }),
  field("s-queue", "Queue", { required: true }),
  field("s-kind", "Item kind", { placeholder: "optional" }),
  [h("label", { for: "s-payload" }, "Item payload"), h("textarea", { id: "s-payload", name: "s-payload", rows: "3", spellcheck: "false", placeholder: "optional, as text" })],
  [h("label", { for: "s-catch-up" }, "Missed ticks"), catchUp],
  field("s-jitter", "Jitter", { placeholder: "0s (at most 24h)" }),
  error,
  h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Create"),
    h("button", { type: "button", onclick: () => mount(container) }, "Cancel")));
  setTimeout(() => form.querySelector("#s-name").focus());
  return form;
}
