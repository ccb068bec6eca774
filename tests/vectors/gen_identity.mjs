#!/usr/bin/env node
// Generates tests/vectors/identity.json: identity test vectors for cwstore,
// computed with Node's own String.prototype.localeCompare (ICU), exactly as the
// StateWeave runtime computes node ids.
//
//   id = "cw_" + hex(SHA-256(UTF-8(S({kind, parents, payload, resourceKey}))))[0:24]
//
// Run from the repository root (see tests/vectors/README.md):
//
//   LANG=en_US.UTF-8 node tests/vectors/gen_identity.mjs
//
// The file is written only after every self-check below has passed; with
// `--stdout` the JSON is printed instead of written.
//
// Environment: CWSTORE_EXAMPLE may point at another copy of the runtime's example
// document (default: tests/support/stateweave_turn.json in this repository).

import { createHash } from "node:crypto";
import { readFileSync, writeFileSync, existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const HERE = dirname(fileURLToPath(import.meta.url));
const REPO = resolve(HERE, "..", "..");
const OUT = join(HERE, "identity.json");
const EXAMPLE = process.env.CWSTORE_EXAMPLE
  ? resolve(process.env.CWSTORE_EXAMPLE)
  : join(REPO, "tests", "support", "stateweave_turn.json");

// --- environment checks ------------------------------------------------------

const defaultLocale = new Intl.Collator().resolvedOptions().locale;
if (defaultLocale !== "en-US") {
  console.error(
    `gen_identity: default ICU locale is ${JSON.stringify(defaultLocale)}, expected "en-US". ` +
      "Run with LANG=en_US.UTF-8 (and no LC_ALL/LC_COLLATE overriding it).",
  );
  process.exit(2);
}

// --- the runtime's stable serialization (own implementation) -----------------

function S(value) {
  if (value === undefined) return "null";
  if (value === null || typeof value === "string" || typeof value === "boolean") {
    return JSON.stringify(value);
  }
  if (typeof value === "number") {
    return Number.isFinite(value) ? String(value) : JSON.stringify(String(value));
  }
  if (Array.isArray(value)) {
    return "[" + value.map((item) => S(item)).join(",") + "]";
  }
  if (typeof value === "object") {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => a.localeCompare(b));
    return "{" + entries.map(([k, v]) => JSON.stringify(k) + ":" + S(v)).join(",") + "}";
  }
  throw new TypeError(`S: unsupported type ${typeof value}`);
}

function canonicalOf({ kind, parents, payload, resourceKey }) {
  // Same insertion order as the runtime: kind, parents, payload, resourceKey.
  return S({ kind, parents, payload, resourceKey });
}

function idOf(canonical) {
  return "cw_" + createHash("sha256").update(canonical, "utf8").digest("hex").slice(0, 24);
}

// --- case collection ---------------------------------------------------------

const KINDS = [
  "system",
  "goal",
  "inference",
  "answer",
  "tool_call",
  "tool_result",
  "resource",
  "semantic",
  "protocol_error",
  "verification",
];

const cases = [];
const byName = new Map();
const groups = [];

function add(name, kind, parents, payload, resourceKey) {
  assert.ok(!byName.has(name), `duplicate case name ${name}`);
  assert.ok(KINDS.includes(kind), `unknown kind ${kind}`);
  const input = { kind, parents, payload };
  if (resourceKey !== undefined) input.resourceKey = resourceKey;
  const canonical = canonicalOf(input);
  // The consumers (Python) only see the JSON round-trip of `input`; the
  // canonical form computed from that round-trip must be the same string,
  // otherwise the vector would not be reproducible from the file.
  const roundTripped = JSON.parse(JSON.stringify(input));
  const canonical2 = canonicalOf(roundTripped);
  assert.equal(canonical2, canonical, `case ${name}: canonical changes after JSON round-trip`);
  const c = { name, input: roundTripped, canonical, id: idOf(canonical) };
  cases.push(c);
  byName.set(name, c);
  return c.id;
}

// Inputs the runtime hashes happily but a Python store may refuse as not
// representable (the JSON file still records what the runtime computes).
const LONE = "lone surrogate: not valid Unicode, cannot be UTF-8 encoded in Python";
const NONFINITE = "non-finite number: JSON.parse overflows to Infinity";
const INEXACT = "integer literal beyond 2**53 that a double cannot hold exactly";
function refusable(name, reason) {
  const c = byName.get(name) ?? payloadTexts.find((p) => p.name === name);
  assert.ok(c, `refusable: no case ${name}`);
  c.refusable = reason;
}

/** Cases whose ids must be equal (same content, different insertion order). */
function sameGroup(description, names) {
  const ids = names.map((n) => byName.get(n).id);
  assert.ok(ids.every((i) => i === ids[0]), `group ${description}: ids differ: ${ids}`);
  groups.push({ description, cases: names, sameId: true });
}

/** Cases whose ids must differ although only insertion order differs (collation ties). */
function differentGroup(description, names) {
  const ids = names.map((n) => byName.get(n).id);
  assert.equal(new Set(ids).size, ids.length, `group ${description}: ids unexpectedly equal`);
  groups.push({ description, cases: names, sameId: false });
}

const sortParents = (ps) => [...ps].sort(); // plain code-unit order, as the runtime does

// --- 1. the runtime's own example turn ---------------------------------------

if (!existsSync(EXAMPLE)) {
  console.error(`gen_identity: example file not found: ${EXAMPLE} (set CWSTORE_EXAMPLE)`);
  process.exit(2);
}
const example = JSON.parse(readFileSync(EXAMPLE, "utf8"));
assert.equal(example.nodes.length, 16, "expected 16 example nodes");
example.nodes.forEach((node, i) => {
  const name = `example #${String(node.sequence ?? i + 1).padStart(2, "0")} ${node.kind}`;
  const id = add(name, node.kind, node.parents, node.payload, node.resourceKey);
  if (id !== node.id) {
    console.error(`gen_identity: FAIL ${name}: computed ${id}, runtime said ${node.id}`);
    console.error(`canonical: ${byName.get(name).canonical}`);
    process.exit(1);
  }
});

// --- 2. every kind, parents 0/1/many, with/without resourceKey ---------------

const sysId = add("kind system, no parents, string payload", "system", [], "You are a test agent.");
const goalId = add("kind goal, one parent", "goal", [sysId], "Make the tests pass.");
const infId = add(
  "kind inference, two parents, object payload",
  "inference",
  sortParents([sysId, goalId]),
  { text: "The config lives in src/config.js.", confidence: 0.8 },
);
const callId = add(
  "kind tool_call, realistic with args",
  "tool_call",
  sortParents([sysId, goalId, infId]),
  {
    name: "edit_file",
    args: {
      file_path: "src/server.js",
      old_string: "const port = 3000;",
      new_string: "import { port } from \"./config.js\";",
      replace_all: false,
    },
    raw: 'TOOL_CALL {"name":"edit_file","args":{"file_path":"src/server.js","old_string":"const port = 3000;","new_string":"import { port } from \\"./config.js\\";","replace_all":false}}',
  },
);
const resultId = add("kind tool_result, one parent", "tool_result", [callId], {
  tool: "edit_file",
  result: { ok: true, path: "src/server.js", replacements: 1, content_hash: "0".repeat(64) },
});
const resId = add(
  "kind resource, with resourceKey",
  "resource",
  [resultId],
  { path: "src/server.js", operation: "edit_file", contentHash: "0".repeat(64), succeeded: true },
  "src/server.js",
);
const semId = add(
  "kind semantic, realistic memory with resourceKey",
  "semantic",
  sortParents([resId, resultId]),
  { type: "memory", key: "server.port-source", content: "src/server.js imports port from src/config.js." },
  "semantic:memory:server.port-source",
);
const verId = add("kind verification, several parents", "verification", sortParents([resId, resultId, callId, semId]), {
  method: "post_mutation_read",
  path: "src/server.js",
});
add("kind protocol_error, object payload", "protocol_error", [infId], {
  error: "unparseable TOOL_CALL",
  raw: "TOOL_CALL {\"name\":\"read_file\",\"args\":{",
  position: 38,
});
add("kind protocol_error, string payload, no parents", "protocol_error", [], "model emitted no TOOL_CALL or ANSWER");
add(
  "kind answer, six parents",
  "answer",
  sortParents([sysId, goalId, infId, callId, resultId, verId]),
  "Done: server.js now imports the port.",
);
add("kind goal, parents not from this file (valid form)", "goal", sortParents([
  "cw_ffffffffffffffffffffffff",
  "cw_000000000000000000000000",
  "cw_0123456789abcdef01234567",
  "cw_a0a0a0a0a0a0a0a0a0a0a0a0",
]), "Parents are sorted by plain string order.");
add("resourceKey present on a system node", "system", [], "odd but allowed", "sys:1");
add("resourceKey empty string is present (not omitted)", "resource", [], { path: "" }, "");
add("resourceKey with non-ASCII and quotes", "resource", [], { path: "docs/naïve \"quoted\".md" }, "docs/naïve \"quoted\".md");
add(
  "semantic artifact with object content",
  "semantic",
  [semId],
  { type: "artifact", key: "src/server.js", content: { path: "src/server.js", summary: "HTTP server entrypoint", lines: 42 } },
  "semantic:artifact:src/server.js",
);
add(
  "semantic wisdom",
  "semantic",
  [],
  { type: "wisdom", key: "verify-after-write", content: "Always read a file back after writing it." },
  "semantic:wisdom:verify-after-write",
);

// --- 3. payload types --------------------------------------------------------

add("payload string empty", "answer", [], "");
add("payload null", "inference", [], null);
add("payload true", "verification", [], true);
add("payload false", "verification", [], false);
add("payload empty array", "inference", [], []);
add("payload empty object", "inference", [], {});
add("payload array of mixed scalars", "inference", [], [1, "two", null, true, false, 0.5, [], {}]);
add("payload undefined array item serializes as null", "inference", [], [1, undefined, 2]);
add("payload undefined object member is dropped", "inference", [], { a: 1, gone: undefined, z: 2 });

// --- 4. numbers --------------------------------------------------------------

const NUMBERS = [
  ["0", 0],
  ["-0", -0],
  ["1e21", 1e21],
  ["1e-7", 1e-7],
  ["1e-6", 1e-6],
  ["123e-20", 123e-20],
  ["0.1", 0.1],
  ["0.30000000000000004", 0.30000000000000004],
  ["5e-324", 5e-324],
  ["1.7976931348623157e308", 1.7976931348623157e308],
  ["-0.5", -0.5],
  ["2**53-1", 2 ** 53 - 1],
  ["-(2**53-1)", -(2 ** 53 - 1)],
  ["1.5", 1.5],
  ["100", 100],
  ["1e20", 1e20],
  ["123456789012345680000", 123456789012345680000],
  ["2**53", 2 ** 53],
  ["2**64", 2 ** 64],
  ["-1e-7", -1e-7],
  ["1e100", 1e100],
  ["0.000001234", 0.000001234],
  ["4.35", 4.35],
  ["-1e21", -1e21],
];
for (const [label, n] of NUMBERS) add(`number ${label}`, "tool_result", [], n);
add("numbers all in one array", "tool_result", [], NUMBERS.map(([, n]) => n));
add("numbers as object values", "tool_result", [], Object.fromEntries(NUMBERS.map(([label, n]) => [label, n])));

// --- 5. strings --------------------------------------------------------------

add("string control characters", "tool_result", [], "nul:\u0000 us:\u001f del:\u007f ls:\u2028 ps:\u2029 end");
add("string JSON short escapes", "tool_result", [], "\b\f\n\r\t");
add("string every C0 control", "tool_result", [], Array.from({ length: 32 }, (_, i) => String.fromCharCode(i)).join(""));
add("string quotes and backslashes", "tool_result", [], 'she said "hi" \\ C:\\path\\to\\file \\"x\\" \'single\'');
add("string non-Latin scripts", "answer", [], "Привет Γειά 你好 مرحبا שלום 안녕하세요");
add("string astral characters", "answer", [], "\u{1F600} \u{10400} \u{20000} \u{1F468}\u200D\u{1F469}\u200D\u{1F467}");
add("string lone surrogates are escaped", "answer", [], "hi \ud800 and \udc00 and \udbff\udfff");
refusable("string lone surrogates are escaped", LONE);
add("string precomposed and decomposed e-acute differ", "answer", [], ["\u00e9", "e\u0301"]);
add("string long 10000 chars", "tool_result", [], "abcdefghij\u00e9\u4e2d\u{1F600}".repeat(800).slice(0, 10000));
add("string slash and html-ish chars not escaped", "tool_result", [], "</script> & <b> / \u00a0 \u00ad");

// --- 6. key ordering ---------------------------------------------------------

add("keys case: b vs C", "inference", [], { C: 1, b: 2, a: 3, B: 4, c: 5, A: 6 });
add("keys apiKeyRef vs api_key_ref", "tool_call", [], {
  api_key_ref: "env:KEY",
  apiKeyRef: "env:KEY",
  apikeyref: 0,
  ApiKeyRef: 1,
  "api-key-ref": 2,
  "api.key.ref": 3,
  "api:key:ref": 4,
  api_key: 5,
  apiKey: 6,
});
add("keys punctuation _ - . : and friends", "inference", [], {
  "a.b": 1,
  "a-b": 2,
  "a_b": 3,
  "a:b": 4,
  ab: 5,
  "a b": 6,
  "a/b": 7,
  "a@b": 8,
  "a#b": 9,
  "a$b": 10,
  "a~b": 11,
  "a+b": 12,
  "a=b": 13,
  "a,b": 14,
  "a;b": 15,
  "a!b": 16,
  "a?b": 17,
  "a(b": 18,
  "a[b": 19,
  "a{b": 20,
  "a|b": 21,
  "a*b": 22,
  "a&b": 23,
  "a%b": 24,
  "a^b": 25,
  "a`b": 26,
  "a'b": 27,
  _: 28,
  "-": 29,
  ".": 30,
  ":": 31,
});
add("keys snake vs camel vs kebab", "tool_result", [], {
  content_hash: 1,
  contentHash: 2,
  "content-hash": 3,
  file_path: 4,
  filePath: 5,
  exit_code: 6,
  exitCode: 7,
  stdout: 8,
  std_out: 9,
});
add("keys digits and integer-like", "inference", [], {
  b: "b",
  "10": "ten",
  "9": "nine",
  "0": "zero",
  "01": "zero-one",
  "4294967295": "2^32-1 (not an array index)",
  "4294967294": "2^32-2 (array index)",
  "-1": "minus one",
  "1a": "one-a",
  a1: "a-one",
  "1.5": "one-point-five",
  "2": "two",
  "100": "hundred",
  "007": "bond",
  "1e3": "exp",
});
add("keys integer-like vs equal-collating non-integer (JS property order wins)", "inference", [], {
  "1\u0000": "inserted first, collates equal to 1",
  "1": "integer key, JS iterates it first",
});
add("keys accented", "inference", [], { f: 1, "\u00e9": 2, E: 3, e: 4, "\u00c9": 5, "\u00ea": 6, "\u00e8": 7, "\u00eb": 8, d: 9, "\u00e9a": 10, eb: 11 });

// Collation ties: U+00E9 and U+0065 U+0301 are canonically equivalent, so
// localeCompare returns 0 and the stable sort keeps JS insertion order.
add("tie precomposed-first", "semantic", [], { z: 0, "\u00e9": "precomposed", "e\u0301": "decomposed", a: 0 });
add("tie decomposed-first", "semantic", [], { z: 0, "e\u0301": "decomposed", "\u00e9": "precomposed", a: 0 });
differentGroup("precomposed vs decomposed e-acute collate equal: insertion order decides, ids differ", [
  "tie precomposed-first",
  "tie decomposed-first",
]);
add("tie a-first vs a-NUL", "semantic", [], { b: 1, a: "plain", "a\u0000": "with NUL" });
add("tie a-NUL-first vs a", "semantic", [], { b: 1, "a\u0000": "with NUL", a: "plain" });
differentGroup("\"a\" and \"a\\u0000\" collate equal: insertion order decides, ids differ", [
  "tie a-first vs a-NUL",
  "tie a-NUL-first vs a",
]);
add("tie ignorables: empty, C0 controls, DEL, ZWSP, BOM, soft hyphen", "semantic", [], {
  x: 0,
  "\u0001": "SOH",
  "": "empty",
  "\u001f": "US",
  "\u007f": "DEL",
  "\u200b": "ZWSP",
  "\ufeff": "BOM",
  "\u00ad": "SHY",
  " ": "space (not ignorable)",
});
add("tie canonical equivalents: Hangul, Angstrom, combining order", "semantic", [], {
  "\u1100\u1161": "jamo",
  "\uac00": "syllable",
  "\u212b": "angstrom sign",
  "\u00c5": "A-ring",
  "A\u030a": "A + ring",
  "a\u0323\u0301": "dot-below then acute",
  "a\u0301\u0323": "acute then dot-below",
});
add("keys tertiary differences: sharp s, ligature, fullwidth, dotted I", "semantic", [], {
  ss: 1,
  "\u00df": 2,
  fi: 3,
  "\ufb01": 4,
  A: 5,
  "\uff21": 6,
  I: 7,
  "\u0130": 8,
  i: 9,
  "\u0131": 10,
  st: 11,
});
add("keys non-Latin scripts", "semantic", [], {
  "\u4e2d\u6587": "CJK",
  "\u0436": "Cyrillic zhe",
  "\u0410": "Cyrillic A",
  "\u03b1": "Greek alpha",
  "\u0391": "Greek Alpha",
  "\u0627\u0644\u0639\u0631\u0628\u064a\u0629": "Arabic",
  "\u05e2\u05d1\u05e8\u05d9\u05ea": "Hebrew",
  "\ud55c\uad6d\uc5b4": "Hangul",
  "\u65e5\u672c": "CJK 2",
  "\u3042": "Hiragana",
  "\u0e44\u0e17\u0e22": "Thai",
  "\u0939\u093f\u0928\u094d\u0926\u0940": "Devanagari",
  z: "Latin z",
  a: "Latin a",
});
add("keys emoji and astral", "semantic", [], {
  "\u{1F600}": "grinning",
  "\u{10400}": "Deseret",
  "\u{20000}": "CJK ext B",
  "\u{1F601}": "grin",
  "\u2603": "snowman (BMP)",
  "\u{1F468}\u200D\u{1F469}": "ZWJ seq",
  a: "a",
  "0": "zero",
  "\ue000": "private use",
  "\uffff": "noncharacter",
});
add("keys empty string", "semantic", [], { b: 1, "": "empty", a: 2 });
add("keys quotes and backslashes", "semantic", [], {
  'a"b': 1,
  "a\\b": 2,
  "\"": 3,
  "\\": 4,
  "'": 5,
  "\n": 6,
  "\t": 7,
  "a\nb": 8,
});
add("keys whitespace", "semantic", [], { "a b": 1, "a\tb": 2, "a\u00a0b": 3, "a\u3000b": 4, ab: 5, " a": 6, "a ": 7 });
add("keys lone surrogates", "semantic", [], { "\ud800": 1, "\udc00": 2, "x\ud800": 3, x: 4, "\ud7ff": 5, "\ue000": 6 });
refusable("keys lone surrogates", LONE);

// --- 7. nesting and size -----------------------------------------------------

add("nested objects in arrays in objects (12 levels)", "tool_result", [], {
  zeta: [{ Beta: { alpha: [1, { "\u00e9": [{ b: { a: [{ C: { c: [null, { "10": { "9": ["deep", { _: true }] } }] } }] } }] }] } }],
  alpha: { list: [{ y: 1, x: 2 }, [{ B: 0, a: 0 }], "s"] },
});
let deep = { leaf: "bottom", Leaf: 0 };
for (let i = 39; i >= 1; i--) deep = { [`k${i}`]: deep, [`K${i}`]: i, [`_${i}`]: [i] };
add("nested 40 levels", "tool_result", [], deep);
let deepArr = "x";
for (let i = 0; i < 40; i++) deepArr = [deepArr, i];
add("nested 40 levels of arrays", "tool_result", [], deepArr);

// Many keys, scrambled insertion order (deterministic LCG shuffle).
const manyKeys = [];
for (let i = 0; i < 60; i++) {
  const variants = [`key${i}`, `Key_${i}`, `k-${i}`, `k.${i}`, `${i}`, `\u00e9t\u00e9${i}`, `Z${i}`, `a${i % 7}b${i}`];
  manyKeys.push(variants[i % variants.length]);
}
function shuffled(arr, seed) {
  const a = [...arr];
  let s = seed >>> 0;
  for (let i = a.length - 1; i > 0; i--) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const j = s % (i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}
const manyA = Object.fromEntries(shuffled(manyKeys, 7).map((k) => [k, `v:${k}`]));
const manyB = Object.fromEntries(shuffled(manyKeys, 99).map((k) => [k, `v:${k}`]));
assert.ok(Object.keys(manyA).length >= 50);
add("order-A: many keys (60) scrambled", "tool_result", [], manyA);
add("order-B: many keys (60) scrambled differently", "tool_result", [], manyB);
sameGroup("60 keys in two scrambled insertion orders", [
  "order-A: many keys (60) scrambled",
  "order-B: many keys (60) scrambled differently",
]);

// --- 8. same content, different insertion order ------------------------------

add("order-A: flat object", "inference", [], { b: 1, a: 2, C: 3, _x: 4, "10": 5, "9": 6 });
add("order-B: flat object", "inference", [], { C: 3, "9": 6, _x: 4, a: 2, "10": 5, b: 1 });
sameGroup("flat object", ["order-A: flat object", "order-B: flat object"]);

add("order-A: tool_call args", "tool_call", [sysId], {
  name: "write_file",
  args: { file_path: "a.txt", content: "hi\n", mode: "0644" },
  raw: "TOOL_CALL ...",
});
add("order-B: tool_call args", "tool_call", [sysId], {
  raw: "TOOL_CALL ...",
  args: { mode: "0644", content: "hi\n", file_path: "a.txt" },
  name: "write_file",
});
add("order-C: tool_call args", "tool_call", [sysId], {
  args: { content: "hi\n", file_path: "a.txt", mode: "0644" },
  name: "write_file",
  raw: "TOOL_CALL ...",
});
sameGroup("tool_call payload", ["order-A: tool_call args", "order-B: tool_call args", "order-C: tool_call args"]);

add("order-A: nested with unicode keys", "semantic", [], {
  type: "memory",
  key: "k",
  content: { "\u00e9": [{ "\u0436": 1, "\u{1F600}": 2 }], e: { Z: 1, y: 2 }, f: null },
}, "semantic:memory:k");
add("order-B: nested with unicode keys", "semantic", [], {
  content: { f: null, e: { y: 2, Z: 1 }, "\u00e9": [{ "\u{1F600}": 2, "\u0436": 1 }] },
  key: "k",
  type: "memory",
}, "semantic:memory:k");
sameGroup("nested semantic payload with unicode keys", [
  "order-A: nested with unicode keys",
  "order-B: nested with unicode keys",
]);

// --- 9. payloads given as JSON text ------------------------------------------
// Values that JSON.stringify can never emit but a JSON parser can read
// (e.g. "-0.0", "100.0", "1e400", integers beyond 2**53). Consumers parse
// `json` with their own JSON parser and must reach the same canonical/id as
// JSON.parse + S. Kind tool_result, no parents, no resourceKey.

const payloadTexts = [];
function addText(name, json, reason) {
  assert.ok(!payloadTexts.some((p) => p.name === name), `duplicate text case ${name}`);
  const canonical = canonicalOf({ kind: "tool_result", parents: [], payload: JSON.parse(json) });
  const entry = { name, json, canonical, id: idOf(canonical) };
  if (reason !== undefined) entry.refusable = reason;
  payloadTexts.push(entry);
}
addText("text -0", "-0");
addText("text -0.0", "-0.0");
addText("text 100.0", "100.0");
addText("text 1.0e2", "1.0e2");
addText("text 1E21", "1E21");
addText("text 1e+21", "1e+21");
addText("text 0.1e1", "0.1e1");
addText("text 1e400 overflows to Infinity", "1e400", NONFINITE);
addText("text -1e400 overflows to -Infinity", "-1e400", NONFINITE);
addText("text 1e-400 underflows to 0", "1e-400");
addText("text integer 2**53+1 rounds", "9007199254740993", INEXACT);
addText("text integer 12345678901234567 rounds", "12345678901234567", INEXACT);
addText("text integer 23 digits", "12345678901234567890123", INEXACT);
addText("text integer 2**53 is exact", "9007199254740992");
addText("text integer 1e20 written out is exact", "100000000000000000000");
addText("text 0.30000000000000004 long form", "0.300000000000000044408920985006");
addText("text numbers in object", '{"b":-0.0,"a":[1.0,2.50,1E2,-0],"c":{"x":1.5e300}}');
addText("text non-finite inside object", '{"b":1,"a":[1e400,-1e400]}', NONFINITE);
addText("text duplicate keys, last value wins", '{"b":1,"a":2,"b":3}');
addText("text __proto__ is an ordinary key", '{"__proto__":{"x":1},"a":1,"_":2}');
addText("text escaped surrogate pair", '{"\\ud83d\\ude00":"\\ud83d\\ude00","b\\u0301":"\\u00e9"}');
addText("text escaped lone surrogates", '{"\\ud800":"\\udfff","a":"x\\udc00"}', LONE);
addText("text escapes that JSON.stringify writes raw", '"\\u007f\\u2028\\u2029\\u00e9\\/"');

// --- checks and output -------------------------------------------------------

// Every input holding a lone surrogate or a non-finite number must be tagged.
function oddities(v, acc = new Set()) {
  const lone = (s) => /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/.test(s);
  if (typeof v === "string") { if (lone(v)) acc.add(LONE); }
  else if (typeof v === "number") { if (!Number.isFinite(v)) acc.add(NONFINITE); }
  else if (Array.isArray(v)) v.forEach((x) => oddities(x, acc));
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) { if (lone(k)) acc.add(LONE); oddities(x, acc); }
  return acc;
}
for (const c of cases) {
  const odd = oddities(c.input);
  assert.ok(odd.size === 0 ? c.refusable === undefined : odd.has(c.refusable), `refusable tag wrong on ${c.name}`);
}
for (const p of payloadTexts) {
  const odd = oddities(JSON.parse(p.json));
  if (odd.size > 0) assert.ok(odd.has(p.refusable), `refusable tag missing on ${p.name}`);
}

for (const k of KINDS) assert.ok(cases.some((c) => c.input.kind === k), `kind ${k} not covered`);
assert.ok(cases.length >= 70, `only ${cases.length} cases`);
for (const c of cases) assert.match(c.id, /^cw_[0-9a-f]{24}$/);

// localeCompare must agree with an explicit en-US collator for every key we
// used (guards against a different default locale sneaking in).
const explicit = new Intl.Collator("en-US");
const allKeys = new Set();
(function collect(v) {
  if (Array.isArray(v)) v.forEach(collect);
  else if (v && typeof v === "object") for (const [k, x] of Object.entries(v)) (allKeys.add(k), collect(x));
})(cases.map((c) => c.input));
const keyList = [...allKeys];
for (const a of keyList) for (const b of keyList) {
  assert.equal(Math.sign(a.localeCompare(b)), Math.sign(explicit.compare(a, b)), `collator mismatch ${a} ${b}`);
}

const out = {
  generator: "tests/vectors/gen_identity.mjs",
  node: process.version,
  icu: process.versions.icu,
  unicode: process.versions.unicode,
  scheme:
    'id = "cw_" + hex(sha256(utf8(S({kind, parents, payload, resourceKey}))))[:24]; ' +
    "object keys sorted with String.prototype.localeCompare (ICU, default locale en-US), stable sort",
  groups,
  cases,
  payloadTexts,
};
const text = JSON.stringify(out, null, 1) + "\n";
if (process.argv.includes("--stdout")) {
  process.stdout.write(text);
} else {
  writeFileSync(OUT, text, "utf8");
  console.error(`gen_identity: wrote ${cases.length} cases + ${payloadTexts.length} payloadTexts to ${OUT} (node ${process.version}, icu ${process.versions.icu})`);
}
