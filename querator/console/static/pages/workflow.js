// One durable workflow (workflows.info): its state, version, search attributes, priority, timeout, its
// journal as a timeline by seq, its signals, its result or error, its parent and children; a signal can
// be sent to it, it can be cancelled, terminated, resumed, or run again from a step (workflows.fork). The
// page refreshes while the workflow runs; the forms stay outside what it redraws, so typing is kept.
import { call, base64Of } from "../api.js";
import { h, mount, route, time, number, payloadView, valueText, errorBox, confirmed, say, refreshKeepingFocus } from "../dom.js";
import { statusBadge, versionText, searchAttributesView } from "./workflows.js";

const REFRESH_MS = 3000;
const ENTRY_STATES = { done: "done", error: "failed", pending: "pending" };

// A child workflow's id: its parent's, a slash and the seq of the entry that started it (docs/durable.md).
function childId(parentId, seq) {
  return `${parentId}/${seq}`;
}

// A run's priority is the level of its task queue: `<queue>.high` or `<queue>.low` beside the app's queue,
// which is the normal level (docs/durable.md, "Priorities").
function priorityOf(queueName) {
  return /\.(high|low)$/.exec(queueName || "")?.[1] || "normal";
}

export async function render(main, params, ctx) {
  const id = params[0] || "";
  let info = await call("workflows.info", { workflow_id: id });
  const body = h("div");
  const problem = h("div");
  const actions = h("div", { class: "actions" });
  const signalBox = h("div");
  // Asks first, then calls one workflow route; a refusal (a read-only key's 403) is shown as it came.
  async function act(question, apiRoute, fields) {
    if (!confirmed(question)) return null;
    try {
      const reply = await call(apiRoute, { workflow_id: id, ...fields });
      mount(problem);
      return reply;
    } catch (e) {
      if (e.needsKey) ctx.onAuth(e);
      else mount(problem, errorBox(e));
      return null;
    }
  }
  // A button that acts on this workflow, then says so and reloads the page (not after a refusal: the
  // reload would clear the refusal's message).
  function action(buttonId, cls, label, question, apiRoute, fields, said) {
    return h("button", { type: "button", id: buttonId, class: cls, onclick: async () => {
      if (!(await act(question, apiRoute, fields))) return;
      say(said);
      load();
    } }, label);
  }
  // A new run with this one's input and its journal before `seq` (ADR 0048); the page moves to it.
  async function fork(seq) {
    const question = seq === 1
      ? `Start a new run of workflow '${id}' from the start, with its input? '${id}' is left as it is.`
      : `Start a new run of workflow '${id}' from step #${seq}? The entries before #${seq} are copied, not run again; from #${seq} on it runs the code the workers have now. '${id}' is left as it is.`;
    const reply = await act(question, "workflows.fork", { from_step: seq });
    if (!reply) return;
    const newId = reply.workflow.workflow_id;
    say(`New run ${newId} started from step #${seq} of ${id}.`);
    location.hash = route("workflow", newId);
  }
  const cancel = action("cancel-workflow", "danger", "Cancel workflow…",
    `Cancel workflow '${id}'? Its compensations run and its children are cancelled.`,
    "workflows.cancel", {}, `Cancel of ${id} requested.`);
  const terminate = action("terminate-workflow", "danger", "Terminate…",
    `Terminate workflow '${id}' now? No worker runs: its code and compensations do not, and its children are terminated too.`,
    "workflows.terminate", { reason: "terminated from the console" }, `${id} terminated.`);
  // A failure of its code (non-determinism): once the workers run fixed code, it can run again.
  const resume = action("resume-workflow", "primary", "Resume…",
    `Resume workflow '${id}'? It replays its journal with the code the workers run now.`,
    "workflows.resume", {}, `${id} resumed.`);
  resume.hidden = true;
  const restart = h("button", { type: "button", id: "restart-workflow", onclick: () => fork(1) }, "Restart…");
  const signal = h("button", { type: "button", id: "signal-workflow", onclick: () => mount(signalBox, signalForm(info, signalBox, () => load())) }, "Send signal…");
  mount(actions, signal, cancel, terminate);
  mount(main,
    h("p", { class: "crumbs" }, h("a", { href: "#/workflows" }, "Workflows"), " / "),
    h("div", { class: "page-head" }, h("h1", {}, id), actions, resume, restart),
    signalBox, problem, body);

  function draw() {
    const running = info.status === "running";
    actions.hidden = !running;
    resume.hidden = !info.resumable;
    if (!running) mount(signalBox);
    const entries = [...(info.entries || [])].sort((a, b) => a.seq - b.seq);
    const children = entries.filter((e) => e.kind === "child");
    refreshKeepingFocus(body, () => mount(body,
      h("dl", { class: "pairs", id: "workflow-info" },
        h("dt", {}, "Status"), h("dd", { id: "workflow-status" }, statusBadge(info.status),
          info.cancel_requested && running ? h("span", { class: "tag" }, "cancel requested") : null),
        h("dt", {}, "Name"), h("dd", {}, info.name),
        h("dt", {}, "App version"), h("dd", { id: "workflow-version" }, versionText(info.app_version)),
        h("dt", {}, "Search attributes"), h("dd", { id: "workflow-search" }, searchAttributesView(info.search_attributes)),
        h("dt", {}, "Priority"), h("dd", { id: "workflow-priority" }, priorityOf(info.queue_name)),
        h("dt", {}, "Task queue"), h("dd", {}, h("a", { href: route("queue", info.queue_name) }, info.queue_name)),
        h("dt", {}, "Timeout"), h("dd", { id: "workflow-timeout" }, info.timeout
          ? [info.timeout, " · deadline ", time(info.deadline), info.timed_out ? h("span", { class: "tag" }, "timed out") : null]
          : h("span", { class: "muted" }, "none")),
        info.forked_from ? [h("dt", {}, "Forked from"), h("dd", { class: "mono" }, h("a", { href: route("workflow", info.forked_from), id: "workflow-forked-from" }, info.forked_from))] : null,
        h("dt", {}, "Parent"), h("dd", { class: "mono" }, info.parent_id
          ? [h("a", { href: route("workflow", info.parent_id), id: "workflow-parent" }, info.parent_id), ` (its step #${info.parent_seq})`]
          : h("span", { class: "muted" }, "none")),
        h("dt", {}, "Children"), h("dd", { class: "mono", id: "workflow-children" }, children.length
          ? children.map((e, i) => [i ? ", " : "", h("a", { href: route("workflow", childId(id, e.seq)) }, childId(id, e.seq))])
          : h("span", { class: "muted" }, "none")),
        h("dt", {}, "Created"), h("dd", {}, time(info.created_at)),
        h("dt", {}, "Updated"), h("dd", {}, time(info.updated_at)),
        h("dt", {}, "Finished"), h("dd", {}, time(info.finished_at)),
        h("dt", {}, "Dropped"), h("dd", {}, time(info.expires_at)),
        h("dt", {}, "Claims"), h("dd", {}, number(info.fence || 0), info.claim_deadline ? [" · held until ", time(info.claim_deadline)] : null),
        h("dt", {}, "Encoding"), h("dd", {}, info.encoding || "—")),
      outcome(info),
      info.input ? payloadView(info.input, "Input") : null,
      h("section", { "aria-labelledby": "s-journal" }, h("h2", { id: "s-journal" }, `Journal (${entries.length})`),
        entries.length ? h("ol", { class: "timeline", id: "journal" }, entries.map((e) => journalEntry(id, e, fork)))
          : h("p", { class: "muted" }, "Nothing recorded yet: no worker has run it.")),
      h("section", { "aria-labelledby": "s-signals" }, h("h2", { id: "s-signals" }, "Signals"), signalTable(info.signals || []))));
  }

  async function load() {
    try {
      info = await call("workflows.info", { workflow_id: id });
      draw();
      mount(problem);
      main.dataset.loaded = String(Number(main.dataset.loaded || 0) + 1);
    } catch (e) {
      if (e.needsKey) return ctx.onAuth(e);
      mount(problem, errorBox(e));
    }
  }

  draw();
  main.dataset.loaded = String(Number(main.dataset.loaded || 0) + 1);
  const timer = setInterval(() => info.status === "running" && !document.hidden && load(), REFRESH_MS);
  return () => clearInterval(timer);
}

function outcome(info) {
  if (info.status === "completed") {
    return h("section", { "aria-labelledby": "s-result", id: "workflow-result" }, h("h2", { id: "s-result" }, "Result"),
      h("pre", { class: "payload", tabindex: "0" }, valueText(info.result)));
  }
  if (info.error) {
    return h("section", { "aria-labelledby": "s-error", id: "workflow-error" }, h("h2", { id: "s-error" }, info.status === "cancelled" ? "Cancelled" : "Error"),
      h("pre", { class: "payload error-text", tabindex: "0" }, info.error));
  }
  return null;
}

// An entry of the timeline; `fork(seq)` runs the workflow again from it (the server refuses a seq that
// cannot start a run, after a pending entry or inside a gather, with its 400 shown).
function journalEntry(workflowId, e, fork) {
  const facts = [];
  if (e.attempts) facts.push(`${e.attempts} attempt(s)`);
  if (e.group_size) facts.push(`awaited with #${e.group} (${e.group_size} together)`);
  const waking = e.wake_at && e.state === "pending" ? (e.kind === "sleep" ? "wakes" : e.kind === "signal" ? "gives up" : "runs again") : "wake at";
  return h("li", { dataset: { seq: String(e.seq), kind: e.kind, state: e.state }, class: `entry entry-${e.state}` },
    h("div", { class: "entry-head" },
      h("span", { class: "seq" }, `#${e.seq}`),
      h("span", { class: "badge" }, e.kind),
      h("strong", { class: "mono" }, e.name),
      h("span", { class: `badge state-${e.state}` }, ENTRY_STATES[e.state] || e.state),
      facts.length ? h("span", { class: "muted" }, facts.join(" · ")) : null,
      e.wake_at ? h("span", {}, `${waking} `, time(e.wake_at)) : null,
      e.kind === "child" ? h("a", { href: route("workflow", childId(workflowId, e.seq)), class: "mono" }, childId(workflowId, e.seq)) : null,
      h("button", { type: "button", class: "small restart-here", "aria-label": `Restart from here (#${e.seq})…`, onclick: () => fork(e.seq) }, "Restart from here…")),
    e.value ? h("pre", { class: "payload", tabindex: "0" }, valueText(e.value)) : null,
    e.error ? h("pre", { class: "payload error-text", tabindex: "0" }, e.error) : null);
}

function signalTable(signals) {
  if (!signals.length) return h("p", { class: "muted" }, "No signals.");
  return h("div", { class: "table-wrap" }, h("table", { class: "data", id: "signals-table" },
    h("thead", {}, h("tr", {}, ["Id", "Name", "Sent", "Received by", "Payload"].map((t) => h("th", { scope: "col" }, t)))),
    h("tbody", {}, signals.map((s) => h("tr", { dataset: { name: s.name } },
      h("td", { class: "mono" }, s.id),
      h("td", {}, s.name),
      h("td", {}, time(s.sent_at)),
      h("td", {}, s.taken_by ? `#${s.taken_by}` : h("span", { class: "muted" }, "waiting")),
      h("td", { class: "mono" }, s.payload ? valueText(s.payload) : h("span", { class: "muted" }, "none")))))));
}

// Sending a signal: a name and a payload in the workflow's encoding (checked as JSON when it is JSON).
function signalForm(info, container, done) {
  const json = /json/i.test(info.encoding || "");
  const error = h("div");
  const name = h("input", { id: "signal-name", name: "signal-name", required: true, autocomplete: "off", spellcheck: "false" });
  const payload = h("textarea", { id: "signal-payload", name: "signal-payload", rows: "4", spellcheck: "false", placeholder: json ? '{"approved": true}' : "" });
  const form = h("form", { class: "card grid-form", id: "signal-form", onsubmit: async (e) => {
    e.preventDefault();
    let text = payload.value;
    if (json) {
      // An empty payload is JSON's null, which the workflow's code receives as None.
      text = text.trim() || "null";
      try {
        JSON.parse(text);
      } catch (err) {
        mount(error, errorBox(new Error(`payload is not JSON; ${err.message}`)));
        return;
      }
    }
    try {
      await call("workflows.signal", { workflow_id: info.workflow_id, name: name.value.trim(), payload: base64Of(text) });
      say(`Signal ${name.value.trim()} sent.`);
      mount(container);
      done();
    } catch (err) {
      mount(error, errorBox(err));
    }
  } },
  h("h2", {}, "Send a signal"),
  h("label", { for: "signal-name" }, "Signal name"), name,
  h("label", { for: "signal-payload" }, json ? "Payload (JSON)" : `Payload (${info.encoding || "text"})`), payload,
  error,
  h("div", { class: "actions" }, h("button", { type: "submit", class: "primary" }, "Send signal"),
    h("button", { type: "button", onclick: () => mount(container) }, "Close")));
  setTimeout(() => name.focus());
  return form;
}
