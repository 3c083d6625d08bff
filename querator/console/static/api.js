// Calls to the node's v1 JSON API, with the API key of this browser tab (sessionStorage: gone when the tab
// closes, never in a URL, a cookie or a log). Every call is a same-origin fetch with a JSON body: the
// console can do nothing the key could not do with curl.

const KEY_ITEM = "querator.apiKey";
// Extension fields (namespace, dedup window, lease token...) are only sent to clients that ask.
const EXTENSIONS = "3";

export class ApiError extends Error {
  // `keyed`: the refused call carried an API key.
  constructor(status, message, keyed = true) {
    super(message);
    this.status = status;
    this.keyed = keyed;
  }

  // A key is wanted: the key was refused (401), or a call without one was (a node with tenancy answers
  // the anonymous user's calls 403, docs/tenancy.md); a key's own 403 is its permissions, shown as is.
  get needsKey() {
    return this.status === 401 || (this.status === 403 && !this.keyed);
  }
}

export function apiKey() {
  return sessionStorage.getItem(KEY_ITEM) || "";
}

export function setApiKey(key) {
  if (key) sessionStorage.setItem(KEY_ITEM, key);
  else sessionStorage.removeItem(KEY_ITEM);
}

function headers(extra) {
  const h = { ...extra };
  const key = apiKey();
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

const OPTIONS = { credentials: "omit", cache: "no-store", referrerPolicy: "no-referrer", redirect: "error" };

// POST /v1/<route> with `body`; the decoded reply, or an ApiError with the server's message.
export async function call(route, body = {}) {
  const keyed = Boolean(apiKey());
  let response;
  try {
    response = await fetch(`/v1/${route}`, {
      ...OPTIONS,
      method: "POST",
      headers: headers({ "Content-Type": "application/json", Accept: "application/json", "X-Querator-Extensions": EXTENSIONS }),
      body: JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, `the node did not answer (${e.message})`);
  }
  const text = await response.text();
  let reply = {};
  try {
    reply = text ? JSON.parse(text) : {};
  } catch {
    throw new ApiError(response.status, `unexpected reply (${response.status})`);
  }
  if (!response.ok) throw new ApiError(response.status, reply.message || `error ${response.status}`, keyed);
  return reply;
}

// This node's Prometheus metrics, parsed: {name: [{labels, value}]}; null when the node has none here.
export async function metrics() {
  const response = await fetch("/metrics", { ...OPTIONS, headers: headers({ Accept: "text/plain" }) });
  if (response.status === 401) {
    const reply = await response.json().catch(() => ({}));
    throw new ApiError(401, reply.message || "api key is invalid");
  }
  if (!response.ok) return null;
  return parseMetrics(await response.text());
}

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/;
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g;

export function parseMetrics(text) {
  const out = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = SAMPLE.exec(line);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || "").matchAll(LABEL)) {
      labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === "n" ? "\n" : c));
    }
    (out[m[1]] ||= []).push({ labels, value: Number(m[3]) });
  }
  return out;
}

// Every record of a list route that pages from an inclusive pivot (`key` names a record's id): queues,
// schedules, workflows. The pivot comes back first on each next page, so it is dropped. `endsEarly`: the
// route may end a page before `limit` (schedules.list and workflows.list at 4 MiB of records), so only a
// page with nothing after the pivot is the last. `fields`: the request's other fields (a status).
export async function listAll(route, itemsField, key, { pageSize = 1000, endsEarly = false, max = 10000, fields = {} } = {}) {
  const records = [];
  let pivot = "";
  while (records.length < max) {
    const page = (await call(route, { ...fields, pivot, limit: pageSize }))[itemsField] || [];
    const fresh = pivot ? page.filter((r) => r[key] !== pivot) : page;
    records.push(...fresh);
    if ((page.length < pageSize && !endsEarly) || fresh.length === 0) break;
    pivot = page[page.length - 1][key];
  }
  return records;
}

// Every queue of the default namespace.
export function allQueues() {
  return listAll("queues.list", "items", "queue_name");
}

// Text as base64 of its UTF-8 bytes, as JSON carries payloads.
export function base64Of(text) {
  let raw = "";
  for (const b of new TextEncoder().encode(text)) raw += String.fromCharCode(b);
  return btoa(raw);
}
