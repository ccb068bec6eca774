// Persist a StateWeave turn in cwstore from Node.js, then read it back.
//
//   DATABASE_URL=postgresql://user@host:5432/db node persist_turn.mjs [turn.json] [graph]
//
// The StateWeave runtime hands back its whole state (AgentState v1) after each turn.
// What goes to the database is the turn: the nodes the graph does not hold yet, plus
// the frontier after them, against the length the worker last saw (optimistic
// concurrency). Everything goes through one SQL function, cwstore.append_v1, so the
// rules are the ones every cwstore client meets. The schema must exist first
// (`cwstore init --dsn "$DATABASE_URL"`).
//
// To show the whole path, the example saves the document in two turns: the first 8
// nodes, then all of it from a stale view of the graph (as a second worker that read
// the graph before the first turn landed would). The second save meets CW409, re-reads,
// sees the stored graph is a prefix of its state and retries once with the rest.

import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import pg from 'pg';

const file = process.argv[2] ?? new URL('./turn.json', import.meta.url);
const graph = process.argv[3] ?? `node-example-${Date.now()}`;
if (!process.env.DATABASE_URL) {
  console.error('set DATABASE_URL, e.g. postgresql://postgres@127.0.0.1:5432/cwstore');
  process.exit(2);
}

// Graph length, 0 when the graph does not exist yet.
async function storedLength(client) {
  const r = await client.query('SELECT length FROM cwstore.graphs WHERE name = $1', [graph]);
  return r.rows.length ? Number(r.rows[0].length) : 0;
}

// True when the stored graph's first nodes are the first nodes of `state`.
async function isPrefixOf(client, state, length) {
  if (length > state.nodes.length) return false;
  const r = await client.query(
    'SELECT id FROM cwstore.node_view WHERE graph = $1 AND seq <= $2 ORDER BY seq',
    [graph, length],
  );
  return r.rows.every((row, i) => row.id === state.nodes[i].id);
}

// One append: the nodes after `seenLength`, without "sequence" (the database assigns
// it), as compact JSON (payload text is stored exactly as sent), and the frontier
// (null: derived by the default fold).
async function appendTurn(client, state, seenLength, frontier) {
  const nodes = state.nodes.slice(seenLength).map(({ sequence, ...node }) => node);
  const r = await client.query(
    'SELECT * FROM cwstore.append_v1($1, $2::json, $3, $4::json)',
    [graph, JSON.stringify(nodes), seenLength, frontier && JSON.stringify(frontier)],
  );
  return r.rows.filter((row) => row.written).length;
}

// Save a turn. On a conflict: re-read, and retry once if the stored graph is still a
// prefix of our state (our own earlier attempt landed, or a stale read); otherwise the
// turn must be re-run by the agent on the stored state (never patched up here).
async function saveTurn(client, state, seenLength, frontier = state.frontier) {
  for (let attempt = 1; ; attempt++) {
    try {
      const written = await appendTurn(client, state, seenLength, frontier);
      console.log(`  appended ${written} node(s) at expected_length ${seenLength}`);
      return;
    } catch (err) {
      if (err.code !== 'CW409' && err.code !== 'CW410') throw err;
      const detail = JSON.parse(err.detail);
      if (err.code === 'CW409') {
        console.log(`  CW409: graph has ${detail.actual_length} nodes, we expected ${detail.expected_length}`);
      } else {
        // Another worker wrote a new version of detail.key first. Our node's parents
        // name the old head (detail.linked_head); the agent must re-create it with
        // detail.current_head among its parents (a new id), so re-run the turn.
        console.log(`  CW410: key ${detail.key} moved from ${detail.linked_head} to ${detail.current_head}`);
      }
      if (attempt > 1) throw err;
      seenLength = await storedLength(client);
      if (!(await isPrefixOf(client, state, seenLength))) {
        throw new Error(`graph ${graph} moved on (length ${seenLength}): reload it and re-run the turn`);
      }
      console.log(`  re-read: the stored ${seenLength} nodes are a prefix of our state; retrying`);
    }
  }
}

// Read the graph back as an AgentState document.
async function loadState(client) {
  const nodes = await client.query(
    `SELECT id, kind, parents, payload_text, created_at_text, seq, resource_key
       FROM cwstore.node_view WHERE graph = $1 ORDER BY seq`,
    [graph],
  );
  const frontier = await client.query(
    'SELECT id FROM cwstore.frontier_at($1) ORDER BY position',
    [graph],
  );
  return {
    version: 1,
    nodes: nodes.rows.map((r) => ({
      id: r.id,
      kind: r.kind,
      parents: r.parents,
      payload: JSON.parse(r.payload_text),
      createdAt: r.created_at_text,
      sequence: Number(r.seq),
      ...(r.resource_key === null ? {} : { resourceKey: r.resource_key }),
    })),
    frontier: frontier.rows.map((r) => r.id),
  };
}

async function main(client, state) {
  const seen = await storedLength(client); // the worker's view before its turns
  if (seen > 0) {
    console.error(`graph ${graph} already holds ${seen} nodes; this example writes a new graph`);
    return 2;
  }
  console.log(`graph ${graph}: new; the state has ${state.nodes.length} nodes`);

  console.log('turn 1: the first 8 nodes');
  const first = { ...state, nodes: state.nodes.slice(0, 8) };
  await saveTurn(client, first, seen, null);

  console.log('turn 2: the whole state, from the stale length read before turn 1');
  await saveTurn(client, state, seen);

  console.log('the same call again, as a retry after a lost reply: idempotent');
  await saveTurn(client, state, 8);

  const back = await loadState(client);
  assert.deepStrictEqual(back, state);
  assert.equal(JSON.stringify(back), JSON.stringify(state)); // member order too
  console.log(`OK: ${back.nodes.length} nodes and the frontier read back equal the input`);
  return 0;
}

const state = JSON.parse(await readFile(file, 'utf8'));
const client = new pg.Client({ connectionString: process.env.DATABASE_URL });
try {
  await client.connect();
  process.exitCode = await main(client, state);
} catch (err) {
  if (err.code === '3F000' || err.code === '42883' || err.code === '42P01') {
    console.error(`no cwstore schema in this database: run  cwstore init --dsn "$DATABASE_URL"  (${err.message})`);
  } else {
    console.error(`failed: ${err.code ? `${err.code} ` : ''}${err.message}`);
  }
  process.exitCode = 1;
} finally {
  await client.end();
}
