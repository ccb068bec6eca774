-- 0001_schema: graphs, the append-only node log, edges, the frontier and resource
-- heads (current and historical), and the triggers that keep them.
--
-- Why: every invariant of an AgentState graph that the database can hold is held here,
-- whoever writes (the Python clients, the TypeScript runtime through pg, psql):
-- append-only history, gapless per-graph sequences, parents that exist, come earlier
-- and are sorted, resource chains that link to the key's head. Derived state (edges,
-- frontier spans, key versions and heads) is written only by the AFTER INSERT
-- statement trigger on nodes, set-based over the transition table, so a bulk COPY is
-- checked and materialized in one pass.
--
-- Safe with live writers: yes (new schema).
--
-- SQLSTATEs raised (DETAIL is a JSON object):
--   CW400 validation (detail: code, index, node_id, path, message)
--   CW403 append-only history touched     CW404 unknown graph
--   CW409 expected length is stale        CW410 chain conflict on a resource key
--   CW412 import into a non-empty graph

CREATE SCHEMA IF NOT EXISTS cwstore;

-- ---------------------------------------------------------------------------------
-- helpers
-- ---------------------------------------------------------------------------------

CREATE FUNCTION cwstore.infinity_seq() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 9223372036854775807::bigint $$;
COMMENT ON FUNCTION cwstore.infinity_seq() IS
  'The to_seq of a span that is still open (a current head).';

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

CREATE FUNCTION cwstore._raise(sqlstate text, message text, detail jsonb) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = sqlstate, MESSAGE = message, DETAIL = detail::text;
END $$;

CREATE FUNCTION cwstore._violation(code text, graph_id bigint, seq bigint, node_id text,
                                   path text, message text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW400', MESSAGE = code || ': ' || message,
    DETAIL = jsonb_build_object('code', code, 'graph_id', graph_id, 'seq', seq,
                                'index', seq - 1, 'node_id', node_id, 'path', path,
                                'message', message)::text;
END $$;

-- ---------------------------------------------------------------------------------
-- tables
-- ---------------------------------------------------------------------------------

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
  CONSTRAINT nodes_pkey PRIMARY KEY (graph_id, seq),
  CONSTRAINT nodes_id_key UNIQUE (graph_id, id),
  CONSTRAINT nodes_seq_check CHECK (seq >= 1),
  CONSTRAINT nodes_id_check CHECK (length(id) = 27 AND left(id, 3) = 'cw_'
                                   AND translate(substr(id, 4), '0123456789abcdef', '') = ''),
  CONSTRAINT nodes_kind_check CHECK (kind IN ('system', 'goal', 'inference', 'answer',
    'tool_call', 'tool_result', 'resource', 'semantic', 'protocol_error', 'verification')),
  CONSTRAINT nodes_created_at_check CHECK (created_at_text ~
    '^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$'),
  CONSTRAINT nodes_resource_key_check CHECK (resource_key <> '')
);
COMMENT ON TABLE cwstore.nodes IS
  'Append-only node log. seq is gapless per graph from 1. payload_text is the exact JSON the runtime wrote (member order, numbers, \u0000), stored once; cwstore.payload_jsonb(payload_text) (the payload column of node_view) is its queryable jsonb, usable in expression indexes. created_at_text is the runtime''s createdAt byte for byte, created_at its parsed value, recorded_at when the database stored the node, xid orders the all-graphs feed: the writing transaction''s 64-bit id, raised when needed to the graph''s previous node''s so it never goes back within a graph (append_v1 does this; see tail_all).';

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
CREATE INDEX frontier_spans_current_idx ON cwstore.frontier_spans (graph_id, head_seq)
  WHERE to_seq = 9223372036854775807;
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

-- ---------------------------------------------------------------------------------
-- guards: history is append-only; derived tables are written by triggers only
-- ---------------------------------------------------------------------------------

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
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER frontier_declarations_append_only BEFORE UPDATE OR DELETE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_declarations_no_truncate BEFORE TRUNCATE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_spans_derived BEFORE INSERT OR UPDATE OR DELETE
  ON cwstore.frontier_spans
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER frontier_spans_no_truncate BEFORE TRUNCATE ON cwstore.frontier_spans
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER key_versions_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.key_versions
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER key_versions_no_truncate BEFORE TRUNCATE ON cwstore.key_versions
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER key_heads_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.key_heads
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER key_heads_no_truncate BEFORE TRUNCATE ON cwstore.key_heads
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER kind_counts_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.kind_counts
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._derived_only();
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

CREATE TRIGGER graphs_guard BEFORE UPDATE OR DELETE ON cwstore.graphs
  FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_guard();

-- ---------------------------------------------------------------------------------
-- the nodes trigger: check and materialize a whole statement's rows at once
-- ---------------------------------------------------------------------------------

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

-- The trigger's statements are planned once per session and the plans kept, so a plan
-- made for a one-node append would be reused for a 100,000-node import and the other
-- way round. Two functions share one body and differ in how they derive: for batches
-- of up to 256 rows (nodes_inserted_small) a loop of short index lookups and writes
-- per node, for larger ones (nodes_inserted_bulk) set-based statements over the whole
-- transition table. Both fire; the one not concerned returns at once. The test suites
-- run both: appends and small imports take the loop, large imports the sets.
DO $do$
DECLARE
  body constant text := $body$
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
  /*SIZE_GUARD*/

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

  /*DERIVE*/

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
    SELECT pg_notify('cwstore', u.graph_id || ':' || u.length) FROM u
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
  derive_bulk constant text := $derive$
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
       AND s.to_seq = 9223372036854775807
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
$derive$;
  derive_small constant text := $derive$
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
           AND to_seq = 9223372036854775807;
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
$derive$;
BEGIN
  EXECUTE format('CREATE FUNCTION cwstore._nodes_inserted_small() RETURNS trigger '
                 'LANGUAGE plpgsql AS %L',
                 replace(replace(body, '/*SIZE_GUARD*/',
                         'IF v_rows > 256 OR v_rows = 0 THEN RETURN NULL; END IF;'),
                         '/*DERIVE*/', derive_small));
  EXECUTE format('CREATE FUNCTION cwstore._nodes_inserted_bulk() RETURNS trigger '
                 'LANGUAGE plpgsql AS %L',
                 replace(replace(body, '/*SIZE_GUARD*/',
                         'IF v_rows <= 256 THEN RETURN NULL; END IF;'),
                         '/*DERIVE*/', derive_bulk));
END
$do$;

-- Bulk imports sort and hash whole batches: give them memory instead of spilling.
ALTER FUNCTION cwstore._nodes_inserted_bulk() SET work_mem = '64MB';

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
   WHERE s.graph_id = NEW.graph_id AND s.to_seq = 9223372036854775807;
  IF coalesce(current_heads, '{}') = NEW.heads THEN
    RETURN NULL;
  END IF;

  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq = 9223372036854775807 AND from_seq = NEW.seq;
  UPDATE cwstore.frontier_spans SET to_seq = NEW.seq
   WHERE graph_id = NEW.graph_id AND to_seq = 9223372036854775807;
  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord)
  SELECT NEW.graph_id, s, NEW.seq, o::integer - 1
    FROM unnest(seqs) WITH ORDINALITY AS u(s, o);
  RETURN NULL;
END $$;

CREATE TRIGGER frontier_declared AFTER INSERT ON cwstore.frontier_declarations
  FOR EACH ROW EXECUTE FUNCTION cwstore._frontier_declared();
