-- 20_tables: the tables, their indexes and their comments.
--
-- graphs holds one row per graph (the per-graph lock of the append path, and its
-- current frontier); nodes is the append-only log; edges, key_versions and key_heads
-- are derived from nodes by its insert triggers in the writing statement
-- (40_derive.sql); frontier_spans, the frontier's history, and kind_counts, running
-- counts by kind, behind a watermark (graphs.derived_length), by the write that takes
-- the graph derive_lag() nodes past it, or by cwstore.derive_v1;
-- frontier_declarations records frontiers declared by writers; tenant_members says
-- which roles belong to which tenant (50_tenancy.sql); listeners who follows the
-- channel cwstore (80_listeners.sql).
--
-- Every unique key of a table keyed by graph begins with graph_id, so each graph's rows
-- can live together on one node of a distributed PostgreSQL (docs/scaling.md). A
-- graph's graph_id is derived from its name (cwstore.graph_key(name, key_probe)), so a
-- name finds its graph's row by the keys of its chain (cwstore.graph_id_of), and
-- graph_key_detours records the keys a chain passed over; erasures is the audit record
-- of erased graphs (90_erasure.sql).
--
-- The tables an append writes carry no CHECK constraints: PostgreSQL reads a table's
-- CHECK expressions back from their text and prepares them again in every statement
-- that writes a row, a tenth of a single-node append. A node row's own rules (its
-- sequence, id, kind, createdAt and resourceKey) are checked by the nodes trigger
-- (cwstore._node_row_check, 30_guards.sql), refusing as those constraints did (23514,
-- nodes_seq_check ... nodes_resource_key_check); the rows derived from nodes (edges,
-- key versions, the graph's length) are written by that trigger only, from nodes that
-- passed its rules.

-- Each life of a graph gets a number of its own, so that what follows one life (a tail,
-- a remembered prefix) can tell it from the next life of the same name. A sequence:
-- only uniqueness matters, holes do not. It starts above every graph_id (48 bits): a
-- database migrated from before lives numbered its graphs' lives by their graph_id.
CREATE SEQUENCE cwstore.graph_incarnations AS bigint START WITH 281474976710656;

CREATE TABLE cwstore.graphs (
  graph_id     bigint NOT NULL,
  name         text NOT NULL,
  tenant       text NOT NULL DEFAULT 'default',
  vocabulary   text[],
  length       bigint NOT NULL DEFAULT 0,
  created_at   timestamptz NOT NULL DEFAULT now(),
  key_probe    integer NOT NULL DEFAULT 0,
  incarnation  bigint NOT NULL DEFAULT nextval('cwstore.graph_incarnations'),
  written_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  retention_group text
    DEFAULT nullif(pg_catalog.current_setting('cwstore.retention_group', true), ''),
  frontier_seqs bigint[] NOT NULL DEFAULT '{}',
  derived_length bigint NOT NULL DEFAULT 0,
  CONSTRAINT graphs_pkey PRIMARY KEY (graph_id)
);
-- The graphs of a retention group (cwstore._idle, erase_idle_v1): a group is looked up
-- within its tenant.
CREATE INDEX graphs_retention_group_idx ON cwstore.graphs (tenant, retention_group)
  WHERE retention_group IS NOT NULL;
COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name, key_probe), key_probe 0 unless another name held that key; incarnation tells this life of the graph from a later one of the same name. written_at is when the last write''s last statement moved its length (clock_timestamp(); its creation before any): retention measures idleness from it. retention_group, set at creation from the setting cwstore.retention_group, makes graphs one unit for retention (idle and erased together). frontier_seqs is the current frontier (its heads'' sequences, in order), kept by every write. derived_length is the watermark of frontier_spans and kind_counts, which hold the frontier''s history and the counts by kind through node derived_length; reads as of a later node fold the nodes after it (fewer than cwstore.derive_lag()). The row is the per-graph lock of the append path.';

CREATE TABLE cwstore.graph_key_detours (
  slot      bigint NOT NULL,
  graph_id  bigint NOT NULL,
  CONSTRAINT graph_key_detours_pkey PRIMARY KEY (slot, graph_id)
);
COMMENT ON TABLE cwstore.graph_key_detours IS
  'Keys a graph''s chain passed over: graph graph_id (key_probe > 0) found slot held by another name when it was created, so finding its name goes on past slot even once slot is free. Written when such a graph is created, removed when it is erased.';

CREATE TABLE cwstore.erasures (
  erasure_id   bigint GENERATED ALWAYS AS IDENTITY,
  graph_id     bigint NOT NULL,
  incarnation  bigint NOT NULL,
  tenant       text NOT NULL,
  nodes        bigint NOT NULL,
  erased_at    timestamptz NOT NULL DEFAULT now(),
  erased_by    name NOT NULL DEFAULT session_user,
  reason       text,
  xid          bigint NOT NULL,
  CONSTRAINT erasures_pkey PRIMARY KEY (graph_id, erasure_id),
  CONSTRAINT erasures_reason_check CHECK (octet_length(reason) <= 1000)
);
CREATE INDEX erasures_xid_idx ON cwstore.erasures (xid);
COMMENT ON TABLE cwstore.erasures IS
  'The audit record of erased graphs, one row each, append-only: the graph''s key (not its name, often personal data), which life of it, its tenant, how many nodes it held, when, by which login role, the reason given, and xid, its place in the all-graphs feed. Inserting a row is the erasure: its trigger removes the graph (90_erasure.sql). Nothing of the content is kept.';

CREATE TABLE cwstore.nodes (
  graph_id         bigint NOT NULL,
  seq              bigint NOT NULL,
  id               text COLLATE "C" NOT NULL,
  kind             text NOT NULL,
  parents          text[] NOT NULL,
  payload_text     text NOT NULL,
  created_at_text  text NOT NULL,
  created_at       timestamptz GENERATED ALWAYS AS (cwstore.parse_time(created_at_text)) STORED,
  resource_key     text COLLATE "C",
  recorded_at      timestamptz NOT NULL DEFAULT now(),
  xid              bigint NOT NULL DEFAULT pg_current_xact_id()::text::bigint,
  CONSTRAINT nodes_pkey PRIMARY KEY (graph_id, seq),
  CONSTRAINT nodes_id_key UNIQUE (graph_id, id)
);
COMMENT ON TABLE cwstore.nodes IS
  'Append-only node log. seq is gapless per graph from 1. payload_text is the exact JSON the runtime wrote (member order, numbers, \u0000), stored once; cwstore.payload_jsonb(payload_text) (the payload column of node_view) is its queryable jsonb, usable in expression indexes. created_at_text is the runtime''s createdAt byte for byte, created_at its parsed value, recorded_at when the database stored the node, xid orders the all-graphs feed: the writing transaction''s 64-bit id, raised when needed to the graph''s previous node''s so it never goes back within a graph (append_v1 does this; see tail_all).';

-- Partial, so that only a condition on created_at can use it. A plan made while the
-- table was tiny (a plpgsql function's generic plan, kept for the connection's life)
-- finds every index that leads with graph_id equally cheap, and takes the one made last:
-- this one, had it no predicate, and every later lookup by id or seq through that plan
-- read the graph's whole range here. Any index on nodes after nodes_id_key must be
-- partial too (tests/db/test_stale_plans.py).
CREATE INDEX nodes_created_at_idx ON cwstore.nodes (graph_id, created_at)
  WHERE created_at IS NOT NULL;
-- A key's versions in order, with their ids: a run of versions (a LangGraph message
-- list, a key's history) is one index range scan, not a descent per version.
CREATE INDEX nodes_key_idx ON cwstore.nodes (graph_id, resource_key, seq)
  INCLUDE (id) WHERE resource_key IS NOT NULL;
-- Transactions write their rows together and xids grow with time, so a block-range
-- index finds "rows after this xid" at almost no cost to writers.
CREATE INDEX nodes_xid_idx ON cwstore.nodes USING brin (xid) WITH (autosummarize = on);

CREATE TABLE cwstore.edges (
  graph_id    bigint NOT NULL,
  child_seq   bigint NOT NULL,
  position    integer NOT NULL,
  parent_seq  bigint NOT NULL,
  CONSTRAINT edges_pkey PRIMARY KEY (graph_id, child_seq, position)
);
CREATE INDEX edges_parent_idx ON cwstore.edges (graph_id, parent_seq, child_seq);
COMMENT ON TABLE cwstore.edges IS
  'Parent links by sequence: child''s parents[position] is parent_seq. Written by the nodes trigger only.';

CREATE TABLE cwstore.frontier_spans (
  graph_id  bigint NOT NULL,
  head_seq  bigint NOT NULL,
  from_seq  bigint NOT NULL,
  ord       integer NOT NULL DEFAULT 0,
  to_seq    bigint NOT NULL DEFAULT cwstore.infinity_seq(),
  CONSTRAINT frontier_spans_check CHECK (from_seq < to_seq AND head_seq <= from_seq)
);
-- The current heads: open spans.
CREATE INDEX frontier_spans_current_idx ON cwstore.frontier_spans (graph_id, head_seq)
  WHERE to_seq = cwstore.infinity_seq();
-- The frontier at s, closed spans: see cwstore.span_band (10_helpers.sql) for the box's
-- shape.
CREATE INDEX frontier_spans_closed_idx ON cwstore.frontier_spans
  USING gist (cwstore.span_band(graph_id, from_seq, to_seq))
  WHERE to_seq <> cwstore.infinity_seq();
COMMENT ON TABLE cwstore.frontier_spans IS
  'Frontier history through the graph''s derived_length: node head_seq is a head for sequences from_seq <= s < to_seq. Heads are listed by (from_seq, ord). to_seq = infinity_seq() for heads still open at derived_length. A node''s own span [s, s + 1) is not stored: node s is the last head at s when it folds and no frontier was declared at s, unless a span stored from s says otherwise. cwstore.frontier_at answers at every s (past the watermark it folds the nodes after it, from the last frontier declared there if any); the current frontier is graphs.frontier_seqs.';

CREATE TABLE cwstore.frontier_declarations (
  declaration_id  bigint GENERATED ALWAYS AS IDENTITY,
  graph_id        bigint NOT NULL,
  seq             bigint NOT NULL,
  heads           text[] NOT NULL,
  declared_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT frontier_declarations_pkey PRIMARY KEY (graph_id, declaration_id)
);
CREATE INDEX frontier_declarations_seq_idx ON cwstore.frontier_declarations (graph_id, seq, declaration_id);
COMMENT ON TABLE cwstore.frontier_declarations IS
  'Frontiers declared by writers (an imported document''s, or one given with an append unless the fold of its own nodes gave that frontier already), exactly as given, at the graph length when declared (the last at a length is the frontier there). One declared past the graph''s derived_length enters frontier_spans when that run is derived.';

CREATE TABLE cwstore.key_versions (
  graph_id  bigint NOT NULL,
  key       text NOT NULL,
  version   integer NOT NULL,
  node_seq  bigint NOT NULL,
  to_seq    bigint NOT NULL
);
-- Versions grow with node_seq along a key, so one index serves "version n" and "the
-- version in force at s"; written only by the nodes trigger, it needs no other key.
CREATE UNIQUE INDEX key_versions_seq_idx ON cwstore.key_versions (graph_id, key, node_seq);
-- The heads of every key at s: a version is the head of its key for
-- node_seq <= s < to_seq, the same validity interval as a frontier span, so the same box
-- index finds every closed version valid at s in one GiST scan; the versions still open
-- are the current heads (key_heads). (Every row is closed: the predicate is from when
-- the open versions were rows too, and holds for all.)
CREATE INDEX key_versions_closed_idx ON cwstore.key_versions
  USING gist (cwstore.span_band(graph_id, node_seq, to_seq))
  WHERE to_seq <> cwstore.infinity_seq();
COMMENT ON TABLE cwstore.key_versions IS
  'Every closed version of every resource key (semantic keys included): version counts from 1 along the chain; the version was the head for node_seq <= s < to_seq. A key''s current version, still open, is its row of key_heads (head_seq, version).';

CREATE TABLE cwstore.key_heads (
  graph_id   bigint NOT NULL,
  key        text NOT NULL,
  head_seq   bigint NOT NULL,
  head_id    text NOT NULL,
  version    integer NOT NULL,
  first_seq  bigint NOT NULL,
  CONSTRAINT key_heads_pkey PRIMARY KEY (graph_id, key)
);
-- Semantic keys of a graph without reading its other resource keys. A partial index,
-- not a LIKE prefix range, because prefix ranges on text only work under the C
-- collation and the database's collation is not ours to choose.
CREATE INDEX key_heads_semantic_idx ON cwstore.key_heads (graph_id, key)
  WHERE starts_with(key, 'semantic:');
COMMENT ON TABLE cwstore.key_heads IS
  'The current head of every resource key, with its version number and the sequence the key first appeared at.';

CREATE TABLE cwstore.kind_counts (
  graph_id  bigint NOT NULL,
  kind      text NOT NULL,
  seq       bigint NOT NULL,
  n         bigint NOT NULL,
  CONSTRAINT kind_counts_pkey PRIMARY KEY (graph_id, kind, seq)
);
COMMENT ON TABLE cwstore.kind_counts IS
  'Running counts by kind, behind the watermark (graphs.derived_length): a row for the last node of its kind in each block of cwstore.count_block() sequences that ends at or before the watermark; n is how many nodes of its kind the graph holds up to and including seq. Counts by kind at any sequence, and the latest node of a kind, are an index lookup here plus at most a block and the watermark''s lag of nodes (cwstore._kind_counts_at).';

CREATE TABLE cwstore.tenant_members (
  tenant    text NOT NULL,
  member    name NOT NULL,
  added_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT tenant_members_pkey PRIMARY KEY (tenant, member),
  CONSTRAINT tenant_members_tenant_check CHECK (tenant <> '')
);
COMMENT ON TABLE cwstore.tenant_members IS
  'Which roles belong to which tenant: member (a role name) and every role that is a member of it may read and write the graphs whose tenant is tenant. Not secret, like pg_auth_members: every cwstore role may read it.';

CREATE UNLOGGED TABLE cwstore.listeners (
  pid     integer NOT NULL,
  since   timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT listeners_pkey PRIMARY KEY (pid)
);
COMMENT ON TABLE cwstore.listeners IS
  'Backends that LISTEN on channel cwstore (cwstore.listen_v1): the nodes trigger sends its wake-up only while this table holds a row. Unlogged: after a crash nobody listens.';

-- No planner statistics on content. ANALYZE copies sample values of a column (its most
-- common values, histogram bounds) into pg_statistic, where they outlive the rows an
-- erasure removes (docs/erasure.md, "What still holds the data"). A statistics target
-- of 0 makes ANALYZE skip the column: these columns hold names, ids, payloads, keys and
-- times written by agents. The plans do not need them: every query of a graph descends
-- an index led by graph_id (whose statistics stay), and a column without statistics
-- gets PostgreSQL's default selectivity. Kept: graph_id, seqs, counts, kind (one of
-- cwstore.node_kinds()), tenant (also in the audit record), xid.
ALTER TABLE cwstore.graphs
  ALTER COLUMN name SET STATISTICS 0,
  ALTER COLUMN vocabulary SET STATISTICS 0,
  ALTER COLUMN created_at SET STATISTICS 0,
  ALTER COLUMN written_at SET STATISTICS 0,
  ALTER COLUMN retention_group SET STATISTICS 0;
ALTER TABLE cwstore.nodes
  ALTER COLUMN id SET STATISTICS 0,
  ALTER COLUMN parents SET STATISTICS 0,
  ALTER COLUMN payload_text SET STATISTICS 0,
  ALTER COLUMN created_at_text SET STATISTICS 0,
  ALTER COLUMN created_at SET STATISTICS 0,
  ALTER COLUMN resource_key SET STATISTICS 0,
  ALTER COLUMN recorded_at SET STATISTICS 0;
ALTER TABLE cwstore.frontier_declarations
  ALTER COLUMN heads SET STATISTICS 0,
  ALTER COLUMN declared_at SET STATISTICS 0;
ALTER TABLE cwstore.key_versions ALTER COLUMN key SET STATISTICS 0;
ALTER TABLE cwstore.key_heads
  ALTER COLUMN key SET STATISTICS 0,
  ALTER COLUMN head_id SET STATISTICS 0;
