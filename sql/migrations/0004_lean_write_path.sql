-- 0004_lean_write_path: less work per node written, the same rules and the same rows.
--
-- Why: an append's time went less to deriving (edges, frontier, chains, counts) than to
-- what surrounds it (benchmarks/README.md, "The write path"): SQL functions that
-- PostgreSQL calls rather than inlines, planning their bodies again on every statement
-- that calls them (the node table's generated node_json column, its CHECK's
-- node_kinds(), payload_jsonb in the payload check), a second statement trigger fired
-- on every insert only to return, one statement per derived table and node, and the
-- new rows read back to be returned.
--
--   * nodes.node_json is dropped: export builds each node's JSON text as it reads it
--     (cwstore.node_json, now STABLE so that its body is inlined). Each node's text is
--     no longer stored twice.
--   * payload_jsonb is no longer STRICT (NULL still gives NULL), so that calls inline;
--     node_kinds() is plpgsql, whose plan is kept, for the CHECK that folds it on every
--     insert; parse_time reads the runtime's own createdAt form (toISOString) directly.
--   * The two nodes triggers (_nodes_inserted_small, _nodes_inserted_bulk) become one,
--     _nodes_inserted, which derives node by node for up to 3 rows (one statement per
--     node: parents checked, edges, frontier, count) and set-based beyond.
--   * append_v1 stamps recorded_at itself and, when every node of the batch is new and
--     given once, returns the rows from what it wrote instead of reading them back.
--
-- The definitions below are those of cwstore/sql/schema/ (10_helpers, 20_tables,
-- 40_derive, 60_write_api, 70_read_api), where they are documented.
--
-- Safe with live writers: yes, between transactions (the trigger swap happens in this
-- migration's one transaction). On a Citus cluster already distributed (cwstore init
-- --citus), the new trigger is created on the distributed nodes table, which Citus
-- allows only with citus.enable_unsafe_triggers, and its DDL must reach the shards one
-- at a time (citus.multi_shard_modify_mode) to be followed by function definitions in
-- the same transaction: both are set below for this transaction (without Citus they are
-- unused placeholders). cwstore init then re-applies cwstore/sql/citus.sql, whose
-- function settings CREATE OR REPLACE resets.

SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- 20_tables

ALTER TABLE cwstore.nodes DROP COLUMN node_json;

-- 10_helpers

CREATE OR REPLACE FUNCTION cwstore.node_kinds() RETURNS text[]
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN ARRAY['system', 'goal', 'inference', 'answer', 'tool_call', 'tool_result',
               'resource', 'semantic', 'protocol_error', 'verification'];
END $$;

CREATE OR REPLACE FUNCTION cwstore.payload_jsonb(payload_text text) RETURNS jsonb
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE WHEN strpos(payload_text, '\u0000') = 0 THEN payload_text::jsonb
         ELSE replace(replace(replace(payload_text, '\\', E'\x01'), '\u0000', '\ufffd'),
                      E'\x01', '\\')::jsonb END
$$;

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

-- 40_derive

DROP TRIGGER nodes_inserted_small ON cwstore.nodes;
DROP TRIGGER nodes_inserted_bulk ON cwstore.nodes;
DROP FUNCTION cwstore._nodes_inserted_small();
DROP FUNCTION cwstore._nodes_inserted_bulk();

CREATE FUNCTION cwstore._nodes_inserted() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
  r record;
  nd record;
  v_head record;
  v_folds boolean;
  v_rows bigint;
  v_semantic boolean;
  v_keyed boolean;
  v_gid bigint;
  v_vocab text[];
  v_gids bigint[];
  v_los bigint[];
  v_his bigint[];
  v_cnts bigint[];
  v_lo bigint;
  v_hi bigint;
  v_cnt bigint;
  v_work_mem text;
  v_jit text;
BEGIN
  -- The batch's graphs (usually one) with their first and last sequence and count: the
  -- statements below read one graph at a time, never joining this transition table to
  -- another table (Citus cannot plan that join on a shard).
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

  -- Semantic nodes: payload shape, key format, resourceKey, vocabulary.
  IF v_semantic THEN
  FOREACH v_gid IN ARRAY v_gids LOOP
  SELECT g.vocabulary INTO v_vocab FROM cwstore.graphs g WHERE g.graph_id = v_gid;
  SELECT n.graph_id, n.seq, n.id, n.payload, n.resource_key, v_vocab AS vocabulary
    INTO r
    FROM (SELECT n.graph_id, n.seq, n.id, n.resource_key,
                 cwstore.payload_jsonb(n.payload_text) AS payload
            FROM new_nodes n WHERE n.kind = 'semantic' AND n.graph_id = v_gid) n
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
  END LOOP;
  END IF;

  IF v_rows <= 3 THEN
    -- Node by node, in sequence order. Per node one statement checks its parents (in
    -- order: sorted and listed once, existing, earlier), records the edges, moves the
    -- frontier (SPEC 4's fold: semantic nodes and parentless system nodes leave it
    -- alone) and counts the node's kind; a keyed node then checks and moves its chain.
    FOR nd IN SELECT * FROM new_nodes ORDER BY graph_id, seq LOOP
      v_folds := NOT (nd.kind = 'semantic' OR (nd.kind = 'system' AND cardinality(nd.parents) = 0));
      WITH e AS (
        INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
        SELECT nd.graph_id, nd.seq, u.o::integer - 1,
               CASE
                 WHEN u.o > 1 AND nd.parents[u.o - 1] COLLATE "C" >= u.pid COLLATE "C"
                   THEN cwstore._violation('parent_order', nd.graph_id, nd.seq, nd.id,
                     format('$.parents[%s]', u.o - 1), 'parents must be sorted ascending and listed once')
                 WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', nd.graph_id, nd.seq,
                   nd.id, format('$.parents[%s]', u.o - 1), format('parent %s does not exist', u.pid))
                 WHEN m.seq >= nd.seq THEN cwstore._violation('parent_order', nd.graph_id, nd.seq,
                   nd.id, format('$.parents[%s]', u.o - 1),
                   format('parent %s is not earlier in sequence', u.pid))
                 ELSE m.seq
               END
          FROM unnest(nd.parents) WITH ORDINALITY AS u(pid, o)
          LEFT JOIN LATERAL (SELECT m.seq FROM cwstore.nodes m
                              WHERE m.graph_id = nd.graph_id AND m.id = u.pid) m ON true
         ORDER BY u.o
        RETURNING parent_seq),
      closed AS (
        UPDATE cwstore.frontier_spans s SET to_seq = nd.seq
          FROM e
         WHERE v_folds AND s.graph_id = nd.graph_id AND s.head_seq = e.parent_seq
           AND s.to_seq = cwstore.infinity_seq()),
      opened AS (
        INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
        SELECT nd.graph_id, nd.seq, nd.seq, 0, cwstore.infinity_seq() WHERE v_folds)
      INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
      SELECT nd.graph_id, nd.kind, nd.seq,
             coalesce((SELECT k.n FROM cwstore.kind_counts k
                        WHERE k.graph_id = nd.graph_id AND k.kind = nd.kind
                        ORDER BY k.seq DESC LIMIT 1), 0) + 1;

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
          INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
          VALUES (nd.graph_id, nd.resource_key, v_head.version + 1, nd.seq, cwstore.infinity_seq());
        ELSE
          INSERT INTO cwstore.key_heads (graph_id, key, head_seq, head_id, version, first_seq)
          VALUES (nd.graph_id, nd.resource_key, nd.seq, nd.id, 1, nd.seq);
          INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
          VALUES (nd.graph_id, nd.resource_key, 1, nd.seq, cwstore.infinity_seq());
        END IF;
      END IF;
    END LOOP;

  ELSE
    v_work_mem := current_setting('work_mem');
    v_jit := current_setting('jit');
    PERFORM set_config('work_mem', '64MB', true), set_config('jit', 'off', true);
    -- Set-based statements, graph by graph. Each graph's new rows are first read from
    -- the transition table into arrays; the statements then work over unnest() of those
    -- arrays and read and write the tables only where graph_id = the graph (Citus cannot
    -- join a transition table to a distributed table on a shard; so it routes each
    -- statement to the graph's local shard).
    DECLARE
      a_seq bigint[];
      a_id text[];
      a_kind text[];
      a_folds boolean[];
      p_child bigint[];
      p_id text[];
      p_pos integer[];
      p_pid text[];
      p_prev text[];
      p_folds boolean[];
      p_seq bigint[];
      c_parent bigint[];
      c_at bigint[];
      k_key text[];
      k_seq bigint[];
      k_id text[];
      k_parents text[];
      v_key text[];
      v_seq bigint[];
      v_id text[];
      v_version bigint[];
      v_next bigint[];
      v_first bigint[];
      v_rn bigint[];
      v_base bigint[];
      b_kind text[];
      b_n bigint[];
    BEGIN
    FOREACH v_gid IN ARRAY v_gids LOOP
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.kind ORDER BY n.seq),
             array_agg(NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
                       ORDER BY n.seq)
        INTO a_seq, a_id, a_kind, a_folds
        FROM new_nodes n WHERE n.graph_id = v_gid;

      -- Parents: resolve, check existence, order and uniqueness, and record the edges;
      -- then close the frontier spans of parents and open spans for the new heads (SPEC
      -- 4's fold: semantic nodes and parentless system nodes leave the frontier alone).
      SELECT array_agg(n.seq), array_agg(n.id), array_agg(u.ord::integer - 1), array_agg(u.pid),
             array_agg(n.parents[u.ord - 1]),
             array_agg(NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0)))
        INTO p_child, p_id, p_pos, p_pid, p_prev, p_folds
        FROM new_nodes n, unnest(n.parents) WITH ORDINALITY AS u(pid, ord)
       WHERE n.graph_id = v_gid;
      IF p_child IS NOT NULL THEN
        -- Parents in the batch itself are found by a join with it; only the others are
        -- looked up one by one in the index (never a scan of the whole table).
        SELECT array_agg(
                 CASE
                   WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', v_gid,
                     p.child_seq, p.child_id, format('$.parents[%s]', p.position),
                     format('parent %s does not exist', p.pid))
                   WHEN m.seq >= p.child_seq THEN cwstore._violation('parent_order', v_gid,
                     p.child_seq, p.child_id, format('$.parents[%s]', p.position),
                     format('parent %s is not earlier in sequence', p.pid))
                   WHEN p.prev_pid IS NOT NULL AND p.prev_pid COLLATE "C" >= p.pid COLLATE "C"
                     THEN cwstore._violation('parent_order', v_gid, p.child_seq, p.child_id,
                     format('$.parents[%s]', p.position),
                     'parents must be sorted ascending and listed once')
                   ELSE m.seq
                 END ORDER BY p.o)
          INTO p_seq
          FROM unnest(p_child, p_id, p_pos, p_pid, p_prev)
                 WITH ORDINALITY AS p(child_seq, child_id, position, pid, prev_pid, o)
          LEFT JOIN unnest(a_seq, a_id) AS b(seq, id) ON b.id = p.pid
          LEFT JOIN LATERAL (SELECT coalesce(b.seq, (SELECT m.seq FROM cwstore.nodes m
                                                     WHERE m.graph_id = v_gid
                                                       AND m.id = p.pid LIMIT 1)) AS seq) m
            ON true;
        INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
        SELECT v_gid, u.c, u.p, u.s FROM unnest(p_child, p_pos, p_seq) AS u(c, p, s);
        SELECT array_agg(x.parent_seq), array_agg(x.close_seq) INTO c_parent, c_at
          FROM (SELECT u.s AS parent_seq, min(u.c) AS close_seq
                  FROM unnest(p_child, p_seq, p_folds) AS u(c, s, f)
                 WHERE u.f GROUP BY u.s) x;
        -- Only open spans (the partial index), so this join stays small at any size.
        UPDATE cwstore.frontier_spans s SET to_seq = c.close_seq
          FROM unnest(c_parent, c_at) AS c(parent_seq, close_seq)
         WHERE s.graph_id = v_gid AND s.head_seq = c.parent_seq
           AND s.to_seq = cwstore.infinity_seq();
      ELSE
        c_parent := NULL;
        c_at := NULL;
      END IF;
      INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
      SELECT v_gid, n.seq, n.seq, 0, coalesce(c.close_seq, cwstore.infinity_seq())
        FROM unnest(a_seq, a_folds) AS n(seq, folds)
        LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq) ON c.parent_seq = n.seq
       WHERE n.folds;

      -- Resource chains: the first new version of a key must link to the key's head, each
      -- later one in the batch to the one before it. A node that does not is a lost race
      -- (CW410), whoever wrote it.
      IF v_keyed THEN
        SELECT array_agg(n.resource_key ORDER BY n.seq), array_agg(n.seq ORDER BY n.seq),
               array_agg(n.id ORDER BY n.seq), array_agg(n.parents::text ORDER BY n.seq)
          INTO k_key, k_seq, k_id, k_parents
          FROM new_nodes n WHERE n.graph_id = v_gid AND n.resource_key IS NOT NULL;
        IF k_key IS NOT NULL THEN
          WITH k AS (
            SELECT k.*, h.version AS base_version, h.head_seq,
                   CASE WHEN k.rn = 1 THEN h.head_id ELSE k.prev_id END AS expected
              FROM (SELECT u.key, u.seq, u.id, u.parents::text[] AS parents,
                           row_number() OVER w AS rn, lag(u.id) OVER w AS prev_id,
                           lead(u.seq) OVER w AS next_seq, first_value(u.seq) OVER w AS batch_first
                      FROM unnest(k_key, k_seq, k_id, k_parents) AS u(key, seq, id, parents)
                    WINDOW w AS (PARTITION BY u.key ORDER BY u.seq)) k
              LEFT JOIN LATERAL (SELECT h.version, h.head_seq, h.head_id FROM cwstore.key_heads h
                                  WHERE h.graph_id = v_gid AND h.key = k.key LIMIT 1) h ON true
          )
          SELECT array_agg(k.key), array_agg(k.seq), array_agg(k.id),
                 array_agg(CASE WHEN k.expected IS NULL OR k.expected = ANY (k.parents)
                                THEN coalesce(k.base_version, 0) + k.rn
                                ELSE cwstore._chain_conflict(v_gid, k.key, k.seq, k.id,
                                                             k.expected, k.parents)
                           END),
                 array_agg(k.next_seq), array_agg(k.batch_first), array_agg(k.rn),
                 array_agg(k.head_seq)
            INTO v_key, v_seq, v_id, v_version, v_next, v_first, v_rn, v_base
            FROM k;
          UPDATE cwstore.key_versions v SET to_seq = c.seq
            FROM unnest(v_key, v_seq, v_rn, v_base) AS c(key, seq, rn, head_seq)
           WHERE c.rn = 1 AND c.head_seq IS NOT NULL
             AND v.graph_id = v_gid AND v.key = c.key AND v.node_seq = c.head_seq;
          INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
          SELECT v_gid, u.key, u.version, u.seq, coalesce(u.next_seq, cwstore.infinity_seq())
            FROM unnest(v_key, v_version, v_seq, v_next) AS u(key, version, seq, next_seq);
          INSERT INTO cwstore.key_heads AS h (graph_id, key, head_seq, head_id, version, first_seq)
          SELECT v_gid, u.key, u.seq, u.id, u.version, u.batch_first
            FROM unnest(v_key, v_seq, v_id, v_version, v_next, v_first)
                   AS u(key, seq, id, version, next_seq, batch_first)
           WHERE u.next_seq IS NULL
          ON CONFLICT (graph_id, key) DO UPDATE
            SET head_seq = excluded.head_seq, head_id = excluded.head_id,
                version = excluded.version;
        END IF;
      END IF;

      -- Running counts by kind.
      SELECT array_agg(d.kind), array_agg(
               coalesce((SELECT k.n FROM cwstore.kind_counts k
                          WHERE k.graph_id = v_gid AND k.kind = d.kind
                          ORDER BY k.seq DESC LIMIT 1), 0))
        INTO b_kind, b_n
        FROM (SELECT DISTINCT u.kind FROM unnest(a_kind) AS u(kind)) d;
      INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
      SELECT v_gid, n.kind, n.seq,
             b.n + row_number() OVER (PARTITION BY n.kind ORDER BY n.seq)
        FROM unnest(a_seq, a_kind) AS n(seq, kind)
        JOIN unnest(b_kind, b_n) AS b(kind, n) ON b.kind = n.kind;
    END LOOP;
    END;
    PERFORM set_config('work_mem', v_work_mem, true), set_config('jit', v_jit, true);
  END IF;

  -- Gapless: each graph's new rows are exactly length+1 .. length+count; then the new
  -- length, and a wake-up for followers (NOTIFY is a hint; the table is the truth).
  -- Graph by graph, each statement on one graph_id: on Citus this trigger fires on the
  -- shard's worker, where a statement must name its graph to stay on the local shard.
  -- (Scalars, not array elements, in the statements: Citus 13.2's deparser crashes on
  -- a subscripted parameter in an UPDATE's SET list.)
  FOR i IN 1 .. cardinality(v_gids) LOOP
    v_gid := v_gids[i];
    v_lo := v_los[i];
    v_hi := v_his[i];
    v_cnt := v_cnts[i];
    UPDATE cwstore.graphs g SET length = v_hi
     WHERE g.graph_id = v_gid AND v_lo = g.length + 1 AND v_hi = g.length + v_cnt;
    IF NOT FOUND THEN
      SELECT g.name, g.length INTO r FROM cwstore.graphs g WHERE g.graph_id = v_gid;
      IF NOT FOUND THEN
        RAISE EXCEPTION USING ERRCODE = 'CW404',
          MESSAGE = format('graph id %s does not exist', v_gid),
          DETAIL = jsonb_build_object('graph_id', v_gid)::text;
      END IF;
      PERFORM cwstore._violation('sequence', v_gid, v_lo, NULL, '$.sequence',
        format('graph %L has %s nodes: new sequences must be %s..%s, got %s..%s',
               r.name, r.length, r.length + 1, r.length + v_cnt, v_lo, v_hi));
    END IF;
    IF EXISTS (SELECT 1 FROM cwstore.listeners) THEN
      PERFORM pg_notify('cwstore', v_gid || ':' || v_hi);
    END IF;
  END LOOP;
  RETURN NULL;
END
$body$;

CREATE TRIGGER nodes_inserted AFTER INSERT ON cwstore.nodes
  REFERENCING NEW TABLE AS new_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._nodes_inserted();

-- 60_write_api

CREATE OR REPLACE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_graph_id bigint;
  v_tenant text;
  v_len bigint;
  v_new bigint;
  v_bad bigint;
  v_last bigint;
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
  v_now timestamptz := now();
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
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
    v_heads := ARRAY(SELECT json_array_elements_text(p_frontier));
  END IF;

  IF cwstore._lone_surrogate(p_nodes::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$',
      'a string holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;

  -- PostgreSQL's JSON functions refuse the escape \u0000: hide it (reversibly) first.
  IF strpos(p_nodes::text, '\u0000') > 0 THEN
    v_hidden := true;
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;

  -- Read the batch once: each node's fields as JSON, checked for their JSON types, for
  -- what the table's constraints would refuse and for _node_problem, so every client
  -- gets a CW400 with the safeguard code, the node's position and the path.
  SELECT array_agg(f.id #>> '{}' ORDER BY f.o), array_agg(f.kind #>> '{}' ORDER BY f.o),
         array_agg(f.parents::text ORDER BY f.o),
         array_agg(f.payload ORDER BY f.o),
         array_agg(f."createdAt" #>> '{}' ORDER BY f.o),
         array_agg(f."resourceKey" #>> '{}' ORDER BY f.o),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem ORDER BY f.o) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END ORDER BY f.o)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys, v_new, v_problem, v_bad_id
    FROM (SELECT c.*,
                 coalesce(c.problem0,
                          cwstore._node_problem(c.kind #>> '{}', c.payload, c."createdAt" #>> '{}',
                                                c."resourceKey" #>> '{}')) AS problem
            FROM (SELECT a.o, r.id, r.kind, r.parents, r."createdAt", r."resourceKey",
                         CASE WHEN v_hidden THEN cwstore._nul_show(r.payload::text)
                              ELSE r.payload::text END AS payload,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|$|node must be a JSON object'
                   WHEN (SELECT count(*) <> count(DISTINCT k) FROM json_object_keys(a.e) k)
                     THEN 'shape|$|node repeats a member name (JSON.parse would keep only the last)'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|$.id|id must be a string'
                   WHEN r.kind IS NULL AND json_typeof(a.e -> 'kind') IS NULL
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
                   WHEN EXISTS (SELECT 1 FROM json_object_keys(a.e) k
                                 WHERE k NOT IN ('id', 'kind', 'parents', 'payload', 'createdAt',
                                                 'sequence', 'resourceKey'))
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
            CROSS JOIN LATERAL json_to_record(CASE json_typeof(a.e) WHEN 'object' THEN a.e
                                                ELSE '{}' END)
                 AS r(id json, kind json, parents json, payload json, "createdAt" json,
                      "resourceKey" json)) c
          OFFSET 0) f;  -- a fence: each node's problem is computed once
  IF v_new IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_new, v_bad_id, v_new - 1);
  END IF;
  IF v_ids IS NULL THEN
    v_ids := '{}';
  END IF;

  -- One id, one content: a node given again later in the batch must be the same node.
  IF cardinality(v_ids) > 1 THEN
  SELECT b.o, b.id INTO v_bad, v_bad_id
    FROM unnest(v_ids) WITH ORDINALITY AS b(id, o)
    JOIN unnest(v_ids) WITH ORDINALITY AS a(id, o) ON a.id = b.id AND a.o < b.o
   WHERE NOT cwstore._same_content(
           v_kinds[a.o], ARRAY(SELECT json_array_elements_text(v_parents[a.o]::json)),
           v_payloads[a.o], v_keys[a.o],
           v_kinds[b.o], ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
           v_payloads[b.o], v_keys[b.o])
   ORDER BY b.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', NULL, v_bad, v_bad_id, format('$[%s].id', v_bad - 1),
      format('id %s is used by an earlier node of the batch with other content', v_bad_id));
  END IF;
  END IF;

  -- The tenant check comes before the lock: a refused caller must not hold another
  -- tenant's counter row while it sits in its aborted transaction.
  -- The graph's row is found by its key, cwstore.graph_key(name) (one shard on Citus).
  v_graph_id := cwstore.graph_key(p_graph);
  -- The tenant is read first, on its own: a statement that both reads a distributed
  -- table and calls the check would run the check on the worker, where session_user
  -- is not the caller (Citus).
  IF session_user <> current_user THEN
    SELECT g.tenant INTO v_tenant FROM cwstore.graphs g
     WHERE g.graph_id = v_graph_id AND g.name = p_graph;
    PERFORM cwstore._check_writer(p_graph, v_tenant);
  END IF;

  -- The counter row: lock it (create the graph on first use). Held until commit.
  SELECT g.length INTO v_len
    FROM cwstore.graphs g WHERE g.graph_id = v_graph_id AND g.name = p_graph FOR UPDATE;
  IF NOT FOUND THEN
    v_graph_id := cwstore.ensure_graph_v1(p_graph);
    SELECT g.length INTO v_len
      FROM cwstore.graphs g WHERE g.graph_id = v_graph_id FOR UPDATE;
  END IF;

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's.
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
                    WHERE l.graph_id = v_graph_id AND l.seq = v_len))
    FROM cwstore.graphs g
   CROSS JOIN (SELECT DISTINCT ON (u.id) u.id, u.o
                 FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
                ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE g.graph_id = v_graph_id AND x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;

  -- A node the graph held must be the same node: a retry, not other content under its
  -- id. Only when the insert skipped some (raising undoes the insert).
  IF v_new < cardinality(v_ids) THEN
  SELECT u.o, u.id, n.seq INTO v_bad, v_bad_id, v_last
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN cwstore.nodes n ON n.graph_id = v_graph_id AND n.id = u.id AND n.seq <= v_len
   WHERE NOT cwstore._same_content(
           n.kind, n.parents, n.payload_text, n.resource_key,
           v_kinds[u.o], ARRAY(SELECT json_array_elements_text(v_parents[u.o]::json)),
           v_payloads[u.o], v_keys[u.o])
   ORDER BY u.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', v_graph_id, v_bad, v_bad_id,
      format('$[%s].id', v_bad - 1),
      format('id %s is node %s of the graph, with other content', v_bad_id, v_last));
  END IF;
  END IF;

  -- Checked after the insert so the batch is read once; raising undoes the insert.
  IF v_new > 0 AND p_expected_length IS NOT NULL AND p_expected_length <> v_len THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', p_graph, v_len,
                       p_expected_length),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected_length,
                                  'actual_length', v_len)::text;
  END IF;

  -- The declared frontier is recorded after new nodes. When this call wrote nothing it
  -- is recorded only if it changes the frontier and, with an expected_length, that is
  -- current, or, without one, no node came after the batch's last: a retry after others
  -- moved on must not move their frontier back.
  IF v_heads IS NOT NULL AND v_new = 0 THEN
    SELECT max(n.seq) INTO v_last
      FROM unnest(v_ids) AS u(id)
      JOIN cwstore.nodes n ON n.graph_id = v_graph_id AND n.id = u.id;
  END IF;
  IF v_heads IS NOT NULL AND (v_new > 0 OR (
         coalesce(p_expected_length, v_last, v_len) = v_len
     AND v_heads IS DISTINCT FROM (
           SELECT coalesce(array_agg(n.id ORDER BY s.from_seq, s.ord), '{}')
             FROM cwstore.frontier_spans s
             JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq
            WHERE s.graph_id = v_graph_id AND s.to_seq = cwstore.infinity_seq()))) THEN
    INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
    VALUES (v_graph_id, v_len + v_new, v_heads);
  END IF;

  -- Every node new and given once: the rows are what was just written, in order.
  IF v_new = cardinality(v_ids) THEN
    RETURN QUERY
    SELECT v_len + u.o, u.id, v_created[u.o], v_now, true, NULL::text
      FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
     ORDER BY u.o;
    RETURN;
  END IF;
  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

-- 70_read_api

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
                   JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq
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
