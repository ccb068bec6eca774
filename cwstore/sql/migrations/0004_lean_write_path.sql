-- 0004_lean_write_path: less work per node written, the same rules and the same rows.
--
-- Why: an append's time went less to deriving (edges, frontier, chains, counts) than to
-- what surrounds it (benchmarks/README.md, "The write path"): SQL functions called
-- rather than inlined, whose bodies PostgreSQL plans again on every statement that
-- calls them (the node table's generated node_json column, payload_jsonb in the payload
-- check), a second statement trigger fired on every insert only to return, and one
-- statement per derived table and node.
--
--   * nodes.node_json is dropped: export builds each node's JSON text as it reads it
--     (cwstore.node_json, now STABLE so that its body is inlined). Each node's text is
--     no longer stored twice.
--   * payload_jsonb is no longer STRICT (NULL still gives NULL), so that calls inline.
--   * parse_time reads the runtime's own createdAt form (toISOString) directly.
--   * The two nodes triggers (_nodes_inserted_small, _nodes_inserted_bulk) become one,
--     _nodes_inserted, which derives node by node for up to 8 rows (one statement per
--     node: parents checked, edges, frontier, count) and set-based beyond.
--
-- The definitions below are those of cwstore/sql/schema/ (10_helpers, 20_tables,
-- 40_derive, 70_read_api), where they are documented.
--
-- Safe with live writers: yes, between transactions (each statement takes its table's
-- lock briefly; the trigger swap happens in this migration's one transaction). On a
-- Citus cluster already distributed (cwstore init --citus) the new trigger is created on
-- the distributed nodes table, which Citus allows only with citus.enable_unsafe_triggers
-- (set below for this transaction; without Citus the setting is an unused placeholder).

SET LOCAL citus.enable_unsafe_triggers = on;

-- 20_tables

ALTER TABLE cwstore.nodes DROP COLUMN node_json;

-- 10_helpers

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
  SELECT '{"id":' || to_json(p_id)::text || ',"kind":' || to_json(p_kind)::text
         || ',"parents":' || array_to_json(p_parents)::text || ',"payload":' || p_payload
         || ',"createdAt":' || to_json(p_created_at)::text || ',"sequence":' || p_seq
         || CASE WHEN p_resource_key IS NULL THEN ''
                 ELSE ',"resourceKey":' || to_json(p_resource_key)::text END
         || '}'
$$;

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
  v_pseqs bigint[];
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

  IF v_rows <= 8 THEN
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
