-- 0002_to_0_1_0: what release 0.1.0 adds to the baseline (0001), in one delta.
--
-- Frozen history once released (migrations/RELEASED). The truth about the schema is
-- sql/schema/; the definitions below are copies of it, and tests/migration proves a
-- database migrated from 0001 equal to one made from schema/, with data in it.
--
-- What 0.1.0 adds, by what changes here:
-- * Graph keys: a graph's graph_id is derived from its name (graph_key(name,
--   key_probe)), so a name finds its row without a unique index on names (what a
--   distributed PostgreSQL needs); every graph's rows are rekeyed once, below, two
--   names whose keys collide taking the keys a graph made now would take.
-- * Lives and erasure: graphs.incarnation tells one life of a name from the next; the
--   audit record cwstore.erasures, whose insert erases a graph; graph_key_detours.
-- * Retention: graphs.written_at (from the graph's last node) and retention_group.
-- * The write path: the SQL door (append_v1) makes the checks cwstore import makes (but
--   for recomputing ids: it checks their form) and decides under the graph's lock on
--   the life it writes (a fifth argument); one statement trigger on nodes derives
--   edges, key versions and kind counts; the frontier's history (frontier_spans) is derived
--   behind a watermark (graphs.derived_length) and the current frontier kept on the
--   graph's row (graphs.frontier_seqs); nodes.node_json, a stored copy, is gone.
-- * Reads in key order that can only be index descents; planner statistics kept off
--   the columns that hold content (docs/erasure.md).
--
-- Folded from the unreleased migrations 0002_sql_door .. 0016 of the development
-- history. A database migrated by those is refused by the runner (another chain):
-- export its graphs, and import them into a new database.
--
-- Safe with live writers: no. It rekeys every graph's rows and replaces the tables'
-- triggers and the write functions: stop the writers first. A database at 0001 cannot
-- be distributed (Citus), so nothing here is for Citus.

-- What 0.1.0 no longer has. node_json is dropped before the function its generated
-- column calls is replaced.
DROP FUNCTION cwstore._check_reader(text, text);
ALTER TABLE cwstore.nodes DROP COLUMN node_json;
DROP TRIGGER nodes_inserted_small ON cwstore.nodes;
DROP TRIGGER nodes_inserted_bulk ON cwstore.nodes;
DROP FUNCTION cwstore._nodes_inserted_small();
DROP FUNCTION cwstore._nodes_inserted_bulk();
DROP FUNCTION cwstore.append_v1(text, json, bigint, json);

-- The tables, as sql/schema/20_tables.sql has them. graph_id is computed from the name
-- from now on; the backfills of the new columns follow the functions.
ALTER TABLE cwstore.graphs ALTER COLUMN graph_id DROP IDENTITY;
ALTER TABLE cwstore.graphs DROP CONSTRAINT graphs_name_key;
CREATE SEQUENCE cwstore.graph_incarnations AS bigint START WITH 281474976710656;
ALTER TABLE cwstore.graphs
  ADD COLUMN key_probe integer NOT NULL DEFAULT 0,
  ADD COLUMN incarnation bigint,
  ADD COLUMN written_at timestamptz,
  ADD COLUMN retention_group text,
  ADD COLUMN frontier_seqs bigint[] NOT NULL DEFAULT '{}',
  ADD COLUMN derived_length bigint NOT NULL DEFAULT 0,
  ADD CONSTRAINT graphs_retention_group_check CHECK (
    retention_group <> '' AND octet_length(retention_group) <= 2000);
CREATE INDEX graphs_retention_group_idx ON cwstore.graphs (tenant, retention_group)
  WHERE retention_group IS NOT NULL;

CREATE TABLE cwstore.graph_key_detours (
  slot      bigint NOT NULL,
  graph_id  bigint NOT NULL,
  CONSTRAINT graph_key_detours_pkey PRIMARY KEY (slot, graph_id)
);

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
ALTER TABLE cwstore.erasures ENABLE ROW LEVEL SECURITY;

DROP INDEX cwstore.nodes_created_at_idx;
CREATE INDEX nodes_created_at_idx ON cwstore.nodes (graph_id, created_at)
  WHERE created_at IS NOT NULL;
CREATE INDEX nodes_key_idx ON cwstore.nodes (graph_id, resource_key, seq)
  INCLUDE (id) WHERE resource_key IS NOT NULL;
DROP INDEX cwstore.frontier_declarations_seq_idx;
CREATE INDEX frontier_declarations_seq_idx ON cwstore.frontier_declarations (graph_id, seq, declaration_id);

-- =================================================================================
-- The functions 0.1.0 adds or changes, as sql/schema/ defines them, file by file.
-- =================================================================================

-- From 10_helpers.sql.

-- How far a graph's frontier history (frontier_spans) may trail its nodes: the write
-- that takes the graph this many nodes past its watermark (graphs.derived_length)
-- derives the spans of those nodes, in one set-wise pass; a read as of a later node
-- folds at most this many minus one.
CREATE OR REPLACE FUNCTION cwstore.derive_lag() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 32::bigint $$;

COMMENT ON FUNCTION cwstore.derive_lag() IS
  'How many nodes a graph''s frontier history may trail its length before the write that reaches it derives them.';

-- _fold_frontier(frontier, new heads, closed): SPEC 4's fold of a run of nodes onto a
-- frontier (heads' sequences, in order): the heads that a node of the run took as a
-- parent leave it, the run's folding nodes join it at the end in sequence order, unless
-- a later node of the run took them as a parent. new is the run's folding nodes
-- (semantic nodes and parentless system nodes leave the frontier alone), closed the
-- parents of those nodes. Set-wise: a node is only ever a parent of later nodes.
CREATE OR REPLACE FUNCTION cwstore._fold_frontier(p_frontier bigint[], p_new bigint[], p_closed bigint[])
RETURNS bigint[] LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  -- plpgsql, not SQL: a SQL function with a FROM clause is not inlined, and its body
  -- was planned again in every statement that called it (0.12 ms an append). A run of a
  -- few nodes (an append, a read's fold) compares each head with each closed one; a
  -- large one (an import) joins them.
  IF coalesce(cardinality(p_closed), 0)
     * (coalesce(cardinality(p_frontier), 0) + coalesce(cardinality(p_new), 0)) <= 10000 THEN
    RETURN ARRAY(SELECT u.s FROM unnest(p_frontier || p_new) WITH ORDINALITY AS u(s, o)
                  WHERE u.s <> ALL (coalesce(p_closed, '{}')) ORDER BY u.o);
  END IF;
  RETURN (SELECT coalesce(array_agg(u.s ORDER BY u.o), '{}')
            FROM unnest(p_frontier || p_new) WITH ORDINALITY AS u(s, o)
            LEFT JOIN (SELECT DISTINCT c.s FROM unnest(p_closed) AS c(s)) c ON c.s = u.s
           WHERE c.s IS NULL);
END $$;

COMMENT ON FUNCTION cwstore._fold_frontier(bigint[], bigint[], bigint[]) IS
  'Private: a frontier (heads'' seqs, in order) after a run of nodes: without closed (the parents of the run''s folding nodes), then new (those nodes), in order.';

-- The ten node kinds of AgentState v1, listed once: the nodes table's CHECK, append_v1's
-- validation and the projection's counts read them from here. A call with no argument
-- to an IMMUTABLE function is folded into a constant when a statement is planned, so
-- this costs nothing per row; a CHECK constraint's is folded each time a statement that
-- writes the table starts, which for a SQL function means planning its body again
-- (about 15 microseconds per append), and for plpgsql reusing a cached plan.
CREATE OR REPLACE FUNCTION cwstore.node_kinds() RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN ARRAY['system', 'goal', 'inference', 'answer', 'tool_call', 'tool_result',
               'resource', 'semantic', 'protocol_error', 'verification'];
END $$;

COMMENT ON FUNCTION cwstore.node_kinds() IS
  'The ten node kinds of AgentState v1, in the runtime''s order.';

-- The queryable jsonb copy of a payload. jsonb refuses \u0000, so the escape becomes
-- U+FFFD here; payload_text keeps the exact text. Escaped backslash pairs are set
-- aside first so that a literal "\\u0000" (backslash, then u0000) is left alone. Not
-- STRICT (a NULL text gives NULL all the same): a STRICT SQL function whose body is
-- not is called rather than inlined, and its body planned again on every statement.
CREATE OR REPLACE FUNCTION cwstore.payload_jsonb(payload_text text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(payload_text, '\u0000') = 0 THEN payload_text::jsonb
         ELSE replace(replace(replace(payload_text, '\\', E'\x01'), '\u0000', '\ufffd'),
                      E'\x01', '\\')::jsonb END
$$;

COMMENT ON FUNCTION cwstore.payload_jsonb(text) IS
  'jsonb copy of an exact payload text (U+0000 shown as U+FFFD).';

-- createdAt is checked to be RFC 3339 with an explicit zone (nodes_created_at_check), so
-- parsing it does not depend on the session's TimeZone or DateStyle: that is what makes
-- IMMUTABLE true. PostgreSQL keeps microseconds; a createdAt with more digits is rounded
-- UP to the next microsecond, so "createdAt <= T" stays exact for any T it can hold.
-- (plpgsql: a non-inlinable SQL function costs more per row in a bulk load.)
CREATE OR REPLACE FUNCTION cwstore.parse_time(created_at text) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_local text;
  v_zone text;
  v_t timestamp;
BEGIN
  -- The runtime's own form (Date.prototype.toISOString), read as it is.
  IF created_at ~ '^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$' THEN
    RETURN created_at::timestamptz;
  END IF;
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

-- A graph's key, its graph_id: 48 bits of the MD5 of its name (probe 0), or, when that
-- key is held by another name, of the next probe's text (cwstore.graph_key(name, probe),
-- below). Derived from the name so that a name finds its graph's row by its key, which
-- is what lets a distributed PostgreSQL (Citus) spread graphs by this key: its unique
-- constraints must include the distribution column. 48 bits keep the key exact in a
-- float8 with room for the quarter-unit width of cwstore.span_band's boxes. Two names
-- with one probe-0 key both exist: the second takes probe 1 (docs/erasure.md, "Graph
-- names and keys"); cwstore.graph_id_of walks the same chain.
-- Probe n > 0 hashes the probe's number before the name, with a separator no digit is:
-- the texts of two (name, probe) pairs never coincide.
-- Not STRICT (a NULL name or probe gives NULL all the same): PostgreSQL inlines a SQL
-- function only if it is not STRICT or its body is, and a CASE is not; a function not
-- inlined has its body planned again in every statement that calls it.
CREATE OR REPLACE FUNCTION cwstore.graph_key(p_name text, p_probe integer DEFAULT 0) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ('x' || left(md5(CASE WHEN p_probe = 0 THEN p_name
                               ELSE p_probe::text || ':' || p_name END), 12))::bit(48)::bigint
$$;

COMMENT ON FUNCTION cwstore.graph_key(text, integer) IS
  'The key of a graph name at a probe of its chain (48 bits of md5; probe 0, the default, is the graph_id of almost every graph): graphs.graph_id = graph_key(name, key_probe).';

-- The longest graph name, in bytes of UTF-8: every door refuses a longer one when it
-- would create the graph (ensure_graph_v1, and so append_v1 and begin_import_v1), and
-- the clients refuse it before sending (cwstore._arg_checks.MAX_GRAPH_NAME_BYTES, the
-- same number, checked by tests/db/test_limits.py). Messages quote at most 200
-- characters of a name.
CREATE OR REPLACE FUNCTION cwstore.max_graph_name_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 2000
$$;

COMMENT ON FUNCTION cwstore.max_graph_name_bytes() IS
  'The longest graph name, in bytes of UTF-8 (2000).';

-- The largest payload, in bytes of its JSON text (UTF-8): append_v1 and import_rows_v1
-- refuse a larger one (too_large), as the validator does
-- (cwstore.document.MAX_PAYLOAD_BYTES, the same number, checked by
-- tests/db/test_limits.py), so that no node costs a backend more than a bounded amount
-- of memory (docs/reliability.md).
CREATE OR REPLACE FUNCTION cwstore.max_payload_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 4194304
$$;

COMMENT ON FUNCTION cwstore.max_payload_bytes() IS
  'The largest payload, in bytes of its JSON text (4 MiB).';

-- The runtime's JSON object of a stored node, fields in the runtime's order: what export
-- concatenates, built as it reads. Its arguments are a row of cwstore.nodes, whose id,
-- kind, parents and createdAt hold nothing JSON escapes (nodes_id_check,
-- nodes_kind_check, nodes_created_at_check, and parents are ids of nodes), so they are
-- quoted as they are; the resourceKey, any text, goes through to_json. STABLE, as
-- to_json is, so that a query calling it gets its body inlined (a SQL function declared
-- more strictly than its body is called instead, its body planned again each time).
CREATE OR REPLACE FUNCTION cwstore.node_json(p_id text, p_kind text, p_parents text[], p_payload text,
                                  p_created_at text, p_seq bigint, p_resource_key text)
RETURNS text LANGUAGE sql STABLE PARALLEL SAFE AS $$
  SELECT '{"id":"' || p_id || '","kind":"' || p_kind || '","parents":'
         || CASE WHEN cardinality(p_parents) = 0 THEN '[]'
                 ELSE '["' || array_to_string(p_parents, '","') || '"]' END
         || ',"payload":' || p_payload || ',"createdAt":"' || p_created_at
         || '","sequence":' || p_seq
         || CASE WHEN p_resource_key IS NULL THEN ''
                 ELSE ',"resourceKey":' || to_json(p_resource_key)::text END
         || '}'
$$;

COMMENT ON FUNCTION cwstore.node_json(text, text, text[], text, text, bigint, text) IS
  'A stored node (a row of cwstore.nodes) as the runtime''s JSON object text (id, kind, parents, payload, createdAt, sequence, resourceKey?), payload verbatim.';

-- From 30_guards.sql.

-- 30_guards: history is append-only; derived tables are written by the nodes trigger
-- only; a graph's id, name and length are kept by cwstore; rows of a graph are removed
-- only by its erasure (the trigger of cwstore.erasures, 90_erasure.sql), which runs at
-- trigger depth 1 like the nodes trigger; the audit record itself is append-only.
--
-- The guards of the derived tables and of graphs' UPDATE fire only for the writes they
-- refuse: a trigger's WHEN condition is evaluated without entering the function, and
-- pg_trigger_depth() there is the depth of the statement that writes (0 for a client's
-- own statement, 1 inside the nodes trigger). Entering a plpgsql function only to be let
-- through cost about a fifth of a single-node append.
--
-- SQLSTATEs raised: CW403 (DETAIL {"table", "operation"}, and "graph" for graphs).

CREATE OR REPLACE FUNCTION cwstore._refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW403',
    MESSAGE = format('cwstore.%s is append-only history: %s refused', TG_TABLE_NAME, TG_OP),
    DETAIL = jsonb_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text,
    HINT = 'A graph is removed whole, and recorded, by cwstore.erase_graph_v1 (docs/erasure.md)';
END $$;

CREATE OR REPLACE FUNCTION cwstore._graphs_guard() RETURNS trigger
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
  IF NEW.graph_id <> OLD.graph_id OR NEW.name <> OLD.name OR NEW.incarnation <> OLD.incarnation
     OR ((NEW.length <> OLD.length OR NEW.frontier_seqs IS DISTINCT FROM OLD.frontier_seqs)
         AND pg_trigger_depth() < 2)
     OR (NEW.derived_length <> OLD.derived_length AND NEW.derived_length <> NEW.length
         AND pg_trigger_depth() < 2) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L: its id, name, incarnation, length and frontier are kept by cwstore (derived_length moves only to its length, cwstore.derive_v1): UPDATE refused', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  IF NEW.vocabulary IS DISTINCT FROM OLD.vocabulary AND OLD.length > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L holds nodes: its vocabulary cannot change', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  RETURN NEW;
END $$;

-- From 40_derive.sql.

-- _check_semantic(graph_id, seqs, ids, payloads, keys): CW400 for the first of a graph's
-- new semantic nodes (their sequences, ids, payload texts and resource keys) whose
-- payload is not {type, key, content} of the right forms, whose resourceKey is not
-- semantic:<type>:<key>, or whose type is outside the graph's fixed vocabulary.
CREATE OR REPLACE FUNCTION cwstore._check_semantic(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                        p_payloads text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_vocab text[];
BEGIN
  SELECT g.vocabulary INTO v_vocab FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
  SELECT n.seq, n.id, n.payload INTO r
    FROM (SELECT u.seq, u.id, u.resource_key, u.o, cwstore.payload_jsonb(u.payload_text) AS payload
            FROM unnest(p_seqs, p_ids, p_payloads, p_keys) WITH ORDINALITY
                   AS u(seq, id, payload_text, resource_key, o)) n
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
     AND (v_vocab IS NULL OR (n.payload ->> 'type') = ANY (v_vocab)))
   ORDER BY n.o
   LIMIT 1;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF jsonb_typeof(r.payload -> 'type') = 'string'
     AND (r.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$'
     AND v_vocab IS NOT NULL AND NOT ((r.payload ->> 'type') = ANY (v_vocab))
     AND (SELECT array_agg(k ORDER BY k) FROM jsonb_object_keys(r.payload) k)
         = ARRAY['content', 'key', 'type'] THEN
    PERFORM cwstore._violation('semantic_type', p_graph_id, r.seq, r.id, '$.payload.type',
      format('semantic type %L is not in the graph''s fixed vocabulary', r.payload ->> 'type'));
  ELSIF jsonb_typeof(r.payload -> 'type') = 'string'
     AND NOT (r.payload ->> 'type') ~ '^[a-z][a-z0-9_-]{0,47}$' THEN
    PERFORM cwstore._violation('semantic_type', p_graph_id, r.seq, r.id, '$.payload.type',
      format('semantic type %L is malformed', r.payload ->> 'type'));
  END IF;
  PERFORM cwstore._violation('semantic_payload', p_graph_id, r.seq, r.id, '$.payload',
    'semantic payload must be {type, key, content} with resourceKey semantic:<type>:<key>');
END $$;

-- _derive_node(graph_id, seq, id, kind, parents, resource_key) -> parent seqs: one new
-- node's derived rows, for a statement of a few nodes, called in sequence order. One
-- statement checks its parents (in order: sorted and listed once, existing, earlier),
-- records the edges and counts the node's kind; a keyed node then checks and moves its
-- chain. Returns its parents' sequences, for the frontier's fold.
CREATE OR REPLACE FUNCTION cwstore._derive_node(p_graph_id bigint, p_seq bigint, p_id text, p_kind text,
                                     p_parents text[], p_key text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
  v_parent_seqs bigint[];
  v_head record;
BEGIN
  WITH e AS (
    INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
    SELECT p_graph_id, p_seq, u.o::integer - 1,
           CASE
             WHEN u.prev COLLATE "C" >= u.pid COLLATE "C"
               THEN cwstore._violation('parent_order', p_graph_id, p_seq, p_id,
                 format('$.parents[%s]', u.o - 1), 'parents must be sorted ascending and listed once')
             WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', p_graph_id, p_seq,
               p_id, format('$.parents[%s]', u.o - 1), format('parent %s does not exist', u.pid))
             WHEN m.seq >= p_seq THEN cwstore._violation('parent_order', p_graph_id, p_seq,
               p_id, format('$.parents[%s]', u.o - 1),
               format('parent %s is not earlier in sequence', u.pid))
             ELSE m.seq
           END
      FROM (SELECT x.pid, x.o, lag(x.pid) OVER (ORDER BY x.o) AS prev
              FROM unnest(p_parents) WITH ORDINALITY AS x(pid, o)) u
      LEFT JOIN LATERAL (SELECT m.seq FROM cwstore.nodes m
                          WHERE m.graph_id = p_graph_id AND m.id = u.pid LIMIT 1) m ON true
     ORDER BY u.o
    RETURNING parent_seq),
  counted AS (
    INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
    SELECT p_graph_id, p_kind, p_seq,
           coalesce((SELECT k.n FROM cwstore.kind_counts k
                      WHERE k.graph_id = p_graph_id AND k.kind = p_kind
                      ORDER BY k.seq DESC LIMIT 1), 0) + 1)
  SELECT array_agg(e.parent_seq) INTO v_parent_seqs FROM e;

  IF p_key IS NULL THEN
    RETURN v_parent_seqs;
  END IF;
  SELECT h.head_seq, h.head_id, h.version INTO v_head
    FROM cwstore.key_heads h WHERE h.graph_id = p_graph_id AND h.key = p_key;
  IF FOUND THEN
    IF NOT (v_head.head_id = ANY (p_parents)) THEN
      PERFORM cwstore._chain_conflict(p_graph_id, p_key, p_seq, p_id, v_head.head_id, p_parents);
    END IF;
    UPDATE cwstore.key_versions SET to_seq = p_seq
     WHERE graph_id = p_graph_id AND key = p_key AND node_seq = v_head.head_seq;
    UPDATE cwstore.key_heads SET head_seq = p_seq, head_id = p_id, version = v_head.version + 1
     WHERE graph_id = p_graph_id AND key = p_key;
    INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
    VALUES (p_graph_id, p_key, v_head.version + 1, p_seq, cwstore.infinity_seq());
  ELSE
    INSERT INTO cwstore.key_heads (graph_id, key, head_seq, head_id, version, first_seq)
    VALUES (p_graph_id, p_key, p_seq, p_id, 1, p_seq);
    INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
    VALUES (p_graph_id, p_key, 1, p_seq, cwstore.infinity_seq());
  END IF;
  RETURN v_parent_seqs;
END $$;

-- _derive_parents(graph_id, batch nodes, batch parents) -> closed: a batch's parents
-- resolved and checked (existence, order, uniqueness) and its edges recorded. The
-- batch's nodes come as sequences and ids; its parents one row per (child, position):
-- child seq and id, position, parent id, the previous parent's id, whether the child
-- folds (SPEC 4: semantic nodes and parentless system nodes leave the frontier alone).
-- Returns the parents of the folding children, for the frontier's fold.
CREATE OR REPLACE FUNCTION cwstore._derive_parents(p_graph_id bigint, a_seq bigint[], a_id text[],
                                        p_child bigint[], p_id text[], p_pos integer[],
                                        p_pid text[], p_prev text[], p_folds boolean[])
RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
  p_seq bigint[];
  v_closed bigint[];
BEGIN
  -- Parents in the batch itself are found by a join with it; only the others are
  -- looked up one by one in the index (never a scan of the whole table).
  SELECT array_agg(
           CASE
             WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', p_graph_id,
               p.child_seq, p.child_id, format('$.parents[%s]', p.position),
               format('parent %s does not exist', p.pid))
             WHEN m.seq >= p.child_seq THEN cwstore._violation('parent_order', p_graph_id,
               p.child_seq, p.child_id, format('$.parents[%s]', p.position),
               format('parent %s is not earlier in sequence', p.pid))
             WHEN p.prev_pid IS NOT NULL AND p.prev_pid COLLATE "C" >= p.pid COLLATE "C"
               THEN cwstore._violation('parent_order', p_graph_id, p.child_seq, p.child_id,
               format('$.parents[%s]', p.position),
               'parents must be sorted ascending and listed once')
             ELSE m.seq
           END ORDER BY p.o)
    INTO p_seq
    FROM unnest(p_child, p_id, p_pos, p_pid, p_prev)
           WITH ORDINALITY AS p(child_seq, child_id, position, pid, prev_pid, o)
    LEFT JOIN unnest(a_seq, a_id) AS b(seq, id) ON b.id = p.pid
    LEFT JOIN LATERAL (SELECT coalesce(b.seq, (SELECT m.seq FROM cwstore.nodes m
                                               WHERE m.graph_id = p_graph_id
                                                 AND m.id = p.pid LIMIT 1)) AS seq) m
      ON true;
  INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
  SELECT p_graph_id, u.c, u.p, u.s FROM unnest(p_child, p_pos, p_seq) AS u(c, p, s);
  SELECT array_agg(u.s) INTO v_closed FROM unnest(p_seq, p_folds) AS u(s, f) WHERE u.f;
  RETURN v_closed;
END $$;

-- _derive_spans(graph_id, from, to): the frontier spans of nodes from+1 .. to, the run
-- after the watermark (graphs.derived_length = from), set-wise: the spans still open at
-- the watermark whose head a folding node of the run took as a parent are closed at the
-- first such node; each folding node of the run gets its span, closed where a later one
-- took it as a parent, else open. The caller holds the graph's row and moves the
-- watermark. (Only semantic nodes among those with parents leave the frontier alone.)
-- A frontier declared within the run (the last one at its sequence d) closes every span
-- open at d, and opens one per declared head at d, in the declared order, closed where a
-- later folding node takes it as a parent or the next declaration comes.
CREATE OR REPLACE FUNCTION cwstore._derive_spans(p_graph_id bigint, p_from bigint, p_to bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  a_seq bigint[];
  a_kind text[];
  a_folds boolean[];
  e_child bigint[];
  e_parent bigint[];
  c_parent bigint[];
  c_at bigint[];
  d_seq bigint[];
BEGIN
  -- The run's nodes and edges in nodes_pkey's and edges_pkey's order: only those
  -- indexes give it, so a plan made while the tables were tiny cannot read the graph's
  -- whole range through another index that leads with graph_id.
  SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.kind ORDER BY n.seq),
         array_agg(NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
                   ORDER BY n.seq)
    INTO a_seq, a_kind, a_folds
    FROM (SELECT r.seq, r.kind, r.parents FROM cwstore.nodes r
           WHERE r.graph_id = p_graph_id AND r.seq > p_from AND r.seq <= p_to
           ORDER BY r.seq) n;
  SELECT array_agg(e.child_seq), array_agg(e.parent_seq) INTO e_child, e_parent
    FROM (SELECT r.child_seq, r.parent_seq FROM cwstore.edges r
           WHERE r.graph_id = p_graph_id AND r.child_seq > p_from AND r.child_seq <= p_to
           ORDER BY r.child_seq) e;
  SELECT array_agg(x.parent_seq), array_agg(x.close_seq) INTO c_parent, c_at
    FROM (SELECT e.parent_seq, min(e.child_seq) AS close_seq
            FROM unnest(e_child, e_parent) AS e(child_seq, parent_seq)
            JOIN unnest(a_seq, a_kind) AS n(seq, kind) ON n.seq = e.child_seq
           WHERE n.kind <> 'semantic'
           GROUP BY e.parent_seq) x;
  -- The run's declarations in frontier_declarations_seq_idx's order (as above).
  SELECT array_agg(DISTINCT d.seq ORDER BY d.seq) INTO d_seq
    FROM (SELECT f.seq FROM cwstore.frontier_declarations f
           WHERE f.graph_id = p_graph_id AND f.seq > p_from AND f.seq <= p_to
           ORDER BY f.seq) d;

  IF d_seq IS NULL THEN
    -- Only open spans (the partial index), so this join stays small at any size.
    UPDATE cwstore.frontier_spans s SET to_seq = c.close_seq
      FROM unnest(c_parent, c_at) AS c(parent_seq, close_seq)
     WHERE s.graph_id = p_graph_id AND s.head_seq = c.parent_seq AND c.parent_seq <= p_from
       AND s.to_seq = cwstore.infinity_seq();
    INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
    SELECT p_graph_id, n.seq, n.seq, 0, coalesce(c.close_seq, cwstore.infinity_seq())
      FROM unnest(a_seq, a_folds) AS n(seq, folds)
      LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq) ON c.parent_seq = n.seq
     WHERE n.folds;
    RETURN;
  END IF;
  PERFORM cwstore._derive_declared_spans(p_graph_id, p_from, a_seq, a_folds, a_kind,
                                         e_child, e_parent, c_parent, c_at, d_seq);
END $$;

-- _derive_declared_spans(graph_id, from, run nodes, run edges, first closings,
-- declarations): _derive_spans for a run holding declared frontiers (d_seq, ascending):
-- every span ends at the first of its closing node and the first declaration at or
-- after its start (a node's own span is empty when a declaration comes at its own
-- sequence, and is not written); each declaration's heads (its last at that sequence)
-- open at it. The next declaration is found by width_bucket (a binary search of d_seq:
-- how many declarations come at or before a sequence).
CREATE OR REPLACE FUNCTION cwstore._derive_declared_spans(p_graph_id bigint, p_from bigint,
                                               a_seq bigint[], a_folds boolean[],
                                               a_kind text[], e_child bigint[],
                                               e_parent bigint[], c_parent bigint[],
                                               c_at bigint[], d_seq bigint[])
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  h_at bigint[];
  h_seq bigint[];
  h_ord integer[];
  v_first bigint;
BEGIN
  -- Each declaration's heads, by sequence (found when it was declared), in its order.
  SELECT array_agg(d.seq ORDER BY d.seq, u.o), array_agg(n.seq ORDER BY d.seq, u.o),
         array_agg(u.o::integer - 1 ORDER BY d.seq, u.o)
    INTO h_at, h_seq, h_ord
    FROM unnest(d_seq) AS d(seq)
    CROSS JOIN LATERAL (SELECT f.heads FROM cwstore.frontier_declarations f
                         WHERE f.graph_id = p_graph_id AND f.seq >= d.seq AND f.seq <= d.seq
                         ORDER BY f.seq DESC, f.declaration_id DESC LIMIT 1) f
    CROSS JOIN LATERAL unnest(f.heads) WITH ORDINALITY AS u(h, o)
    JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                   WHERE n.graph_id = p_graph_id AND n.id = u.h LIMIT 1) n ON true;

  -- The spans open at the watermark: all end within the run, at the first declaration
  -- if nothing took their head before it.
  v_first := d_seq[1];
  UPDATE cwstore.frontier_spans s SET to_seq = least(coalesce(c.close_seq, v_first), v_first)
    FROM (SELECT o.head_seq, c.close_seq
            FROM (SELECT r.head_seq FROM cwstore.frontier_spans r
                   WHERE r.graph_id = p_graph_id AND r.to_seq = cwstore.infinity_seq()
                     AND r.from_seq <= p_from) o
            LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq)
              ON c.parent_seq = o.head_seq) c
   WHERE s.graph_id = p_graph_id AND s.head_seq = c.head_seq
     AND s.to_seq = cwstore.infinity_seq();

  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
  SELECT p_graph_id, x.head_seq, x.from_seq, x.ord, x.to_seq
    FROM (SELECT n.seq AS head_seq, n.seq AS from_seq, 0 AS ord,
                 least(coalesce(c.close_seq, cwstore.infinity_seq()),
                       CASE WHEN d_seq[width_bucket(n.seq, d_seq)] = n.seq THEN n.seq
                            ELSE coalesce(d_seq[width_bucket(n.seq, d_seq) + 1],
                                          cwstore.infinity_seq()) END) AS to_seq
            FROM unnest(a_seq, a_folds) AS n(seq, folds)
            LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq) ON c.parent_seq = n.seq
           WHERE n.folds
          UNION ALL
          SELECT h.head_seq, h.at, h.ord,
                 least(coalesce(k.close_seq, cwstore.infinity_seq()),
                       coalesce(d_seq[width_bucket(h.at, d_seq) + 1], cwstore.infinity_seq()))
            FROM unnest(h_at, h_seq, h_ord) AS h(at, head_seq, ord)
            LEFT JOIN (SELECT g.at, g.head_seq, min(e.child_seq) AS close_seq
                         FROM unnest(h_at, h_seq) AS g(at, head_seq)
                         JOIN unnest(e_child, e_parent) AS e(child_seq, parent_seq)
                           ON e.parent_seq = g.head_seq AND e.child_seq > g.at
                         JOIN unnest(a_seq, a_kind) AS n(seq, kind)
                           ON n.seq = e.child_seq AND n.kind <> 'semantic'
                        GROUP BY g.at, g.head_seq) k
              ON k.at = h.at AND k.head_seq = h.head_seq) x
   WHERE x.from_seq < x.to_seq;
END $$;

-- _derive_chains(graph_id, keys, seqs, ids, parents): a batch's keyed nodes (in sequence
-- order; parents as text[] literals) moved onto their resource chains. The first new
-- version of a key must link to the key's head, each later one in the batch to the one
-- before it; a node that does not is a lost race (CW410), whoever wrote it.
CREATE OR REPLACE FUNCTION cwstore._derive_chains(p_graph_id bigint, k_key text[], k_seq bigint[],
                                       k_id text[], k_parents text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_key text[];
  v_seq bigint[];
  v_id text[];
  v_version bigint[];
  v_next bigint[];
  v_first bigint[];
  v_rn bigint[];
  v_base bigint[];
BEGIN
  WITH k AS (
    SELECT k.*, h.version AS base_version, h.head_seq,
           CASE WHEN k.rn = 1 THEN h.head_id ELSE k.prev_id END AS expected
      FROM (SELECT u.key, u.seq, u.id, u.parents::text[] AS parents,
                   row_number() OVER w AS rn, lag(u.id) OVER w AS prev_id,
                   lead(u.seq) OVER w AS next_seq, first_value(u.seq) OVER w AS batch_first
              FROM unnest(k_key, k_seq, k_id, k_parents) AS u(key, seq, id, parents)
            WINDOW w AS (PARTITION BY u.key ORDER BY u.seq)) k
      LEFT JOIN LATERAL (SELECT h.version, h.head_seq, h.head_id FROM cwstore.key_heads h
                          WHERE h.graph_id = p_graph_id AND h.key = k.key LIMIT 1) h ON true
  )
  SELECT array_agg(k.key), array_agg(k.seq), array_agg(k.id),
         array_agg(CASE WHEN k.expected IS NULL OR k.expected = ANY (k.parents)
                        THEN coalesce(k.base_version, 0) + k.rn
                        ELSE cwstore._chain_conflict(p_graph_id, k.key, k.seq, k.id,
                                                     k.expected, k.parents)
                   END),
         array_agg(k.next_seq), array_agg(k.batch_first), array_agg(k.rn),
         array_agg(k.head_seq)
    INTO v_key, v_seq, v_id, v_version, v_next, v_first, v_rn, v_base
    FROM k;
  UPDATE cwstore.key_versions v SET to_seq = c.seq
    FROM unnest(v_key, v_seq, v_rn, v_base) AS c(key, seq, rn, head_seq)
   WHERE c.rn = 1 AND c.head_seq IS NOT NULL
     AND v.graph_id = p_graph_id AND v.key = c.key AND v.node_seq = c.head_seq;
  INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
  SELECT p_graph_id, u.key, u.version, u.seq, coalesce(u.next_seq, cwstore.infinity_seq())
    FROM unnest(v_key, v_version, v_seq, v_next) AS u(key, version, seq, next_seq);
  INSERT INTO cwstore.key_heads AS h (graph_id, key, head_seq, head_id, version, first_seq)
  SELECT p_graph_id, u.key, u.seq, u.id, u.version, u.batch_first
    FROM unnest(v_key, v_seq, v_id, v_version, v_next, v_first)
           AS u(key, seq, id, version, next_seq, batch_first)
   WHERE u.next_seq IS NULL
  ON CONFLICT (graph_id, key) DO UPDATE
    SET head_seq = excluded.head_seq, head_id = excluded.head_id,
        version = excluded.version;
END $$;

-- _count_kinds(graph_id, seqs, kinds): a batch's running counts by kind.
CREATE OR REPLACE FUNCTION cwstore._count_kinds(p_graph_id bigint, a_seq bigint[], a_kind text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  b_kind text[];
  b_n bigint[];
BEGIN
  SELECT array_agg(d.kind), array_agg(
           coalesce((SELECT k.n FROM cwstore.kind_counts k
                      WHERE k.graph_id = p_graph_id AND k.kind = d.kind
                      ORDER BY k.seq DESC LIMIT 1), 0))
    INTO b_kind, b_n
    FROM (SELECT DISTINCT u.kind FROM unnest(a_kind) AS u(kind)) d;
  INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
  SELECT p_graph_id, n.kind, n.seq,
         b.n + row_number() OVER (PARTITION BY n.kind ORDER BY n.seq)
    FROM unnest(a_seq, a_kind) AS n(seq, kind)
    JOIN unnest(b_kind, b_n) AS b(kind, n) ON b.kind = n.kind;
END $$;

-- _advance_length(graph_id, lo, hi, count, new, closed) -> lag: gapless: a graph's new
-- rows in a statement are exactly length+1 .. length+count (CW400 sequence otherwise,
-- CW404 for an unknown graph); then the new length, the current frontier folded with
-- the statement's nodes (new: its folding nodes, closed: their parents; see
-- cwstore._fold_frontier), and the time of this statement (written_at,
-- clock_timestamp(): a long transaction's last statement, not its start, so retention
-- measures idleness from the end of the last write), and a wake-up for followers
-- (NOTIFY is a hint; the table is the truth). Returns how far the frontier's history
-- trails the new length.
CREATE OR REPLACE FUNCTION cwstore._advance_length(p_graph_id bigint, p_lo bigint, p_hi bigint,
                                        p_count bigint, p_new bigint[], p_closed bigint[])
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_lag bigint;
  v_now timestamptz := clock_timestamp();  -- a value: Citus refuses a volatile call in an UPDATE
BEGIN
  UPDATE cwstore.graphs g
     SET length = p_hi, written_at = v_now,
         frontier_seqs = cwstore._fold_frontier(g.frontier_seqs, p_new, p_closed)
   WHERE g.graph_id = p_graph_id AND p_lo = g.length + 1 AND p_hi = g.length + p_count
  RETURNING p_hi - g.derived_length INTO v_lag;
  IF NOT FOUND THEN
    SELECT g.name, g.length INTO r FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
    IF NOT FOUND THEN
      RAISE EXCEPTION USING ERRCODE = 'CW404',
        MESSAGE = format('graph id %s does not exist', p_graph_id),
        DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
    END IF;
    PERFORM cwstore._violation('sequence', p_graph_id, p_lo, NULL, '$.sequence',
      format('graph %L has %s nodes: new sequences must be %s..%s, got %s..%s',
             r.name, r.length, r.length + 1, r.length + p_count, p_lo, p_hi));
  END IF;
  IF EXISTS (SELECT 1 FROM cwstore.listeners) THEN
    PERFORM pg_notify('cwstore', p_graph_id || ':' || p_hi);
  END IF;
  RETURN v_lag;
END $$;

-- _derive_history(graph_id, to): the frontier's history written through node to (the
-- graph's length or less) from the graph's watermark, which moves there. The caller
-- holds the graph's row (a write's lock, or the UPDATE that asked for it).
CREATE OR REPLACE FUNCTION cwstore._derive_history(p_graph_id bigint, p_to bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_from bigint;
BEGIN
  SELECT g.derived_length INTO v_from FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
  IF v_from < p_to THEN
    PERFORM cwstore._derive_spans(p_graph_id, v_from, p_to);
    UPDATE cwstore.graphs g SET derived_length = p_to WHERE g.graph_id = p_graph_id;
  END IF;
END $$;

-- A client (cwstore.derive_v1, or the owner in psql) asks for a graph's history by
-- moving its watermark to its length (the guard allows nothing else): the row is
-- locked by that UPDATE, and this trigger writes the spans of the nodes it passed.
CREATE OR REPLACE FUNCTION cwstore._derive_requested() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM cwstore._derive_spans(NEW.graph_id, OLD.derived_length, NEW.derived_length);
  RETURN NULL;
END $$;

-- The trigger, fired once per statement that inserts nodes: it reads the statement's new
-- rows (the transition table, visible only here) into arrays, graph by graph, and hands
-- them to the functions above. The statements of a plpgsql function are planned once
-- per session and the plans kept, so a plan made for a one-node append must not be
-- reused for a 100,000-node import or the other way round: there are two ways to
-- derive, with functions of their own. A statement of up to 3 rows derives node by node
-- (_derive_node: short index lookups and writes, cheaper than the set-based statements
-- for so few); a larger one with set-based statements over each graph's batch
-- (_derive_parents, _derive_chains, _count_kinds; with more work_mem: they sort and
-- hash whole batches; and no JIT: statements over unnest() have no statistics, their
-- cost estimates run high, and compiling them took longer than running them). Both ways
-- check the same rules and write the same rows (tests/contract/test_derive_paths.py);
-- the test suites run both.
--
-- A plan kept from when a graph was small must still be right when it is large: a node
-- is looked up by id or sequence as LATERAL (... LIMIT 1), which stays an index lookup,
-- never a join over the graph's rows.
--
-- Every statement reads one graph at a time, never joining the transition table to
-- another table: on Citus this trigger fires on the shard's worker, which cannot plan
-- such a join, and where a statement must name its graph to stay on the local shard.
-- (Scalars, not array elements, in the statements: Citus 13.2's deparser crashes on a
-- subscripted parameter in an UPDATE's SET list.)
CREATE OR REPLACE FUNCTION cwstore._nodes_inserted() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
  nd record;
  v_rows bigint;
  v_semantic boolean;
  v_keyed boolean;
  v_gid bigint;
  v_gids bigint[];
  v_los bigint[];
  v_his bigint[];
  v_cnts bigint[];
  v_work_mem text;
  v_jit text;
  a_seq bigint[];
  a_id text[];
  a_kind text[];
  v_new bigint[];
  v_closed bigint[];
  v_parent_seqs bigint[];
  v_lag bigint;
  s_seq bigint[];
  s_id text[];
  s_payload text[];
  s_key text[];
  p_child bigint[];
  p_id text[];
  p_pos integer[];
  p_pid text[];
  p_prev text[];
  p_folds boolean[];
  k_key text[];
  k_seq bigint[];
  k_id text[];
  k_parents text[];
BEGIN
  -- The batch's graphs (usually one) with their first and last sequence and count.
  SELECT array_agg(x.graph_id), array_agg(x.lo), array_agg(x.hi), array_agg(x.cnt),
         sum(x.cnt), bool_or(x.semantic), bool_or(x.keyed)
    INTO v_gids, v_los, v_his, v_cnts, v_rows, v_semantic, v_keyed
    FROM (SELECT n.graph_id, min(n.seq) AS lo, max(n.seq) AS hi, count(*) AS cnt,
                 bool_or(n.kind = 'semantic') AS semantic,
                 bool_or(n.resource_key IS NOT NULL) AS keyed
            FROM new_nodes n GROUP BY n.graph_id) x;
  IF v_gids IS NULL THEN
    RETURN NULL;
  END IF;

  IF v_semantic THEN
    FOREACH v_gid IN ARRAY v_gids LOOP
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.payload_text ORDER BY n.seq), array_agg(n.resource_key ORDER BY n.seq)
        INTO s_seq, s_id, s_payload, s_key
        FROM new_nodes n WHERE n.kind = 'semantic' AND n.graph_id = v_gid;
      IF s_seq IS NOT NULL THEN
        PERFORM cwstore._check_semantic(v_gid, s_seq, s_id, s_payload, s_key);
      END IF;
    END LOOP;
  END IF;

  IF v_rows > 3 THEN
    v_work_mem := current_setting('work_mem');
    v_jit := current_setting('jit');
    PERFORM set_config('work_mem', '64MB', true), set_config('jit', 'off', true);
  END IF;
  FOR i IN 1 .. cardinality(v_gids) LOOP
    v_gid := v_gids[i];
    v_new := NULL;
    v_closed := NULL;
    IF v_rows <= 3 THEN
      FOR nd IN SELECT n.seq, n.id, n.kind, n.parents, n.resource_key
                  FROM new_nodes n WHERE n.graph_id = v_gid ORDER BY n.seq LOOP
        -- The ids and keys as the default collation: nodes' are "C", and a "C" argument
        -- would make every text comparison in _derive_node "C", which the indexes of
        -- key_heads, key_versions and kind_counts cannot serve (a scan of the graph's rows).
        v_parent_seqs := cwstore._derive_node(v_gid, nd.seq, nd.id COLLATE "default", nd.kind,
                                              nd.parents, nd.resource_key COLLATE "default");
        IF NOT (nd.kind = 'semantic' OR (nd.kind = 'system' AND cardinality(nd.parents) = 0)) THEN
          v_new := v_new || nd.seq;
          v_closed := v_closed || v_parent_seqs;
        END IF;
      END LOOP;
    ELSE
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.kind ORDER BY n.seq),
             array_agg(n.seq ORDER BY n.seq)
               FILTER (WHERE NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0)))
        INTO a_seq, a_id, a_kind, v_new
        FROM new_nodes n WHERE n.graph_id = v_gid;
      -- One row per (child, parent), with the parent before it in the child's list.
      -- (lag(), not an element found by its index: a text[] element is read from the
      -- array's start, quadratic in a node's parents.)
      SELECT array_agg(u.seq), array_agg(u.id), array_agg(u.ord::integer - 1), array_agg(u.pid),
             array_agg(u.prev), array_agg(u.folds)
        INTO p_child, p_id, p_pos, p_pid, p_prev, p_folds
        FROM (SELECT n.seq, n.id, x.ord, x.pid,
                     lag(x.pid) OVER (PARTITION BY n.seq ORDER BY x.ord) AS prev,
                     n.kind <> 'semantic' AS folds
                FROM new_nodes n, unnest(n.parents) WITH ORDINALITY AS x(pid, ord)
               WHERE n.graph_id = v_gid) u;
      v_closed := cwstore._derive_parents(v_gid, a_seq, a_id, p_child, p_id, p_pos, p_pid,
                                          p_prev, p_folds);
      IF v_keyed THEN
        SELECT array_agg(n.resource_key ORDER BY n.seq), array_agg(n.seq ORDER BY n.seq),
               array_agg(n.id ORDER BY n.seq), array_agg(n.parents::text ORDER BY n.seq)
          INTO k_key, k_seq, k_id, k_parents
          FROM new_nodes n WHERE n.graph_id = v_gid AND n.resource_key IS NOT NULL;
        IF k_key IS NOT NULL THEN
          PERFORM cwstore._derive_chains(v_gid, k_key, k_seq, k_id, k_parents);
        END IF;
      END IF;
      PERFORM cwstore._count_kinds(v_gid, a_seq, a_kind);
    END IF;
    v_lag := cwstore._advance_length(v_gid, v_los[i], v_his[i], v_cnts[i], v_new, v_closed);
    IF v_lag >= cwstore.derive_lag() THEN
      PERFORM cwstore._derive_history(v_gid, v_his[i]);
    END IF;
  END LOOP;
  IF v_rows > 3 THEN
    PERFORM set_config('work_mem', v_work_mem, true), set_config('jit', v_jit, true);
  END IF;
  RETURN NULL;
END
$body$;

-- ---------------------------------------------------------------------------------
-- declared frontiers
-- ---------------------------------------------------------------------------------

-- A declared frontier (a row of frontier_declarations) is checked (declared at the
-- graph's length, its heads nodes of the graph, each once) and, when it differs from
-- the current frontier, becomes it; the frontier's history takes it where it was
-- declared: now when the spans are written up to the length, else when the run that
-- holds it is derived (_derive_spans), reads past the watermark folding from it.
CREATE OR REPLACE FUNCTION cwstore._frontier_declared() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g_length bigint;
  g_derived bigint;
  g_name text;
  g_frontier bigint[];
  current_heads text[];
  missing text;
  seqs bigint[];
BEGIN
  SELECT length, name, frontier_seqs, derived_length INTO g_length, g_name, g_frontier, g_derived
    FROM cwstore.graphs WHERE graph_id = NEW.graph_id;
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
    LEFT JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                        WHERE n.graph_id = NEW.graph_id AND n.id = u.h LIMIT 1) n ON true;
  IF missing IS NOT NULL THEN
    PERFORM cwstore._violation('frontier_reference', NEW.graph_id, NULL, missing, '$.frontier',
      format('frontier references missing node %s', missing));
  END IF;

  -- Each head by a range of one seq in nodes_pkey's order: with seq = u.s the order
  -- would say nothing, and a plan made while the table was tiny could take nodes_id_key
  -- and read the graph's whole range.
  SELECT array_agg(n.id ORDER BY u.o) INTO current_heads
    FROM unnest(g_frontier) WITH ORDINALITY AS u(s, o)
    JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                   WHERE n.graph_id = NEW.graph_id AND n.seq >= u.s AND n.seq <= u.s
                   ORDER BY n.seq LIMIT 1) n ON true;
  IF coalesce(current_heads, '{}') = NEW.heads THEN
    RETURN NULL;
  END IF;

  UPDATE cwstore.graphs g SET frontier_seqs = coalesce(seqs, '{}') WHERE g.graph_id = NEW.graph_id;
  -- The spans: when their history is behind the declaration, the run that passes it
  -- applies it (_derive_spans); else they are rewritten at the graph's length now.
  IF g_derived < g_length THEN
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

-- From 50_tenancy.sql.

-- plpgsql, not sql: on Citus tenant_members is a reference table, and Citus cannot plan
-- a parameterized SQL-function query over it.
CREATE OR REPLACE FUNCTION cwstore.tenants_of(p_role name) RETURNS SETOF text
LANGUAGE plpgsql STABLE ROWS 2 AS $$
BEGIN
  RETURN QUERY
  SELECT DISTINCT m.tenant
    FROM cwstore.tenant_members m
    JOIN pg_catalog.pg_roles r ON r.rolname = m.member
   WHERE pg_catalog.pg_has_role(p_role, r.oid, 'MEMBER');
END $$;

COMMENT ON FUNCTION cwstore.tenants_of(name) IS
  'The tenants a role belongs to: those listed in tenant_members for it or for any role it is a member of (directly or not).';

-- _may_use(tenant): whether the login role may read and write the graphs of a tenant.
CREATE OR REPLACE FUNCTION cwstore._may_use(p_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT cwstore.sees_all(session_user)
      OR EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant)
$$;

-- _check_writer(graph, tenant): 42501 unless the login role may write that tenant's
-- graphs. A NULL tenant (no such graph yet) passes: creating one is checked on its own.
-- Called by the SECURITY DEFINER write functions, where current_user is their owner
-- and session_user is who logged in.
CREATE OR REPLACE FUNCTION cwstore._check_writer(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_tenant IS NOT NULL AND NOT cwstore._may_use(p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not write graph %L: the graph belongs to a tenant the role is not a member of',
                       session_user, left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text,
      HINT = 'An administrator adds the role to the tenant: SELECT cwstore.add_tenant_member(tenant, role)';
  END IF;
END $$;

-- plpgsql, as tenants_of: Citus cannot plan a SQL function's parameterized DELETE on
-- the reference table tenant_members.
CREATE OR REPLACE FUNCTION cwstore.remove_tenant_member(p_tenant text, p_role name) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM cwstore.tenant_members WHERE tenant = p_tenant AND member = p_role;
  RETURN FOUND;
END $$;

COMMENT ON FUNCTION cwstore.remove_tenant_member(text, name) IS
  'Undo add_tenant_member; true if the role was listed. Its sessions lose access at their next statement.';

-- ---------------------------------------------------------------------------------
-- row-level security: a policy on every table keyed by graph
-- ---------------------------------------------------------------------------------

-- Every other table is visible through its graph's row, so one rule, graphs', decides
-- for all. Each policy calls a function of its own row's tenant or graph_id, and no
-- sub-select is written in a policy: Citus refuses policies with sub-selects, while a
-- policy calling a function is kept on every shard and evaluated there, on the worker,
-- as the role that queries (citus.sql lets these two functions read the shards they
-- name from there); plpgsql, as Citus cannot plan a SQL function's parameterized
-- query. They run as the caller (not SECURITY DEFINER), so the graphs policy applies
-- inside _sees_graph: a graph_id is visible when its graph is. Superusers and BYPASSRLS
-- roles are not subject to policies at all. The cost: one function call per row a
-- restricted role reads directly (the owner's reads and the read functions pay none).
--
-- Row-level security also keeps PostgreSQL from using an index through an operator
-- that is not LEAKPROOF (the GiST box test of the frontier history, starts_with):
-- such a test is applied after the policy, as a filter. So the public read functions
-- below run as their owner, with their indexes, after checking the graph once
-- (cwstore._graph), and row-level security guards the tables for every other query.

-- _sees_tenant(tenant): whether current_user reads the graphs of that tenant: a member
-- (directly or not) of a role listed for it in tenant_members, or of the owner of
-- schema cwstore. A role listed but since dropped grants nothing.
CREATE OR REPLACE FUNCTION cwstore._sees_tenant(p_tenant text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN p_tenant IN (SELECT m.tenant FROM cwstore.tenant_members m
                       WHERE pg_catalog.pg_has_role(current_user,
                               pg_catalog.to_regrole(pg_catalog.quote_ident(m.member)),
                               'MEMBER'))
      OR pg_catalog.pg_has_role(current_user,
                                (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                  WHERE n.nspname = 'cwstore'), 'MEMBER');
END $$;

-- _sees_graph(graph_id): whether current_user sees that graph's row (the graphs
-- policy decides); false for a graph_id with no graph.
CREATE OR REPLACE FUNCTION cwstore._sees_graph(p_graph_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM cwstore.graphs g WHERE g.graph_id = p_graph_id);
END $$;

-- ---------------------------------------------------------------------------------
-- grants for the roles cwstore_reader and cwstore_writer
-- ---------------------------------------------------------------------------------

-- apply_grants() -> whether the roles exist (false: nothing done)
--   cwstore_reader: USAGE on the schema; SELECT on its tables and views but the audit
--   record of erasures, every row filtered by the policies above; EXECUTE on every
--   function but the write and erasure APIs (the read functions and their helpers, the
--   table-free tenant functions). No write privilege: add_tenant_member and
--   remove_tenant_member need the owner's INSERT and DELETE on tenant_members.
--   cwstore_writer: a member of cwstore_reader (made so by roles.sql), plus EXECUTE
--   on the write API, by name below. No INSERT, UPDATE, DELETE or TRUNCATE on any
--   table.
--   cwstore_admin, where it exists: a member of cwstore_writer (roles.sql), plus
--   EXECUTE on the erasure API (90_erasure.sql) and SELECT on cwstore.erasures, both
--   for the tenants it belongs to. The private functions that write or lock (_erase,
--   _create_graph, _retention_group_lock) are granted to nobody: the functions above
--   call them as the owner.
--   Functions are executable by PUBLIC unless revoked, so that is revoked everywhere in
--   the schema. Run by roles.sql, and by the migration runner after each later
--   migration in a database whose roles were set up, so new functions get their grants.
CREATE OR REPLACE FUNCTION cwstore.apply_grants() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  f record;
  v_admin boolean := pg_catalog.to_regrole('cwstore_admin') IS NOT NULL;
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
  REVOKE SELECT ON cwstore.erasures FROM cwstore_reader;
  REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cwstore FROM PUBLIC, cwstore_reader, cwstore_writer;
  IF v_admin THEN
    REVOKE ALL ON ALL TABLES IN SCHEMA cwstore FROM cwstore_admin;
    REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cwstore FROM cwstore_admin;
    GRANT SELECT ON cwstore.erasures TO cwstore_admin;
  END IF;
  FOR f IN SELECT p.oid::regprocedure AS sig,
                  CASE WHEN p.proname IN ('ensure_graph_v1', 'begin_import_v1',
                                          'import_rows_v1', 'append_v1',
                                          'declare_frontier_v1', 'derive_v1')
                         THEN 'cwstore_writer'
                       WHEN p.proname IN ('erase_graph_v1', 'erase_tenant_v1',
                                          'idle_graphs_v1', 'erase_idle_v1')
                         THEN 'cwstore_admin'
                       WHEN p.proname IN ('_erase', '_create_graph', '_retention_group_lock') THEN NULL
                       ELSE 'cwstore_reader' END AS grantee
             FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'cwstore'::regnamespace AND p.prokind = 'f'
              AND p.prorettype <> 'pg_catalog.trigger'::regtype LOOP
    CONTINUE WHEN f.grantee IS NULL OR (f.grantee = 'cwstore_admin' AND NOT v_admin);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.sig, f.grantee);
  END LOOP;
  RETURN true;
END $$;

COMMENT ON FUNCTION cwstore.apply_grants() IS
  'Grant cwstore_reader reading (SELECT, every function but the write and erasure APIs), cwstore_writer the write API, cwstore_admin (if it exists) the erasure API and the audit record; false if the roles do not exist.';

-- From 55_graph_keys.sql.

-- 55_graph_keys: from a graph's name to its key (graph_id), and the making of a new one.
--
-- A name's keys form a chain, cwstore.graph_key(name, 0), graph_key(name, 1), ... A graph
-- holds the first key of its chain that was free when it was created (graphs.key_probe),
-- and each key it passed over is recorded in graph_key_detours. Finding a name walks
-- the chain: a key held by the name is its graph; a key held by another name, or free
-- but passed over by some graph's chain, means go on; a key neither held nor passed
-- over ends the walk: no such graph. So two names sharing a key both live (the second
-- one probe further), an erased graph's key stays passable for the chains that went
-- past it, and nothing is refused for a collision. Almost every name is found at probe
-- 0, by one primary-key lookup: what a name cost before chains.
--
-- Chains are bounded at 64 probes: at 10^9 graphs among 2^48 keys the chance that a
-- name's first key is held is about 4e-6, that 64 are, nil; a tenant that searched for
-- names blocking another's would need 64 preimages of 48 bits to end one chain, and even
-- then only makes that one name refused (CW400 shape, as for a bad name).
--
-- SQLSTATEs raised: CW400 (no free key within 64 probes), CW404 (DETAIL {"graph",
-- "erased": true}: the graph was erased while the caller's transaction ran).

-- graph_id_of(name) -> graph_id, or NULL when no graph has that name (or none the
--   caller may see: it runs as the caller, and a graph of another tenant reads as a
--   free key, still passable when passed over). Cost: one lookup per probe walked,
--   almost always one.
CREATE OR REPLACE FUNCTION cwstore.graph_id_of(p_name text) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
  v_key bigint;
  v_name text;
BEGIN
  FOR v_probe IN 0..63 LOOP
    v_key := cwstore.graph_key(p_name, v_probe);
    SELECT g.name INTO v_name FROM cwstore.graphs g WHERE g.graph_id = v_key;
    IF FOUND THEN
      IF v_name = p_name THEN
        RETURN v_key;
      END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM cwstore.graph_key_detours d WHERE d.slot = v_key) THEN
      RETURN NULL;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;

COMMENT ON FUNCTION cwstore.graph_id_of(text) IS
  'The graph_id of a graph name (the key of its chain it holds), or NULL when there is no such graph.';

-- find_graph(name) -> (graph_id, length, vocabulary, incarnation) of the graph of that
--   name, no row when there is none (or none the caller may see: it runs as the
--   caller). The key is found first, in a statement of its own: on Citus the row is then
--   read from the graph's one shard.
CREATE OR REPLACE FUNCTION cwstore.find_graph(p_name text)
RETURNS TABLE (graph_id bigint, length bigint, vocabulary text[], incarnation bigint)
LANGUAGE plpgsql STABLE STRICT ROWS 1 AS $$
DECLARE
  v_key bigint := cwstore.graph_id_of(p_name);
BEGIN
  RETURN QUERY
  SELECT g.graph_id, g.length, g.vocabulary, g.incarnation
    FROM cwstore.graphs g WHERE g.graph_id = v_key AND g.name = p_name;
END $$;

COMMENT ON FUNCTION cwstore.find_graph(text) IS
  'The graph of a name: graph_id, length, vocabulary (NULL = dynamic) and incarnation (which life of the name); no row when there is none the caller may see.';

-- _check_retention_group(): the group a graph created now would take (the setting
-- cwstore.retention_group, graphs' column default) must pass graphs_retention_group_check;
-- refused here, before the insert, as the constraint would refuse it (23514, that name):
-- on Citus a constraint refused on a worker reaches the client without its name.
CREATE OR REPLACE FUNCTION cwstore._check_retention_group() RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_group text := pg_catalog.current_setting('cwstore.retention_group', true);
BEGIN
  IF octet_length(v_group) > 2000 THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      CONSTRAINT = 'graphs_retention_group_check', SCHEMA = 'cwstore', TABLE = 'graphs',
      MESSAGE = 'new row for relation "graphs" violates check constraint "graphs_retention_group_check"',
      DETAIL = format('a retention group is at most 2000 bytes of UTF-8 (this one has %s)',
                      octet_length(v_group));
  END IF;
END $$;

-- _retention_group_lock(tenant, group, exclusive) -> whether the lock is held
--   The transaction-level advisory lock that makes a retention group's creations and
--   its retention take turns: a transaction that creates a graph in a group holds it
--   shared until it ends (waiting while a retention holds it), erase_idle_v1 takes it
--   exclusive, without waiting, before it reads the group's members (false: a creation
--   is in flight, the group is not idle). Two groups whose keys collide only make one
--   another wait or be skipped.
CREATE OR REPLACE FUNCTION cwstore._retention_group_lock(p_tenant text, p_group text,
                                              p_exclusive boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_class constant integer := 1668772455;  -- 'cwrg'
  v_key integer := pg_catalog.hashtext(p_tenant || '/' || p_group);
BEGIN
  IF p_exclusive THEN
    RETURN pg_catalog.pg_try_advisory_xact_lock(v_class, v_key);
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(v_class, v_key);
  RETURN true;
END $$;

-- _create_graph(name, vocabulary, tenant) -> graph_id
--   The graph of that name, created in the first free key of its chain unless it exists.
--   Creations of one name (and of names sharing its first key) take turns on a
--   transaction-level advisory lock on that key, so two of them never place one name
--   at two keys. A creation in a retention group holds the group's lock shared
--   (_retention_group_lock) until its transaction ends, so retention cannot take the
--   rest of the group meanwhile. Called as the owner (ensure_graph_v1), who sees every
--   graph.
CREATE OR REPLACE FUNCTION cwstore._create_graph(p_name text, p_vocabulary text[], p_tenant text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_key bigint;
  v_name text;
  v_free integer;
  v_id bigint;
  v_group text := nullif(pg_catalog.current_setting('cwstore.retention_group', true), '');
BEGIN
  PERFORM cwstore._check_retention_group();
  IF v_group IS NOT NULL THEN
    PERFORM cwstore._retention_group_lock(p_tenant, v_group, false);
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock(cwstore.graph_key(p_name, 0));
  LOOP
    v_free := NULL;
    FOR v_probe IN 0..63 LOOP
      v_key := cwstore.graph_key(p_name, v_probe);
      SELECT g.name INTO v_name FROM cwstore.graphs g WHERE g.graph_id = v_key;
      IF FOUND THEN
        IF v_name = p_name THEN
          RETURN v_key;
        END IF;
        CONTINUE;
      END IF;
      v_free := coalesce(v_free, v_probe);
      EXIT WHEN NOT EXISTS (SELECT 1 FROM cwstore.graph_key_detours d WHERE d.slot = v_key);
    END LOOP;
    IF v_free IS NULL THEN
      PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
        format('graph name %L cannot be used: no free key within 64 probes of its chain',
               left(p_name, 200)));
    END IF;
    -- Another name may take the same key meanwhile (one whose chain crosses this one):
    -- then walk again.
    INSERT INTO cwstore.graphs (graph_id, name, vocabulary, tenant, key_probe)
    VALUES (cwstore.graph_key(p_name, v_free), p_name, p_vocabulary, p_tenant, v_free)
    ON CONFLICT (graph_id) DO NOTHING RETURNING graph_id INTO v_id;
    IF v_id IS NOT NULL THEN
      RETURN v_id;  -- its detours: cwstore._graph_detoured
    END IF;
  END LOOP;
END $$;

-- _graphs_key (BEFORE INSERT, or UPDATE of graph_id, name or key_probe, on graphs):
-- graph_id is the key of the name at its probe, graph_key(name, key_probe), and
-- key_probe >= 0; refused as the check constraint graphs_key_check would be (23514,
-- that name). A trigger on those columns, not a CHECK: PostgreSQL prepares a table's
-- CHECK expressions again in every statement that updates a row, and the append path
-- updates its graph's length in every call.
CREATE OR REPLACE FUNCTION cwstore._graphs_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.key_probe < 0 OR NEW.graph_id <> cwstore.graph_key(NEW.name, NEW.key_probe) THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'graphs_key_check',
      SCHEMA = 'cwstore', TABLE = 'graphs',
      MESSAGE = 'new row for relation "graphs" violates check constraint "graphs_key_check"',
      DETAIL = format('graph_id %s is not the key of its name at probe %s', NEW.graph_id,
                      NEW.key_probe);
  END IF;
  RETURN NEW;
END $$;

-- _graph_detoured (AFTER INSERT on graphs, for a graph past probe 0): records the keys
-- its chain passed over, one statement per key (each names its key: its one shard on
-- Citus). A trigger, so that graph_key_detours is written at trigger depth 1 only, as
-- the tables derived from nodes are (30_guards.sql).
CREATE OR REPLACE FUNCTION cwstore._graph_detoured() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  FOR p IN 0 .. NEW.key_probe - 1 LOOP
    INSERT INTO cwstore.graph_key_detours (slot, graph_id)
    VALUES (cwstore.graph_key(NEW.name, p), NEW.graph_id);
  END LOOP;
  RETURN NULL;
END $$;

-- _erased_meanwhile(name): raise CW404 for a graph found at the start of a call and
-- gone when its row was locked: erased while the call waited.
CREATE OR REPLACE FUNCTION cwstore._erased_meanwhile(p_graph text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW404',
    MESSAGE = format('graph %L was erased while this call waited for it', left(p_graph, 200)),
    DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
END $$;

-- _check_after_erasure(name, graph_id): before the first node of a graph's life is
-- written, refuse (CW404, erased) a transaction older than an erasure of the same key:
-- its nodes' xids would come before that erasure in the all-graphs feed (tail_all_v2),
-- and a follower would apply the erasure to them. A new transaction passes. Without
-- Citus only: there xids are each node's own and the feed is not offered.
CREATE OR REPLACE FUNCTION cwstore._check_after_erasure(p_graph text, p_graph_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL
     AND EXISTS (SELECT 1 FROM cwstore.erasures e
                  WHERE e.graph_id = p_graph_id
                    AND e.xid >= pg_catalog.pg_current_xact_id()::text::bigint) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L was erased by a transaction newer than this one: write it again in a new transaction',
                       left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
  END IF;
END $$;

-- From 60_write_api.sql.

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
-- the graph (its name, or its graph_id within an import) first. The write doors plan
-- with enable_seqscan off: a caller's connection keeps a plpgsql function's plans for
-- its life, and one made while the tables were small would go on scanning them as they
-- grow; every lookup here has an index (off is a penalty, not a ban).
--
-- SQLSTATEs raised: CW400 validation, CW404 unknown graph, CW409 expected length is
-- stale, CW410 chain conflict on a resource key, CW412 import into a non-empty graph,
-- 42501 a graph of a tenant the login role is not in.

-- js_number(token) -> String(Number(token)) in JavaScript, for a JSON number token;
-- NULL when the value is beyond a double (1e400) or rounds to zero from a non-zero
-- token (1e-400). PostgreSQL prints a double with the shortest digits that read back
-- (extra_float_digits = 1, fixed here), as JavaScript does; only the layout differs
-- (ECMAScript Number::toString: plain for exponents -7 < e < 21, else d.ddde+N).
CREATE OR REPLACE FUNCTION cwstore.js_number(p_token text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET extra_float_digits = 1 AS $$
DECLARE
  v_f float8;
  v_s text;
  v_neg boolean;
  v_mant text;
  v_exp integer;
  v_digits text;
  v_n integer;
  v_k integer;
BEGIN
  BEGIN
    v_f := p_token::float8;
  EXCEPTION WHEN numeric_value_out_of_range OR invalid_text_representation THEN
    RETURN NULL;
  END;
  IF v_f = 0 THEN
    RETURN '0';
  END IF;
  v_s := v_f::text;
  v_neg := left(v_s, 1) = '-';
  IF v_neg THEN
    v_s := substr(v_s, 2);
  END IF;
  v_mant := split_part(v_s, 'e', 1);
  v_exp := coalesce(nullif(split_part(v_s, 'e', 2), '')::integer, 0);
  IF strpos(v_mant, '.') > 0 THEN
    v_n := strpos(v_mant, '.') - 1 + v_exp;
    v_digits := replace(v_mant, '.', '');
  ELSE
    v_n := length(v_mant) + v_exp;
    v_digits := v_mant;
  END IF;
  v_k := length(v_digits);
  v_digits := ltrim(v_digits, '0');
  v_n := v_n - (v_k - length(v_digits));
  v_digits := rtrim(v_digits, '0');
  v_k := length(v_digits);
  IF v_k <= v_n AND v_n <= 21 THEN
    v_s := v_digits || repeat('0', v_n - v_k);
  ELSIF 0 < v_n AND v_n <= 21 THEN
    v_s := left(v_digits, v_n) || '.' || substr(v_digits, v_n + 1);
  ELSIF -6 < v_n AND v_n <= 0 THEN
    v_s := '0.' || repeat('0', -v_n) || v_digits;
  ELSE
    v_s := left(v_digits, 1) || CASE WHEN v_k > 1 THEN '.' || substr(v_digits, 2) ELSE '' END
           || 'e' || CASE WHEN v_n - 1 >= 0 THEN '+' ELSE '-' END || abs(v_n - 1);
  END IF;
  RETURN CASE WHEN v_neg THEN '-' ELSE '' END || v_s;
END $$;

COMMENT ON FUNCTION cwstore.js_number(text) IS
  'String(Number(token)) in JavaScript for a JSON number token (1e21 -> 1e+21, 1E2 -> 100); NULL when JavaScript would read it as Infinity or as 0 from a non-zero token.';

-- _created_at_ok(text): createdAt is an RFC 3339 date-time with a zone that
-- JavaScript's Date.parse reads as written: a real calendar date (year >= 1), hour
-- 00-23, minute and second 00-59 (no leap second), offset up to +-23:59. The same rule
-- as cwstore.document (Python).
CREATE OR REPLACE FUNCTION cwstore._created_at_ok(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_y integer;
  v_m integer;
  v_d integer;
  v_zoned boolean;
BEGIN
  IF p !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$' THEN
    RETURN false;
  END IF;
  v_y := left(p, 4)::integer;
  v_m := substr(p, 6, 2)::integer;
  v_d := substr(p, 9, 2)::integer;
  v_zoned := right(p, 1) NOT IN ('Z', 'z');
  RETURN v_y >= 1 AND v_m BETWEEN 1 AND 12 AND v_d >= 1
     AND v_d <= CASE WHEN v_m = 2 THEN
                       CASE WHEN (v_y % 4 = 0 AND v_y % 100 <> 0) OR v_y % 400 = 0 THEN 29 ELSE 28 END
                     WHEN v_m IN (4, 6, 9, 11) THEN 30 ELSE 31 END
     AND substr(p, 12, 2)::integer <= 23 AND substr(p, 15, 2)::integer <= 59
     AND substr(p, 18, 2)::integer <= 59
     AND (NOT v_zoned OR (substr(p, length(p) - 4, 2)::integer <= 23
                          AND right(p, 2)::integer <= 59));
END $$;

-- _lone_surrogate(json text): whether a string in it escapes half of a surrogate pair
-- (\ud800 alone): not Unicode, so no text can hold it. PostgreSQL's json input takes
-- it and fails later, wherever the string is first read as text.
CREATE OR REPLACE FUNCTION cwstore._lone_surrogate(p_text text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  RETURN strpos(p_text, '\u') > 0
     AND (replace(p_text, '\\', '') ~ '\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])'
          OR replace(p_text, '\\', '') ~ '(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]');
END $$;

-- _ascii_depth_change(text) -> opening minus closing brackets in an ASCII text, read in
-- slices of 64 kB (so a long text costs no more than a slice).
CREATE OR REPLACE FUNCTION cwstore._ascii_depth_change(p_text text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT coalesce(sum(length(translate(t, '}]', '')) - length(translate(t, '{[', ''))), 0)
    FROM (SELECT convert_from(substring(b.b FROM i FOR 65536), 'UTF8') AS t
            FROM (SELECT convert_to(p_text, 'UTF8') AS b) b,
                 generate_series(1, octet_length(p_text), 65536) AS i) x
$$;

-- _members_unique(text, bare) -> whether no object of a JSON text (as JSON.stringify
--   writes it; bare: the same with every string written "") repeats a member name.
--   jsonb keeps one member per name, so the text holds more values than its jsonb when
--   a name repeats: up to 64 kB the two counts are compared (_members_unique_small).
--   Building the jsonb of many small objects takes about 80 times the text in memory,
--   so a longer text is read as a stream of its names instead (_members_unique_large).
CREATE OR REPLACE FUNCTION cwstore._members_unique(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  IF octet_length(p_text) <= 65536 THEN
    RETURN cwstore._members_unique_small(p_text, p_bare);
  END IF;
  RETURN cwstore._members_unique_large(p_text);
END $$;

-- _members_unique_large(text): _members_unique for a text of any length and depth, in
-- memory bounded by work_mem (set low here: its rows spill to temporary files) and time
-- n log n. The text is cut at every double quote (string_to_table): a quote after an
-- odd run of backslashes is escaped, the others alternate opening and closing strings.
-- Each string is one row, each stretch between strings another; a stretch's brackets
-- give the depth at its end. A member name is a string followed by ':'; its object is
-- the last stretch ending with '{' at its depth (objects at one depth follow one
-- another). Names are compared as written (JSON.stringify writes each string one way),
-- each part between escaped quotes over 64 bytes by its SHA-256, so that no long text
-- goes through the sorts. An outside stretch is ASCII (punctuation, numbers, literals),
-- so one over 64 kB is counted in slices (translate takes 4 bytes a character).
CREATE OR REPLACE FUNCTION cwstore._members_unique_large(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT NOT EXISTS (
    SELECT 1
      FROM (SELECT s.k, s.is_name,
                   max(s.r) FILTER (WHERE s.opens) OVER (PARTITION BY s.d ORDER BY s.r) AS c
              FROM (SELECT g.r, g.opens, g.k,
                           g.r % 2 = 1 AND lead(g.first) OVER (ORDER BY g.r) = ':' AS is_name,
                           sum(g.delta) OVER (ORDER BY g.r) AS d
                      FROM (SELECT p.r,
                                   CASE WHEN p.r % 2 = 1 THEN string_agg(p.k, '"' ORDER BY p.o) END AS k,
                                   min(p.first) AS first,
                                   p.r % 2 = 0 AND min(p.last) = '{' AS opens,
                                   CASE WHEN p.r % 2 = 1 THEN 0 ELSE min(p.delta) END AS delta
                              FROM (SELECT x.o, x.k, x.first, x.last, x.delta,
                                           count(*) FILTER (WHERE x.real)
                                             OVER (ORDER BY x.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS r
                                      FROM (SELECT o, left(t, 1) AS first, right(t, 1) AS last,
                                                   right(t, 1) <> '\' OR (length(t) - length(rtrim(t, '\'))) % 2 = 0 AS real,
                                                   CASE WHEN octet_length(t) <= 64 THEN t
                                                        ELSE sha256(convert_to(t, 'UTF8'))::text END AS k,
                                                   CASE WHEN octet_length(t) <= 65536
                                                          THEN length(translate(t, '}]', ''))
                                                               - length(translate(t, '{[', ''))
                                                        WHEN octet_length(t) = length(t)
                                                          THEN cwstore._ascii_depth_change(t) END AS delta
                                              FROM string_to_table(p_text, '"') WITH ORDINALITY AS y(t, o)) x) p
                             GROUP BY p.r) g) s) n
     WHERE n.is_name
     GROUP BY n.c, n.k
    HAVING count(*) > 1)
$$;

-- _json_values(bare) -> how many values a JSON text holds, its root included, given
-- with every string written "": every value but the root follows a comma or opens a
-- container that is not empty, so 1 + commas + containers - empty containers (counted
-- apart: '[{}]' holds one empty container, not two).
CREATE OR REPLACE FUNCTION cwstore._json_values(p_bare text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 1 + (length(p_bare) - length(replace(p_bare, ',', '')))
         + (length(p_bare) - length(translate(p_bare, '{[', '')))
         - (length(p_bare) - length(replace(p_bare, '{}', ''))) / 2
         - (length(p_bare) - length(replace(p_bare, '[]', ''))) / 2
$$;

-- _members_unique_small(text, bare): _members_unique by counting values in the text
-- and in its jsonb (for texts of tens of kB: the jsonb costs about 80 times them). The
-- jsonb's values are counted by a JSON path, which is fast but takes stack at every
-- level; a text of over 1,000 containers (it may nest that deep) has them counted in
-- the jsonb's own text instead, as in the text's: slower, at any depth.
CREATE OR REPLACE FUNCTION cwstore._members_unique_small(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_doc jsonb := cwstore.payload_jsonb(p_text);
BEGIN
  IF length(p_bare) - length(translate(p_bare, '{[', '')) > 1000 THEN
    RETURN cwstore._json_values(p_bare)
           = cwstore._json_values(regexp_replace(v_doc::text, '"(\\.|[^"\\])*"', '""', 'g'));
  END IF;
  RETURN cwstore._json_values(p_bare)
         = jsonb_array_length(jsonb_path_query_array(v_doc, 'strict $.**.type()'));
END $$;

-- _json_bare(text without escapes) -> the text with every string written "": the
-- text cut at its quotes (string_to_table, rows that spill to temporary files past
-- work_mem), its odd parts joined by "".
CREATE OR REPLACE FUNCTION cwstore._json_bare(p_rest text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT string_agg(t, '""' ORDER BY o)
    FROM string_to_table(p_rest, '"') WITH ORDINALITY AS x(t, o)
   WHERE o % 2 = 1
$$;

-- _bare_number_problem(bare) -> the first number of a bare JSON text that
-- JSON.stringify would not write as it is written, or NULL; read between commas (no
-- number spans one). Only parts that may hold such a number are read: a fraction or an
-- exponent (after a digit: true and false hold an e), 16 digits or more, or -0.
CREATE OR REPLACE FUNCTION cwstore._bare_number_problem(p_bare text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT m[1]
    FROM string_to_table(p_bare, ',') WITH ORDINALITY AS x(t, o)
   CROSS JOIN LATERAL regexp_matches(x.t, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
   WHERE x.t ~ '[0-9][.eE]|[0-9]{16}|-0'
     AND m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
   ORDER BY x.o
   LIMIT 1
$$;

-- _too_deep(bare, limit) -> whether a bare JSON text nests deeper than limit levels, read
-- between commas: a part is walked a character at a time only when the depth at its
-- start plus its opening brackets exceeds the limit.
CREATE OR REPLACE FUNCTION cwstore._too_deep(p_bare text, p_limit integer) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT EXISTS (
    SELECT 1
      FROM (SELECT x.t, x.opens,
                   coalesce(sum(x.opens - x.closes)
                              OVER (ORDER BY x.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                            0) AS depth
              FROM (SELECT t, o, length(t) - length(translate(t, '{[', '')) AS opens,
                           length(t) - length(translate(t, '}]', '')) AS closes
                      FROM string_to_table(p_bare, ',') WITH ORDINALITY AS s(t, o)) x) p
     WHERE p.depth + p.opens > p_limit
       AND p.depth + (SELECT max(d)
                        FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1
                                              WHEN c IN ('}', ']') THEN -1 ELSE 0 END)
                                       OVER (ORDER BY i) AS d
                                FROM string_to_table(p.t, NULL) WITH ORDINALITY AS c(c, i)) y)
           > p_limit)
$$;

-- _payload_problem(payload text) -> 'code|path|message', or NULL when the payload is
-- JSON the runtime can write and cwstore can keep exactly. The text must already be
-- one JSON value (append_v1 reads it out of a json batch; import_rows_v1 parses its
-- slice first). Checks, in order:
--   * spelling: exactly as JSON.stringify writes the value (no whitespace outside
--     strings, no escape it would not write, numbers as Number::toString writes them),
--     since the text is stored and given back byte for byte (code shape);
--   * numbers: finite, integers within +-(2^53-1) unless JavaScript writes them back
--     digit for digit (unrepresentable);
--   * nesting at most 10,000 levels (cwstore._jsontext.MAX_DEPTH; unrepresentable);
--   * no object repeats a member name (shape; JSON.parse keeps only the last).
CREATE OR REPLACE FUNCTION cwstore._payload_problem(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_rest text;
  v_bare text;
  v_tok text;
  v_js text;
  v_deep boolean;
BEGIN
  -- Escapes: take out those JSON.stringify writes (escaped backslashes first, pair by
  -- pair from the left, so each backslash left starts an escape); none may remain.
  v_rest := replace(p_text, '\\', '');
  IF strpos(v_rest, '\') > 0 THEN
    v_rest := replace(replace(replace(replace(replace(replace(v_rest, '\"', ''), '\n', ''),
                                                      '\t', ''), '\r', ''), '\b', ''), '\f', '');
    IF strpos(v_rest, '\') > 0 THEN
      v_rest := regexp_replace(v_rest, '\\u00(0[0-7bef]|1[0-9a-f])', '', 'g');
      IF strpos(v_rest, '\') > 0 THEN
        IF cwstore._lone_surrogate(p_text) THEN
          RETURN 'unrepresentable|$.payload|a string holds a lone surrogate (not valid Unicode)';
        END IF;
        RETURN format('shape|$.payload|the escape %s is not how JSON.stringify writes that character',
                      substring(v_rest FROM '\\(?:u[0-9a-fA-F]{4}|.)'));
      END IF;
    END IF;
  END IF;
  -- What is left outside strings: punctuation, literals and numbers, nothing else. Over
  -- 64 kB, each check reads the text in parts (_json_bare, _bare_number_problem,
  -- _too_deep):
  -- a regular expression over the whole text takes 4 bytes a character.
  IF octet_length(v_rest) <= 65536 THEN
    v_bare := regexp_replace(v_rest, '"[^"]*"', '""', 'g');
  ELSE
    v_bare := cwstore._json_bare(v_rest);
  END IF;
  IF strpos(v_bare, ' ') > 0 OR strpos(v_bare, E'\n') > 0 OR strpos(v_bare, E'\t') > 0
     OR strpos(v_bare, E'\r') > 0 THEN
    RETURN 'shape|$.payload|whitespace outside strings: send the payload as JSON.stringify writes it (compact)';
  END IF;
  IF octet_length(v_bare) <= 65536 THEN
    IF v_bare ~ '[0-9][.eE]|[0-9]{16}|-0' THEN
      SELECT m[1] INTO v_tok
        FROM regexp_matches(v_bare, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
       WHERE m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
       LIMIT 1;
    END IF;
  ELSE
    v_tok := cwstore._bare_number_problem(v_bare);
  END IF;
  IF v_tok IS NOT NULL THEN
    v_js := cwstore.js_number(v_tok);
    IF v_js IS NULL AND v_tok ~ '^-?[0-9.]+[eE]\+?[0-9]+$' THEN
      RETURN format('unrepresentable|$.payload|%s is not a finite number', v_tok);
    ELSIF v_tok ~ '^-?[0-9]+$' AND v_tok <> '-0' THEN
      RETURN format('unrepresentable|$.payload|integer %s is beyond +-(2^53-1): JavaScript cannot hold it exactly',
                    v_tok);
    END IF;
    RETURN format('shape|$.payload|the number %s is written %s by JSON.stringify', v_tok,
                  coalesce(v_js, 'as 0'));
  END IF;
  -- Nesting depth: the deepest point of the running count of brackets outside strings.
  IF octet_length(v_bare) <= 65536 THEN
    v_deep := length(v_bare) - length(translate(v_bare, '{[', '')) > 10000
              AND (SELECT max(d) FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1 ELSE -1 END)
                                                OVER (ORDER BY o) AS d
                                         FROM string_to_table(regexp_replace(v_bare, '[^][{}]', '', 'g'),
                                                              NULL) WITH ORDINALITY AS t(c, o)) x) > 10000;
  ELSE
    v_deep := cwstore._too_deep(v_bare, 10000);
  END IF;
  IF v_deep THEN
    RETURN 'unrepresentable|$.payload|nesting deeper than 10000 levels';
  END IF;
  -- Repeated member names (after the depth, which bounds the stack their check takes):
  -- jsonb keeps one member per name, so it holds fewer values than the text when a name
  -- repeats. Values in the text: containers, strings that are not member names, numbers
  -- and literals.
  IF strpos(v_bare, '"":') > 0
     AND strpos(substr(v_bare, strpos(v_bare, '"":') + 3), '"":') > 0
     AND NOT cwstore._members_unique(p_text, v_bare) THEN
    RETURN 'shape|$.payload|an object repeats a member name (JSON.parse would keep only the last)';
  END IF;
  RETURN NULL;
END $$;

-- _node_problem(kind, payload, createdAt, resourceKey) -> 'code|path|message' or NULL:
-- what append_v1 and import_rows_v1 check per node beyond the table's constraints and
-- the nodes trigger (parents, chains, sequences, semantic shape): createdAt, the
-- resourceKey's length (cwstore.document.RESOURCE_KEY_MAX_BYTES: the key is indexed, and
-- a btree entry holds about 2,700 bytes), the payload, and a semantic content's length
-- (100,000 UTF-16 code units of JSON.stringify(content), as the runtime counts).
CREATE OR REPLACE FUNCTION cwstore._node_problem(p_kind text, p_payload text, p_created text, p_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_content text;
  v_units bigint;
BEGIN
  IF NOT cwstore._created_at_ok(p_created) THEN
    RETURN format('created_at|$.createdAt|createdAt %s is not an RFC 3339 date-time with a zone that JavaScript reads as written',
                  to_json(p_created));
  END IF;
  IF octet_length(p_key) > 2000 THEN
    RETURN format('shape|$.resourceKey|resourceKey is %s bytes of UTF-8; at most 2000 are allowed',
                  octet_length(p_key));
  END IF;
  IF p_payload IS NULL THEN
    RETURN 'shape|$.payload|payload is missing';
  END IF;
  IF octet_length(p_payload) > cwstore.max_payload_bytes() THEN
    RETURN format('too_large|$.payload|payload is %s bytes of JSON; at most %s are allowed',
                  octet_length(p_payload), cwstore.max_payload_bytes());
  END IF;
  IF p_kind = 'semantic' THEN
    v_content := cwstore._json_member_text(p_payload, 'content');
    v_units := char_length(v_content)
               + (SELECT count(*) FROM regexp_matches(v_content, '[\U00010000-\U0010FFFF]', 'g'));
    IF v_units > 100000 THEN
      RETURN format('semantic_payload|$.payload.content|semantic content is %s characters of JSON; at most 100000',
                    v_units);
    END IF;
  END IF;
  RETURN cwstore._payload_problem(p_payload);
END $$;

-- _node_violation(problem, graph_id, seq, node_id, index): raise a problem of
-- _node_problem (or append_v1's own) as CW400, its path under the node's ($[i].path).
CREATE OR REPLACE FUNCTION cwstore._node_violation(p_problem text, p_graph_id bigint, p_seq bigint,
                                        p_node_id text, p_index bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_code text := split_part(p_problem, '|', 1);
  v_path text := split_part(p_problem, '|', 2);
BEGIN
  RETURN cwstore._violation(v_code, p_graph_id, p_seq, p_node_id,
                            format('$[%s]', p_index) || substr(v_path, 2),
                            substr(p_problem, length(v_code) + length(v_path) + 3));
END $$;

-- _same_content(a, b): two nodes with one id hold the same content (kind, parents,
-- payload, resourceKey: what the id is computed from). Payloads compare as values
-- (member order aside), unless either holds U+0000, which jsonb cannot hold.
CREATE OR REPLACE FUNCTION cwstore._same_content(a_kind text, a_parents text[], a_payload text, a_key text,
                                      b_kind text, b_parents text[], b_payload text, b_key text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN a_kind = b_kind AND a_parents = b_parents AND a_key IS NOT DISTINCT FROM b_key
     AND (a_payload = b_payload
          OR (strpos(a_payload, '\u0000') = 0 AND strpos(b_payload, '\u0000') = 0
              AND cwstore.payload_jsonb(a_payload) = cwstore.payload_jsonb(b_payload)));
END $$;

-- _writable_graph(graph_id) -> the graph's length, with its counter row locked until
-- commit. A graph of a tenant the login role may not write reads exactly as a graph id
-- that does not exist (CW404, one RAISE), and is checked before the lock, so a refused
-- caller holds nothing; the lock is then taken on the life that was checked only
-- (CW404 erased when it is gone, whatever holds the key by then).
CREATE OR REPLACE FUNCTION cwstore._writable_graph(p_graph_id bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text;
  v_incarnation bigint;
  v_len bigint;
BEGIN
  SELECT g.tenant, g.incarnation INTO v_tenant, v_incarnation
    FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
  END IF;
  SELECT g.length INTO v_len FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id AND g.incarnation = v_incarnation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s was erased while this call waited for it', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id, 'erased', true)::text;
  END IF;
  RETURN v_len;
END $$;

-- ensure_graph_v1(graph, vocabulary) -> graph_id
--   Creates the graph on first use. vocabulary NULL = dynamic. Takes no lock on the
--   graph's row. The graph_id is the key of the name's chain it holds
--   (cwstore.graph_id_of, 55_graph_keys.sql); a name whose first key another graph
--   holds takes the next one.
CREATE OR REPLACE FUNCTION cwstore.ensure_graph_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_id bigint;
  v_tenant text;
BEGIN
  IF p_graph IS NULL OR p_graph = '' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
                               'a graph name must be a non-empty string');
  END IF;
  IF octet_length(p_graph) > cwstore.max_graph_name_bytes() THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
      format('a graph name is at most %s bytes of UTF-8 (this one has %s)',
             cwstore.max_graph_name_bytes(), octet_length(p_graph)));
  END IF;
  v_id := cwstore.graph_id_of(p_graph);
  IF v_id IS NULL THEN
    v_tenant := cwstore._new_graph_tenant();
    IF session_user <> current_user THEN
      PERFORM cwstore._check_writer(p_graph, v_tenant);
    END IF;
    v_id := cwstore._create_graph(p_graph, p_vocabulary, v_tenant);
  END IF;
  SELECT g.tenant INTO v_tenant FROM cwstore.graphs g WHERE g.graph_id = v_id;
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
CREATE OR REPLACE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_life record;
  v_len bigint;
BEGIN
  v_life := cwstore._writer_life(p_graph, true, p_vocabulary);
  v_len := cwstore._lock_life(p_graph, v_life.life_id, v_life.life_incarnation);
  IF v_len > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph %L already holds %s nodes; import needs an empty graph', left(p_graph, 200), v_len),
      DETAIL = jsonb_build_object('graph', p_graph, 'length', v_len)::text;
  END IF;
  UPDATE cwstore.graphs SET vocabulary = p_vocabulary
   WHERE graph_id = v_life.life_id AND vocabulary IS DISTINCT FROM p_vocabulary;
  RETURN v_life.life_id;
END $$;

COMMENT ON FUNCTION cwstore.begin_import_v1(text, text[]) IS
  'Start importing into an empty graph: create or lock it; CW412 if it holds nodes. COPY rows into cwstore.nodes next, then declare_frontier_v1.';

-- import_rows_v1(graph_id, seqs, ids, kinds, parents, payloads, created, keys)
--   The import path of roles that may not COPY into cwstore.nodes (cwstore_writer):
--   one slice of an import as parallel arrays (parents as array literals, e.g.
--   '{cw_…,cw_…}'), inserted in one statement, so the nodes trigger checks and
--   materializes it like a COPY. Call it after begin_import_v1, in the same transaction,
--   once per slice, then declare_frontier_v1. Returns the rows inserted.
--   Only within an import: the graph must be empty, or hold only nodes this transaction
--   wrote (CW412). Each payload must be one JSON value as JSON.stringify writes it, and
--   every node passes the checks of append_v1 (CW400 with the node's index and path).
CREATE OR REPLACE FUNCTION cwstore.import_rows_v1(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                       p_kinds text[], p_parents text[], p_payloads text[],
                                       p_created text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_len bigint;
  v_xid bigint;
  v_n bigint;
  v_all json;
  v_hidden boolean;
  v_bad integer;
  v_problem text;
BEGIN
  v_len := cwstore._writable_graph(p_graph_id);
  v_xid := pg_current_xact_id()::text::bigint;
  IF v_len > 0 AND (SELECT n.xid FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.seq = 1) <> v_xid THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph id %s already held nodes before this transaction; import_rows_v1 continues an import that begin_import_v1 started in this transaction',
                       p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id, 'length', v_len)::text;
  END IF;
  IF cardinality(p_seqs) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_kinds) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_parents) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_created) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_keys) IS DISTINCT FROM cardinality(p_payloads) THEN
    PERFORM cwstore._violation('shape', p_graph_id, NULL, NULL, '$',
                               'import_rows_v1 takes arrays of one length, one element per node');
  END IF;
  -- Every payload is one JSON value: parsed together as one array, whose elements must
  -- be the payloads' texts exactly (text pasted into a payload shows as an extra or a
  -- different element).
  v_bad := array_position(p_payloads, NULL);
  IF v_bad IS NULL THEN
    BEGIN
      v_hidden := EXISTS (SELECT 1 FROM unnest(p_payloads) AS p(t) WHERE strpos(p.t, '\u0000') > 0);
      v_all := (CASE WHEN v_hidden THEN cwstore._nul_hide('[' || array_to_string(p_payloads, ',') || ']')
                     ELSE '[' || array_to_string(p_payloads, ',') || ']' END)::json;
      -- Element and payload side by side (ROWS FROM pads the shorter with NULLs): no
      -- join, so no sort or hash holds the payloads again.
      SELECT min(x.o) INTO v_bad
        FROM ROWS FROM (json_array_elements(v_all), unnest(p_payloads)) WITH ORDINALITY AS x(v, t, o)
       WHERE x.v IS NULL OR x.t IS NULL
          OR (CASE WHEN v_hidden THEN cwstore._nul_show(x.v::text) ELSE x.v::text END) <> x.t;
      v_all := NULL;  -- not held while the payloads are checked and inserted
    EXCEPTION WHEN invalid_text_representation THEN
      v_bad := 0;
    END;
    IF v_bad = 0 THEN
      FOR v_n IN 1 .. cardinality(p_payloads) LOOP
        BEGIN
          PERFORM cwstore._nul_hide(p_payloads[v_n])::json;
        EXCEPTION WHEN invalid_text_representation THEN
          v_bad := v_n;
          EXIT;
        END;
      END LOOP;
    END IF;
  END IF;
  IF v_bad IS NOT NULL THEN
    v_bad := least(v_bad, cardinality(p_payloads));
    PERFORM cwstore._violation('shape', p_graph_id, p_seqs[v_bad], p_ids[v_bad],
                               format('$[%s].payload', v_bad - 1),
                               'payload must be exactly one JSON value');
  END IF;
  SELECT x.o, x.problem INTO v_bad, v_problem
    FROM (SELECT r.o, cwstore._node_problem(r.kind, r.payload, r.created, r.key) AS problem
            FROM unnest(p_kinds, p_payloads, p_created, p_keys)
                 WITH ORDINALITY AS r(kind, payload, created, key, o)
          OFFSET 0) x  -- a fence: each node's problem is computed once
   WHERE x.problem IS NOT NULL
   ORDER BY x.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._node_violation(v_problem, p_graph_id, p_seqs[v_bad], p_ids[v_bad], v_bad - 1);
  END IF;
  -- As in append_v1: within a graph the feed's xid never goes back; the rows come
  -- joined to the graph's counter row (one statement on the graph's worker on Citus).
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,
                             resource_key, xid)
  SELECT g.graph_id, r.seq, r.id, r.kind, r.parents::text[], r.payload, r.created, r.key, v_xid
    FROM cwstore.graphs g
   CROSS JOIN unnest(p_seqs, p_ids, p_kinds, p_parents, p_payloads, p_created, p_keys)
         AS r(seq, id, kind, parents, payload, created, key)
   WHERE g.graph_id = p_graph_id;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;

COMMENT ON FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[]) IS
  'Import one slice of nodes as parallel arrays after begin_import_v1 (the import path of roles without INSERT on cwstore.nodes). Returns how many rows it inserted.';

-- declare_frontier_v1(graph_id, heads) : the frontier after the graph's last node, as
-- given and in its order, with the graph locked (so it is declared at the length an
-- append that committed first left). CW400 frontier_reference for unknown or repeated
-- ids, CW404 for an unknown graph id (or one of another tenant).
CREATE OR REPLACE FUNCTION cwstore.declare_frontier_v1(p_graph_id bigint, p_heads text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_len bigint;
BEGIN
  v_len := cwstore._writable_graph(p_graph_id);
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, v_len, coalesce(p_heads, '{}'));
END $$;

COMMENT ON FUNCTION cwstore.declare_frontier_v1(bigint, text[]) IS
  'Declare the frontier after the graph''s last node (graph by graph_id), as given and in its order: after an import, or to set it by hand. CW400 frontier_reference for unknown or repeated ids.';

-- derive_v1(graph) -> the graph's length: the frontier's history (frontier_spans) of a
-- graph written up to its length, now, under the graph's lock. Writes do it on their
-- own every cwstore.derive_lag() nodes, and every read answers at every point without
-- it; this is for whoever wants the table itself current (SQL over frontier_spans) or
-- the work done before a burst of reads. CW404 for an unknown graph.
CREATE OR REPLACE FUNCTION cwstore.derive_v1(p_graph text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_life record;
  v_len bigint;
BEGIN
  v_life := cwstore._writer_life(p_graph, false, NULL);
  IF v_life.life_id IS NULL THEN
    PERFORM cwstore._graph(p_graph);
  END IF;
  v_len := cwstore._lock_life(p_graph, v_life.life_id, v_life.life_incarnation);
  UPDATE cwstore.graphs g SET derived_length = g.length
   WHERE g.graph_id = v_life.life_id AND g.derived_length < g.length;
  RETURN v_len;
END $$;

COMMENT ON FUNCTION cwstore.derive_v1(text) IS
  'Write a graph''s frontier history (frontier_spans) up to its length now; returns the length. Reads never need it: they fold the nodes past the watermark (graphs.derived_length).';

-- _refuse_stale(graph, graph_id, nodes, expected, length): CW409 for an append whose
-- expected length is not the graph's, unless every node of the batch (by id) is held by
-- the graph already. The ids are read from the batch as given, before any other check:
-- a conflict costs a lookup, not the batch's validation. Called without the graph's
-- lock; append_v1 checks again under it.
CREATE OR REPLACE FUNCTION cwstore._refuse_stale(p_graph text, p_graph_id bigint, p_nodes json,
                                      p_expected bigint, p_length bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_held bigint := 0;
BEGIN
  -- A batch with a \u escape (a U+0000 or a lone surrogate may be among them, which
  -- ->> refuses) is left to the check under the lock.
  IF strpos(p_nodes::text, '\u') > 0 THEN
    RETURN;
  END IF;
  v_ids := ARRAY(SELECT DISTINCT e ->> 'id' FROM json_array_elements(p_nodes) e);
  IF p_graph_id IS NOT NULL AND array_position(v_ids, NULL) IS NULL THEN
    SELECT count(*) INTO v_held
      FROM unnest(v_ids) AS u(id)
      JOIN LATERAL (SELECT 1 FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.id = u.id LIMIT 1) n ON true;
  END IF;
  IF v_held < cardinality(v_ids) OR cardinality(v_ids) = 0 AND p_graph_id IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200),
                       p_length, p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', p_length)::text;
  END IF;
END $$;

-- _frontier_heads(frontier): a declared frontier (a JSON array of node ids) as text[];
-- NULL for NULL; CW400 at $.frontier for anything else.
CREATE OR REPLACE FUNCTION cwstore._frontier_heads(p_frontier json) RETURNS text[]
LANGUAGE plpgsql AS $$
BEGIN
  IF p_frontier IS NULL THEN
    RETURN NULL;
  END IF;
  IF cwstore._lone_surrogate(p_frontier::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$.frontier',
      'a frontier id holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  IF json_typeof(p_frontier) <> 'array'
     OR EXISTS (SELECT 1 FROM json_array_elements(p_frontier) f WHERE json_typeof(f) <> 'string')
  THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.frontier',
                               'frontier must be a JSON array of node ids');
  END IF;
  RETURN ARRAY(SELECT json_array_elements_text(p_frontier));
END $$;

-- _writer_graph(graph): the graph's id, length, tenant and life (incarnation), read
-- without a lock, by its key (one shard on Citus): the name's first key, else its chain
-- (cwstore.graph_id_of). NULLs for a name no graph has.
CREATE OR REPLACE FUNCTION cwstore._writer_graph(p_graph text, OUT found_id bigint, OUT found_length bigint,
                                      OUT found_tenant text, OUT found_incarnation bigint)
LANGUAGE plpgsql AS $$
BEGIN
  found_id := cwstore.graph_key(p_graph);
  SELECT g.length, g.tenant, g.incarnation INTO found_length, found_tenant, found_incarnation
    FROM cwstore.graphs g
   WHERE g.graph_id = found_id AND g.name = p_graph;
  IF NOT FOUND THEN
    found_id := cwstore.graph_id_of(p_graph);
    IF found_id IS NOT NULL THEN
      SELECT g.length, g.tenant, g.incarnation INTO found_length, found_tenant, found_incarnation
        FROM cwstore.graphs g WHERE g.graph_id = found_id AND g.name = p_graph;
      IF NOT FOUND THEN
        found_id := NULL;
      END IF;
    END IF;
  END IF;
END $$;

-- _writer_life(graph, create, vocabulary) -> (life_id, life_length, life_incarnation):
-- the graph's life that the login role may write, read without a lock (42501 for a
-- graph of a tenant the role is not in); NULLs for a name no graph has, unless create:
-- then the graph is created first (ensure_graph_v1, with vocabulary). The tenant is
-- checked on the same read that gives the life, and a life's tenant and name never
-- change, so locking that life (cwstore._lock_life) and nothing else keeps the check
-- true under the lock. The check is a statement of its own, after the read (on Citus a
-- statement that reads a distributed table runs on the worker, as another role).
CREATE OR REPLACE FUNCTION cwstore._writer_life(p_graph text, p_create boolean, p_vocabulary text[],
                                     OUT life_id bigint, OUT life_length bigint,
                                     OUT life_incarnation bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v record;
BEGIN
  v := cwstore._writer_graph(p_graph);
  IF v.found_id IS NULL AND p_create THEN
    PERFORM cwstore.ensure_graph_v1(p_graph, p_vocabulary);
    v := cwstore._writer_graph(p_graph);
    IF v.found_id IS NULL THEN
      PERFORM cwstore._erased_meanwhile(p_graph);
    END IF;
  END IF;
  IF v.found_id IS NOT NULL AND session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v.found_tenant);
  END IF;
  life_id := v.found_id;
  life_length := v.found_length;
  life_incarnation := v.found_incarnation;
END $$;

-- _lock_life(graph, graph_id, incarnation) -> the graph's length, with its counter row
-- locked until commit: that life's row, and no other. CW404 (erased) when the life is
-- gone, even if another life (or another graph) holds the key by now. Before the first
-- node of a life, _check_after_erasure.
CREATE OR REPLACE FUNCTION cwstore._lock_life(p_graph text, p_graph_id bigint, p_incarnation bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint;
BEGIN
  SELECT g.length INTO v_len FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id AND g.incarnation = p_incarnation FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  IF v_len = 0 THEN
    PERFORM cwstore._check_after_erasure(p_graph, p_graph_id);
  END IF;
  RETURN v_len;
END $$;

-- _batch_fields(nodes): append_v1's batch (a JSON array), each node's fields as arrays in
-- the batch's order (parents as JSON array texts; payloads byte for byte, a \u0000 in
-- them kept). Every node is checked for its JSON types, for what the table's
-- constraints would refuse and for _node_problem, so every client gets a CW400 with the
-- safeguard code, the node's position and the path (the first node with a problem).
-- Each node's members are read once (json_each): PostgreSQL's JSON functions keep an
-- allocation for every name and scalar they read until the row is done, so each more
-- reading of a 4 MiB payload of small values would cost tens of MB. The rows come in
-- the array's order, aggregated without a sort (a sort would hold every payload again).
CREATE OR REPLACE FUNCTION cwstore._batch_fields(p_nodes json, OUT b_ids text[], OUT b_kinds text[],
                                      OUT b_parents text[], OUT b_payloads text[],
                                      OUT b_created text[], OUT b_keys text[])
LANGUAGE plpgsql AS $$
DECLARE
  v_hidden boolean := false;
  v_bad bigint;
  v_problem text;
  v_bad_id text;
BEGIN
  IF cwstore._lone_surrogate(p_nodes::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$',
      'a string holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  -- PostgreSQL's JSON functions refuse the escape \u0000: hide it (reversibly) first.
  IF strpos(p_nodes::text, '\u0000') > 0 THEN
    v_hidden := true;
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;
  SELECT coalesce(array_agg(f.id #>> '{}'), '{}'), array_agg(f.kind #>> '{}'),
         array_agg(f.parents::text), array_agg(f.payload), array_agg(f."createdAt" #>> '{}'),
         array_agg(f."resourceKey" #>> '{}'),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO b_ids, b_kinds, b_parents, b_payloads, b_created, b_keys, v_bad, v_problem, v_bad_id
    FROM (SELECT c.*,
                 coalesce(c.problem0,
                          cwstore._node_problem(c.kind #>> '{}', c.payload, c."createdAt" #>> '{}',
                                                c."resourceKey" #>> '{}')) AS problem
            FROM (SELECT a.o, r.id, r.kind, r.parents, r."createdAt", r."resourceKey",
                         CASE WHEN v_hidden THEN cwstore._nul_show(r.payload)
                              ELSE r.payload END AS payload,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|$|node must be a JSON object'
                   WHEN r.fields <> r.names
                     THEN 'shape|$|node repeats a member name (JSON.parse would keep only the last)'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|$.id|id must be a string'
                   WHEN NOT r.has_kind
                     THEN 'shape|$|node is missing field kind'
                   WHEN json_typeof(r.kind) IS DISTINCT FROM 'string'
                     THEN 'kind|$.kind|kind must be one of the ten kinds (a string)'
                   WHEN json_typeof(r.parents) IS DISTINCT FROM 'array'
                     THEN 'shape|$.parents|parents must be an array'
                   WHEN r.payload IS NULL THEN 'shape|$|payload is missing'
                   WHEN json_typeof(r."createdAt") IS DISTINCT FROM 'string'
                     THEN 'shape|$.createdAt|createdAt must be a string'
                   WHEN r."resourceKey" IS NOT NULL AND json_typeof(r."resourceKey") <> 'string'
                     THEN 'shape|$.resourceKey|resourceKey must be a string when present'
                   WHEN r.unknown
                     THEN 'shape|$|unknown node field'
                   WHEN EXISTS (SELECT 1 FROM json_array_elements(r.parents) pe
                                 WHERE json_typeof(pe) <> 'string')
                     THEN 'shape|$.parents|parents must be string ids'
                   WHEN v_hidden AND strpos(r.id::text || r.kind::text || r."createdAt"::text
                                            || coalesce(r."resourceKey"::text, '')
                                            || r.parents::text, '\\u0000') > 0
                     THEN 'unrepresentable|$|U+0000 outside a payload cannot be stored'
                   WHEN NOT ((r.kind #>> '{}') = ANY (cwstore.node_kinds()))
                     THEN 'kind|$.kind|kind is not one of the ten'
                   WHEN (r.id #>> '{}') !~ '^cw_[0-9a-f]{24}$'
                     THEN 'identity|$.id|id must be cw_ and 24 lowercase hex digits'
                   WHEN (r."resourceKey" #>> '{}') = ''
                     THEN 'shape|$.resourceKey|resourceKey must not be empty'
                 END AS problem0
            FROM json_array_elements(p_nodes) WITH ORDINALITY AS a(e, o)
            CROSS JOIN LATERAL (
                   SELECT count(*) AS fields, count(DISTINCT m.k) AS names,
                          coalesce(bool_or(m.k = 'kind'), false) AS has_kind,
                          coalesce(bool_or(m.k NOT IN ('id', 'kind', 'parents', 'payload',
                                                       'createdAt', 'sequence', 'resourceKey')),
                                   false) AS unknown,
                          min(m.v::text) FILTER (WHERE m.k = 'id' AND json_typeof(m.v) <> 'null')::json AS id,
                          min(m.v::text) FILTER (WHERE m.k = 'kind' AND json_typeof(m.v) <> 'null')::json AS kind,
                          min(m.v::text) FILTER (WHERE m.k = 'parents' AND json_typeof(m.v) <> 'null')::json AS parents,
                          min(m.v::text) FILTER (WHERE m.k = 'payload' AND json_typeof(m.v) <> 'null') AS payload,
                          min(m.v::text) FILTER (WHERE m.k = 'createdAt' AND json_typeof(m.v) <> 'null')::json AS "createdAt",
                          min(m.v::text) FILTER (WHERE m.k = 'resourceKey' AND json_typeof(m.v) <> 'null')::json AS "resourceKey"
                     FROM json_each(CASE json_typeof(a.e) WHEN 'object' THEN a.e ELSE '{}' END)
                          AS m(k, v)) r) c
          OFFSET 0) f;  -- a fence: each node's problem is computed once
  IF v_bad IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_bad, v_bad_id, v_bad - 1);
  END IF;
END $$;

-- _refuse_repeated(ids, kinds, parents, payloads, keys): one id, one content: CW400
-- duplicate_id for the first node of a batch (its fields as _batch_fields gives them)
-- given again later with other content.
CREATE OR REPLACE FUNCTION cwstore._refuse_repeated(p_ids text[], p_kinds text[], p_parents text[],
                                         p_payloads text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_bad bigint;
  v_bad_id text;
BEGIN
  SELECT b.o, b.id INTO v_bad, v_bad_id
    FROM unnest(p_ids) WITH ORDINALITY AS b(id, o)
    JOIN unnest(p_ids) WITH ORDINALITY AS a(id, o) ON a.id = b.id AND a.o < b.o
   WHERE NOT cwstore._same_content(
           p_kinds[a.o], ARRAY(SELECT json_array_elements_text(p_parents[a.o]::json)),
           p_payloads[a.o], p_keys[a.o],
           p_kinds[b.o], ARRAY(SELECT json_array_elements_text(p_parents[b.o]::json)),
           p_payloads[b.o], p_keys[b.o])
   ORDER BY b.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', NULL, v_bad, v_bad_id, format('$[%s].id', v_bad - 1),
      format('id %s is used by an earlier node of the batch with other content', v_bad_id));
  END IF;
END $$;

-- _lock_for_append(graph, graph_id, incarnation, expected_length, ids): that life of
-- the graph locked (until commit, cwstore._lock_life) and its length. CW409 for a stale
-- expected length, unless every node of the batch (ids) is held already (a retry of a
-- write that committed: not a conflict).
CREATE OR REPLACE FUNCTION cwstore._lock_for_append(p_graph text, p_graph_id bigint, p_incarnation bigint,
                                         p_expected bigint, p_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint := cwstore._lock_life(p_graph, p_graph_id, p_incarnation);
BEGIN
  IF p_expected IS NOT NULL AND p_expected <> v_len
     AND EXISTS (SELECT 1 FROM unnest(p_ids) AS u(id)
                  WHERE NOT EXISTS (SELECT 1 FROM cwstore.nodes n
                                     WHERE n.graph_id = p_graph_id AND n.id = u.id)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200), v_len,
                       p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', v_len)::text;
  END IF;
  RETURN v_len;
END $$;

-- _refuse_changed(graph_id, length, ids, kinds, parents, payloads, keys): a node of the
-- batch that the graph held (at or below length) must be the same node: a retry, not
-- other content under its id (CW400 duplicate_id).
CREATE OR REPLACE FUNCTION cwstore._refuse_changed(p_graph_id bigint, p_len bigint, p_ids text[],
                                        p_kinds text[], p_parents text[], p_payloads text[],
                                        p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_bad bigint;
  v_bad_id text;
  v_seq bigint;
BEGIN
  -- One index lookup per id (LATERAL ... LIMIT 1): as a join, a plan kept from a small
  -- graph scanned the graph's nodes up to p_len on every append.
  SELECT u.o, u.id, n.seq INTO v_bad, v_bad_id, v_seq
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT n.seq, n.kind, n.parents, n.payload_text, n.resource_key
                    FROM cwstore.nodes n
                   WHERE n.graph_id = p_graph_id AND n.id = u.id
                   LIMIT 1) n ON n.seq <= p_len
   WHERE NOT cwstore._same_content(
           n.kind, n.parents, n.payload_text, n.resource_key,
           p_kinds[u.o], ARRAY(SELECT json_array_elements_text(p_parents[u.o]::json)),
           p_payloads[u.o], p_keys[u.o])
   ORDER BY u.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', p_graph_id, v_bad, v_bad_id,
      format('$[%s].id', v_bad - 1),
      format('id %s is node %s of the graph, with other content', v_bad_id, v_seq));
  END IF;
END $$;

-- _declare_after_append(graph_id, length, written, heads, ids, expected_length): the
-- declared frontier recorded after an append's new nodes. When the call wrote nothing it
-- is recorded only if it changes the frontier and, with an expected_length, that is
-- current, or, without one, no node came after the batch's last: a retry after others
-- moved on must not move their frontier back.
CREATE OR REPLACE FUNCTION cwstore._declare_after_append(p_graph_id bigint, p_len bigint, p_new bigint,
                                              p_heads text[], p_ids text[], p_expected bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_last bigint;
BEGIN
  IF p_new = 0 THEN
    SELECT max(n.seq) INTO v_last
      FROM unnest(p_ids) AS u(id)
      JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.id = u.id LIMIT 1) n ON true;
    IF coalesce(p_expected, v_last, p_len) <> p_len
       OR p_heads IS NOT DISTINCT FROM (
            SELECT coalesce(array_agg(n.id ORDER BY u.o), '{}')
              FROM cwstore.graphs g
             CROSS JOIN LATERAL unnest(g.frontier_seqs) WITH ORDINALITY AS u(s, o)
              JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                             WHERE n.graph_id = p_graph_id AND n.seq >= u.s AND n.seq <= u.s
                             ORDER BY n.seq LIMIT 1) n ON true
             WHERE g.graph_id = p_graph_id) THEN
      RETURN;
    END IF;
  END IF;
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, p_len + p_new, p_heads);
END $$;

-- append_v1(graph, nodes, expected_length, frontier, incarnation)
--   nodes: a JSON array of runtime nodes {id, kind, parents, payload, createdAt,
--   resourceKey?} (sequence is assigned here; one given is ignored). Each payload is
--   stored byte for byte, so it must be written as JSON.stringify writes it (compact;
--   the runtime's and cwstore's clients' own form); the same checks as cwstore import
--   apply to every node (createdAt, numbers, member names, semantic content and key
--   forms, resourceKey length), each refused with CW400, its code, index and path.
--   expected_length: NULL, or the length the writer last saw (CW409 when stale).
--   frontier: NULL (the fold applies) or a JSON array of ids, the frontier after
--   the batch.
--   incarnation: NULL, or the life of the graph the writer means (graphs.incarnation,
--   returned by every append): CW404 (erased) when the graph's life is another one, or
--   the graph does not exist (it is not created then).
--   The graph's tenant is checked on the row read first, and the row locked is that
--   same life's: a graph erased and made again meanwhile (by any tenant) is never
--   written by this call; it gets CW404 (erased) instead.
--   Nodes whose id the graph already holds, with the same content, are returned as
--   stored and not written (idempotent retries); an id given again with other content,
--   in the graph or earlier in the batch, is refused (duplicate_id). When a call writes
--   nothing, its frontier is declared only if expected_length is current, or, with no
--   expected_length, if no node was appended after the batch's own: a retry after
--   others moved on never moves their frontier back.
--   Locks: the graph row (FOR UPDATE) until commit; nothing else.
--   Returns each node's sequence, id, createdAt and recorded_at, whether this call wrote
--   it, the stored payload of a node it did not write, and the graph's life.
--   Raises: CW400 (shape, kind, parents, semantic...), CW404 (erased), CW409, CW410
--   (chain race), 42501 (another tenant's graph).
-- Its statements take arrays and ids as parameters; custom plans would be re-made on
-- every call, and the generic ones are right for every batch size that takes this path.
CREATE OR REPLACE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL,
                                  p_incarnation bigint DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text, incarnation bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_heads text[];
  v_life record;
  v_ids text[];
  v_kinds text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_keys text[];
  v_now timestamptz := now();
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
    v_heads := cwstore._frontier_heads(p_frontier);
  END IF;

  -- The graph's row is read first, without a lock: the tenant check comes before
  -- anything else (a refused caller learns nothing of the graph, and must not hold
  -- another tenant's counter row while it sits in its aborted transaction). The life
  -- read here is the one locked below, or none: a graph found here but gone once locked
  -- was erased meanwhile, and the call must not write whatever holds its key by then.
  v_life := cwstore._writer_life(p_graph, false, NULL);
  IF p_incarnation IS NOT NULL AND v_life.life_incarnation IS DISTINCT FROM p_incarnation THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  v_graph_id := v_life.life_id;
  v_len := v_life.life_length;
  -- A stale expected length is refused before the batch is read: within a graph's life
  -- its length only grows, so a length seen here that differs from the expected one
  -- differs under the lock too (or the graph is gone by then: CW404). Unless every node
  -- of the batch is held already (a retry of a write that committed: not a conflict).
  IF p_expected_length IS NOT NULL AND p_expected_length <> coalesce(v_len, 0) THEN
    PERFORM cwstore._refuse_stale(p_graph, v_graph_id, p_nodes, p_expected_length,
                                  coalesce(v_len, 0));
  END IF;

  SELECT f.b_ids, f.b_kinds, f.b_parents, f.b_payloads, f.b_created, f.b_keys
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys
    FROM cwstore._batch_fields(p_nodes) f;
  IF cardinality(v_ids) > 1 THEN
    PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
  END IF;
  IF v_graph_id IS NULL THEN
    v_life := cwstore._writer_life(p_graph, true, NULL);
    v_graph_id := v_life.life_id;
  END IF;
  v_len := cwstore._lock_for_append(p_graph, v_graph_id, v_life.life_incarnation,
                                    p_expected_length, v_ids);

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's (read as the last at or
  -- before the length, in nodes_pkey's order: only that index gives the order, so a
  -- plan made while the table was tiny cannot take another one and read the graph).
  -- The rows come joined to the graph's counter row: on Citus that makes the statement
  -- one INSERT ... SELECT on the graph's worker (not rows copied through the
  -- coordinator, which loses the SQLSTATE of the triggers' refusals).
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                             created_at_text, resource_key, recorded_at, xid)
  SELECT g.graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o], v_now,
         greatest(pg_current_xact_id()::text::bigint,
                  (SELECT l.xid FROM cwstore.nodes l
                    WHERE l.graph_id = v_graph_id AND l.seq <= v_len
                    ORDER BY l.seq DESC LIMIT 1))
    FROM cwstore.graphs g
   CROSS JOIN (SELECT DISTINCT ON (u.id) u.id, u.o
                 FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
                ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE g.graph_id = v_graph_id AND x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;
  -- Only when the insert skipped some (raising undoes the insert).
  IF v_new < cardinality(v_ids) THEN
    PERFORM cwstore._refuse_changed(v_graph_id, v_len, v_ids, v_kinds, v_parents, v_payloads,
                                    v_keys);
  END IF;
  IF v_heads IS NOT NULL THEN
    PERFORM cwstore._declare_after_append(v_graph_id, v_len, v_new, v_heads, v_ids,
                                          p_expected_length);
  END IF;

  -- Every node new and given once: the rows are what was just written, in order.
  IF v_new = cardinality(v_ids) THEN
    RETURN QUERY
    SELECT v_len + u.o, u.id, v_created[u.o], v_now, true, NULL::text, v_life.life_incarnation
      FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
     ORDER BY u.o;
    RETURN;
  END IF;
  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END, v_life.life_incarnation
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

COMMENT ON FUNCTION cwstore.append_v1(text, json, bigint, json, bigint) IS
  'Append a batch of runtime nodes to a graph (created on first use unless a life is named), optionally declaring the frontier after it, optionally to one life of the graph only. Idempotent by id. Returns each node''s sequence, whether this call wrote it, for nodes it did not write the stored createdAt and payload, and the graph''s life (incarnation).';

-- From 70_read_api.sql.

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
--   Resolves a graph name: its first key, else its chain (55_graph_keys.sql). Raises
--   CW404 when there is no such graph, or when the login role may not read it
--   (cwstore._may_use), from one RAISE: the two must read the same, message, detail and
--   context, or the difference tells that the graph exists. Every public read function
--   resolves its graph here first: the one check they need.
--   Cost: log.
CREATE OR REPLACE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_tenant text;
BEGIN
  SELECT g.graph_id, g.length, g.tenant INTO graph_id, length, v_tenant
    FROM cwstore.graphs g WHERE g.graph_id = cwstore.graph_key(p_graph) AND g.name = p_graph;
  IF NOT FOUND THEN
    graph_id := cwstore.graph_id_of(p_graph);
    SELECT g.graph_id, g.length, g.tenant INTO graph_id, length, v_tenant
      FROM cwstore.graphs g WHERE g.graph_id = _graph.graph_id AND g.name = p_graph;
  END IF;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
END $$;

COMMENT ON FUNCTION cwstore._graph(text) IS
  'Private: resolve a graph name to (graph_id, length); CW404 if unknown.';

-- _node_seq(graph_id, graph, node_id) -> seq
--   The sequence of a node given by id. Raises CW404 when the graph has no such node
--   (DETAIL {"graph", "node_id"}). Cost: log n.
CREATE OR REPLACE FUNCTION cwstore._node_seq(p_graph_id bigint, p_graph text, p_node_id text)
RETURNS bigint LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_seq bigint;
BEGIN
  SELECT n.seq INTO v_seq FROM cwstore.nodes n
   WHERE n.graph_id = p_graph_id AND n.id = p_node_id;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L has no node %s', left(p_graph, 200), left(coalesce(p_node_id, 'NULL'), 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'node_id', p_node_id)::text;
  END IF;
  RETURN v_seq;
END $$;

COMMENT ON FUNCTION cwstore._node_seq(bigint, text, text) IS
  'Private: the seq of node_id in a graph; CW404 if the graph has no such node.';

-- _spans_at(graph_id, s) -> (position, seq)
--   The frontier after node s as the spans hold it: s at most the graph's watermark
--   (graphs.derived_length). One GiST descent of frontier_spans_closed_idx for the
--   closed spans containing s, plus the open spans that began at or before s (the
--   partial index frontier_spans_current_idx): O(log n + h).
CREATE OR REPLACE FUNCTION cwstore._spans_at(p_graph_id bigint, p_seq bigint)
RETURNS TABLE ("position" integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
BEGIN
  -- The box test is the index condition (it implies the graph: boxes of different
  -- graphs are apart); the integer tests after it are exact whatever float8 rounding
  -- the boxes carry. The graph is named all the same: on Citus that sends the query
  -- to the graph's one shard, not to every shard. (plpgsql: Citus plans no SQL
  -- function that reads a distributed table with parameters.)
  RETURN QUERY
  SELECT (row_number() OVER (ORDER BY x.from_seq, x.ord))::integer - 1, x.head_seq
    FROM (SELECT s.head_seq, s.from_seq, s.ord FROM cwstore.frontier_spans s
           WHERE s.graph_id = p_graph_id
             AND cwstore.span_band(s.graph_id, s.from_seq, s.to_seq)
                 @> cwstore.at_box(p_graph_id, p_seq)
             AND s.to_seq <> cwstore.infinity_seq()
             AND s.from_seq <= p_seq AND p_seq < s.to_seq
          UNION ALL
          SELECT s.head_seq, s.from_seq, s.ord FROM cwstore.frontier_spans s
           WHERE s.graph_id = p_graph_id AND s.to_seq = cwstore.infinity_seq()
             AND s.from_seq <= p_seq) x
   ORDER BY x.from_seq, x.ord;
END $$;

COMMENT ON FUNCTION cwstore._spans_at(bigint, bigint) IS
  'Private: frontier (position, seq) of a graph_id after node s as frontier_spans hold it (s at most the watermark).';

-- _frontier_at(graph_id, s) -> (position, seq)
--   The frontier after node s, in order (position from 0). s NULL = now.
--   Cost: now, the graph's row (graphs.frontier_seqs), O(h); at s up to the watermark,
--   the spans (_spans_at), O(log n + h); past it, the frontier at the watermark (the
--   spans), or the last frontier declared after it, folded with the nodes after that,
--   fewer than cwstore.derive_lag(): their rows and edges by two primary-key range scans.
CREATE OR REPLACE FUNCTION cwstore._frontier_at(p_graph_id bigint, p_seq bigint)
RETURNS TABLE ("position" integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
DECLARE
  g record;
  v_from bigint;
  v_heads text[];
  v_base bigint[];
  v_new bigint[];
  v_semantic bigint[];
  v_closed bigint[];
BEGIN
  SELECT x.length, x.derived_length, x.frontier_seqs INTO g
    FROM cwstore.graphs x WHERE x.graph_id = p_graph_id;
  IF p_seq IS NULL OR p_seq >= g.length THEN
    RETURN QUERY
    SELECT u.o::integer - 1, u.s FROM unnest(g.frontier_seqs) WITH ORDINALITY AS u(s, o)
     ORDER BY u.o;
    RETURN;
  ELSIF p_seq <= g.derived_length THEN
    RETURN QUERY SELECT f.position, f.seq FROM cwstore._spans_at(p_graph_id, p_seq) f;
    RETURN;
  END IF;
  -- Past the watermark: the fold starts from the last frontier declared in the run
  -- (frontier_declarations_seq_idx's order, the last declared at its sequence), else
  -- from the spans at the watermark.
  SELECT f.seq, f.heads INTO v_from, v_heads FROM cwstore.frontier_declarations f
   WHERE f.graph_id = p_graph_id AND f.seq > g.derived_length AND f.seq <= p_seq
   ORDER BY f.seq DESC, f.declaration_id DESC LIMIT 1;
  IF v_from IS NULL THEN
    v_from := g.derived_length;
    v_base := ARRAY(SELECT f.seq FROM cwstore._spans_at(p_graph_id, g.derived_length) f
                     ORDER BY f.position);
  ELSE
    v_base := ARRAY(SELECT n.seq FROM unnest(v_heads) WITH ORDINALITY AS u(h, o)
                      JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                                     WHERE n.graph_id = p_graph_id AND n.id = u.h
                                     LIMIT 1) n ON true
                     ORDER BY u.o);
  END IF;
  -- The run's folding nodes, and its semantic nodes: of the nodes with parents, the
  -- only ones that leave the frontier alone (usually none). Nodes and edges in their
  -- primary keys' order, as in _derive_spans.
  SELECT array_agg(n.seq ORDER BY n.seq)
           FILTER (WHERE NOT (n.kind = 'semantic'
                              OR (n.kind = 'system' AND cardinality(n.parents) = 0))),
         coalesce(array_agg(n.seq) FILTER (WHERE n.kind = 'semantic'), '{}')
    INTO v_new, v_semantic
    FROM (SELECT r.seq, r.kind, r.parents FROM cwstore.nodes r
           WHERE r.graph_id = p_graph_id AND r.seq > v_from AND r.seq <= p_seq
           ORDER BY r.seq) n;
  SELECT array_agg(e.parent_seq) FILTER (WHERE e.child_seq <> ALL (v_semantic)) INTO v_closed
    FROM (SELECT r.child_seq, r.parent_seq FROM cwstore.edges r
           WHERE r.graph_id = p_graph_id AND r.child_seq > v_from AND r.child_seq <= p_seq
           ORDER BY r.child_seq) e;
  RETURN QUERY
  SELECT u.o::integer - 1, u.s
    FROM unnest(cwstore._fold_frontier(v_base, v_new, v_closed)) WITH ORDINALITY AS u(s, o)
   ORDER BY u.o;
END $$;

COMMENT ON FUNCTION cwstore._frontier_at(bigint, bigint) IS
  'Private: frontier (position, seq) of a graph_id after node s (NULL = now): the graph''s row now, the spans up to the watermark; past it, the spans at the watermark, or the last frontier declared after it, folded with the nodes after that.';

-- _heads_at(graph_id, s, semantic_only) -> (key, version, seq)
--   Every resource key's head after node s (s NULL = now), keys in byte order. With
--   semantic_only, only keys beginning "semantic:".
--   Cost: now, O(k) rows of key_heads; at s, one GiST scan of key_versions_closed_idx
--   for the closed versions valid at s, plus the current heads that began by s:
--   O(log n + k).
CREATE OR REPLACE FUNCTION cwstore._heads_at(p_graph_id bigint, p_seq bigint,
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
    -- As in _frontier_at: the box test is the index condition, the integer test after
    -- it is exact whatever float8 rounding the boxes carry, and the graph is named for
    -- Citus. The integer test is a range containment, which no btree index serves: as
    -- "node_seq <= s", PostgreSQL 18 (skip scan) ANDed the box scan with a scan of
    -- key_versions_seq_idx over the graph's versions up to s (2 ms at s = 50k).
    RETURN QUERY
    SELECT x.key, x.version, x.seq
      FROM (SELECT v.key, v.version, v.node_seq AS seq FROM cwstore.key_versions v
             WHERE v.graph_id = p_graph_id
               AND cwstore.span_band(v.graph_id, v.node_seq, v.to_seq)
                   @> cwstore.at_box(p_graph_id, p_seq)
               AND v.to_seq <> cwstore.infinity_seq()
               AND int8range(v.node_seq, v.to_seq) @> p_seq
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
--   Nodes already reached are not expanded again: each level's query is given that
--   level only and returns its neighbours; this function keeps the nodes reached in a
--   boolean[] indexed by distance in seq from start (grown as far as the walk goes, 1
--   byte a slot) and checks each neighbour there, O(1). Nothing the size of the walk so
--   far goes into a query: that made a level cost what every level before it had
--   reached, and a chain's closure quadratic.
--   Cost: O(r log n) for the r nodes reached (one index descent each), plus a query per
--   level, plus the array up to the farthest node reached.
CREATE OR REPLACE FUNCTION cwstore._walk(p_graph_id bigint, p_start bigint, p_up boolean,
                              p_max_depth integer, p_bound bigint, p_target bigint)
RETURNS TABLE (seq bigint, depth integer, via bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_mark boolean[] := '{}';  -- v_mark[|s - start|] once s is reached, false before
  v_level bigint[] := ARRAY[p_start];
  v_next bigint[];
  v_hood bigint[];
  v_from bigint[];
  v_at integer;
  d integer := 0;
BEGIN
  IF (p_up AND p_start <= p_bound) OR (NOT p_up AND p_start >= p_bound)
     OR p_max_depth <= 0 THEN
    RETURN;
  END IF;
  WHILE cardinality(v_level) > 0 AND (p_max_depth IS NULL OR d < p_max_depth) LOOP
    d := d + 1;
    IF p_up THEN
      SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'), coalesce(array_agg(x.v ORDER BY x.s), '{}')
        INTO v_hood, v_from
        FROM (SELECT e.parent_seq AS s, min(e.child_seq) AS v FROM cwstore.edges e
               WHERE e.graph_id = p_graph_id AND e.child_seq = ANY (v_level)
                 AND e.parent_seq >= p_bound
               GROUP BY e.parent_seq) x;
    ELSE
      SELECT coalesce(array_agg(x.s ORDER BY x.s), '{}'), coalesce(array_agg(x.v ORDER BY x.s), '{}')
        INTO v_hood, v_from
        FROM (SELECT e.child_seq AS s, min(e.parent_seq) AS v FROM cwstore.edges e
               WHERE e.graph_id = p_graph_id AND e.parent_seq = ANY (v_level)
                 AND e.child_seq <= p_bound
               GROUP BY e.child_seq) x;
    END IF;
    depth := d;
    v_next := '{}';
    FOR i IN 1 .. cardinality(v_hood) LOOP
      v_at := abs(v_hood[i] - p_start)::integer;
      IF v_at > cardinality(v_mark) THEN  -- grown by doubling: amortized O(1) a node
        v_mark := v_mark || array_fill(false, ARRAY[greatest(v_at, 2 * cardinality(v_mark), 64)
                                                    - cardinality(v_mark)]);
      END IF;
      CONTINUE WHEN v_mark[v_at];
      v_mark[v_at] := true;
      seq := v_hood[i];
      via := v_from[i];
      v_next := v_next || seq;
      RETURN NEXT;
    END LOOP;
    v_level := v_next;
    EXIT WHEN p_target IS NOT NULL AND p_target = ANY (v_level);
  END LOOP;
END $$;

COMMENT ON FUNCTION cwstore._walk(bigint, bigint, boolean, integer, bigint, bigint) IS
  'Private: breadth-first walk over edges from one node (up = to parents), minimal depth and predecessor per node reached.';

-- _walk_nodes(graph_id, start, up, max_depth, bound) -> (seq, id, kind, depth)
--   The nodes _walk reaches (no target), with their id and kind, ordered by depth, then
--   seq. The walk is read into arrays by a statement of its own before the nodes are
--   joined: a statement that both calls _walk and reads nodes would, on Citus, run
--   _walk on the graph's worker, where its own queries of the distributed edges are
--   refused (a distributed query inside one already on a shard).
CREATE OR REPLACE FUNCTION cwstore._walk_nodes(p_graph_id bigint, p_start bigint, p_up boolean,
                                    p_max_depth integer, p_bound bigint)
RETURNS TABLE (seq bigint, id text, kind text, depth integer)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_seqs bigint[];
  v_depths integer[];
BEGIN
  SELECT coalesce(array_agg(w.seq ORDER BY w.depth, w.seq), '{}'),
         coalesce(array_agg(w.depth ORDER BY w.depth, w.seq), '{}')
    INTO v_seqs, v_depths
    FROM cwstore._walk(p_graph_id, p_start, p_up, p_max_depth, p_bound, NULL) w;
  RETURN QUERY
  SELECT u.seq, n.id, n.kind, u.depth
    FROM unnest(v_seqs, v_depths) WITH ORDINALITY AS u(seq, depth, ord)
    JOIN LATERAL (SELECT n.id, n.kind FROM cwstore.nodes n
                   WHERE n.graph_id = p_graph_id AND n.seq = u.seq LIMIT 1) n ON true
   ORDER BY u.ord;
END $$;

COMMENT ON FUNCTION cwstore._walk_nodes(bigint, bigint, boolean, integer, bigint) IS
  'Private: the nodes of a _walk (seq, id, kind, depth), ordered by depth, seq.';

-- frontier_at(graph, s) -> (position, seq, id, kind)
--   The frontier (active heads) after node s, in the order the heads joined (position
--   from 0): the frontier declared at s or derived by SPEC 4's fold from the last
--   declared one, as materialized in frontier_spans. s NULL = now.
--   Cost: now O(h) (partial index on current spans); at s O(log n + h) (GiST), plus
--   one primary-key lookup per head for id and kind.
CREATE OR REPLACE FUNCTION cwstore.frontier_at(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS TABLE ("position" integer, seq bigint, id text, kind text)
LANGUAGE plpgsql STABLE ROWS 4 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  RETURN QUERY
  SELECT f.position, f.seq, n.id, n.kind
    FROM cwstore._frontier_at(g.graph_id, cwstore._at(p_seq, g.length)) f
    JOIN LATERAL (SELECT n.id, n.kind FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = f.seq LIMIT 1) n ON true
   ORDER BY f.position;
END $$;

COMMENT ON FUNCTION cwstore.frontier_at(text, bigint) IS
  'Frontier (active heads) of a graph after node s (NULL = now), in order: position from 0, seq, id, kind. O(log n + heads).';

-- heads_at(graph, s) -> (key, version, seq, id, kind)
--   Every resource key's head after node s (semantic keys included, as
--   "semantic:<type>:<key>"), with its version number counted from 1 along the chain.
--   Keys in byte order. s NULL = now. Keys that first appear after s are absent.
--   Cost: now O(k); at s O(k log n) (one descent of key_versions_seq_idx per key).
CREATE OR REPLACE FUNCTION cwstore.heads_at(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS TABLE (key text, version integer, seq bigint, id text, kind text)
LANGUAGE plpgsql STABLE ROWS 100 SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
BEGIN
  RETURN QUERY
  SELECT h.key, h.version, h.seq, n.id, n.kind
    FROM cwstore._heads_at(g.graph_id, cwstore._at(p_seq, g.length), false) h
    JOIN LATERAL (SELECT n.id, n.kind FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = h.seq LIMIT 1) n ON true
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
CREATE OR REPLACE FUNCTION cwstore.semantic_at(p_graph text, p_seq bigint DEFAULT NULL)
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
    JOIN LATERAL (SELECT n.id, n.kind, n.payload_text FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = h.seq LIMIT 1) n ON true
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
CREATE OR REPLACE FUNCTION cwstore.ancestors(p_graph text, p_node_id text, p_max_depth integer DEFAULT NULL)
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
  SELECT * FROM cwstore._walk_nodes(g.graph_id, v_seq, true, p_max_depth, 1);
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
CREATE OR REPLACE FUNCTION cwstore.descendants(p_graph text, p_node_id text, p_max_depth integer DEFAULT NULL)
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
  SELECT * FROM cwstore._walk_nodes(g.graph_id, v_seq, false, p_max_depth, g.length);
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
CREATE OR REPLACE FUNCTION cwstore.path(p_graph text, p_from_id text, p_to_id text)
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
    JOIN LATERAL (SELECT n.id, n.kind FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = u.s LIMIT 1) n ON true
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
CREATE OR REPLACE FUNCTION cwstore.key_history(p_graph text, p_key text)
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
    JOIN LATERAL (SELECT n.id, n.kind, n.created_at, n.recorded_at, n.payload_text
                    FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = v.node_seq LIMIT 1) n ON true
   WHERE v.graph_id = g.graph_id AND v.key = p_key
   ORDER BY v.version;
END $$;

COMMENT ON FUNCTION cwstore.key_history(text, text) IS
  'Every version of a resource key, oldest first: version, seq, id, kind, created_at, recorded_at, payload (jsonb), payload_text (exact).';

-- export_parts_v1(graph, s, t, part_bytes) -> (length, seq, part, nodes, frontier)
--   export_v1 as several rows, so a graph whose JSON exceeds what one text value holds
--   (1 GB) still exports: the first row (part -1) carries length, seq and the frontier;
--   each following row a part of the nodes array, nodes in order, joined by commas,
--   about part_bytes each (a part ends after the node that reaches the size). A client
--   writes '[' || the parts joined by ',' || ']'. One statement, so one snapshot. When
--   s is beyond the graph's length, the first row alone, with a NULL frontier.
CREATE OR REPLACE FUNCTION cwstore.export_parts_v1(p_graph text, p_seq bigint DEFAULT NULL,
                                        p_time timestamptz DEFAULT NULL,
                                        p_part_bytes bigint DEFAULT 67108864)
RETURNS TABLE (length bigint, seq bigint, part bigint, nodes text, frontier text[])
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
    RETURN QUERY SELECT g.length, v_seq, -1::bigint, NULL::text, NULL::text[];
    RETURN;
  END IF;
  RETURN QUERY
  SELECT g.length, v_seq, -1::bigint, NULL::text,
         CASE WHEN v_seq = 0 THEN '{}'::text[] ELSE
           ARRAY(SELECT n.id FROM cwstore._frontier_at(g.graph_id, v_seq) f
                   JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                                  WHERE n.graph_id = g.graph_id AND n.seq = f.seq
                                  LIMIT 1) n ON true
                  ORDER BY f.position) END;
  RETURN QUERY
  SELECT g.length, v_seq, c.part, string_agg(c.node_json, ',' ORDER BY c.seq), NULL::text[]
    FROM (SELECT j.seq, j.node_json,
                 (sum(octet_length(j.node_json)) OVER (ORDER BY j.seq)
                  - octet_length(j.node_json)) / greatest(p_part_bytes, 1) AS part
            FROM (SELECT n.seq, cwstore.node_json(n.id, n.kind, n.parents, n.payload_text,
                                                  n.created_at_text, n.seq, n.resource_key)
                           AS node_json
                    FROM cwstore.nodes n WHERE n.graph_id = g.graph_id AND n.seq <= v_seq
                  OFFSET 0) j) c
   GROUP BY c.part
   ORDER BY c.part;
END $$;

COMMENT ON FUNCTION cwstore.export_parts_v1(text, bigint, timestamptz, bigint) IS
  'export_v1 in rows: part -1 carries (length, seq, frontier), parts 0.. the nodes array''s text in order, about part_bytes each, so graphs over 1 GB export. One snapshot.';

-- export_v1(graph, s, t) -> (length, seq, nodes, frontier)
--   The graph as of node s, or as of time t (the last node whose createdAt <= t), or now
--   when both are NULL: nodes is the JSON array text of nodes 1..seq, frontier the ids
--   of the frontier in force there. When s is beyond the graph's length, nodes and
--   frontier are NULL and length tells the client why. One statement, one snapshot.
--   CW404 for an unknown graph (or one of another tenant).
--   It is export_parts_v1 in one part: one text value, so at most 1 GB (the clients
--   read export_parts_v1).
CREATE OR REPLACE FUNCTION cwstore.export_v1(p_graph text, p_seq bigint DEFAULT NULL,
                                  p_time timestamptz DEFAULT NULL)
RETURNS TABLE (length bigint, seq bigint, nodes text, frontier text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH p AS (SELECT * FROM cwstore.export_parts_v1(p_graph, p_seq, p_time,
                                                   4611686018427387904))
  SELECT h.length, h.seq,
         CASE WHEN h.frontier IS NOT NULL THEN
           '[' || coalesce((SELECT string_agg(x.nodes, ',' ORDER BY x.part) FROM p x
                             WHERE x.part >= 0), '') || ']' END,
         h.frontier
    FROM p h WHERE h.part = -1
$$;

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
CREATE OR REPLACE FUNCTION cwstore.projection_v1(p_graph text, p_seq bigint DEFAULT NULL)
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
      JOIN LATERAL (SELECT n.id, n.kind, n.payload_text FROM cwstore.nodes n
                     WHERE n.graph_id = g.graph_id AND n.seq = h.seq LIMIT 1) n ON true
  )
  SELECT '{"length":' || v_len
    || ',"frontier":[' || coalesce((
      SELECT string_agg('{"id":"' || n.id || '","kind":"' || n.kind || '","seq":' || n.seq
                        || ',"payload":' || n.payload_text || '}', ',' ORDER BY f.position)
        FROM cwstore._frontier_at(g.graph_id, v_at) f
        JOIN LATERAL (SELECT n.id, n.kind, n.seq, n.payload_text FROM cwstore.nodes n
                       WHERE n.graph_id = g.graph_id AND n.seq = f.seq LIMIT 1) n ON true), '')
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

-- From 80_listeners.sql.

-- feed_horizon() -> xid
--   The all-graphs feed (tail_all_v1) reads rows whose xid is below this: every
--   transaction of this database that may write nodes and is still running has an xid
--   at or above it, and so does every transaction that starts later. A node's xid is
--   at least its writing transaction's (append_v1, import_rows_v1), so no node below
--   the horizon can still commit: a reader that follows by xid never skips one.
--   Only transactions of roles that may write cwstore nodes count (superusers, members
--   of the schema's owner or of cwstore_writer, roles with EXECUTE on the write API or
--   INSERT on cwstore.nodes), in this database, prepared ones included: a transaction of
--   any other role, or in another database, does not hold the feed back. A writer that
--   keeps a transaction with an xid open does, until it ends; idle_in_transaction_session_timeout
--   on writer roles bounds that.
--   Call it in its own statement, before the statement that reads nodes: that one's
--   snapshot must come after it (READ COMMITTED).
CREATE OR REPLACE FUNCTION cwstore.feed_horizon() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_xmax bigint := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
  v_min bigint;
BEGIN
  PERFORM pg_catalog.pg_stat_clear_snapshot();
  WITH running AS (
    SELECT l.transactionid::text::bigint AS xid32, a.usesysid AS role
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
       AND a.datname = pg_catalog.current_database()
    UNION ALL
    SELECT p.transaction::text::bigint, r.oid
      FROM pg_catalog.pg_prepared_xacts p JOIN pg_catalog.pg_roles r ON r.rolname = p.owner
     WHERE p.database = pg_catalog.current_database()
  ), writers AS (
    SELECT x.xid32 FROM running x
     WHERE pg_catalog.pg_has_role(x.role, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                            WHERE n.nspname = 'cwstore'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = x.role AND r.rolsuper)
        OR CASE WHEN pg_catalog.to_regrole('cwstore_writer') IS NULL THEN false
                ELSE pg_catalog.pg_has_role(x.role, pg_catalog.to_regrole('cwstore_writer'),
                                            'MEMBER') END
        OR (pg_catalog.has_schema_privilege(x.role, 'cwstore', 'USAGE')
            AND (pg_catalog.has_function_privilege(x.role,
                   'cwstore.append_v1(text, json, bigint, json, bigint)', 'EXECUTE')
                 OR pg_catalog.has_table_privilege(x.role, 'cwstore.nodes', 'INSERT')))
  )
  -- A 32-bit xid of a running transaction is within 2^31 below the next one: widen it
  -- with the epoch of xmax.
  SELECT min(CASE WHEN (v_xmax >> 32 << 32) + w.xid32 > v_xmax
                  THEN (v_xmax >> 32 << 32) + w.xid32 - 4294967296
                  ELSE (v_xmax >> 32 << 32) + w.xid32 END)
    INTO v_min FROM writers w;
  RETURN least(v_xmax, v_min);
END $$;

COMMENT ON FUNCTION cwstore.feed_horizon() IS
  'The xid below which no node can still commit: the oldest running transaction of a role that may write cwstore nodes in this database, else the next xid. tail_all_v1 reads below it.';

-- _erasure_events(xid, graph_id, seq, horizon, limit) -> (xid, graph_id) of the
--   erasures after the cursor and below the horizon, of the tenants the login role may
--   read, in cursor order (an erasure sits at seq infinity_seq(), after every node of its
--   xid and graph). Runs as the owner: the audit record is not the readers' to read, the
--   fact that a graph they could read is gone is.
CREATE OR REPLACE FUNCTION cwstore._erasure_events(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                        p_horizon bigint, p_limit integer)
RETURNS TABLE (xid bigint, graph_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT e.xid, e.graph_id FROM cwstore.erasures e
   WHERE e.xid >= p_xid
     AND (e.xid, e.graph_id, cwstore.infinity_seq()) > (p_xid, p_graph_id, p_seq)
     AND e.xid < p_horizon AND cwstore._may_use(e.tenant)
   ORDER BY e.xid, e.graph_id LIMIT p_limit
$$;

-- _tail_all(xid, graph_id, seq, limit, max_bytes, erasures) -> nodes of every graph the
--   caller may read, and with erasures also the erasure events: up to limit rows after
--   the cursor (xid, graph_id, seq), in cursor order, only below feed_horizon()
--   (computed first, in a statement of its own, so the read's snapshot comes after it),
--   and no more than max_bytes of payload text past the first row (NULL: no byte
--   bound). Runs as the caller: row-level security decides which nodes it sees. In a
--   REPEATABLE READ or SERIALIZABLE transaction the read's snapshot is the
--   transaction's, so the horizon is held to that snapshot's xmin as well.
--   Refused where cwstore.nodes is distributed by Citus (0A000): transaction ids and the
--   horizon are each node's own there, so a cursor by xid would skip or repeat nodes
--   across workers (docs/scaling.md says what to follow instead).
CREATE OR REPLACE FUNCTION cwstore._tail_all(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                  p_limit integer, p_max_bytes bigint, p_erasures boolean)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text,
               erased boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_horizon bigint;
  v_spread boolean := false;
BEGIN
  IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition'
            ' WHERE logicalrelid = ''cwstore.nodes''::regclass)' INTO v_spread;
  END IF;
  IF v_spread THEN
    RAISE EXCEPTION USING ERRCODE = '0A000',
      MESSAGE = 'the all-graphs feed (tail_all) is not available on Citus: transaction ids are per node, so its cursor could skip or repeat nodes across workers',
      HINT = 'Follow each graph with tail (its sequence is exact on any node); see docs/scaling.md';
  END IF;
  v_horizon := cwstore.feed_horizon();
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    v_horizon := least(v_horizon,
      pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::bigint);
  END IF;
  RETURN QUERY
  SELECT x.xid, x.graph_id, x.name, x.seq, x.id, x.kind, x.parents, x.payload_text,
         x.created_at_text, x.resource_key, x.erased
    FROM (SELECT l.*, sum(coalesce(octet_length(l.payload_text), 0))
                        OVER (ORDER BY l.xid, l.graph_id, l.seq)
                      - coalesce(octet_length(l.payload_text), 0) AS before
            FROM (SELECT * FROM (
                    SELECT n.xid, n.graph_id, g.name, n.seq, n.id, n.kind, n.parents,
                           n.payload_text, n.created_at_text, n.resource_key, false AS erased
                      FROM cwstore.nodes n JOIN cwstore.graphs g ON g.graph_id = n.graph_id
                     WHERE n.xid >= p_xid
                       AND (n.xid, n.graph_id, n.seq) > (p_xid, p_graph_id, p_seq)
                       AND n.xid < v_horizon
                     ORDER BY n.xid, n.graph_id, n.seq
                     LIMIT p_limit) nodes
                  UNION ALL
                  SELECT e.xid, e.graph_id, NULL, cwstore.infinity_seq(), NULL, NULL, NULL,
                         NULL, NULL, NULL, true
                    FROM cwstore._erasure_events(p_xid, p_graph_id, p_seq, v_horizon, p_limit) e
                   WHERE p_erasures
                  ORDER BY 1, 2, 4
                  LIMIT p_limit) l) x
   WHERE p_max_bytes IS NULL OR x.before = 0 OR x.before < p_max_bytes
   ORDER BY x.xid, x.graph_id, x.seq;
END $$;

-- tail_all_v1(xid, graph_id, seq, limit, max_bytes) -> the nodes of the all-graphs feed
--   (_tail_all without erasure events): what a follower that predates erasure reads.
CREATE OR REPLACE FUNCTION cwstore.tail_all_v1(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text)
LANGUAGE sql VOLATILE AS $$
  SELECT t.xid, t.graph_id, t.name, t.seq, t.id, t.kind, t.parents, t.payload_text,
         t.created_at_text, t.resource_key
    FROM cwstore._tail_all(p_xid, p_graph_id, p_seq, p_limit, p_max_bytes, false) t
$$;

COMMENT ON FUNCTION cwstore.tail_all_v1(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed: up to limit nodes (and max_bytes of payload past the first) after cursor (xid, graph_id, seq) that can no longer be overtaken (below feed_horizon()), in order; what the caller may read. No erasure events: tail_all_v2 has them.';

-- tail_all_v2(xid, graph_id, seq, limit, max_bytes) -> the all-graphs feed with its
--   erasure events: a row with erased true (seq infinity_seq(), name and node columns
--   NULL) where a graph the caller may read was erased, after every node of the erased
--   life and before any node of a later one (_check_after_erasure keeps those after).
CREATE OR REPLACE FUNCTION cwstore.tail_all_v2(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text,
               erased boolean)
LANGUAGE sql VOLATILE AS $$
  SELECT * FROM cwstore._tail_all(p_xid, p_graph_id, p_seq, p_limit, p_max_bytes, true)
$$;

COMMENT ON FUNCTION cwstore.tail_all_v2(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed with erasure events: up to limit rows after cursor (xid, graph_id, seq), nodes and erasures (erased true, seq infinity) of graphs the caller may read, in order, below feed_horizon().';

-- From 90_erasure.sql.

-- 90_erasure: forgetting on request. A graph is erased whole, in one transaction, by
-- inserting its audit record in cwstore.erasures: the record's trigger locks the
-- graph's row (waiting for appends in flight), fills the record from it and removes
-- every row of the graph from every table. It runs at trigger depth 1, where the guards
-- of 30_guards.sql let removals through; nothing else removes history, and nothing
-- removes it without a record. The public functions decide who may erase, and which
-- graphs (by name, by tenant, by idleness), in batches a caller repeats. docs/erasure.md
-- says what is kept and why.
--
-- Who may erase: unrestricted roles (cwstore.sees_all), and members of the group role
-- cwstore_admin for the tenants they belong to (the membership that lets them read and
-- write those graphs). Another tenant's graph reads as no graph at all (CW404, the
-- answer a read gets).
--
-- SQLSTATEs raised: CW404 (unknown graph, or erased meanwhile: DETAIL {"graph",
-- "erased"} / {"graph_id"}), 42501 (a role that may not erase; DETAIL {"graph" or
-- "tenant", "role"}), 22023 (a bad interval or batch).

-- _erasure_recorded (BEFORE INSERT on erasures, per row): the erasure itself. The
-- inserted row names the graph's key and the life to erase (incarnation): that life's
-- row is locked, and only that life is erased; when it is gone (erased meanwhile, even
-- if another life or another graph holds the key by now), CW404. Whatever else the
-- inserted row says, the record holds what was erased: the graph's tenant and node
-- count, and its xid in the all-graphs feed (after the graph's last node's, like a
-- node's own). When and by whom are what the statement gives (the columns' defaults,
-- now() and session_user, unless _erase names the role).
CREATE OR REPLACE FUNCTION cwstore._erasure_recorded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g record;
BEGIN
  SELECT x.name, x.length, x.tenant, x.key_probe INTO g
    FROM cwstore.graphs x
   WHERE x.graph_id = NEW.graph_id AND x.incarnation = NEW.incarnation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s (life %s) does not exist', NEW.graph_id, NEW.incarnation),
      DETAIL = jsonb_build_object('graph_id', NEW.graph_id)::text;
  END IF;
  NEW.tenant := g.tenant;
  NEW.nodes := g.length;
  NEW.xid := greatest(pg_catalog.pg_current_xact_id()::text::bigint,
                      (SELECT n.xid FROM cwstore.nodes n
                        WHERE n.graph_id = NEW.graph_id AND n.seq = g.length));
  DELETE FROM cwstore.edges WHERE graph_id = NEW.graph_id;
  -- Open spans by their partial btree, closed ones by the box index: a box covering
  -- every sequence of the graph (neither index serves graph_id = alone).
  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq();
  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq <> cwstore.infinity_seq()
     AND cwstore.span_band(graph_id, from_seq, to_seq)
         && cwstore.span_band(NEW.graph_id, 0, cwstore.infinity_seq());
  DELETE FROM cwstore.frontier_declarations WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.key_versions WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.key_heads WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.kind_counts WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.nodes WHERE graph_id = NEW.graph_id;
  -- A statement per key passed over: each names its key (its one shard on Citus).
  FOR p IN 0 .. g.key_probe - 1 LOOP
    DELETE FROM cwstore.graph_key_detours
     WHERE slot = cwstore.graph_key(g.name, p) AND graph_id = NEW.graph_id;
  END LOOP;
  DELETE FROM cwstore.graphs WHERE graph_id = NEW.graph_id;
  IF EXISTS (SELECT 1 FROM cwstore.listeners) THEN
    PERFORM pg_notify('cwstore', NEW.graph_id || ':erased');
  END IF;
  RETURN NEW;
END $$;

-- may_erase(role, tenant): whether a role may erase the graphs of a tenant.
CREATE OR REPLACE FUNCTION cwstore.may_erase(p_role name, p_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT cwstore.sees_all(p_role)
      OR (pg_catalog.to_regrole('cwstore_admin') IS NOT NULL
          AND pg_catalog.pg_has_role(p_role, pg_catalog.to_regrole('cwstore_admin'), 'MEMBER')
          AND EXISTS (SELECT 1 FROM cwstore.tenants_of(p_role) t WHERE t = p_tenant))
$$;

COMMENT ON FUNCTION cwstore.may_erase(name, text) IS
  'Whether a role may erase the graphs of a tenant: an unrestricted role, or a member of cwstore_admin that belongs to the tenant.';

-- _erase(graph_id, incarnation, reason) -> nodes erased: the record, and so the erasure
-- of that life of the graph (CW404 when it is gone). The login role is read here, where
-- the call was made (on Citus the record's trigger runs on a worker, as the cluster's
-- own connection).
CREATE OR REPLACE FUNCTION cwstore._erase(p_graph_id bigint, p_incarnation bigint, p_reason text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_by name := session_user;
  v_nodes bigint;
BEGIN
  INSERT INTO cwstore.erasures (graph_id, incarnation, tenant, nodes, erased_by, reason, xid)
  VALUES (p_graph_id, p_incarnation, '', 0, v_by, p_reason, 0)
  RETURNING nodes INTO v_nodes;
  RETURN v_nodes;
END $$;

-- erase_graph_v1(graph, reason) -> nodes erased
--   Erases one graph, recorded with the reason given. Unknown, or of a tenant the
--   caller is not in: CW404, as a read. A role that may read it but not erase it:
--   42501. Erased by another call meanwhile: CW404 (erased), even when the name has a
--   new graph by then (that one is not erased: the call erases the life it checked).
--   Waits for the appends and imports in flight on the graph; the writers that come
--   after get CW404.
CREATE OR REPLACE FUNCTION cwstore.erase_graph_v1(p_graph text, p_reason text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v record := cwstore._writer_graph(p_graph);
BEGIN
  IF v.found_id IS NULL
     OR (session_user <> current_user AND NOT cwstore._may_use(v.found_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
  IF NOT cwstore.may_erase(session_user, v.found_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not erase graph %L: erasing needs membership in cwstore_admin',
                       session_user, left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text;
  END IF;
  BEGIN
    RETURN cwstore._erase(v.found_id, v.found_incarnation, p_reason);
  EXCEPTION WHEN SQLSTATE 'CW404' THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END;
  RETURN NULL;
END $$;

COMMENT ON FUNCTION cwstore.erase_graph_v1(text, text) IS
  'Erase a graph: every row of it in every cwstore table, in this transaction, with an audit record in cwstore.erasures (no content, no name). Returns how many nodes it held.';

-- erase_tenant_v1(tenant, reason, batch) -> (graph, nodes) of each graph erased
--   Erases up to batch graphs of the tenant, each recorded; call it until it returns
--   no row. The call that finds no graph left also removes the tenant's memberships
--   (tenant_members). A tenant the caller may not erase: 42501. Each graph is erased in
--   the life listed (of this tenant): one erased meanwhile is skipped, even when its
--   name has a new graph by then, of this tenant or another.
CREATE OR REPLACE FUNCTION cwstore.erase_tenant_v1(p_tenant text, p_reason text DEFAULT NULL,
                                        p_batch integer DEFAULT 100)
RETURNS TABLE (graph text, nodes bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
BEGIN
  PERFORM cwstore._check_batch(p_batch);
  IF NOT cwstore.may_erase(session_user, p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not erase tenant %L: erasing needs membership in cwstore_admin and in the tenant',
                       session_user, left(p_tenant, 200)),
      DETAIL = jsonb_build_object('tenant', p_tenant, 'role', session_user)::text;
  END IF;
  FOR r IN SELECT g.graph_id, g.name, g.incarnation FROM cwstore.graphs g
            WHERE g.tenant = p_tenant ORDER BY g.graph_id LIMIT p_batch LOOP
    BEGIN
      graph := r.name;
      nodes := cwstore._erase(r.graph_id, r.incarnation, p_reason);
      RETURN NEXT;
    EXCEPTION WHEN SQLSTATE 'CW404' THEN
      NULL;  -- erased by another call meanwhile
    END;
  END LOOP;
  IF NOT FOUND THEN
    DELETE FROM cwstore.tenant_members m WHERE m.tenant = p_tenant;
  END IF;
END $$;

COMMENT ON FUNCTION cwstore.erase_tenant_v1(text, text, integer) IS
  'Erase up to batch graphs of a tenant (each recorded in cwstore.erasures); call until no row. The call that finds none left removes the tenant''s memberships.';

CREATE OR REPLACE FUNCTION cwstore._check_batch(p_batch integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_batch IS NULL OR p_batch < 1 OR p_batch > 10000 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('a batch is 1 to 10000 graphs, got %s', coalesce(p_batch::text, 'NULL')),
      DETAIL = jsonb_build_object('batch', p_batch)::text;
  END IF;
END $$;

-- _check_idle(idle): 22023 unless idle is an interval >= 0.
CREATE OR REPLACE FUNCTION cwstore._check_idle(p_idle interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_idle IS NULL OR p_idle < interval '0' THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('an idle time is an interval >= 0, got %s', coalesce(p_idle::text, 'NULL')),
      DETAIL = jsonb_build_object('idle', p_idle::text)::text;
  END IF;
END $$;

-- Retention. A graph is idle since its written_at: the time of the last statement of its
-- last write (40_derive.sql), or its creation when it holds no node. A retention group
-- (graphs.retention_group, within a tenant) is idle when every graph of it is, and is
-- erased whole or not at all.

-- _idle(idle, tenant, all, tenants, after, limit) -> up to limit (NULL: every) graphs
--   with a key above after, idle longer than idle, of the tenant (every tenant when
--   NULL) and of the tenants given (all of them when all), in key order; a graph of a
--   group only when no graph of its group was written since. Cost: a scan of graphs
--   (no node read). plpgsql: Citus cannot plan a SQL function's parameterized query
--   over distributed tables; the group test is an uncorrelated subquery for the same
--   reason.
CREATE OR REPLACE FUNCTION cwstore._idle(p_idle interval, p_tenant text, p_all boolean,
                              p_tenants text[], p_after bigint, p_limit integer)
RETURNS TABLE (graph_id bigint, graph text, tenant text, length bigint,
               last_write timestamptz, retention_group text, incarnation bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN QUERY
  SELECT g.graph_id, g.name, g.tenant, g.length, g.written_at, g.retention_group,
         g.incarnation
    FROM cwstore.graphs g
   WHERE g.graph_id > p_after
     AND (p_tenant IS NULL OR g.tenant = p_tenant)
     AND (p_all OR g.tenant = ANY (p_tenants))
     AND g.written_at < now() - p_idle
     AND (g.retention_group IS NULL
          OR (g.tenant, g.retention_group) NOT IN (
               SELECT o.tenant, o.retention_group FROM cwstore.graphs o
                WHERE o.retention_group IS NOT NULL AND o.written_at >= now() - p_idle))
   ORDER BY g.graph_id
   LIMIT p_limit;
END $$;

-- _erasable_tenants() -> the tenants the login role may erase; NULL: every tenant.
CREATE OR REPLACE FUNCTION cwstore._erasable_tenants() RETURNS text[]
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN cwstore.sees_all(session_user) THEN NULL
              ELSE ARRAY(SELECT t FROM cwstore.tenants_of(session_user) t
                          WHERE cwstore.may_erase(session_user, t)) END
$$;

-- idle_graphs_v1(idle, tenant) -> what erase_idle_v1 would erase now (a dry run).
CREATE OR REPLACE FUNCTION cwstore.idle_graphs_v1(p_idle interval, p_tenant text DEFAULT NULL)
RETURNS TABLE (graph text, tenant text, length bigint, last_write timestamptz,
               retention_group text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_tenants text[] := cwstore._erasable_tenants();
BEGIN
  PERFORM cwstore._check_idle(p_idle);
  RETURN QUERY
  SELECT i.graph, i.tenant, i.length, i.last_write, i.retention_group
    FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, -1, NULL) i;
END $$;

COMMENT ON FUNCTION cwstore.idle_graphs_v1(interval, text) IS
  'The graphs idle longer than an interval (of a tenant, or every tenant when NULL) that the caller may erase: what erase_idle_v1 would erase. Idle: nothing written since (graphs.written_at), and likewise for every graph of its retention group. Erases nothing.';

-- _lock_idle(graph_id, incarnation, cutoff) -> the graph's row, locked, when it is still
--   that life and written before cutoff; NULL when a writer holds it (SKIP LOCKED: a
--   graph with a write in flight is not idle), it is gone, or it is another life or was
--   written since. A write kept open holds the lock until it ends.
CREATE OR REPLACE FUNCTION cwstore._lock_idle(p_graph_id bigint, p_incarnation bigint,
                                   p_cutoff timestamptz) RETURNS cwstore.graphs
LANGUAGE plpgsql AS $$
DECLARE
  g cwstore.graphs;
BEGIN
  SELECT * INTO g FROM cwstore.graphs x WHERE x.graph_id = p_graph_id FOR UPDATE SKIP LOCKED;
  IF NOT FOUND OR g.incarnation <> p_incarnation OR g.written_at >= p_cutoff THEN
    RETURN NULL;
  END IF;
  RETURN g;
END $$;

-- _lock_idle_group(tenant, group, cutoff) -> every graph of the group, locked (in key
--   order), when every one is idle before cutoff under its lock; an empty array when a
--   graph of the group is being created (the group's lock, _retention_group_lock, is
--   held by its transaction), or any member is locked by a writer or was written since
--   (then nothing of it is erased). The group's lock, taken first and held to the end
--   of the transaction, keeps new members out until the erasure commits. Each member is
--   locked by its key (one shard on Citus).
CREATE OR REPLACE FUNCTION cwstore._lock_idle_group(p_tenant text, p_group text, p_cutoff timestamptz)
RETURNS cwstore.graphs[] LANGUAGE plpgsql AS $$
DECLARE
  v_members cwstore.graphs[] := '{}';
  g cwstore.graphs;
  m record;
BEGIN
  IF NOT cwstore._retention_group_lock(p_tenant, p_group, true) THEN
    RETURN '{}';
  END IF;
  FOR m IN SELECT x.graph_id, x.incarnation FROM cwstore.graphs x
            WHERE x.tenant = p_tenant AND x.retention_group = p_group
            ORDER BY x.graph_id LOOP
    g := cwstore._lock_idle(m.graph_id, m.incarnation, p_cutoff);
    IF g IS NULL THEN
      RETURN '{}';
    END IF;
    v_members := v_members || g;
  END LOOP;
  RETURN v_members;
END $$;

-- erase_idle_v1(idle, tenant, reason, batch) -> the graphs erased
--   Erases up to batch graphs idle longer than idle, each checked again under its lock
--   (a graph written meanwhile, or another life of its name, is kept) and recorded; a
--   graph a writer holds locked is skipped (it is not idle). A retention group is
--   erased whole in one call (even past batch) or not at all: when any graph of it is
--   locked or not idle under the lock, none is. Call it until it returns no row: each
--   call is one short transaction.
CREATE OR REPLACE FUNCTION cwstore.erase_idle_v1(p_idle interval, p_tenant text DEFAULT NULL,
                                      p_reason text DEFAULT NULL, p_batch integer DEFAULT 100)
RETURNS TABLE (graph text, tenant text, nodes bigint, last_write timestamptz,
               retention_group text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_tenants text[] := cwstore._erasable_tenants();
  v_cutoff timestamptz;
  v_after bigint := -1;
  v_left integer := p_batch;
  v_seen text[] := '{}';
  v_found boolean;
  v_unit cwstore.graphs[];
  r record;
  g cwstore.graphs;
BEGIN
  PERFORM cwstore._check_idle(p_idle);
  PERFORM cwstore._check_batch(p_batch);
  v_cutoff := now() - p_idle;
  -- Candidates in key order, a batch at a time, until batch graphs are erased.
  LOOP
    v_found := false;
    FOR r IN SELECT i.graph_id, i.tenant, i.retention_group, i.incarnation
               FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, v_after,
                                  p_batch) i LOOP
      v_found := true;
      v_after := r.graph_id;
      IF r.retention_group IS NULL THEN
        v_unit := ARRAY[cwstore._lock_idle(r.graph_id, r.incarnation, v_cutoff)];
        CONTINUE WHEN v_unit[1] IS NULL;
      ELSE
        CONTINUE WHEN jsonb_build_array(r.tenant, r.retention_group)::text = ANY (v_seen);
        v_seen := v_seen || jsonb_build_array(r.tenant, r.retention_group)::text;
        v_unit := cwstore._lock_idle_group(r.tenant, r.retention_group, v_cutoff);
      END IF;
      FOREACH g IN ARRAY v_unit LOOP
        graph := g.name;
        tenant := g.tenant;
        last_write := g.written_at;
        retention_group := g.retention_group;
        nodes := cwstore._erase(g.graph_id, g.incarnation, p_reason);
        RETURN NEXT;
        v_left := v_left - 1;
      END LOOP;
      IF v_left <= 0 THEN
        RETURN;
      END IF;
    END LOOP;
    EXIT WHEN NOT v_found;
  END LOOP;
END $$;

COMMENT ON FUNCTION cwstore.erase_idle_v1(interval, text, text, integer) IS
  'Erase up to batch graphs idle longer than an interval (of a tenant, or every tenant the caller may erase when NULL), each recorded in cwstore.erasures; a retention group goes whole or not at all. Call until no row.';

-- =================================================================================
-- The rows: every graph rekeyed to the key of its name, its life numbered by its new
-- key, written_at from its last node, its current frontier and watermark from its
-- frontier history (derived through its length). The guards refuse these updates, so
-- the tables' own triggers are off while they run.
-- =================================================================================

ALTER TABLE cwstore.graphs DISABLE TRIGGER USER;
ALTER TABLE cwstore.nodes DISABLE TRIGGER USER;
ALTER TABLE cwstore.edges DISABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_spans DISABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_declarations DISABLE TRIGGER USER;
ALTER TABLE cwstore.key_versions DISABLE TRIGGER USER;
ALTER TABLE cwstore.key_heads DISABLE TRIGGER USER;
ALTER TABLE cwstore.kind_counts DISABLE TRIGGER USER;

-- Each graph's key, in the order the graphs were made: graph_key(name, probe) at the
-- first probe no graph made before it took, as cwstore._create_graph gives one now (two
-- names whose keys collide: the later takes the next key of its chain, and
-- graph_key_detours records the keys it passed over). parked: its key is the graph_id
-- another graph has until it moves, so it moves after every other.
CREATE TEMPORARY TABLE graph_keys_0002 (
  old_id  bigint PRIMARY KEY,
  new_id  bigint NOT NULL UNIQUE,
  probe   integer NOT NULL,
  parked  boolean NOT NULL DEFAULT false
) ON COMMIT DROP;
DO $keys$
DECLARE
  g record;
  v_probe integer;
BEGIN
  FOR g IN SELECT graph_id, name FROM cwstore.graphs ORDER BY graph_id LOOP
    v_probe := 0;
    WHILE EXISTS (SELECT 1 FROM graph_keys_0002 k
                   WHERE k.new_id = cwstore.graph_key(g.name, v_probe)) LOOP
      v_probe := v_probe + 1;
    END LOOP;
    INSERT INTO graph_keys_0002 (old_id, new_id, probe)
    VALUES (g.graph_id, cwstore.graph_key(g.name, v_probe), v_probe);
  END LOOP;
END
$keys$;
UPDATE graph_keys_0002 k SET parked = true
 WHERE k.new_id <> k.old_id
   AND EXISTS (SELECT 1 FROM graph_keys_0002 o WHERE o.old_id = k.new_id);

-- Every table keyed by graph, in three steps so that no row takes a key another row
-- still holds: the parked graphs' rows out of the way (to the negated key; keys are
-- positive), every other graph's rows to its key, then the parked ones to theirs.
DO $rekey$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['nodes', 'edges', 'frontier_spans', 'frontier_declarations',
                           'key_versions', 'key_heads', 'kind_counts', 'graphs'] LOOP
    EXECUTE format('UPDATE cwstore.%I t SET graph_id = -k.new_id FROM graph_keys_0002 k'
                   ' WHERE t.graph_id = k.old_id AND k.parked', t);
    EXECUTE format('UPDATE cwstore.%I t SET graph_id = k.new_id FROM graph_keys_0002 k'
                   ' WHERE t.graph_id = k.old_id AND k.new_id <> k.old_id'
                   ' AND NOT k.parked', t);
    EXECUTE format('UPDATE cwstore.%I t SET graph_id = k.new_id FROM graph_keys_0002 k'
                   ' WHERE t.graph_id = -k.new_id AND k.parked', t);
  END LOOP;
END
$rekey$;
UPDATE cwstore.graphs g SET key_probe = k.probe
  FROM graph_keys_0002 k WHERE g.graph_id = k.new_id AND k.probe > 0;
INSERT INTO cwstore.graph_key_detours (slot, graph_id)
  SELECT cwstore.graph_key(g.name, p), g.graph_id
    FROM cwstore.graphs g, generate_series(0, g.key_probe - 1) AS p
   WHERE g.key_probe > 0;

UPDATE cwstore.graphs g
   SET incarnation = g.graph_id,
       written_at = coalesce((SELECT n.recorded_at FROM cwstore.nodes n
                               WHERE n.graph_id = g.graph_id AND n.seq = g.length),
                             g.created_at),
       frontier_seqs = coalesce((SELECT array_agg(s.head_seq ORDER BY s.from_seq, s.ord)
                                   FROM cwstore.frontier_spans s
                                  WHERE s.graph_id = g.graph_id
                                    AND s.to_seq = cwstore.infinity_seq()), '{}'),
       derived_length = g.length;

ALTER TABLE cwstore.graphs ENABLE TRIGGER USER;
ALTER TABLE cwstore.nodes ENABLE TRIGGER USER;
ALTER TABLE cwstore.edges ENABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_spans ENABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_declarations ENABLE TRIGGER USER;
ALTER TABLE cwstore.key_versions ENABLE TRIGGER USER;
ALTER TABLE cwstore.key_heads ENABLE TRIGGER USER;
ALTER TABLE cwstore.kind_counts ENABLE TRIGGER USER;

-- The defaults of the new columns once the existing rows hold their values (a default
-- given with ADD COLUMN would have filled them from this session's settings).
ALTER TABLE cwstore.graphs
  ALTER COLUMN incarnation SET DEFAULT nextval('cwstore.graph_incarnations'),
  ALTER COLUMN incarnation SET NOT NULL,
  ALTER COLUMN written_at SET DEFAULT clock_timestamp(),
  ALTER COLUMN written_at SET NOT NULL,
  ALTER COLUMN retention_group
    SET DEFAULT nullif(pg_catalog.current_setting('cwstore.retention_group', true), '');

-- =================================================================================
-- Triggers and row security, as sql/schema/ has them.
-- =================================================================================

-- Erasure is the one way rows leave the log (90_erasure.sql): deletes are refused
-- unless a trigger (the erasure's) makes them.
DROP TRIGGER nodes_append_only ON cwstore.nodes;
CREATE TRIGGER nodes_append_only BEFORE UPDATE ON cwstore.nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER nodes_erased_only BEFORE DELETE ON cwstore.nodes
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
DROP TRIGGER edges_append_only ON cwstore.edges;
CREATE TRIGGER edges_append_only BEFORE UPDATE ON cwstore.edges
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_erased_only BEFORE DELETE ON cwstore.edges
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
DROP TRIGGER frontier_declarations_append_only ON cwstore.frontier_declarations;
CREATE TRIGGER frontier_declarations_append_only BEFORE UPDATE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_declarations_erased_only BEFORE DELETE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
DROP TRIGGER graphs_guard_delete ON cwstore.graphs;
DROP TRIGGER graphs_guard ON cwstore.graphs;
CREATE TRIGGER graphs_guard_delete BEFORE DELETE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1 OR NEW.graph_id <> OLD.graph_id
                     OR NEW.incarnation <> OLD.incarnation
                     OR NEW.name <> OLD.name OR NEW.vocabulary IS DISTINCT FROM OLD.vocabulary)
  EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graph_key_detours_derived BEFORE INSERT OR UPDATE OR DELETE
  ON cwstore.graph_key_detours
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER graph_key_detours_no_truncate BEFORE TRUNCATE ON cwstore.graph_key_detours
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER erasures_append_only BEFORE UPDATE OR DELETE ON cwstore.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON cwstore.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();

-- The graph's key (55_graph_keys.sql), the derivation (40_derive.sql), the erasure
-- (90_erasure.sql).
CREATE TRIGGER graphs_key_check BEFORE INSERT OR UPDATE OF graph_id, name, key_probe
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_key();
CREATE TRIGGER graphs_detoured AFTER INSERT ON cwstore.graphs
  FOR EACH ROW WHEN (NEW.key_probe > 0) EXECUTE FUNCTION cwstore._graph_detoured();
CREATE TRIGGER nodes_inserted AFTER INSERT ON cwstore.nodes
  REFERENCING NEW TABLE AS new_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._nodes_inserted();
CREATE TRIGGER graphs_derive_requested AFTER UPDATE OF derived_length ON cwstore.graphs
  FOR EACH ROW WHEN (NEW.derived_length > OLD.derived_length AND pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derive_requested();
CREATE TRIGGER erasures_erase BEFORE INSERT ON cwstore.erasures
  FOR EACH ROW EXECUTE FUNCTION cwstore._erasure_recorded();

-- A policy calls a function instead of a sub-select (50_tenancy.sql): the same rows,
-- and a distributed PostgreSQL can plan it.
ALTER POLICY graphs_tenant ON cwstore.graphs USING (cwstore._sees_tenant(tenant));
ALTER POLICY nodes_tenant ON cwstore.nodes USING (cwstore._sees_graph(graph_id));
ALTER POLICY edges_tenant ON cwstore.edges USING (cwstore._sees_graph(graph_id));
ALTER POLICY frontier_spans_tenant ON cwstore.frontier_spans
  USING (cwstore._sees_graph(graph_id));
ALTER POLICY frontier_declarations_tenant ON cwstore.frontier_declarations
  USING (cwstore._sees_graph(graph_id));
ALTER POLICY key_versions_tenant ON cwstore.key_versions
  USING (cwstore._sees_graph(graph_id));
ALTER POLICY key_heads_tenant ON cwstore.key_heads
  USING (cwstore._sees_graph(graph_id));
ALTER POLICY kind_counts_tenant ON cwstore.kind_counts
  USING (cwstore._sees_graph(graph_id));
CREATE POLICY erasures_tenant ON cwstore.erasures USING (cwstore._sees_tenant(tenant));

-- =================================================================================
-- The tables' comments, and no planner statistics on content (20_tables.sql).
-- =================================================================================

COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name, key_probe), key_probe 0 unless another name held that key; incarnation tells this life of the graph from a later one of the same name. written_at is when the last write''s last statement moved its length (clock_timestamp(); its creation before any): retention measures idleness from it. retention_group, set at creation from the setting cwstore.retention_group, makes graphs one unit for retention (idle and erased together). frontier_seqs is the current frontier (its heads'' sequences, in order), kept by every write. derived_length is the watermark of frontier_spans, which holds the frontier''s history through node derived_length; reads as of a later node fold the nodes after it (fewer than cwstore.derive_lag()). The row is the per-graph lock of the append path.';
COMMENT ON TABLE cwstore.graph_key_detours IS
  'Keys a graph''s chain passed over: graph graph_id (key_probe > 0) found slot held by another name when it was created, so finding its name goes on past slot even once slot is free. Written when such a graph is created, removed when it is erased.';
COMMENT ON TABLE cwstore.erasures IS
  'The audit record of erased graphs, one row each, append-only: the graph''s key (not its name, often personal data), which life of it, its tenant, how many nodes it held, when, by which login role, the reason given, and xid, its place in the all-graphs feed. Inserting a row is the erasure: its trigger removes the graph (90_erasure.sql). Nothing of the content is kept.';
COMMENT ON TABLE cwstore.frontier_spans IS
  'Frontier history through the graph''s derived_length: node head_seq is a head for sequences from_seq <= s < to_seq. Heads are listed by (from_seq, ord). to_seq = infinity_seq() for heads still open at derived_length. cwstore.frontier_at answers at every s (past the watermark it folds the nodes after it, from the last frontier declared there if any); the current frontier is graphs.frontier_seqs.';
COMMENT ON TABLE cwstore.frontier_declarations IS
  'Frontiers declared by writers (an imported document''s, or one given with an append), exactly as given, at the graph length when declared (the last at a length is the frontier there). One declared past the graph''s derived_length enters frontier_spans when that run is derived.';

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

-- What ANALYZE gathered for these columns before: removed, as the samples it copied may
-- hold content an erasure removes (docs/erasure.md).
DO $$
DECLARE
  c record;
  v_clear boolean := pg_catalog.to_regprocedure(
    'pg_catalog.pg_clear_attribute_stats(text, text, text, boolean)') IS NOT NULL;
  v_left integer := 0;
BEGIN
  FOR c IN SELECT a.attrelid, r.relname, a.attname, a.attnum
             FROM pg_catalog.pg_attribute a
             JOIN pg_catalog.pg_class r ON r.oid = a.attrelid
            WHERE r.relnamespace = 'cwstore'::regnamespace AND r.relkind = 'r'
              AND a.attstattarget = 0 AND a.attnum > 0 AND NOT a.attisdropped
              AND EXISTS (SELECT 1 FROM pg_catalog.pg_statistic s
                           WHERE s.starelid = a.attrelid AND s.staattnum = a.attnum) LOOP
    IF v_clear THEN
      EXECUTE 'SELECT pg_catalog.pg_clear_attribute_stats($1, $2, $3, false)'
        USING 'cwstore', c.relname::text, c.attname::text;
    ELSIF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
      DELETE FROM pg_catalog.pg_statistic s
       WHERE s.starelid = c.attrelid AND s.staattnum = c.attnum;
    ELSE
      v_left := v_left + 1;
    END IF;
  END LOOP;
  IF v_left > 0 THEN
    RAISE WARNING USING
      MESSAGE = format('%s cwstore columns keep planner statistics gathered before this migration, which may hold content of erased graphs', v_left),
      HINT = 'As a superuser: DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = ''cwstore''::regnamespace) AND staattnum IN (SELECT attnum FROM pg_attribute WHERE attrelid = starelid AND attstattarget = 0) (docs/erasure.md)';
  END IF;
END $$;
