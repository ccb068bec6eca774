-- 0001_baseline: the schema as first released, a frozen copy of cwstore/sql/schema/.
--
-- Frozen history: this file never changes (migrations/RELEASED holds its SHA-256 and a
-- unit test checks it). The truth about the current schema is cwstore/sql/schema/; read
-- that, not this. A change to the schema edits schema/ and adds the next migration
-- (0002_...) as a delta; a test builds one database from schema/ and one from these
-- migrations and fails on any difference between their catalogs.
--
-- Why one file: the pre-release chain (0001_schema .. 0007_notify_listeners) was
-- squashed here before the first release; a database made by that chain is refused by
-- the runner with a MigrationError saying to create a new one and import again.
--
-- What it holds, in this order: the files 10_helpers.sql .. 80_listeners.sql of
-- schema/ as they were, each after a line naming it.
--
-- Safe with live writers: yes (a new database; nothing to upgrade).

-- =================================================================================
-- schema/10_helpers.sql
-- =================================================================================

-- 10_helpers: the schema, and the pure helper functions everything else uses (no
-- table access): the open-span sentinel, payload and JSON text helpers, createdAt
-- parsing, the boxes of the span indexes, a node's JSON text, and the raising of a
-- validation error.
--
-- SQLSTATEs raised: CW400 (cwstore._violation; DETAIL is a JSON object with code,
-- graph_id, seq, index, node_id, path, message).

CREATE SCHEMA IF NOT EXISTS cwstore;

-- ---------------------------------------------------------------------------------
-- helpers
-- ---------------------------------------------------------------------------------

-- The open-span sentinel: the to_seq of a frontier span or key version that is still
-- open. Written as this call everywhere, index predicates included: it is folded into
-- the constant when a statement is planned, so partial indexes still match.
CREATE FUNCTION cwstore.infinity_seq() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 9223372036854775807::bigint $$;
COMMENT ON FUNCTION cwstore.infinity_seq() IS
  'The to_seq of a span that is still open (a current head).';

-- The ten node kinds of AgentState v1, listed once: the nodes table's CHECK, append_v1's
-- validation and the projection's counts read them from here. A call with no argument
-- to an IMMUTABLE function is folded into a constant when a statement is planned, so
-- this costs nothing per row.
CREATE FUNCTION cwstore.node_kinds() RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ARRAY['system', 'goal', 'inference', 'answer', 'tool_call', 'tool_result',
               'resource', 'semantic', 'protocol_error', 'verification']
$$;
COMMENT ON FUNCTION cwstore.node_kinds() IS
  'The ten node kinds of AgentState v1, in the runtime''s order.';

-- The queryable jsonb copy of a payload. jsonb refuses \u0000, so the escape becomes
-- U+FFFD here; payload_text keeps the exact text. Escaped backslash pairs are set
-- aside first so that a literal "\\u0000" (backslash, then u0000) is left alone.
CREATE FUNCTION cwstore.payload_jsonb(payload_text text) RETURNS jsonb
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(payload_text, '\u0000') = 0 THEN payload_text::jsonb
         ELSE replace(replace(replace(payload_text, '\\', E'\x01'), '\u0000', '\ufffd'),
                      E'\x01', '\\')::jsonb END
$$;
COMMENT ON FUNCTION cwstore.payload_jsonb(text) IS
  'jsonb copy of an exact payload text (U+0000 shown as U+FFFD).';

-- PostgreSQL's JSON functions refuse the escape \u0000 when they read a document. To
-- pass such a document through them, _nul_hide rewrites it reversibly: escaped
-- backslashes are doubled and each \u0000 becomes an escaped backslash followed by
-- "u0000"; _nul_show undoes it on any member's text taken out of the hidden document.
CREATE FUNCTION cwstore._nul_hide(doc text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT replace(replace(replace(doc, '\\', E'\x01'), '\u0000', '\\u0000'),
                 E'\x01', '\\\\')
$$;

CREATE FUNCTION cwstore._nul_show(doc text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT replace(replace(replace(doc, '\\\\', E'\x01'), '\\u0000', '\u0000'),
                 E'\x01', '\\')
$$;

-- createdAt is checked to be RFC 3339 with an explicit zone (nodes_created_at_check), so
-- parsing it does not depend on the session's TimeZone or DateStyle: that is what makes
-- IMMUTABLE true. PostgreSQL keeps microseconds; a createdAt with more digits is rounded
-- UP to the next microsecond, so "createdAt <= T" stays exact for any T it can hold.
-- (plpgsql: a non-inlinable SQL function costs more per row in a bulk load.)
CREATE FUNCTION cwstore.parse_time(created_at text) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_local text;
  v_zone text;
  v_t timestamp;
BEGIN
  -- Split the zone off and apply it by hand: RFC 3339 allows offsets up to +-23:59,
  -- PostgreSQL's timestamptz input only up to +-15:59.
  IF right(created_at, 1) IN ('Z', 'z') THEN
    v_local := left(created_at, length(created_at) - 1);
    v_zone := '+00:00';
  ELSIF substr(created_at, length(created_at) - 5, 1) NOT IN ('+', '-')
        OR substr(created_at, length(created_at) - 2, 1) <> ':' THEN
    RETURN NULL;  -- no zone: nodes_created_at_check refuses the row
  ELSE
    v_local := left(created_at, length(created_at) - 6);
    v_zone := right(created_at, 6);
  END IF;
  IF v_local ~ '\.\d{7}' THEN
    v_t := regexp_replace(v_local, '(\.\d{6})\d+', '\1')::timestamp
           + CASE WHEN substring(v_local FROM '\.\d{6}(\d+)') ~ '[1-9]'
                  THEN interval '1 microsecond' ELSE interval '0' END;
  ELSE
    v_t := v_local::timestamp;
  END IF;
  RETURN (v_t - (CASE left(v_zone, 1) WHEN '-' THEN -1 ELSE 1 END)
                * make_interval(hours => substr(v_zone, 2, 2)::int,
                                mins => substr(v_zone, 5, 2)::int)) AT TIME ZONE 'UTC';
END $$;

CREATE FUNCTION cwstore.at_box(graph_id bigint, seq bigint) RETURNS box
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT box(point(graph_id, seq), point(graph_id, seq))
$$;

CREATE FUNCTION cwstore._violation(code text, graph_id bigint, seq bigint, node_id text,
                                   path text, message text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW400', MESSAGE = code || ': ' || message,
    DETAIL = jsonb_build_object('code', code, 'graph_id', graph_id, 'seq', seq,
                                'index', seq - 1, 'node_id', node_id, 'path', path,
                                'message', message)::text;
END $$;


-- A closed frontier span as a box: x spans graph_id +- 0.25, y spans from_seq ..
-- to_seq - 0.5. Why a width: with zero-width boxes every box has zero area, GiST's
-- insertion penalty (area enlargement) is zero everywhere and the tree ends up
-- unordered: finding the heads at s in 200,000 spans read ~390 index pages. With a
-- width, the area grows with the span's length and the tree clusters by sequence: 3-5
-- pages. The index holds closed spans only (partial): a span is written
-- open (to_seq infinite) and closed later by an UPDATE, and an open version's box,
-- even once dead and vacuumed, would leave its parents' boxes stretched to infinity
-- (GiST never shrinks them). Open spans are the current heads, found through
-- frontier_spans_current_idx.
CREATE FUNCTION cwstore.span_band(graph_id bigint, from_seq bigint, to_seq bigint) RETURNS box
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT box(point(graph_id::float8 - 0.25, from_seq), point(graph_id::float8 + 0.25,
                                                            to_seq::float8 - 0.5))
$$;
COMMENT ON FUNCTION cwstore.span_band(bigint, bigint, bigint) IS
  'A validity span [from_seq, to_seq) of one graph as a box half a unit wide, for frontier_spans_closed_idx: span_band(...) @> at_box(graph_id, s) means valid at s.';

-- _json_member_text(doc, member) -> text
--   The exact JSON text of one member of a JSON object given as text (as the runtime
--   wrote it: member order, spacing, escapes), NULL if absent (the last one if repeated,
--   as jsonb reads it). The json type keeps a value's text, so -> on it returns the
--   member's text verbatim; PostgreSQL's json operators refuse the escape \u0000
--   anywhere in the document, so such a document goes through the reversible
--   cwstore._nul_hide first and the member's text through cwstore._nul_show after.
--   Cost: one parse of the document.
CREATE FUNCTION cwstore._json_member_text(p_doc text, p_member text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(p_doc, '\u0000') = 0 THEN (p_doc::json -> p_member)::text
         ELSE cwstore._nul_show((cwstore._nul_hide(p_doc)::json -> p_member)::text)
         END
$$;
COMMENT ON FUNCTION cwstore._json_member_text(text, text) IS
  'Private: exact JSON text of a member of a JSON object text, \u0000 escapes included.';

-- The runtime's JSON object of a node, fields in the runtime's order (the same text the
-- export query built before). IMMUTABLE is true here though to_json is STABLE in
-- general: for text and text[] its output depends on no setting.
CREATE FUNCTION cwstore.node_json(p_id text, p_kind text, p_parents text[], p_payload text,
                                  p_created_at text, p_seq bigint, p_resource_key text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT '{"id":' || to_json(p_id)::text || ',"kind":' || to_json(p_kind)::text
         || ',"parents":' || array_to_json(p_parents)::text || ',"payload":' || p_payload
         || ',"createdAt":' || to_json(p_created_at)::text || ',"sequence":' || p_seq
         || CASE WHEN p_resource_key IS NULL THEN ''
                 ELSE ',"resourceKey":' || to_json(p_resource_key)::text END
         || '}'
$$;
COMMENT ON FUNCTION cwstore.node_json(text, text, text[], text, text, bigint, text) IS
  'A node as the runtime''s JSON object text (id, kind, parents, payload, createdAt, sequence, resourceKey?), payload verbatim.';

-- =================================================================================
-- schema/20_tables.sql
-- =================================================================================

-- 20_tables: the tables, their indexes and their comments.
--
-- graphs holds one row per graph (the per-graph lock of the append path); nodes is the
-- append-only log; edges, frontier_spans, key_versions, key_heads and kind_counts are
-- derived from nodes by its insert triggers (40_derive.sql), current and historical;
-- frontier_declarations records frontiers declared by writers; tenant_members says
-- which roles belong to which tenant (50_tenancy.sql); listeners who follows the
-- channel cwstore (80_listeners.sql).
--
-- Every unique key of a table keyed by graph begins with graph_id, so each graph's rows
-- can live together on one node of a distributed PostgreSQL.

CREATE TABLE cwstore.graphs (
  graph_id    bigint GENERATED ALWAYS AS IDENTITY,
  name        text NOT NULL,
  tenant      text NOT NULL DEFAULT 'default',
  vocabulary  text[],
  length      bigint NOT NULL DEFAULT 0,
  created_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT graphs_pkey PRIMARY KEY (graph_id),
  CONSTRAINT graphs_name_key UNIQUE (name),
  CONSTRAINT graphs_length_check CHECK (length >= 0),
  CONSTRAINT graphs_vocabulary_check CHECK (
    vocabulary IS NULL OR (cardinality(vocabulary) BETWEEN 1 AND 32
                           AND array_position(vocabulary, NULL) IS NULL))
);
COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). The row is the per-graph lock of the append path.';

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
  node_json        text GENERATED ALWAYS AS (cwstore.node_json(id, kind, parents, payload_text,
                                                               created_at_text, seq,
                                                               resource_key)) STORED,
  CONSTRAINT nodes_pkey PRIMARY KEY (graph_id, seq),
  CONSTRAINT nodes_id_key UNIQUE (graph_id, id),
  CONSTRAINT nodes_seq_check CHECK (seq >= 1),
  CONSTRAINT nodes_id_check CHECK (length(id) = 27 AND left(id, 3) = 'cw_'
                                   AND translate(substr(id, 4), '0123456789abcdef', '') = ''),
  CONSTRAINT nodes_kind_check CHECK (kind = ANY (cwstore.node_kinds())),
  CONSTRAINT nodes_created_at_check CHECK (created_at_text ~
    '^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$'),
  CONSTRAINT nodes_resource_key_check CHECK (resource_key <> '')
);
COMMENT ON TABLE cwstore.nodes IS
  'Append-only node log. seq is gapless per graph from 1. payload_text is the exact JSON the runtime wrote (member order, numbers, \u0000), stored once; cwstore.payload_jsonb(payload_text) (the payload column of node_view) is its queryable jsonb, usable in expression indexes. created_at_text is the runtime''s createdAt byte for byte, created_at its parsed value, recorded_at when the database stored the node, xid orders the all-graphs feed: the writing transaction''s 64-bit id, raised when needed to the graph''s previous node''s so it never goes back within a graph (append_v1 does this; see tail_all).';
COMMENT ON COLUMN cwstore.nodes.node_json IS
  'The node as the runtime''s JSON object, as export writes it (payload verbatim); computed when stored.';

CREATE INDEX nodes_created_at_idx ON cwstore.nodes (graph_id, created_at);
-- Transactions write their rows together and xids grow with time, so a block-range
-- index finds "rows after this xid" at almost no cost to writers.
CREATE INDEX nodes_xid_idx ON cwstore.nodes USING brin (xid) WITH (autosummarize = on);

CREATE TABLE cwstore.edges (
  graph_id    bigint NOT NULL,
  child_seq   bigint NOT NULL,
  position    integer NOT NULL,
  parent_seq  bigint NOT NULL,
  CONSTRAINT edges_pkey PRIMARY KEY (graph_id, child_seq, position),
  CONSTRAINT edges_order_check CHECK (parent_seq < child_seq AND parent_seq >= 1)
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
  'Frontier history: node head_seq is a head for sequences from_seq <= s < to_seq. Heads are listed by (from_seq, ord). to_seq = infinity_seq() for current heads.';

CREATE TABLE cwstore.frontier_declarations (
  declaration_id  bigint GENERATED ALWAYS AS IDENTITY,
  graph_id        bigint NOT NULL,
  seq             bigint NOT NULL,
  heads           text[] NOT NULL,
  declared_at     timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT frontier_declarations_pkey PRIMARY KEY (graph_id, declaration_id)
);
CREATE INDEX frontier_declarations_seq_idx ON cwstore.frontier_declarations (graph_id, seq);
COMMENT ON TABLE cwstore.frontier_declarations IS
  'Frontiers declared by writers (an imported document''s, or one given with an append), exactly as given, at the graph length when declared.';

CREATE TABLE cwstore.key_versions (
  graph_id  bigint NOT NULL,
  key       text NOT NULL,
  version   integer NOT NULL,
  node_seq  bigint NOT NULL,
  to_seq    bigint NOT NULL DEFAULT cwstore.infinity_seq(),
  CONSTRAINT key_versions_check CHECK (node_seq < to_seq AND version >= 1)
);
-- Versions grow with node_seq along a key, so one index serves "version n" and "the
-- version in force at s"; written only by the nodes trigger, it needs no other key.
CREATE UNIQUE INDEX key_versions_seq_idx ON cwstore.key_versions (graph_id, key, node_seq);
-- The heads of every key at s: a version is the head of its key for
-- node_seq <= s < to_seq, the same validity interval as a frontier span, so the same box
-- index finds every closed version valid at s in one GiST scan; the versions still open
-- are the current heads (key_heads).
CREATE INDEX key_versions_closed_idx ON cwstore.key_versions
  USING gist (cwstore.span_band(graph_id, node_seq, to_seq))
  WHERE to_seq <> cwstore.infinity_seq();
COMMENT ON TABLE cwstore.key_versions IS
  'Every version of every resource key (semantic keys included): version counts from 1 along the chain; the version is the head for node_seq <= s < to_seq.';

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
  'One row per node: n is how many nodes of its kind the graph holds up to and including seq. Counts by kind at any sequence, and the latest node of a kind, are index lookups.';

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

-- =================================================================================
-- schema/30_guards.sql
-- =================================================================================

-- 30_guards: history is append-only; derived tables are written by the nodes trigger
-- only; a graph's id, name and length are kept by cwstore.
--
-- The guards of the derived tables and of graphs' UPDATE fire only for the writes they
-- refuse: a trigger's WHEN condition is evaluated without entering the function, and
-- pg_trigger_depth() there is the depth of the statement that writes (0 for a client's
-- own statement, 1 inside the nodes trigger). Entering a plpgsql function only to be let
-- through cost about a fifth of a single-node append.
--
-- SQLSTATEs raised: CW403 (DETAIL {"table", "operation"}, and "graph" for graphs).

CREATE FUNCTION cwstore._refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW403',
    MESSAGE = format('cwstore.%s is append-only history: %s refused', TG_TABLE_NAME, TG_OP),
    DETAIL = jsonb_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text;
END $$;

CREATE FUNCTION cwstore._derived_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_trigger_depth() < 2 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('cwstore.%s is derived from cwstore.nodes and written by its trigger only: %s refused',
                       TG_TABLE_NAME, TG_OP),
      DETAIL = jsonb_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER nodes_append_only BEFORE UPDATE OR DELETE ON cwstore.nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER nodes_no_truncate BEFORE TRUNCATE ON cwstore.nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_append_only BEFORE UPDATE OR DELETE ON cwstore.edges
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_no_truncate BEFORE TRUNCATE ON cwstore.edges
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_derived BEFORE INSERT ON cwstore.edges
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER frontier_declarations_append_only BEFORE UPDATE OR DELETE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_declarations_no_truncate BEFORE TRUNCATE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_spans_derived BEFORE INSERT OR UPDATE OR DELETE
  ON cwstore.frontier_spans
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER frontier_spans_no_truncate BEFORE TRUNCATE ON cwstore.frontier_spans
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER key_versions_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.key_versions
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER key_versions_no_truncate BEFORE TRUNCATE ON cwstore.key_versions
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER key_heads_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.key_heads
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER key_heads_no_truncate BEFORE TRUNCATE ON cwstore.key_heads
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER kind_counts_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.kind_counts
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER kind_counts_no_truncate BEFORE TRUNCATE ON cwstore.kind_counts
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER graphs_no_truncate BEFORE TRUNCATE ON cwstore.graphs
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();

CREATE FUNCTION cwstore._graphs_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.length > 0 THEN
      RAISE EXCEPTION USING ERRCODE = 'CW403',
        MESSAGE = format('graph %L holds %s nodes of history: DELETE refused', OLD.name, OLD.length),
        DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'DELETE', 'graph', OLD.name)::text;
    END IF;
    RETURN OLD;
  END IF;
  IF NEW.graph_id <> OLD.graph_id OR NEW.name <> OLD.name
     OR (NEW.length <> OLD.length AND pg_trigger_depth() < 2) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L: its id, name and length are kept by cwstore: UPDATE refused', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  IF NEW.vocabulary IS DISTINCT FROM OLD.vocabulary AND OLD.length > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L holds nodes: its vocabulary cannot change', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  RETURN NEW;
END $$;


-- graphs: DELETE is always checked; an UPDATE only when a client sends it or when it
-- touches what nobody may change (the nodes trigger moves length, nothing else).
CREATE TRIGGER graphs_guard_delete BEFORE DELETE ON cwstore.graphs
  FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1 OR NEW.graph_id <> OLD.graph_id
                     OR NEW.name <> OLD.name OR NEW.vocabulary IS DISTINCT FROM OLD.vocabulary)
  EXECUTE FUNCTION cwstore._graphs_guard();

-- =================================================================================
-- schema/40_derive.sql
-- =================================================================================

-- 40_derive: the nodes triggers, which check a whole statement's new rows and write
-- what is derived from them, in the same transaction: edges, frontier spans, resource
-- key versions and heads, running counts by kind, and the graph's new length; and the
-- trigger of declared frontiers.
--
-- Whoever writes (append_v1, import_rows_v1, a COPY by the owner, psql), every invariant
-- the database can hold is checked here: parents that exist, come earlier and are sorted,
-- semantic payloads of the right shape and vocabulary, resource chains that link to the
-- key's head, gapless sequences.
--
-- SQLSTATEs raised: CW400 validation (detail: code, index, node_id, path, message),
-- CW404 unknown graph, CW410 chain conflict on a resource key.

CREATE FUNCTION cwstore._chain_conflict(p_graph_id bigint, p_key text, p_seq bigint,
                                         p_id text, p_expected text, p_parents text[])
RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
  v_name text;
  v_linked text;
BEGIN
  SELECT name INTO v_name FROM cwstore.graphs WHERE graph_id = p_graph_id;
  SELECT m.id INTO v_linked FROM cwstore.nodes m
   WHERE m.graph_id = p_graph_id AND m.resource_key = p_key AND m.id = ANY (p_parents)
     AND m.seq < p_seq
   ORDER BY m.seq DESC LIMIT 1;
  RAISE EXCEPTION USING ERRCODE = 'CW410',
    MESSAGE = format('key %L moved on: node %s links to %s, the key''s head is %s',
                     p_key, p_id, coalesce(v_linked, 'no version'), p_expected),
    DETAIL = jsonb_build_object('graph', v_name, 'key', p_key, 'node_id', p_id, 'seq', p_seq,
                                'linked_head', v_linked, 'current_head', p_expected)::text;
END $$;

-- Two trigger functions, written out in full below: the statements of a trigger
-- function are planned once per session and the plans kept, so a plan made for a
-- one-node append would be reused for a 100,000-node import and the other way round.
-- For batches of up to 256 rows, _nodes_inserted_small derives with a loop of short
-- index lookups and writes per node; for larger ones, _nodes_inserted_bulk with
-- set-based statements over the whole transition table (and more work_mem: it sorts
-- and hashes whole batches). Both fire; the one not concerned returns at once. The test
-- suites run both: appends and small imports take the loop, large imports the sets.
--
-- The two bodies are the same text but for the size guard and how they derive, each
-- between the lines "-- not shared: ..." and "-- end not shared": a unit test
-- (tests/unit/test_schema_files.py) fails if the rest drifts apart.

CREATE FUNCTION cwstore._nodes_inserted_small() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
  r record;
  nd record;
  v_head record;
  v_pid text;
  v_prev text;
  v_pseq bigint;
  v_pseqs bigint[];
  v_pos integer;
  v_folds boolean;
  v_count bigint;
  v_rows bigint;
  v_semantic boolean;
  v_keyed boolean;
BEGIN
  SELECT count(*), bool_or(kind = 'semantic'), bool_or(resource_key IS NOT NULL)
    INTO v_rows, v_semantic, v_keyed FROM new_nodes;
  -- not shared: the size guard
  IF v_rows > 256 OR v_rows = 0 THEN RETURN NULL; END IF;
  -- end not shared

  -- Semantic nodes: payload shape, key format, resourceKey, vocabulary.
  IF v_semantic THEN
  SELECT n.graph_id, n.seq, n.id, n.payload, n.resource_key, g.vocabulary
    INTO r
    FROM (SELECT n.graph_id, n.seq, n.id, n.resource_key,
                 cwstore.payload_jsonb(n.payload_text) AS payload
            FROM new_nodes n WHERE n.kind = 'semantic') n
    JOIN LATERAL (SELECT g.vocabulary FROM cwstore.graphs g
                   WHERE g.graph_id = n.graph_id LIMIT 1) g ON true
   WHERE NOT (
         jsonb_typeof(n.payload) = 'object'
     AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(n.payload) k)
         = ARRAY['content', 'key', 'type']
     AND jsonb_typeof(n.payload -> 'type') = 'string'
     AND jsonb_typeof(n.payload -> 'key') = 'string'
     AND (n.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$'
     AND (n.payload ->> 'key') ~ '^[a-z0-9_./:-]{1,120}$'
     AND n.resource_key IS NOT DISTINCT FROM
         ('semantic:' || (n.payload ->> 'type') || ':' || (n.payload ->> 'key'))
     AND (g.vocabulary IS NULL OR (n.payload ->> 'type') = ANY (g.vocabulary)))
   LIMIT 1;
  IF FOUND THEN
    IF jsonb_typeof(r.payload -> 'type') = 'string'
       AND (r.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$'
       AND r.vocabulary IS NOT NULL AND NOT ((r.payload ->> 'type') = ANY (r.vocabulary))
       AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(r.payload) k)
           = ARRAY['content', 'key', 'type'] THEN
      PERFORM cwstore._violation('semantic_type', r.graph_id, r.seq, r.id, '$.payload.type',
        format('semantic type %L is not in the graph''s fixed vocabulary', r.payload ->> 'type'));
    ELSIF jsonb_typeof(r.payload -> 'type') = 'string'
       AND NOT (r.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$' THEN
      PERFORM cwstore._violation('semantic_type', r.graph_id, r.seq, r.id, '$.payload.type',
        format('semantic type %L is malformed', r.payload ->> 'type'));
    END IF;
    PERFORM cwstore._violation('semantic_payload', r.graph_id, r.seq, r.id, '$.payload',
      'semantic payload must be {type, key, content} with resourceKey semantic:<type>:<key>');
  END IF;
  END IF;

  -- not shared: how this function derives
  -- One node at a time, in sequence order: the same checks and the same derived rows
  -- as the set-based statements of the bulk path, each a short index lookup or write,
  -- which is what a single append needs.
  FOR nd IN SELECT * FROM new_nodes ORDER BY graph_id, seq LOOP
    v_folds := NOT (nd.kind = 'semantic' OR (nd.kind = 'system' AND cardinality(nd.parents) = 0));
    v_pseqs := '{}';
    v_prev := NULL;
    FOREACH v_pid IN ARRAY nd.parents LOOP
      v_pos := cardinality(v_pseqs);
      IF v_prev IS NOT NULL AND v_prev COLLATE "C" >= v_pid COLLATE "C" THEN
        PERFORM cwstore._violation('parent_order', nd.graph_id, nd.seq, nd.id,
          format('$.parents[%s]', v_pos), 'parents must be sorted ascending and listed once');
      END IF;
      SELECT m.seq INTO v_pseq FROM cwstore.nodes m
       WHERE m.graph_id = nd.graph_id AND m.id = v_pid;
      IF NOT FOUND THEN
        PERFORM cwstore._violation('missing_parent', nd.graph_id, nd.seq, nd.id,
          format('$.parents[%s]', v_pos), format('parent %s does not exist', v_pid));
      ELSIF v_pseq >= nd.seq THEN
        PERFORM cwstore._violation('parent_order', nd.graph_id, nd.seq, nd.id,
          format('$.parents[%s]', v_pos), format('parent %s is not earlier in sequence', v_pid));
      END IF;
      v_pseqs := v_pseqs || v_pseq;
      v_prev := v_pid;
    END LOOP;
    IF cardinality(v_pseqs) > 0 THEN
      INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
      SELECT nd.graph_id, nd.seq, u.o::integer - 1, u.s
        FROM unnest(v_pseqs) WITH ORDINALITY AS u(s, o);
      IF v_folds THEN
        UPDATE cwstore.frontier_spans SET to_seq = nd.seq
         WHERE graph_id = nd.graph_id AND head_seq = ANY (v_pseqs)
           AND to_seq = cwstore.infinity_seq();
      END IF;
    END IF;
    IF v_folds THEN
      INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord)
      VALUES (nd.graph_id, nd.seq, nd.seq, 0);
    END IF;

    IF nd.resource_key IS NOT NULL THEN
      SELECT h.head_seq, h.head_id, h.version INTO v_head
        FROM cwstore.key_heads h WHERE h.graph_id = nd.graph_id AND h.key = nd.resource_key;
      IF FOUND THEN
        IF NOT (v_head.head_id = ANY (nd.parents)) THEN
          PERFORM cwstore._chain_conflict(nd.graph_id, nd.resource_key, nd.seq, nd.id,
                                          v_head.head_id, nd.parents);
        END IF;
        UPDATE cwstore.key_versions SET to_seq = nd.seq
         WHERE graph_id = nd.graph_id AND key = nd.resource_key AND node_seq = v_head.head_seq;
        UPDATE cwstore.key_heads SET head_seq = nd.seq, head_id = nd.id, version = v_head.version + 1
         WHERE graph_id = nd.graph_id AND key = nd.resource_key;
        INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq)
        VALUES (nd.graph_id, nd.resource_key, v_head.version + 1, nd.seq);
      ELSE
        INSERT INTO cwstore.key_heads (graph_id, key, head_seq, head_id, version, first_seq)
        VALUES (nd.graph_id, nd.resource_key, nd.seq, nd.id, 1, nd.seq);
        INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq)
        VALUES (nd.graph_id, nd.resource_key, 1, nd.seq);
      END IF;
    END IF;

    SELECT k.n INTO v_count FROM cwstore.kind_counts k
     WHERE k.graph_id = nd.graph_id AND k.kind = nd.kind ORDER BY k.seq DESC LIMIT 1;
    INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
    VALUES (nd.graph_id, nd.kind, nd.seq, coalesce(v_count, 0) + 1);
  END LOOP;
  -- end not shared

  -- Gapless: each graph's new rows are exactly length+1 .. length+count; then the new
  -- length, and a wake-up for followers (NOTIFY is a hint; the table is the truth).
  WITH x AS (
    SELECT graph_id, min(seq) AS lo, max(seq) AS hi, count(*) AS cnt
      FROM new_nodes GROUP BY graph_id
  ), u AS (
    UPDATE cwstore.graphs g SET length = x.hi
      FROM x
     WHERE g.graph_id = x.graph_id AND x.lo = g.length + 1 AND x.hi = g.length + x.cnt
    RETURNING g.graph_id, g.length
  ), woken AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM cwstore.listeners) THEN pg_notify('cwstore', u.graph_id || ':' || u.length) END FROM u
  )
  SELECT (SELECT count(*) FROM x) - (SELECT count(*) FROM woken) INTO v_rows;
  IF v_rows > 0 THEN
    SELECT x.graph_id, g.name, g.length, x.lo, x.hi, x.cnt, g.graph_id IS NULL AS missing
      INTO r
      FROM (SELECT graph_id, min(seq) AS lo, max(seq) AS hi, count(*) AS cnt
              FROM new_nodes GROUP BY graph_id) x
      LEFT JOIN LATERAL (SELECT g.graph_id, g.name, g.length FROM cwstore.graphs g
                          WHERE g.graph_id = x.graph_id LIMIT 1) g ON true
     WHERE g.graph_id IS NULL OR x.lo <> g.length + 1 OR x.hi <> g.length + x.cnt
     LIMIT 1;
    IF FOUND THEN
      IF r.missing THEN
        RAISE EXCEPTION USING ERRCODE = 'CW404',
          MESSAGE = format('graph id %s does not exist', r.graph_id),
          DETAIL = jsonb_build_object('graph_id', r.graph_id)::text;
      END IF;
      PERFORM cwstore._violation('sequence', r.graph_id, r.lo, NULL, '$.sequence',
        format('graph %L has %s nodes: new sequences must be %s..%s, got %s..%s',
               r.name, r.length, r.length + 1, r.length + r.cnt, r.lo, r.hi));
    END IF;
  END IF;
  RETURN NULL;
END
$body$;

CREATE FUNCTION cwstore._nodes_inserted_bulk() RETURNS trigger
LANGUAGE plpgsql
SET work_mem = '64MB' AS $body$
DECLARE
  r record;
  nd record;
  v_head record;
  v_pid text;
  v_prev text;
  v_pseq bigint;
  v_pseqs bigint[];
  v_pos integer;
  v_folds boolean;
  v_count bigint;
  v_rows bigint;
  v_semantic boolean;
  v_keyed boolean;
BEGIN
  SELECT count(*), bool_or(kind = 'semantic'), bool_or(resource_key IS NOT NULL)
    INTO v_rows, v_semantic, v_keyed FROM new_nodes;
  -- not shared: the size guard
  IF v_rows <= 256 THEN RETURN NULL; END IF;
  -- end not shared

  -- Semantic nodes: payload shape, key format, resourceKey, vocabulary.
  IF v_semantic THEN
  SELECT n.graph_id, n.seq, n.id, n.payload, n.resource_key, g.vocabulary
    INTO r
    FROM (SELECT n.graph_id, n.seq, n.id, n.resource_key,
                 cwstore.payload_jsonb(n.payload_text) AS payload
            FROM new_nodes n WHERE n.kind = 'semantic') n
    JOIN LATERAL (SELECT g.vocabulary FROM cwstore.graphs g
                   WHERE g.graph_id = n.graph_id LIMIT 1) g ON true
   WHERE NOT (
         jsonb_typeof(n.payload) = 'object'
     AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(n.payload) k)
         = ARRAY['content', 'key', 'type']
     AND jsonb_typeof(n.payload -> 'type') = 'string'
     AND jsonb_typeof(n.payload -> 'key') = 'string'
     AND (n.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$'
     AND (n.payload ->> 'key') ~ '^[a-z0-9_./:-]{1,120}$'
     AND n.resource_key IS NOT DISTINCT FROM
         ('semantic:' || (n.payload ->> 'type') || ':' || (n.payload ->> 'key'))
     AND (g.vocabulary IS NULL OR (n.payload ->> 'type') = ANY (g.vocabulary)))
   LIMIT 1;
  IF FOUND THEN
    IF jsonb_typeof(r.payload -> 'type') = 'string'
       AND (r.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$'
       AND r.vocabulary IS NOT NULL AND NOT ((r.payload ->> 'type') = ANY (r.vocabulary))
       AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(r.payload) k)
           = ARRAY['content', 'key', 'type'] THEN
      PERFORM cwstore._violation('semantic_type', r.graph_id, r.seq, r.id, '$.payload.type',
        format('semantic type %L is not in the graph''s fixed vocabulary', r.payload ->> 'type'));
    ELSIF jsonb_typeof(r.payload -> 'type') = 'string'
       AND NOT (r.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$' THEN
      PERFORM cwstore._violation('semantic_type', r.graph_id, r.seq, r.id, '$.payload.type',
        format('semantic type %L is malformed', r.payload ->> 'type'));
    END IF;
    PERFORM cwstore._violation('semantic_payload', r.graph_id, r.seq, r.id, '$.payload',
      'semantic payload must be {type, key, content} with resourceKey semantic:<type>:<key>');
  END IF;
  END IF;

  -- not shared: how this function derives
  -- Parents: resolve, check existence, order and uniqueness, and record the edges; then
  -- close the frontier spans of parents and open spans for the new heads (SPEC 4's fold:
  -- semantic nodes and parentless system nodes leave the frontier alone).
  WITH p AS (
    SELECT n.graph_id, n.seq AS child_seq, n.id AS child_id, u.ord::integer - 1 AS position,
           u.pid, n.parents[u.ord - 1] AS prev_pid,
           NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
             AS folds
      FROM new_nodes n, unnest(n.parents) WITH ORDINALITY AS u(pid, ord)
  ), resolved AS (
    SELECT p.graph_id, p.child_seq, p.position, p.folds,
           CASE
             WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', p.graph_id,
               p.child_seq, p.child_id, format('$.parents[%s]', p.position),
               format('parent %s does not exist', p.pid))
             WHEN m.seq >= p.child_seq THEN cwstore._violation('parent_order', p.graph_id,
               p.child_seq, p.child_id, format('$.parents[%s]', p.position),
               format('parent %s is not earlier in sequence', p.pid))
             WHEN p.prev_pid IS NOT NULL AND p.prev_pid COLLATE "C" >= p.pid COLLATE "C"
               THEN cwstore._violation('parent_order', p.graph_id, p.child_seq, p.child_id,
               format('$.parents[%s]', p.position),
               'parents must be sorted ascending and listed once')
             ELSE m.seq
           END AS parent_seq
      FROM p
      -- Parents in the batch itself are found by a join with it; only the others are
      -- looked up one by one in the index (never a scan of the whole table).
      LEFT JOIN new_nodes b ON b.graph_id = p.graph_id AND b.id = p.pid
      LEFT JOIN LATERAL (SELECT coalesce(b.seq, (SELECT m.seq FROM cwstore.nodes m
                                                 WHERE m.graph_id = p.graph_id
                                                   AND m.id = p.pid LIMIT 1)) AS seq) m
        ON true
  ), ins AS (
    INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
    SELECT graph_id, child_seq, position, parent_seq FROM resolved
  ), closes AS (
    SELECT graph_id, parent_seq, min(child_seq) AS close_seq
      FROM resolved WHERE folds
     GROUP BY graph_id, parent_seq
  ), closed AS (
    -- Only open spans (the partial index), so this join stays small at any size.
    UPDATE cwstore.frontier_spans s SET to_seq = c.close_seq
      FROM closes c
     WHERE s.graph_id = c.graph_id AND s.head_seq = c.parent_seq
       AND s.to_seq = cwstore.infinity_seq()
  )
  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
  SELECT n.graph_id, n.seq, n.seq, 0, coalesce(c.close_seq, cwstore.infinity_seq())
    FROM new_nodes n LEFT JOIN closes c ON c.graph_id = n.graph_id AND c.parent_seq = n.seq
   WHERE NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0));

  -- Resource chains: the first new version of a key must link to the key's head, each
  -- later one in the batch to the one before it. A node that does not is a lost race
  -- (CW410), whoever wrote it.
  IF v_keyed THEN
  WITH k AS (
    SELECT k.*, h.version AS base_version, h.head_seq,
           CASE WHEN k.rn = 1 THEN h.head_id ELSE k.prev_id END AS expected
      FROM (SELECT n.graph_id, n.resource_key AS key, n.seq, n.id, n.parents,
                   row_number() OVER w AS rn, lag(n.id) OVER w AS prev_id,
                   lead(n.seq) OVER w AS next_seq, first_value(n.seq) OVER w AS batch_first
              FROM new_nodes n
             WHERE n.resource_key IS NOT NULL
            WINDOW w AS (PARTITION BY n.graph_id, n.resource_key ORDER BY n.seq)) k
      LEFT JOIN LATERAL (SELECT h.version, h.head_seq, h.head_id FROM cwstore.key_heads h
                          WHERE h.graph_id = k.graph_id AND h.key = k.key LIMIT 1) h ON true
  ), checked AS (
    SELECT k.*,
           CASE WHEN k.expected IS NULL OR k.expected = ANY (k.parents)
                THEN coalesce(k.base_version, 0) + k.rn
                ELSE cwstore._chain_conflict(k.graph_id, k.key, k.seq, k.id, k.expected,
                                             k.parents)
           END AS version
      FROM k
  ), ins AS (
    INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
    SELECT graph_id, key, version, seq, coalesce(next_seq, cwstore.infinity_seq())
      FROM checked
    RETURNING 1
  ), upd AS (
    UPDATE cwstore.key_versions v SET to_seq = c.seq
      FROM checked c
     WHERE c.rn = 1 AND c.head_seq IS NOT NULL
       AND v.graph_id = c.graph_id AND v.key = c.key AND v.node_seq = c.head_seq
    RETURNING 1
  )
  INSERT INTO cwstore.key_heads AS h (graph_id, key, head_seq, head_id, version, first_seq)
  SELECT graph_id, key, seq, id, version, batch_first
    FROM checked WHERE next_seq IS NULL
  ON CONFLICT (graph_id, key) DO UPDATE
    SET head_seq = excluded.head_seq, head_id = excluded.head_id, version = excluded.version;
  END IF;

  -- Running counts by kind.
  WITH base AS MATERIALIZED (
    SELECT d.graph_id, d.kind,
           coalesce((SELECT k.n FROM cwstore.kind_counts k
                      WHERE k.graph_id = d.graph_id AND k.kind = d.kind
                      ORDER BY k.seq DESC LIMIT 1), 0) AS n
      FROM (SELECT DISTINCT graph_id, kind FROM new_nodes) d
  )
  INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
  SELECT n.graph_id, n.kind, n.seq,
         b.n + row_number() OVER (PARTITION BY n.graph_id, n.kind ORDER BY n.seq)
    FROM new_nodes n JOIN base b ON b.graph_id = n.graph_id AND b.kind = n.kind;
  -- end not shared

  -- Gapless: each graph's new rows are exactly length+1 .. length+count; then the new
  -- length, and a wake-up for followers (NOTIFY is a hint; the table is the truth).
  WITH x AS (
    SELECT graph_id, min(seq) AS lo, max(seq) AS hi, count(*) AS cnt
      FROM new_nodes GROUP BY graph_id
  ), u AS (
    UPDATE cwstore.graphs g SET length = x.hi
      FROM x
     WHERE g.graph_id = x.graph_id AND x.lo = g.length + 1 AND x.hi = g.length + x.cnt
    RETURNING g.graph_id, g.length
  ), woken AS (
    SELECT CASE WHEN EXISTS (SELECT 1 FROM cwstore.listeners) THEN pg_notify('cwstore', u.graph_id || ':' || u.length) END FROM u
  )
  SELECT (SELECT count(*) FROM x) - (SELECT count(*) FROM woken) INTO v_rows;
  IF v_rows > 0 THEN
    SELECT x.graph_id, g.name, g.length, x.lo, x.hi, x.cnt, g.graph_id IS NULL AS missing
      INTO r
      FROM (SELECT graph_id, min(seq) AS lo, max(seq) AS hi, count(*) AS cnt
              FROM new_nodes GROUP BY graph_id) x
      LEFT JOIN LATERAL (SELECT g.graph_id, g.name, g.length FROM cwstore.graphs g
                          WHERE g.graph_id = x.graph_id LIMIT 1) g ON true
     WHERE g.graph_id IS NULL OR x.lo <> g.length + 1 OR x.hi <> g.length + x.cnt
     LIMIT 1;
    IF FOUND THEN
      IF r.missing THEN
        RAISE EXCEPTION USING ERRCODE = 'CW404',
          MESSAGE = format('graph id %s does not exist', r.graph_id),
          DETAIL = jsonb_build_object('graph_id', r.graph_id)::text;
      END IF;
      PERFORM cwstore._violation('sequence', r.graph_id, r.lo, NULL, '$.sequence',
        format('graph %L has %s nodes: new sequences must be %s..%s, got %s..%s',
               r.name, r.length, r.length + 1, r.length + r.cnt, r.lo, r.hi));
    END IF;
  END IF;
  RETURN NULL;
END
$body$;

CREATE TRIGGER nodes_inserted_small AFTER INSERT ON cwstore.nodes
  REFERENCING NEW TABLE AS new_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._nodes_inserted_small();
CREATE TRIGGER nodes_inserted_bulk AFTER INSERT ON cwstore.nodes
  REFERENCING NEW TABLE AS new_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._nodes_inserted_bulk();

-- ---------------------------------------------------------------------------------
-- declared frontiers
-- ---------------------------------------------------------------------------------

CREATE FUNCTION cwstore._frontier_declared() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g_length bigint;
  g_name text;
  current_heads text[];
  missing text;
  seqs bigint[];
BEGIN
  SELECT length, name INTO g_length, g_name FROM cwstore.graphs WHERE graph_id = NEW.graph_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', NEW.graph_id),
      DETAIL = jsonb_build_object('graph_id', NEW.graph_id)::text;
  END IF;
  IF NEW.seq <> g_length THEN
    PERFORM cwstore._violation('frontier_reference', NEW.graph_id, NULL, NULL, '$.frontier',
      format('a frontier is declared at the graph''s length %s, not at %s', g_length, NEW.seq));
  END IF;
  IF array_position(NEW.heads, NULL) IS NOT NULL
     OR cardinality(NEW.heads) <> (SELECT count(DISTINCT h) FROM unnest(NEW.heads) h) THEN
    PERFORM cwstore._violation('frontier_reference', NEW.graph_id, NULL, NULL, '$.frontier',
      'frontier lists an id twice (or null)');
  END IF;

  SELECT array_agg(n.seq ORDER BY u.ord), min(u.h) FILTER (WHERE n.seq IS NULL)
    INTO seqs, missing
    FROM unnest(NEW.heads) WITH ORDINALITY AS u(h, ord)
    LEFT JOIN cwstore.nodes n ON n.graph_id = NEW.graph_id AND n.id = u.h;
  IF missing IS NOT NULL THEN
    PERFORM cwstore._violation('frontier_reference', NEW.graph_id, NULL, missing, '$.frontier',
      format('frontier references missing node %s', missing));
  END IF;

  SELECT array_agg(n.id ORDER BY s.from_seq, s.ord) INTO current_heads
    FROM cwstore.frontier_spans s
    JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq
   WHERE s.graph_id = NEW.graph_id AND s.to_seq = cwstore.infinity_seq();
  IF coalesce(current_heads, '{}') = NEW.heads THEN
    RETURN NULL;
  END IF;

  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq() AND from_seq = NEW.seq;
  UPDATE cwstore.frontier_spans SET to_seq = NEW.seq
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq();
  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord)
  SELECT NEW.graph_id, s, NEW.seq, o::integer - 1
    FROM unnest(seqs) WITH ORDINALITY AS u(s, o);
  RETURN NULL;
END $$;

CREATE TRIGGER frontier_declared AFTER INSERT ON cwstore.frontier_declarations
  FOR EACH ROW EXECUTE FUNCTION cwstore._frontier_declared();

-- =================================================================================
-- schema/50_tenancy.sql
-- =================================================================================

-- 50_tenancy: tenants, who may see and write what, row-level security, and the grants
-- of the roles cwstore_reader and cwstore_writer.
--
-- One database serves many agents, and often many customers. A graph belongs to a
-- tenant (graphs.tenant); a role belongs to the tenants listed for it, or for any role
-- it is a member of, in cwstore.tenant_members. Reads are limited by row-level
-- security: every table keyed by graph carries a policy and the views run as the
-- caller (security_invoker, 70_read_api.sql), so a role sees the graphs of its tenants
-- and nothing else, whatever SQL it writes. The public read functions run as their
-- owner, so they keep their indexes, and check the graph's tenant once, when they
-- resolve its name (cwstore._graph; CW404 as for a missing graph). Writes go through the
-- write functions only (60_write_api.sql): SECURITY DEFINER too, so a writer role needs
-- no privilege on any table, and each checks that the login role (session_user) may
-- write the graph's tenant before it locks or writes anything.
--
-- Who is unrestricted: superusers, BYPASSRLS roles, and members of the role that owns
-- the schema cwstore (the role that ran the migrations). Table owners are not subject
-- to row-level security (it is enabled, not forced).
--
-- The roles cwstore_reader and cwstore_writer are made by `cwstore init --roles`
-- (roles.sql): roles are cluster-wide objects, created only when asked for, and need
-- CREATEROLE.
--
-- SQLSTATEs raised: 42501 (a write to a graph of a tenant the login role is not in;
-- DETAIL {"graph", "role"}), CW404 (a read of such a graph), 42704 (unknown role).

CREATE FUNCTION cwstore.sees_all(p_role name) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles r
                    WHERE r.rolname = p_role), false)
      OR pg_catalog.pg_has_role(p_role, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                          WHERE n.nspname = 'cwstore'), 'MEMBER')
$$;
COMMENT ON FUNCTION cwstore.sees_all(name) IS
  'Whether a role reads and writes every graph: a superuser, a BYPASSRLS role, or a member of the owner of schema cwstore.';

CREATE FUNCTION cwstore.tenants_of(p_role name) RETURNS SETOF text
LANGUAGE sql STABLE ROWS 2 AS $$
  SELECT DISTINCT m.tenant
    FROM cwstore.tenant_members m
    JOIN pg_catalog.pg_roles r ON r.rolname = m.member
   WHERE pg_catalog.pg_has_role(p_role, r.oid, 'MEMBER')
$$;
COMMENT ON FUNCTION cwstore.tenants_of(name) IS
  'The tenants a role belongs to: those listed in tenant_members for it or for any role it is a member of (directly or not).';

-- The tenant of a graph created now: the session's cwstore.tenant setting if set (the
-- clients' tenant= option sets it), else the login role's only tenant if it has exactly
-- one and is restricted, else 'default'. Choosing is not permitting: the writer is
-- checked against the result like against any existing graph.
CREATE FUNCTION cwstore._new_graph_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    nullif(pg_catalog.current_setting('cwstore.tenant', true), ''),
    CASE WHEN NOT cwstore.sees_all(session_user) THEN
      (SELECT min(t) FROM cwstore.tenants_of(session_user) t HAVING count(*) = 1) END,
    'default')
$$;

-- _check_writer(graph, tenant): 42501 unless the login role may write that tenant's
-- graphs. A NULL tenant (no such graph yet) passes: creating one is checked on its own.
-- Called by the SECURITY DEFINER write functions, where current_user is their owner
-- and session_user is who logged in.
CREATE FUNCTION cwstore._check_writer(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_tenant IS NOT NULL AND NOT cwstore.sees_all(session_user)
     AND NOT EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not write graph %L: the graph belongs to a tenant the role is not a member of',
                       session_user, p_graph),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text,
      HINT = 'An administrator adds the role to the tenant: SELECT cwstore.add_tenant_member(tenant, role)';
  END IF;
END $$;

CREATE FUNCTION cwstore.add_tenant_member(p_tenant text, p_role name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.to_regrole(quote_ident(p_role)) IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('role %s does not exist', p_role),
      DETAIL = jsonb_build_object('role', p_role)::text;
  END IF;
  INSERT INTO cwstore.tenant_members (tenant, member) VALUES (p_tenant, p_role)
  ON CONFLICT DO NOTHING;
END $$;
COMMENT ON FUNCTION cwstore.add_tenant_member(text, name) IS
  'Let a role (and every member of it) read and write the graphs of a tenant. Needs INSERT on tenant_members: the owner''s.';

CREATE FUNCTION cwstore.remove_tenant_member(p_tenant text, p_role name) RETURNS boolean
LANGUAGE sql AS $$
  WITH d AS (DELETE FROM cwstore.tenant_members WHERE tenant = p_tenant AND member = p_role
             RETURNING 1)
  SELECT EXISTS (SELECT 1 FROM d)
$$;
COMMENT ON FUNCTION cwstore.remove_tenant_member(text, name) IS
  'Undo add_tenant_member; true if the role was listed. Its sessions lose access at their next statement.';

-- _check_reader(graph, tenant): CW404, as for a graph that does not exist, unless the
-- login role may read that tenant's graphs. Like _check_writer, it judges session_user,
-- because inside a SECURITY DEFINER function current_user is the owner.
CREATE FUNCTION cwstore._check_reader(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT cwstore.sees_all(session_user)
     AND NOT EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', p_graph),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
END $$;

-- ---------------------------------------------------------------------------------
-- row-level security: a policy on every table keyed by graph
-- ---------------------------------------------------------------------------------

-- Every other table is visible through its graph's row, so one rule, graphs', decides
-- for all. It is sees_all and tenants_of written out, not called: a policy's text is
-- planned with the query (and cached with it), while a SQL function call with
-- sub-selects is planned again at every execution. The sub-selects that do not depend
-- on the row run once per query; each row is then a hash probe.
--
-- Row-level security also keeps PostgreSQL from using an index through an operator
-- that is not LEAKPROOF (the GiST box test of the frontier history, starts_with):
-- such a test is applied after the policy, as a filter. So the public read functions
-- below run as their owner, with their indexes, after checking the graph once
-- (_check_reader), and row-level security guards the tables for every other query.
ALTER TABLE cwstore.graphs ENABLE ROW LEVEL SECURITY;
CREATE POLICY graphs_tenant ON cwstore.graphs
  USING (tenant IN (SELECT m.tenant FROM cwstore.tenant_members m
                      JOIN pg_catalog.pg_roles r ON r.rolname = m.member
                     WHERE pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER'))
         OR (SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles r
              WHERE r.rolname = current_user)
         OR pg_catalog.pg_has_role(current_user,
                                   (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                     WHERE n.nspname = 'cwstore'), 'MEMBER'));

ALTER TABLE cwstore.nodes ENABLE ROW LEVEL SECURITY;
CREATE POLICY nodes_tenant ON cwstore.nodes
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));
ALTER TABLE cwstore.edges ENABLE ROW LEVEL SECURITY;
CREATE POLICY edges_tenant ON cwstore.edges
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));
ALTER TABLE cwstore.frontier_spans ENABLE ROW LEVEL SECURITY;
CREATE POLICY frontier_spans_tenant ON cwstore.frontier_spans
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));
ALTER TABLE cwstore.frontier_declarations ENABLE ROW LEVEL SECURITY;
CREATE POLICY frontier_declarations_tenant ON cwstore.frontier_declarations
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));
ALTER TABLE cwstore.key_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY key_versions_tenant ON cwstore.key_versions
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));
ALTER TABLE cwstore.key_heads ENABLE ROW LEVEL SECURITY;
CREATE POLICY key_heads_tenant ON cwstore.key_heads
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));
ALTER TABLE cwstore.kind_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY kind_counts_tenant ON cwstore.kind_counts
  USING (graph_id IN (SELECT g.graph_id FROM cwstore.graphs g));

-- ---------------------------------------------------------------------------------
-- grants for the roles cwstore_reader and cwstore_writer
-- ---------------------------------------------------------------------------------

-- apply_grants() -> whether the roles exist (false: nothing done)
--   cwstore_reader: USAGE on the schema; SELECT on its tables and views, every row
--   filtered by the policies above; EXECUTE on every function but the write API (the
--   read functions and their helpers, the table-free tenant functions). No write
--   privilege: add_tenant_member and remove_tenant_member need the owner's INSERT and
--   DELETE on tenant_members.
--   cwstore_writer: a member of cwstore_reader (made so by roles.sql), plus EXECUTE
--   on the write API, by name below. No INSERT, UPDATE, DELETE or TRUNCATE on any
--   table.
--   Functions are executable by PUBLIC unless revoked, so that is revoked everywhere in
--   the schema. Run by roles.sql, and by the migration runner after each later
--   migration in a database whose roles were set up, so new functions get their grants.
CREATE FUNCTION cwstore.apply_grants() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  f record;
BEGIN
  IF pg_catalog.to_regrole('cwstore_reader') IS NULL
     OR pg_catalog.to_regrole('cwstore_writer') IS NULL THEN
    RETURN false;
  END IF;
  REVOKE ALL ON SCHEMA cwstore FROM PUBLIC;
  GRANT USAGE ON SCHEMA cwstore TO cwstore_reader;
  REVOKE ALL ON ALL TABLES IN SCHEMA cwstore FROM PUBLIC, cwstore_reader, cwstore_writer;
  REVOKE ALL ON ALL SEQUENCES IN SCHEMA cwstore FROM PUBLIC, cwstore_reader, cwstore_writer;
  GRANT SELECT ON ALL TABLES IN SCHEMA cwstore TO cwstore_reader;
  REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cwstore FROM PUBLIC, cwstore_reader, cwstore_writer;
  FOR f IN SELECT p.oid::regprocedure AS sig,
                  p.proname IN ('ensure_graph_v1', 'begin_import_v1', 'import_rows_v1',
                                'append_v1', 'declare_frontier_v1') AS writes
             FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'cwstore'::regnamespace AND p.prokind = 'f'
              AND p.prorettype <> 'pg_catalog.trigger'::regtype LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.sig,
                   CASE WHEN f.writes THEN 'cwstore_writer' ELSE 'cwstore_reader' END);
  END LOOP;
  RETURN true;
END $$;
COMMENT ON FUNCTION cwstore.apply_grants() IS
  'Grant cwstore_reader reading (SELECT, every function but the write API) and cwstore_writer the write API; false if the roles do not exist.';


-- =================================================================================
-- schema/60_write_api.sql
-- =================================================================================

-- 60_write_api: the write API, as SQL functions, so every client (asyncpg, psycopg,
-- psql, the TypeScript runtime through pg) meets the same rules and errors.
--
-- The append path locks the graph's counter row, numbers the batch from its length and
-- inserts in one statement; the nodes triggers (40_derive.sql) check and materialize.
-- One round trip, no session state (works behind a transaction-mode pooler). Every
-- function runs as its owner (SECURITY DEFINER, a fixed search_path), so a writer role
-- needs no privilege on any table, and checks that the login role may write the graph's
-- tenant (cwstore._check_writer, 50_tenancy.sql) before it locks or writes anything.
-- Functions are versioned (_v1) so a new signature can live beside the old; each takes
-- the graph (its name, or its graph_id within an import) first.
--
-- SQLSTATEs raised: CW400 validation, CW404 unknown graph, CW409 expected length is
-- stale, CW410 chain conflict on a resource key, CW412 import into a non-empty graph,
-- 42501 a graph of a tenant the login role is not in.

-- ensure_graph_v1(graph, vocabulary) -> graph_id
--   Creates the graph on first use. vocabulary NULL = dynamic. Takes no lock.
CREATE FUNCTION cwstore.ensure_graph_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_tenant text;
BEGIN
  IF p_graph IS NULL OR p_graph = '' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
                               'a graph name must be a non-empty string');
  END IF;
  SELECT graph_id, tenant INTO v_id, v_tenant FROM cwstore.graphs WHERE name = p_graph;
  IF NOT FOUND THEN
    v_tenant := cwstore._new_graph_tenant();
    IF session_user <> current_user THEN
      PERFORM cwstore._check_writer(p_graph, v_tenant);
    END IF;
    INSERT INTO cwstore.graphs (name, vocabulary, tenant) VALUES (p_graph, p_vocabulary, v_tenant)
    ON CONFLICT (name) DO NOTHING RETURNING graph_id INTO v_id;
    IF v_id IS NULL THEN
      SELECT graph_id, tenant INTO v_id, v_tenant FROM cwstore.graphs WHERE name = p_graph;
    END IF;
  END IF;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v_tenant);
  END IF;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.ensure_graph_v1(text, text[]) IS
  'Create a graph if it does not exist (vocabulary NULL = dynamic); returns its graph_id.';

-- begin_import_v1(graph, vocabulary) -> graph_id
--   Locks the graph row for the rest of the transaction. Raises CW412 when the graph
--   already holds nodes. Sets the vocabulary.
CREATE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_len bigint;
BEGIN
  PERFORM cwstore.ensure_graph_v1(p_graph, p_vocabulary);
  SELECT graph_id, length INTO v_id, v_len FROM cwstore.graphs WHERE name = p_graph FOR UPDATE;
  IF v_len > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph %L already holds %s nodes; import needs an empty graph', p_graph, v_len),
      DETAIL = jsonb_build_object('graph', p_graph, 'length', v_len)::text;
  END IF;
  UPDATE cwstore.graphs SET vocabulary = p_vocabulary
   WHERE graph_id = v_id AND vocabulary IS DISTINCT FROM p_vocabulary;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.begin_import_v1(text, text[]) IS
  'Start importing into an empty graph: create or lock it; CW412 if it holds nodes. COPY rows into cwstore.nodes next, then declare_frontier_v1.';

-- import_rows_v1(graph_id, seqs, ids, kinds, parents, payloads, created, keys)
--   The import path of roles that may not COPY into cwstore.nodes (cwstore_writer):
--   one slice of an import as parallel arrays (parents as array literals, e.g.
--   '{cw_…,cw_…}'), inserted in one statement, so the nodes trigger checks and
--   materializes it like a COPY. Call it after begin_import_v1, in the same transaction,
--   once per slice, then declare_frontier_v1. Returns the rows inserted.
CREATE FUNCTION cwstore.import_rows_v1(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                       p_kinds text[], p_parents text[], p_payloads text[],
                                       p_created text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_name text;
  v_tenant text;
  v_len bigint;
  v_xid bigint;
  v_n bigint;
BEGIN
  SELECT name, tenant INTO v_name, v_tenant FROM cwstore.graphs WHERE graph_id = p_graph_id;
  IF FOUND AND session_user <> current_user THEN
    PERFORM cwstore._check_writer(v_name, v_tenant);
  END IF;
  -- The counter row, as append_v1 takes it (already held after begin_import_v1).
  SELECT length INTO v_len FROM cwstore.graphs WHERE graph_id = p_graph_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
  END IF;
  -- As in append_v1: within a graph the feed's xid never goes back.
  v_xid := greatest(pg_current_xact_id()::text::bigint,
                    (SELECT n.xid FROM cwstore.nodes n
                      WHERE n.graph_id = p_graph_id AND n.seq = v_len));
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,
                             resource_key, xid)
  SELECT p_graph_id, r.seq, r.id, r.kind, r.parents::text[], r.payload, r.created, r.key, v_xid
    FROM unnest(p_seqs, p_ids, p_kinds, p_parents, p_payloads, p_created, p_keys)
         AS r(seq, id, kind, parents, payload, created, key);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
COMMENT ON FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[]) IS
  'Import one slice of nodes as parallel arrays after begin_import_v1 (the import path of roles without INSERT on cwstore.nodes). Returns how many rows it inserted.';

-- declare_frontier_v1(graph_id, heads) : the frontier after the graph's last node, as
-- given and in its order. CW400 frontier_reference for unknown or repeated ids.
CREATE FUNCTION cwstore.declare_frontier_v1(p_graph_id bigint, p_heads text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(g.name, g.tenant) FROM cwstore.graphs g
      WHERE g.graph_id = p_graph_id;
  END IF;
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  SELECT p_graph_id, g.length, coalesce(p_heads, '{}') FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id;
END $$;
COMMENT ON FUNCTION cwstore.declare_frontier_v1(bigint, text[]) IS
  'Declare the frontier after the graph''s last node (graph by graph_id), as given and in its order: after an import, or to set it by hand. CW400 frontier_reference for unknown or repeated ids.';

-- append_v1(graph, nodes, expected_length, frontier)
--   nodes: a JSON array of runtime nodes {id, kind, parents, payload, createdAt,
--   resourceKey?} (sequence is assigned here; one given is ignored). Send compact JSON:
--   payload text is stored exactly as received.
--   expected_length: NULL, or the length the writer last saw (CW409 when stale).
--   frontier: NULL (the fold applies) or a JSON array of ids, the frontier after
--   the batch.
--   Nodes whose id the graph already holds are returned as stored and not written
--   (idempotent retries); if every node exists, expected_length is not checked, and
--   the frontier is declared only when expected_length is NULL or current.
--   Locks: the graph row (FOR UPDATE) until commit; nothing else.
--   Raises: CW400 (shape, kind, parents, semantic...), CW409, CW410 (chain race).
-- Its statements take arrays and ids as parameters; custom plans would be re-made on
-- every call, and the generic ones are right for every batch size that takes this path.
CREATE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_problem text;
  v_bad_id text;
  v_hidden boolean := false;
  v_heads text[];
  v_ids text[];
  v_kinds text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_keys text[];
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
    IF json_typeof(p_frontier) <> 'array'
       OR EXISTS (SELECT 1 FROM json_array_elements(p_frontier) f WHERE json_typeof(f) <> 'string')
    THEN
      PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.frontier',
                                 'frontier must be a JSON array of node ids');
    END IF;
    v_heads := ARRAY(SELECT json_array_elements_text(p_frontier));
  END IF;

  -- PostgreSQL's JSON functions refuse the escape \u0000: hide it (reversibly) first.
  IF strpos(p_nodes::text, '\u0000') > 0 THEN
    v_hidden := true;
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;

  -- Read the batch once: each node's fields as JSON, checked for their JSON types and
  -- for what the table's constraints would refuse, so every client gets a CW400 with
  -- the safeguard code and the node's position.
  SELECT array_agg(f.id #>> '{}' ORDER BY f.o), array_agg(f.kind #>> '{}' ORDER BY f.o),
         array_agg(f.parents::text ORDER BY f.o),
         array_agg(CASE WHEN v_hidden THEN cwstore._nul_show(f.payload::text)
                        ELSE f.payload::text END ORDER BY f.o),
         array_agg(f."createdAt" #>> '{}' ORDER BY f.o),
         array_agg(f."resourceKey" #>> '{}' ORDER BY f.o),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem ORDER BY f.o) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END ORDER BY f.o)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys, v_new, v_problem, v_bad_id
    FROM (SELECT a.o, r.*,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|node must be a JSON object'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|id must be a string'
                   WHEN json_typeof(r.kind) IS DISTINCT FROM 'string'
                     THEN 'shape|kind must be a string'
                   WHEN json_typeof(r.parents) IS DISTINCT FROM 'array'
                     THEN 'shape|parents must be an array'
                   WHEN r.payload IS NULL THEN 'shape|payload is missing'
                   WHEN json_typeof(r."createdAt") IS DISTINCT FROM 'string'
                     THEN 'shape|createdAt must be a string'
                   WHEN r."resourceKey" IS NOT NULL AND json_typeof(r."resourceKey") <> 'string'
                     THEN 'shape|resourceKey must be a string when present'
                   WHEN EXISTS (SELECT 1 FROM json_object_keys(a.e) k
                                 WHERE k NOT IN ('id', 'kind', 'parents', 'payload', 'createdAt',
                                                 'sequence', 'resourceKey'))
                     THEN 'shape|unknown node field'
                   WHEN EXISTS (SELECT 1 FROM json_array_elements(r.parents) pe
                                 WHERE json_typeof(pe) <> 'string')
                     THEN 'shape|parents must be string ids'
                   WHEN v_hidden AND strpos(r.id::text || r.kind::text || r."createdAt"::text
                                            || coalesce(r."resourceKey"::text, '')
                                            || r.parents::text, '\\u0000') > 0
                     THEN 'unrepresentable|U+0000 outside a payload cannot be stored'
                   WHEN NOT ((r.kind #>> '{}') = ANY (cwstore.node_kinds()))
                     THEN 'kind|kind is not one of the ten'
                   WHEN (r.id #>> '{}') !~ '^cw_[0-9a-f]{24}$'
                     THEN 'identity|id must be cw_ and 24 lowercase hex digits'
                   WHEN (r."createdAt" #>> '{}') !~
                        '^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$'
                     THEN 'created_at|createdAt is not an RFC 3339 timestamp with a zone'
                   WHEN (r."resourceKey" #>> '{}') = ''
                     THEN 'shape|resourceKey must not be empty'
                 END AS problem
            FROM json_array_elements(p_nodes) WITH ORDINALITY AS a(e, o)
            CROSS JOIN LATERAL json_to_record(CASE json_typeof(a.e) WHEN 'object' THEN a.e
                                                ELSE '{}' END)
                 AS r(id json, kind json, parents json, payload json, "createdAt" json,
                      "resourceKey" json)) f;
  IF v_new IS NOT NULL THEN
    PERFORM cwstore._violation(split_part(v_problem, '|', 1), NULL, v_new, v_bad_id,
                               format('$[%s]', v_new - 1), split_part(v_problem, '|', 2));
  END IF;
  IF v_ids IS NULL THEN
    v_ids := '{}';
  END IF;

  -- The tenant check comes before the lock: a refused caller must not hold another
  -- tenant's counter row while it sits in its aborted transaction.
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, (SELECT g.tenant FROM cwstore.graphs g
                                             WHERE g.name = p_graph));
  END IF;

  -- The counter row: lock it (create the graph on first use). Held until commit.
  SELECT g.graph_id, g.length INTO v_graph_id, v_len
    FROM cwstore.graphs g WHERE g.name = p_graph FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore.ensure_graph_v1(p_graph);
    SELECT g.graph_id, g.length INTO v_graph_id, v_len
      FROM cwstore.graphs g WHERE g.name = p_graph FOR UPDATE;
  END IF;

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's.
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                             created_at_text, resource_key, xid)
  SELECT v_graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o],
         greatest(pg_current_xact_id()::text::bigint,
                  (SELECT l.xid FROM cwstore.nodes l
                    WHERE l.graph_id = v_graph_id AND l.seq = v_len))
    FROM (SELECT DISTINCT ON (u.id) u.id, u.o
            FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
           ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;

  -- Checked after the insert so the batch is read once; raising undoes the insert.
  IF v_new > 0 AND p_expected_length IS NOT NULL AND p_expected_length <> v_len THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', p_graph, v_len,
                       p_expected_length),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected_length,
                                  'actual_length', v_len)::text;
  END IF;

  -- The declared frontier is recorded after new nodes. When this call wrote nothing it
  -- is recorded only if it changes the frontier and expected_length is NULL or current:
  -- a retry after others moved on must not move their frontier back.
  IF v_heads IS NOT NULL AND (v_new > 0 OR (
         (p_expected_length IS NULL OR p_expected_length = v_len)
     AND v_heads IS DISTINCT FROM (
           SELECT coalesce(array_agg(n.id ORDER BY s.from_seq, s.ord), '{}')
             FROM cwstore.frontier_spans s
             JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq
            WHERE s.graph_id = v_graph_id AND s.to_seq = cwstore.infinity_seq()))) THEN
    INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
    VALUES (v_graph_id, v_len + v_new, v_heads);
  END IF;

  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

COMMENT ON FUNCTION cwstore.append_v1(text, json, bigint, json) IS
  'Append a batch of runtime nodes to a graph (created on first use), optionally declaring the frontier after it. Idempotent by id. Returns each node''s sequence, whether this call wrote it, and for nodes it did not write the stored createdAt and payload.';

-- =================================================================================
-- schema/70_read_api.sql
-- =================================================================================

-- 70_read_api: the read side in SQL: functions for the frontier, resource heads and
-- semantic memory at any sequence, time-to-sequence, ancestors, descendants, causal
-- paths, key history, a state as of s in one round trip, and the projection; views over
-- nodes and edges with graph names.
--
-- The projection is read from the database's own current and historical tables
-- (frontier_spans, key_versions, key_heads, kind_counts), never by folding every node
-- in a client. These functions are that reading, once, for every client: the Python
-- stores call them, and so can psql users (docs/sql.md).
--
-- Conventions of every public function below:
--   * The graph is addressed by name, first; it is resolved to graph_id once per call
--     (cwstore._graph), which also checks the caller's tenant. Unknown graph, or one of
--     a tenant the caller is not in: SQLSTATE CW404, DETAIL {"graph": name}.
--   * They run as their owner (SECURITY DEFINER, a fixed search_path), so they keep
--     their indexes under row-level security (see 50_tenancy.sql).
--   * s is a sequence number: the prefix 1..s of the graph. NULL means now (the whole
--     graph); s at or beyond the graph's length reads as the whole graph; s = 0 is the
--     empty prefix (empty frontier, no heads). s < 0: SQLSTATE 22023.
--   * They are STABLE, so every statement inside one call reads the snapshot of the
--     calling query: a result never mixes two states of a graph, even while appends
--     commit.
--   * Costs: n = nodes in the graph, h = heads in the frontier, k = resource keys of the
--     graph, m = semantic keys. "log n" = one btree or GiST descent.
--   * Orders are deterministic: keys and semantic types are ordered by byte order
--     (COLLATE "C"), whatever the database's collation.
--   * Set-returning functions carry ROWS estimates near their usual size, so the
--     planner joins their rows to nodes by primary-key lookups, not by hashing a graph.
--
-- SQLSTATEs raised: CW404 unknown graph or node; 22023 invalid argument.

-- ---------------------------------------------------------------------------------
-- private helpers (by graph_id)
-- ---------------------------------------------------------------------------------

-- _graph(graph) -> (graph_id, length)
--   Resolves a graph name. Raises CW404 when there is no such graph, or when the login
--   role may not read it (cwstore._check_reader). Every public read function resolves
--   its graph here first: the one check they need. Cost: log.
CREATE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_tenant text;
BEGIN
  SELECT g.graph_id, g.length, g.tenant INTO graph_id, length, v_tenant
    FROM cwstore.graphs g WHERE g.name = p_graph;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', p_graph),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_reader(p_graph, v_tenant);
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._graph(text) IS
  'Private: resolve a graph name to (graph_id, length); CW404 if unknown.';

-- _node_seq(graph_id, graph, node_id) -> seq
--   The sequence of a node given by id. Raises CW404 when the graph has no such node
--   (DETAIL {"graph", "node_id"}). Cost: log n.
CREATE FUNCTION cwstore._node_seq(p_graph_id bigint, p_graph text, p_node_id text)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_seq bigint;
BEGIN
  SELECT n.seq INTO v_seq FROM cwstore.nodes n
   WHERE n.graph_id = p_graph_id AND n.id = p_node_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L has no node %s', p_graph, coalesce(p_node_id, 'NULL')),
      DETAIL = jsonb_build_object('graph', p_graph, 'node_id', p_node_id)::text;
  END IF;
  RETURN v_seq;
END $$;
COMMENT ON FUNCTION cwstore._node_seq(bigint, text, text) IS
  'Private: the seq of node_id in a graph; CW404 if the graph has no such node.';

-- _at(s, length) -> the sequence to read at, or NULL for "now"
--   NULL when s is NULL or s >= length: the current tables answer that, and they are the
--   cheapest. Raises 22023 for s < 0. Cost: constant.
CREATE FUNCTION cwstore._at(p_seq bigint, p_length bigint)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_seq < 0 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('a sequence number is >= 0, got %s', p_seq),
      DETAIL = jsonb_build_object('seq', p_seq)::text;
  END IF;
  RETURN CASE WHEN p_seq IS NULL OR p_seq >= p_length THEN NULL ELSE p_seq END;
END $$;
COMMENT ON FUNCTION cwstore._at(bigint, bigint) IS
  'Private: normalize a read position: NULL (now) when s is NULL or >= length; 22023 when s < 0.';

-- _frontier_at(graph_id, s) -> (position, seq)
--   The frontier after node s, in order (position from 0). s NULL = now.
--   Cost: now, the partial index frontier_spans_current_idx, O(h); at s, one GiST
--   descent of frontier_spans_closed_idx for the closed spans containing s, plus the
--   open spans that began at or before s (current index): O(log n + h).
CREATE FUNCTION cwstore._frontier_at(p_graph_id bigint, p_seq bigint)
RETURNS TABLE ("position" integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
BEGIN
  IF p_seq IS NULL THEN
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY s.from_seq, s.ord))::integer - 1, s.head_seq
      FROM cwstore.frontier_spans s
     WHERE s.graph_id = p_graph_id AND s.to_seq = cwstore.infinity_seq()
     ORDER BY s.from_seq, s.ord;
  ELSE
    -- The box test is the index condition (it implies the graph: boxes of different
    -- graphs are apart); the integer tests after it are exact whatever float8 rounding
    -- the boxes carry.
    RETURN QUERY
    SELECT (row_number() OVER (ORDER BY x.from_seq, x.ord))::integer - 1, x.head_seq
      FROM (SELECT s.head_seq, s.from_seq, s.ord FROM cwstore.frontier_spans s
             WHERE cwstore.span_band(s.graph_id, s.from_seq, s.to_seq)
                   @> cwstore.at_box(p_graph_id, p_seq)
               AND s.to_seq <> cwstore.infinity_seq()
               AND s.from_seq <= p_seq AND p_seq < s.to_seq
            UNION ALL
            SELECT s.head_seq, s.from_seq, s.ord FROM cwstore.frontier_spans s
             WHERE s.graph_id = p_graph_id AND s.to_seq = cwstore.infinity_seq()
               AND s.from_seq <= p_seq) x
     ORDER BY x.from_seq, x.ord;
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._frontier_at(bigint, bigint) IS
  'Private: frontier (position, seq) of a graph_id after node s (NULL = now).';

-- _heads_at(graph_id, s, semantic_only) -> (key, version, seq)
--   Every resource key's head after node s (s NULL = now), keys in byte order. With
--   semantic_only, only keys beginning "semantic:".
--   Cost: now, O(k) rows of key_heads; at s, one GiST scan of key_versions_closed_idx
--   for the closed versions valid at s, plus the current heads that began by s:
--   O(log n + k).
CREATE FUNCTION cwstore._heads_at(p_graph_id bigint, p_seq bigint,
                                             p_semantic_only boolean)
RETURNS TABLE (key text, version integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 100 AS $$
BEGIN
  IF p_seq IS NULL THEN
    RETURN QUERY
    SELECT h.key, h.version, h.head_seq FROM cwstore.key_heads h
     WHERE h.graph_id = p_graph_id
       AND (NOT p_semantic_only OR starts_with(h.key, 'semantic:'))
     ORDER BY h.key COLLATE "C";
  ELSE
    -- As in _frontier_at: the box test is the index condition, the integer tests after
    -- it are exact whatever float8 rounding the boxes carry.
    RETURN QUERY
    SELECT x.key, x.version, x.seq
      FROM (SELECT v.key, v.version, v.node_seq AS seq FROM cwstore.key_versions v
             WHERE cwstore.span_band(v.graph_id, v.node_seq, v.to_seq)
                   @> cwstore.at_box(p_graph_id, p_seq)
               AND v.to_seq <> cwstore.infinity_seq()
               AND v.node_seq <= p_seq AND p_seq < v.to_seq
            UNION ALL
            SELECT h.key, h.version, h.head_seq FROM cwstore.key_heads h
             WHERE h.graph_id = p_graph_id AND h.head_seq <= p_seq) x
     WHERE NOT p_semantic_only OR starts_with(x.key, 'semantic:')
     ORDER BY x.key COLLATE "C";
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._heads_at(bigint, bigint, boolean) IS
  'Private: (key, version, seq) of every resource key''s head of a graph_id after node s (NULL = now): one GiST scan of key_versions_closed_idx plus the current heads that began by s.';

-- _walk(graph_id, start, up, max_depth, bound, target) -> (seq, depth, via)
--   Breadth-first walk from node start over edges: to parents when up (edges_pkey),
--   else to children (edges_parent_idx), one query per level. Each node reached is
--   returned once, with its minimal depth (>= 1) and via, the node one step nearer to
--   start it was first reached from (the smallest such seq). Only nodes with
--   seq >= bound (up) or seq <= bound (down) are visited; max_depth NULL = no limit;
--   the walk stops after the level that reaches target (NULL = none).
--   Nodes already reached are not expanded again. Two ways to remember them:
--   * unbounded walks (max_depth NULL) usually reach much of the window between start
--     and bound, so they mark a boolean[] indexed by distance in seq from start: O(1) a
--     check, for a 1-byte slot per sequence number of the window, filled once;
--   * walks bounded by max_depth keep the nodes reached in a bigint[] and leave them
--     out with a hashed NOT IN, O(reached) a level: no cost in the window's length.
--   Cost: O(r log n) for the r nodes reached (one index descent each), plus the array
--   of the window (unbounded) or O(max_depth * r) (bounded).
CREATE FUNCTION cwstore._walk(p_graph_id bigint, p_start bigint, p_up boolean,
                              p_max_depth integer, p_bound bigint, p_target bigint)
RETURNS TABLE (seq bigint, depth integer, via bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_size bigint := CASE WHEN p_up THEN p_start - p_bound ELSE p_bound - p_start END;
  v_dense boolean := p_max_depth IS NULL;
  v_mark boolean[];     -- unbounded: v_mark[|s - start|] once s is reached
  v_seen bigint[];      -- bounded: start and every node reached
  v_level bigint[] := ARRAY[p_start];
  v_next bigint[];
  v_via bigint[];
  d integer := 0;
  i integer;
BEGIN
  IF v_size <= 0 OR p_max_depth <= 0 THEN
    RETURN;
  END IF;
  IF v_dense THEN
    v_mark := array_fill(false, ARRAY[v_size::integer]);
  ELSE
    v_seen := ARRAY[p_start];
  END IF;
  WHILE cardinality(v_level) > 0 AND (v_dense OR d < p_max_depth) LOOP
    d := d + 1;
    IF p_up AND v_dense THEN
      SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'), coalesce(array_agg(x.v ORDER BY x.s), '{}')
        INTO v_next, v_via
        FROM (SELECT e.parent_seq AS s, min(e.child_seq) AS v FROM cwstore.edges e
               WHERE e.graph_id = p_graph_id AND e.child_seq = ANY (v_level)
                 AND e.parent_seq >= p_bound AND NOT v_mark[p_start - e.parent_seq]
               GROUP BY e.parent_seq) x;
    ELSIF p_up THEN
      SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'), coalesce(array_agg(x.v ORDER BY x.s), '{}')
        INTO v_next, v_via
        FROM (SELECT e.parent_seq AS s, min(e.child_seq) AS v FROM cwstore.edges e
               WHERE e.graph_id = p_graph_id AND e.child_seq = ANY (v_level)
                 AND e.parent_seq >= p_bound
                 AND e.parent_seq NOT IN (SELECT unnest(v_seen))
               GROUP BY e.parent_seq) x;
    ELSIF v_dense THEN
      SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'), coalesce(array_agg(x.v ORDER BY x.s), '{}')
        INTO v_next, v_via
        FROM (SELECT e.child_seq AS s, min(e.parent_seq) AS v FROM cwstore.edges e
               WHERE e.graph_id = p_graph_id AND e.parent_seq = ANY (v_level)
                 AND e.child_seq <= p_bound AND NOT v_mark[e.child_seq - p_start]
               GROUP BY e.child_seq) x;
    ELSE
      SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'), coalesce(array_agg(x.v ORDER BY x.s), '{}')
        INTO v_next, v_via
        FROM (SELECT e.child_seq AS s, min(e.parent_seq) AS v FROM cwstore.edges e
               WHERE e.graph_id = p_graph_id AND e.parent_seq = ANY (v_level)
                 AND e.child_seq <= p_bound
                 AND e.child_seq NOT IN (SELECT unnest(v_seen))
               GROUP BY e.child_seq) x;
    END IF;
    depth := d;
    FOR i IN 1 .. cardinality(v_next) LOOP
      seq := v_next[i];
      via := v_via[i];
      IF v_dense THEN
        v_mark[abs(seq - p_start)] := true;
      END IF;
      RETURN NEXT;
    END LOOP;
    IF NOT v_dense THEN
      v_seen := v_seen || v_next;
    END IF;
    v_level := v_next;
    EXIT WHEN p_target IS NOT NULL AND p_target = ANY (v_level);
  END LOOP;
END $$;
COMMENT ON FUNCTION cwstore._walk(bigint, bigint, boolean, integer, bigint, bigint) IS
  'Private: breadth-first walk over edges from one node (up = to parents), minimal depth and predecessor per node reached.';

-- ---------------------------------------------------------------------------------
-- public read functions
-- ---------------------------------------------------------------------------------

-- seq_at_time(graph, t) -> bigint
--   As of a time: the last sequence whose created_at (the runtime's createdAt) is <= t,
--   0 when there is none. t NULL = now (the graph's length). The prefix 1..that seq is
--   "the graph as of t" (SPEC 8); nodes inside it may carry a createdAt later than t
--   when the writer's clock went backwards, exactly as the definition says.
--   Cost: when createdAt grows with sequence (the runtime's normal case) the planner
--   reads the cheaper end: for t near the end, a backward walk of the primary key over
--   the few nodes after the answer; for t near the start, a range of
--   nodes_created_at_idx (graph_id, created_at) over the few nodes before it. For t in
--   the middle it reads about min(answer, n - answer) rows: "the last node with
--   createdAt <= t" must rule out every later node, and no index can say "no later node
--   is older" without a column the writer keeps (a running maximum of createdAt).
--   Plans are made with t's value (force_custom_plan) so each call gets the right end.
CREATE FUNCTION cwstore.seq_at_time(p_graph text, p_time timestamptz)
RETURNS bigint LANGUAGE plpgsql STABLE
SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_custom_plan AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_seq bigint;
BEGIN
  IF p_time IS NULL THEN
    RETURN g.length;
  END IF;
  SELECT max(n.seq) INTO v_seq FROM cwstore.nodes n
   WHERE n.graph_id = g.graph_id AND n.created_at <= p_time;
  RETURN coalesce(v_seq, 0);
END $$;
COMMENT ON FUNCTION cwstore.seq_at_time(text, timestamptz) IS
  'As of a time: the last seq whose created_at (runtime createdAt) <= t, 0 if none; t NULL = the graph''s length. Feed it to the *_at functions.';

-- frontier_at(graph, s) -> (position, seq, id, kind)
--   The frontier (active heads) after node s, in the order the heads joined (position
--   from 0): the frontier declared at s or derived by SPEC 4's fold from the last
--   declared one, as materialized in frontier_spans. s NULL = now.
--   Cost: now O(h) (partial index on current spans); at s O(log n + h) (GiST), plus
--   one primary-key lookup per head for id and kind.
CREATE FUNCTION cwstore.frontier_at(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS TABLE ("position" integer, seq bigint, id text, kind text)
LANGUAGE plpgsql STABLE ROWS 4 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  RETURN QUERY
  SELECT f.position, f.seq, n.id, n.kind
    FROM cwstore._frontier_at(g.graph_id, cwstore._at(p_seq, g.length)) f
    JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq
   ORDER BY f.position;
END $$;
COMMENT ON FUNCTION cwstore.frontier_at(text, bigint) IS
  'Frontier (active heads) of a graph after node s (NULL = now), in order: position from 0, seq, id, kind. O(log n + heads).';

-- heads_at(graph, s) -> (key, version, seq, id, kind)
--   Every resource key's head after node s (semantic keys included, as
--   "semantic:<type>:<key>"), with its version number counted from 1 along the chain.
--   Keys in byte order. s NULL = now. Keys that first appear after s are absent.
--   Cost: now O(k); at s O(k log n) (one descent of key_versions_seq_idx per key).
CREATE FUNCTION cwstore.heads_at(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS TABLE (key text, version integer, seq bigint, id text, kind text)
LANGUAGE plpgsql STABLE ROWS 100 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  RETURN QUERY
  SELECT h.key, h.version, h.seq, n.id, n.kind
    FROM cwstore._heads_at(g.graph_id, cwstore._at(p_seq, g.length), false) h
    JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = h.seq
   ORDER BY h.key COLLATE "C";
END $$;
COMMENT ON FUNCTION cwstore.heads_at(text, bigint) IS
  'Head of every resource key (semantic keys included) of a graph after node s (NULL = now): key, version (from 1), seq, id, kind. O(keys * log n).';

-- semantic_at(graph, s) -> (type, key, content, content_text, version, seq, id)
--   Semantic memory after node s: the head of every "semantic:<type>:<key>" chain whose
--   head is a semantic node, with its payload's fields. content is jsonb (U+0000 shown
--   as U+FFFD, members reordered); content_text is the exact JSON text the runtime
--   wrote for it. Ordered by type, then key (byte order). s NULL = now.
--   Cost: now O(m); at s O(m log n); plus reading each head's payload.
CREATE FUNCTION cwstore.semantic_at(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS TABLE (type text, key text, content jsonb, content_text text, version integer,
               seq bigint, id text)
LANGUAGE plpgsql STABLE ROWS 50 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  -- type and key come from the resource key, semantic:<type>:<key> (the nodes trigger
  -- holds semantic nodes to it, and a type has no colon), so only content is parsed.
  RETURN QUERY
  SELECT t.type, substr(h.key, length(t.type) + 11), cwstore.payload_jsonb(c.text), c.text,
         h.version, h.seq, n.id
    FROM cwstore._heads_at(g.graph_id, cwstore._at(p_seq, g.length), true) h
    JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = h.seq
   CROSS JOIN LATERAL (SELECT split_part(h.key, ':', 2) AS type) t
   CROSS JOIN LATERAL (SELECT cwstore._json_member_text(n.payload_text, 'content') AS text) c
   WHERE n.kind = 'semantic'
   ORDER BY t.type COLLATE "C", substr(h.key, length(t.type) + 11) COLLATE "C";
END $$;
COMMENT ON FUNCTION cwstore.semantic_at(text, bigint) IS
  'Semantic memory of a graph after node s (NULL = now): type, key, content (jsonb), content_text (exact JSON), version, seq, id of every semantic key''s head.';

-- ancestors(graph, node_id, max_depth) -> (seq, id, kind, depth)
--   Every node the given node depends on, through parents transitively, each once with
--   its minimal depth (1 = a parent). max_depth NULL = no limit. The node itself is not
--   listed. Ordered by depth, then seq. CW404 if the graph has no such node.
--   Cost: O(r log n) for the r ancestors returned. Without max_depth, plus an array of
--   1 byte per sequence number below the node; with it, nothing that grows with n
--   (see _walk).
CREATE FUNCTION cwstore.ancestors(p_graph text, p_node_id text, p_max_depth integer DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, kind text, depth integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_seq bigint := cwstore._node_seq(g.graph_id, p_graph, p_node_id);
BEGIN
  IF p_max_depth < 0 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('max_depth is >= 0 or NULL, got %s', p_max_depth);
  END IF;
  RETURN QUERY
  SELECT w.seq, n.id, n.kind, w.depth
    FROM cwstore._walk(g.graph_id, v_seq, true, p_max_depth, 1, NULL) w
    JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = w.seq
   ORDER BY w.depth, w.seq;
END $$;
COMMENT ON FUNCTION cwstore.ancestors(text, text, integer) IS
  'Ancestors of a node (transitive parents), each with its minimal depth (1 = parent), up to max_depth (NULL = all). Ordered by depth, seq.';

-- descendants(graph, node_id, max_depth) -> (seq, id, kind, depth)
--   Every node that depends on the given node, each once with its minimal depth
--   (1 = a child). max_depth NULL = no limit. The node itself is not listed. Ordered by
--   depth, then seq. CW404 if the graph has no such node.
--   Cost: O(r log n) for the r descendants returned (edges_parent_idx). Without
--   max_depth, plus an array of 1 byte per sequence number above the node; with it,
--   nothing that grows with n (see _walk).
CREATE FUNCTION cwstore.descendants(p_graph text, p_node_id text, p_max_depth integer DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, kind text, depth integer)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_seq bigint := cwstore._node_seq(g.graph_id, p_graph, p_node_id);
BEGIN
  IF p_max_depth < 0 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('max_depth is >= 0 or NULL, got %s', p_max_depth);
  END IF;
  RETURN QUERY
  SELECT w.seq, n.id, n.kind, w.depth
    FROM cwstore._walk(g.graph_id, v_seq, false, p_max_depth, g.length, NULL) w
    JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = w.seq
   ORDER BY w.depth, w.seq;
END $$;
COMMENT ON FUNCTION cwstore.descendants(text, text, integer) IS
  'Descendants of a node (transitive children), each with its minimal depth (1 = child), up to max_depth (NULL = all). Ordered by depth, seq.';

-- path(graph, from_id, to_id) -> (step, seq, id, kind)
--   A shortest causal path from from_id to to_id, where from_id is an ancestor of to_id:
--   step 0 is from_id, each next step is a child of the one before, the last is to_id.
--   Empty when from_id is not an ancestor of to_id; one step when they are the same node.
--   Among several shortest paths, each step takes the smallest seq that still leads to
--   to_id by a shortest path. CW404 if either node is unknown.
--   Cost: a breadth-first walk up from to_id that visits only sequences between the
--   two nodes and stops at the level reaching from_id: O(r log n) for the r nodes
--   visited, plus arrays of 9 bytes per sequence number between them.
CREATE FUNCTION cwstore.path(p_graph text, p_from_id text, p_to_id text)
RETURNS TABLE (step integer, seq bigint, id text, kind text)
LANGUAGE plpgsql STABLE ROWS 10 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_from bigint := cwstore._node_seq(g.graph_id, p_graph, p_from_id);
  v_to bigint := cwstore._node_seq(g.graph_id, p_graph, p_to_id);
  v_via bigint[];       -- v_via[to - s]: the node one step from s towards to_id
  v_steps bigint[];
  v_cur bigint;
  r record;
BEGIN
  IF v_from > v_to THEN
    RETURN;
  END IF;
  v_steps := ARRAY[v_from];
  IF v_from < v_to THEN
    v_via := array_fill(0::bigint, ARRAY[(v_to - v_from)::integer]);
    FOR r IN SELECT w.seq, w.via
               FROM cwstore._walk(g.graph_id, v_to, true, NULL, v_from, v_from) w LOOP
      v_via[v_to - r.seq] := r.via;
    END LOOP;
    IF v_via[v_to - v_from] = 0 THEN
      RETURN;             -- from_id is not an ancestor of to_id
    END IF;
    v_cur := v_from;
    WHILE v_cur <> v_to LOOP
      v_cur := v_via[v_to - v_cur];
      v_steps := v_steps || v_cur;
    END LOOP;
  END IF;
  RETURN QUERY
  SELECT u.ord::integer - 1, u.s, n.id, n.kind
    FROM unnest(v_steps) WITH ORDINALITY AS u(s, ord)
    JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = u.s
   ORDER BY u.ord;
END $$;
COMMENT ON FUNCTION cwstore.path(text, text, text) IS
  'A shortest causal path from an ancestor (from_id, step 0) to a descendant (to_id, last step); empty if from_id is not an ancestor of to_id.';

-- key_history(graph, key) -> (version, seq, id, kind, created_at, recorded_at, payload,
--                             payload_text)
--   Every version of a resource key (semantic keys as "semantic:<type>:<key>"), oldest
--   first: version from 1, the node, its runtime createdAt, when the database stored it,
--   and its payload (jsonb, and the exact text). Empty for a key the graph never had.
--   Cost: O(v log n) for the v versions (key_versions_seq_idx, then nodes_pkey).
CREATE FUNCTION cwstore.key_history(p_graph text, p_key text)
RETURNS TABLE (version integer, seq bigint, id text, kind text, created_at timestamptz,
               recorded_at timestamptz, payload jsonb, payload_text text)
LANGUAGE plpgsql STABLE ROWS 10 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  RETURN QUERY
  SELECT v.version, v.node_seq, n.id, n.kind, n.created_at, n.recorded_at,
         cwstore.payload_jsonb(n.payload_text),
         n.payload_text
    FROM cwstore.key_versions v
    JOIN cwstore.nodes n ON n.graph_id = v.graph_id AND n.seq = v.node_seq
   WHERE v.graph_id = g.graph_id AND v.key = p_key
   ORDER BY v.version;
END $$;
COMMENT ON FUNCTION cwstore.key_history(text, text) IS
  'Every version of a resource key, oldest first: version, seq, id, kind, created_at, recorded_at, payload (jsonb), payload_text (exact).';


-- export_v1(graph, s, t) -> (length, seq, nodes, frontier)
--   The graph as of node s, or as of time t (the last node whose createdAt <= t), or now
--   when both are NULL: nodes is the JSON array text of nodes 1..seq, frontier the ids
--   of the frontier in force there. When s is beyond the graph's length, nodes and
--   frontier are NULL and length tells the client why. One statement, one snapshot.
--   CW404 for an unknown graph (or one of another tenant).
CREATE FUNCTION cwstore.export_v1(p_graph text, p_seq bigint DEFAULT NULL,
                                  p_time timestamptz DEFAULT NULL)
RETURNS TABLE (length bigint, seq bigint, nodes text, frontier text[])
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_seq bigint;
BEGIN
  IF p_seq < 0 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('a sequence number is >= 0, got %s', p_seq),
      DETAIL = jsonb_build_object('seq', p_seq)::text;
  END IF;
  v_seq := CASE WHEN p_time IS NOT NULL THEN cwstore.seq_at_time(p_graph, p_time)
                ELSE coalesce(p_seq, g.length) END;
  IF v_seq > g.length THEN
    RETURN QUERY SELECT g.length, v_seq, NULL::text, NULL::text[];
    RETURN;
  END IF;
  RETURN QUERY
  SELECT g.length, v_seq,
         (SELECT '[' || coalesce(string_agg(x.node_json, ','), '') || ']'
            FROM (SELECT n.node_json FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq <= v_seq ORDER BY n.seq) x),
         CASE WHEN v_seq = 0 THEN '{}'::text[] ELSE
           ARRAY(SELECT n.id FROM cwstore._frontier_at(g.graph_id, v_seq) f
                   JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq
                  ORDER BY f.position) END;
END $$;
COMMENT ON FUNCTION cwstore.export_v1(text, bigint, timestamptz) IS
  'The graph as of node s, time t, or now: (length, seq, nodes JSON array text, frontier ids), from one snapshot. nodes is NULL when s > length.';

-- projection_v1(graph, s) -> text
--   The state a reader works from, after node s (NULL = now), in one round trip, as JSON
--   text with every payload embedded as the exact JSON the runtime wrote (member order,
--   numbers, escapes), built by concatenating stored texts and parsed by a client in one
--   pass (psql users: cast it, projection_v1(g)::jsonb):
--   {"length": the prefix length (s, at most the graph's length),
--    "frontier": [{"id", "kind", "seq", "payload"}] in frontier order,
--    "resources": [{"key", "version", "seq", "id", "kind", "payload"}] the head of every
--        resource key that is not semantic memory, keys in byte order,
--    "semantic": [{"key", "version", "seq", "id", "payload"}] the head of every semantic
--        key (as semantic_at; payload is {type, key, content}), by type then key,
--    "latest_goal": {"seq", "id", "payload"} or null, the newest goal at or before s,
--    "latest_answer": likewise for answers,
--    "counts": {kind: number of nodes of that kind in 1..s}, kinds that occur only}.
--   Every part reads one snapshot (the function is STABLE).
--   Cost: frontier O(log n + h); heads O(log n + k) (O(k) now); counts and the latest
--   goal and answer: one backward descent of kind_counts_pkey per kind (ten), since
--   the newest kind_counts row of a kind at or before s holds both the running count
--   and the seq of that kind's latest node. Nothing else grows with n.
CREATE FUNCTION cwstore.projection_v1(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_at bigint := cwstore._at(p_seq, g.length);
  v_len bigint := coalesce(v_at, g.length);
  v_counts text;
  v_goal bigint;
  v_answer bigint;
BEGIN
  SELECT coalesce(json_object_agg(k.kind, c.n)::text, '{}'),
         max(c.seq) FILTER (WHERE k.kind = 'goal'), max(c.seq) FILTER (WHERE k.kind = 'answer')
    INTO v_counts, v_goal, v_answer
    FROM unnest(cwstore.node_kinds()) AS k(kind)
   CROSS JOIN LATERAL (
         SELECT kc.seq, kc.n FROM cwstore.kind_counts kc
          WHERE kc.graph_id = g.graph_id AND kc.kind = k.kind AND kc.seq <= v_len
          ORDER BY kc.seq DESC LIMIT 1) c;
  RETURN (
  WITH h AS MATERIALIZED (
    SELECT h.key, h.version, h.seq, n.id, n.kind, n.payload_text,
           starts_with(h.key, 'semantic:') AND n.kind = 'semantic' AS memory
      FROM cwstore._heads_at(g.graph_id, v_at, false) h
      JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = h.seq
  )
  SELECT '{"length":' || v_len
    || ',"frontier":[' || coalesce((
      SELECT string_agg('{"id":"' || n.id || '","kind":"' || n.kind || '","seq":' || n.seq
                        || ',"payload":' || n.payload_text || '}', ',' ORDER BY f.position)
        FROM cwstore._frontier_at(g.graph_id, v_at) f
        JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq), '')
    || '],"resources":[' || coalesce((
      SELECT string_agg('{"key":' || to_json(h.key)::text || ',"version":' || h.version
                        || ',"seq":' || h.seq || ',"id":"' || h.id || '","kind":"' || h.kind
                        || '","payload":' || h.payload_text || '}', ',' ORDER BY h.key COLLATE "C")
        FROM h WHERE NOT h.memory), '')
    || '],"semantic":[' || coalesce((
      SELECT string_agg('{"key":' || to_json(h.key)::text || ',"version":' || h.version
                        || ',"seq":' || h.seq || ',"id":"' || h.id
                        || '","payload":' || h.payload_text || '}', ','
                        ORDER BY t.type COLLATE "C", substr(h.key, length(t.type) + 11) COLLATE "C")
        FROM h CROSS JOIN LATERAL (SELECT split_part(h.key, ':', 2) AS type) t
       WHERE h.memory), '')
    || '],"latest_goal":' || coalesce((
      SELECT '{"seq":' || n.seq || ',"id":"' || n.id || '","payload":' || n.payload_text || '}'
        FROM cwstore.nodes n WHERE n.graph_id = g.graph_id AND n.seq = v_goal), 'null')
    || ',"latest_answer":' || coalesce((
      SELECT '{"seq":' || n.seq || ',"id":"' || n.id || '","payload":' || n.payload_text || '}'
        FROM cwstore.nodes n WHERE n.graph_id = g.graph_id AND n.seq = v_answer), 'null')
    || ',"counts":' || v_counts || '}');
END $$;
COMMENT ON FUNCTION cwstore.projection_v1(text, bigint) IS
  'Projection after node s (NULL = now) as JSON text: length, frontier, resources, semantic, latest_goal, latest_answer, counts, with payloads embedded verbatim (cast to jsonb in psql).';

-- ---------------------------------------------------------------------------------
-- views
-- ---------------------------------------------------------------------------------

CREATE VIEW cwstore.node_view WITH (security_invoker = true) AS
SELECT g.name AS graph, n.seq, n.id, n.kind, n.parents,
       cwstore.payload_jsonb(n.payload_text) AS payload, n.payload_text,
       n.created_at, n.created_at_text, n.resource_key, n.recorded_at
  FROM cwstore.nodes n JOIN cwstore.graphs g ON g.graph_id = n.graph_id;
COMMENT ON VIEW cwstore.node_view IS
  'Nodes with their graph''s name. payload_text is the exact JSON the runtime wrote; payload its jsonb reading, cwstore.payload_jsonb(payload_text) (members reordered, U+0000 shown as U+FFFD). created_at(_text) is the runtime''s createdAt, recorded_at when the database stored the node. Filter on graph and seq: both are index columns underneath.';

CREATE VIEW cwstore.edge_view WITH (security_invoker = true) AS
SELECT g.name AS graph, e.child_seq, c.id AS child_id, e.position, e.parent_seq,
       p.id AS parent_id
  FROM cwstore.edges e
  JOIN cwstore.graphs g ON g.graph_id = e.graph_id
  JOIN cwstore.nodes c ON c.graph_id = e.graph_id AND c.seq = e.child_seq
  JOIN cwstore.nodes p ON p.graph_id = e.graph_id AND p.seq = e.parent_seq;
COMMENT ON VIEW cwstore.edge_view IS
  'Parent links with graph name and node ids: the child''s parents[position] is the parent (position from 0).';

-- =================================================================================
-- schema/80_listeners.sql
-- =================================================================================

-- 80_listeners: who follows the channel cwstore, so appends wake followers only while
-- someone follows.
--
-- PostgreSQL queues a notification under one lock for the whole server at commit,
-- whether or not any session listens: with 16 writers on separate graphs an
-- unconditional NOTIFY cost about a quarter of the throughput. Followers (the clients'
-- tail and tail_all) register in cwstore.listeners after they LISTEN, and the nodes
-- triggers notify only while the table holds a row. NOTIFY stays a hint: a follower
-- that registers while a write is in flight may miss that one wake-up and finds the
-- node at its next poll.

-- listen_v1(): register this backend as a follower (call it after LISTEN cwstore), and
-- forget backends that are gone. unlisten_v1(): undo it. Both run as the owner, so
-- readers may follow without any write privilege.
CREATE FUNCTION cwstore.listen_v1() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  DELETE FROM cwstore.listeners l
   WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = l.pid);
  INSERT INTO cwstore.listeners (pid) VALUES (pg_catalog.pg_backend_pid())
  ON CONFLICT (pid) DO NOTHING;
$$;
COMMENT ON FUNCTION cwstore.listen_v1() IS
  'Register this backend as a follower of channel cwstore (after LISTEN cwstore), so appends send their wake-up NOTIFY.';

CREATE FUNCTION cwstore.unlisten_v1() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  DELETE FROM cwstore.listeners WHERE pid = pg_catalog.pg_backend_pid();
$$;
COMMENT ON FUNCTION cwstore.unlisten_v1() IS
  'Undo listen_v1 for this backend.';
