// Small helpers: elements built with properties, never from HTML strings (payloads and names are data),
// times shown relative and absolute, payloads as text, JSON or hex.

export function h(tag, props = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "class") el.className = v;
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k in el && typeof v !== "string") el[k] = v;
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : String(c));
  }
  return el;
}

export function mount(parent, ...children) {
  parent.replaceChildren(...children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false));
}

export function link(hash, text) {
  return h("a", { href: hash }, text);
}

export function route(...parts) {
  return "#/" + parts.map(encodeURIComponent).join("/");
}

function pad(n) {
  return String(n).padStart(2, "0");
}

export function absolute(date) {
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())} ${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

export function ageText(seconds) {
  const s = Math.abs(seconds);
  if (s < 1) return "now";
  if (s < 90) return `${Math.round(s)} s`;
  if (s < 5400) return `${Math.round(s / 60)} min`;
  if (s < 129600) return `${Math.round(s / 3600)} h`;
  return `${Math.round(s / 86400)} d`;
}

export function relative(date) {
  const seconds = (Date.now() - date.getTime()) / 1000;
  if (Math.abs(seconds) < 1) return "now";
  return seconds >= 0 ? `${ageText(seconds)} ago` : `in ${ageText(seconds)}`;
}

// A time as "3 min ago · 2026-11-26 12:01:02" (local), machine-readable in <time>.
export function time(iso) {
  if (!iso) return h("span", { class: "muted" }, "—");
  const date = new Date(iso);
  if (Number.isNaN(date.getTime()) || date.getTime() <= 0) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: date.toISOString(), title: date.toISOString() }, relative(date), h("span", { class: "abs" }, ` · ${absolute(date)}`));
}

export function number(n) {
  return n === undefined || n === null ? h("span", { class: "muted" }, "—") : Number(n).toLocaleString("en");
}

export function bytesOf(base64) {
  const raw = atob(base64 || "");
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes;
}

export function payloadAs(bytes, view) {
  if (view === "hex") {
    const lines = [];
    for (let i = 0; i < bytes.length; i += 16) {
      const row = Array.from(bytes.slice(i, i + 16));
      const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
      const ascii = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
      lines.push(`${i.toString(16).padStart(8, "0")}  ${hex.padEnd(47)}  ${ascii}`);
    }
    return lines.join("\n");
  }
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  if (view === "json") {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch (e) {
      return `not JSON: ${e.message}`;
    }
  }
  return text;
}

function parsesAsJson(bytes) {
  try {
    JSON.parse(new TextDecoder().decode(bytes));
    return true;
  } catch {
    return false;
  }
}

// A value (base64) as pretty JSON when it parses, else as text.
export function valueText(base64) {
  const bytes = bytesOf(base64);
  return payloadAs(bytes, parsesAsJson(bytes) ? "json" : "text");
}

// A payload with a choice of view; JSON first when it parses.
export function payloadView(base64, label = "Payload") {
  const bytes = bytesOf(base64);
  const initial = parsesAsJson(bytes) ? "json" : "text";
  const pre = h("pre", { class: "payload", tabindex: "0" });
  const select = h("select", { "aria-label": `Show ${label.toLowerCase()} as`, onchange: () => (pre.textContent = payloadAs(bytes, select.value)) },
    ["text", "json", "hex"].map((v) => h("option", { value: v, selected: v === initial }, v === "json" ? "JSON" : v)));
  pre.textContent = payloadAs(bytes, initial);
  return h("div", { class: "payload-box" }, h("label", {}, `${label} (${bytes.length} bytes) as `, select), pre);
}

const STATUS_MS = 8000;
let statusTimer = 0;

// A short message in the polite live region (screen readers announce it), gone after a few seconds.
export function say(message) {
  const status = document.getElementById("status");
  status.textContent = message;
  clearTimeout(statusTimer);
  statusTimer = setTimeout(() => (status.textContent = ""), STATUS_MS);
}

export function errorBox(error) {
  return h("p", { class: "error", role: "alert" }, error.message || String(error));
}

// A confirmation in the page's own words; window.confirm is keyboard-accessible and blocks the action.
export function confirmed(question) {
  return window.confirm(question);
}

const UNIT_MS = { ns: 1e-6, us: 1e-3, "µs": 1e-3, ms: 1, s: 1000, m: 60000, h: 3600000 };

// A Go duration as the API prints it ("1m0s", "24h0m0s", "1.5s") in milliseconds.
export function durationMs(text) {
  let total = 0;
  for (const m of String(text || "").matchAll(/(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)/g)) total += Number(m[1]) * UNIT_MS[m[2]];
  return total;
}

// Re-renders `container` by `render()` and puts the keyboard focus back where it was (same place in
// the new content): a live refresh must not throw a keyboard user back to the top of the page.
export function refreshKeepingFocus(container, render) {
  const focused = document.activeElement;
  if (!focused || focused === container || !container.contains(focused)) return render();
  const path = [];
  for (let el = focused; el !== container; el = el.parentElement) {
    path.unshift(Array.prototype.indexOf.call(el.parentElement.children, el));
  }
  render();
  let target = container;
  for (const i of path) target = target?.children[i];
  if (target && typeof target.focus === "function") target.focus({ preventScroll: true });
}
