// A workflows.list filter typed as text: `KEY=VALUE` conditions separated by whitespace, all of which
// must hold (docs/console.md, "Workflows"). A condition is split by the rule of the CLI's --where
// (parse_search_condition in querator/wire/search.py), refusal word for word:
// tests/integration/test_console_workflow_search.py runs that rule's cases through this copy. The
// server checks the keys and values, and its 400 says what is wrong with them.
const INVALID = "search attributes are invalid";
// ASCII whitespace, so that no other character (a no-break space) silently splits a value.
const SPACES = /[ \t\n\r\f\v]+/;

// [key, value]: split at the first "=" (a value may hold more); without one, the refusal.
export function parseSearchCondition(text) {
  const at = text.indexOf("=");
  if (at < 0) throw new Error(`${INVALID}; ${JSON.stringify(text)} is not KEY=VALUE`);
  return [text.slice(0, at), text.slice(at + 1)];
}

// The `search` of workflows.list; a key given twice takes its last value, as the CLI's --where does.
// Built by Object.fromEntries, so that a key such as __proto__ is a key like any other.
export function parseSearchFilter(text) {
  const conditions = new Map();
  for (const condition of text.split(SPACES)) {
    if (!condition) continue;
    const [key, value] = parseSearchCondition(condition);
    conditions.set(key, value);
  }
  return Object.fromEntries(conditions);
}

// Whether `value` can be typed in the filter as it is (whitespace would split it).
export function typable(value) {
  return !SPACES.test(value);
}
