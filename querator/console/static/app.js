// The console's shell: navigation, the API key prompt and the hash router. A page is a module exporting
// `render(main, params, ctx)`; it may return a function that stops its live refresh.
import { ApiError, apiKey, setApiKey, call } from "./api.js";
import { h, mount, errorBox } from "./dom.js";
import * as queues from "./pages/queues.js";
import * as queue from "./pages/queue.js";
import * as dead from "./pages/dead.js";
import * as cluster from "./pages/cluster.js";
import * as workflows from "./pages/workflows.js";
import * as workflow from "./pages/workflow.js";
import * as schedules from "./pages/schedules.js";

// The sections in the navigation; a new section is one line here and a page module. `within`: the pages
// reached from the section, under which it stays marked as current.
const NAV = [
  { path: "queues", label: "Queues", page: queues, within: ["queue", "dead"] },
  { path: "workflows", label: "Workflows", page: workflows, within: ["workflow"] },
  { path: "schedules", label: "Schedules", page: schedules, within: [] },
  { path: "cluster", label: "Cluster", page: cluster, within: [] },
];
// Pages reached from others, by the first part of the hash.
const PAGES = { queue, dead, workflow, ...Object.fromEntries(NAV.map((n) => [n.path, n.page])) };

const main = document.getElementById("main");
let stop = null;

function renderNav(current) {
  mount(document.getElementById("nav"), NAV.map((n) => {
    const active = current === n.path || n.within.includes(current);
    return h("li", {}, h("a", { href: `#/${n.path}`, "aria-current": active ? "page" : false }, n.label));
  }));
  document.getElementById("forget-key").hidden = !apiKey();
}

function keyForm(reason) {
  const input = h("input", { type: "password", id: "api-key", name: "api-key", autocomplete: "off", required: true, spellcheck: "false" });
  const form = h("form", { class: "card key-form", onsubmit: (e) => {
    e.preventDefault();
    setApiKey(input.value.trim());
    show();
  } },
  h("h1", {}, "API key"),
  h("p", {}, "This node requires an API key. The console sends it with each call, and keeps it in this tab only (it is forgotten when the tab closes)."),
  reason ? h("p", { class: "error", role: "alert" }, reason) : null,
  h("label", { for: "api-key" }, "Key"), input,
  h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Use this key")));
  mount(main, form);
  input.focus();
}

async function show() {
  if (stop) stop();
  stop = null;
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  const name = parts[0] || "queues";
  const page = PAGES[name];
  renderNav(name);
  if (!page) {
    mount(main, errorBox(new Error(`no such page: ${name}`)));
    return;
  }
  try {
    stop = (await page.render(main, parts.slice(1), { onAuth: authFailed })) || null;
  } catch (e) {
    if (e instanceof ApiError && e.needsKey) authFailed(e);
    else mount(main, errorBox(e));
  }
  // Move focus to the new content for keyboard and screen-reader users, as a page load would.
  if (!main.contains(document.activeElement)) main.focus({ preventScroll: true });
}

function authFailed(error) {
  if (stop) stop();
  stop = null;
  const had = apiKey();
  setApiKey("");
  renderNav("");
  keyForm(had ? error.message : "");
}

document.getElementById("forget-key").addEventListener("click", () => {
  setApiKey("");
  show();
});

async function nodeName() {
  try {
    const info = await call("cluster.info", { queue_name: "", namespace: "" });
    document.getElementById("node").textContent = `this node: ${info.node_id || "?"}`;
  } catch {}
}

window.addEventListener("hashchange", show);
show().then(nodeName);
