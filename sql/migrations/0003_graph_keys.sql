-- 0003_graph_keys: a graph's graph_id is derived from its name (cwstore.graph_key), and
-- the nodes triggers read their batch one graph at a time, so that every table keyed by
-- graph can be distributed by graph_id on Citus (docs/scaling.md).
--
-- Why: a distributed PostgreSQL spreads a table's rows by one column, and each of its
-- unique constraints must include that column. graphs had graph_id (an identity) and
-- UNIQUE (name): it could be spread by neither. With graph_id = graph_key(name) (and the
-- check graphs_key_check), the primary key alone keeps names unique and a name finds its
-- row by the key. The triggers' statements that joined the transition table to graphs
-- cannot be planned by Citus on a shard; they now read it into arrays first. The
-- row-level security policies call functions (_sees_tenant, _sees_graph) instead of
-- holding sub-selects, which Citus refuses; the as-of reads (_frontier_at, _heads_at)
-- name the graph, so that Citus sends them to one shard.
--
-- The definitions below are those of cwstore/sql/schema/ (10_helpers, 20_tables,
-- 40_derive, 50_tenancy, 60_write_api, 70_read_api, 80_listeners), where they are
-- documented. On
-- Citus, tail_all_v1 now refuses (0A000): its xid cursor is per node there.
--
-- Safe with live writers: no. Every row of every table keyed by graph is rewritten
-- with its graph's new graph_id (the tables' own triggers are off for it), under the
-- tables' exclusive locks: stop writers, migrate, start them again. A tail_all cursor
-- taken before it names old graph ids: start followers of the all-graphs feed again from
-- a cursor taken after it. Two existing names with one key (about N^2 / 2^49 for N
-- graphs) make it fail on graphs_pkey, with nothing changed: rename one of them first.

-- 10_helpers

CREATE FUNCTION cwstore.graph_key(p_name text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT ('x' || left(md5(p_name), 12))::bit(48)::bigint
$$;
COMMENT ON FUNCTION cwstore.graph_key(text) IS
  'The graph_id of a graph name: 48 bits of md5(name). graphs.graph_id = graph_key(name).';

-- 20_tables: the new keys, written through every table keyed by graph.

ALTER TABLE cwstore.graphs ALTER COLUMN graph_id DROP IDENTITY;
ALTER TABLE cwstore.graphs DISABLE TRIGGER USER;
ALTER TABLE cwstore.nodes DISABLE TRIGGER USER;
ALTER TABLE cwstore.edges DISABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_spans DISABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_declarations DISABLE TRIGGER USER;
ALTER TABLE cwstore.key_versions DISABLE TRIGGER USER;
ALTER TABLE cwstore.key_heads DISABLE TRIGGER USER;
ALTER TABLE cwstore.kind_counts DISABLE TRIGGER USER;
CREATE TEMPORARY TABLE graph_keys_0003 ON COMMIT DROP AS
  SELECT graph_id AS old_id, cwstore.graph_key(name) AS new_id FROM cwstore.graphs
   WHERE graph_id <> cwstore.graph_key(name);
UPDATE cwstore.nodes t SET graph_id = k.new_id FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.edges t SET graph_id = k.new_id FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.frontier_spans t SET graph_id = k.new_id
  FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.frontier_declarations t SET graph_id = k.new_id
  FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.key_versions t SET graph_id = k.new_id
  FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.key_heads t SET graph_id = k.new_id FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.kind_counts t SET graph_id = k.new_id
  FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
UPDATE cwstore.graphs t SET graph_id = k.new_id FROM graph_keys_0003 k WHERE t.graph_id = k.old_id;
ALTER TABLE cwstore.graphs ENABLE TRIGGER USER;
ALTER TABLE cwstore.nodes ENABLE TRIGGER USER;
ALTER TABLE cwstore.edges ENABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_spans ENABLE TRIGGER USER;
ALTER TABLE cwstore.frontier_declarations ENABLE TRIGGER USER;
ALTER TABLE cwstore.key_versions ENABLE TRIGGER USER;
ALTER TABLE cwstore.key_heads ENABLE TRIGGER USER;
ALTER TABLE cwstore.kind_counts ENABLE TRIGGER USER;
ALTER TABLE cwstore.graphs DROP CONSTRAINT graphs_name_key;
ALTER TABLE cwstore.graphs
  ADD CONSTRAINT graphs_key_check CHECK (graph_id = cwstore.graph_key(name));
COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name). The row is the per-graph lock of the append path.';

-- 40_derive

CREATE OR REPLACE FUNCTION cwstore._nodes_inserted_small() RETURNS trigger
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
  v_gid bigint;
  v_vocab text[];
  v_gids bigint[];
  v_los bigint[];
  v_his bigint[];
  v_cnts bigint[];
  v_lo bigint;
  v_hi bigint;
  v_cnt bigint;
BEGIN
  SELECT count(*), bool_or(kind = 'semantic'), bool_or(resource_key IS NOT NULL)
    INTO v_rows, v_semantic, v_keyed FROM new_nodes;
  -- not shared: the size guard
  IF v_rows > 256 OR v_rows = 0 THEN RETURN NULL; END IF;
  -- end not shared

  -- The batch's graphs (usually one) with their first and last sequence and count: the
  -- statements below read one graph at a time, never joining this transition table to
  -- another table (Citus cannot plan that join on a shard).
  SELECT array_agg(x.graph_id), array_agg(x.lo), array_agg(x.hi), array_agg(x.cnt)
    INTO v_gids, v_los, v_his, v_cnts
    FROM (SELECT n.graph_id, min(n.seq) AS lo, max(n.seq) AS hi, count(*) AS cnt
            FROM new_nodes n GROUP BY n.graph_id) x;

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

CREATE OR REPLACE FUNCTION cwstore._nodes_inserted_bulk() RETURNS trigger
LANGUAGE plpgsql
SET work_mem = '64MB' SET jit = off AS $body$
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
  v_gid bigint;
  v_vocab text[];
  v_gids bigint[];
  v_los bigint[];
  v_his bigint[];
  v_cnts bigint[];
  v_lo bigint;
  v_hi bigint;
  v_cnt bigint;
BEGIN
  SELECT count(*), bool_or(kind = 'semantic'), bool_or(resource_key IS NOT NULL)
    INTO v_rows, v_semantic, v_keyed FROM new_nodes;
  -- not shared: the size guard
  IF v_rows <= 256 THEN RETURN NULL; END IF;
  -- end not shared

  -- The batch's graphs (usually one) with their first and last sequence and count: the
  -- statements below read one graph at a time, never joining this transition table to
  -- another table (Citus cannot plan that join on a shard).
  SELECT array_agg(x.graph_id), array_agg(x.lo), array_agg(x.hi), array_agg(x.cnt)
    INTO v_gids, v_los, v_his, v_cnts
    FROM (SELECT n.graph_id, min(n.seq) AS lo, max(n.seq) AS hi, count(*) AS cnt
            FROM new_nodes n GROUP BY n.graph_id) x;

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

  -- not shared: how this function derives
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
  -- end not shared

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

-- 50_tenancy

CREATE OR REPLACE FUNCTION cwstore.tenants_of(p_role name) RETURNS SETOF text
LANGUAGE plpgsql STABLE ROWS 2 AS $$
BEGIN
  RETURN QUERY
  SELECT DISTINCT m.tenant
    FROM cwstore.tenant_members m
    JOIN pg_catalog.pg_roles r ON r.rolname = m.member
   WHERE pg_catalog.pg_has_role(p_role, r.oid, 'MEMBER');
END $$;

CREATE OR REPLACE FUNCTION cwstore.remove_tenant_member(p_tenant text, p_role name) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM cwstore.tenant_members WHERE tenant = p_tenant AND member = p_role;
  RETURN FOUND;
END $$;

-- Row-level security without sub-selects in the policies (Citus refuses those): each
-- policy calls a function of its row's tenant or graph_id.

-- _sees_tenant(tenant): whether current_user reads the graphs of that tenant: a member
-- (directly or not) of a role listed for it in tenant_members, or of the owner of
-- schema cwstore. A role listed but since dropped grants nothing.
CREATE FUNCTION cwstore._sees_tenant(p_tenant text) RETURNS boolean
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
CREATE FUNCTION cwstore._sees_graph(p_graph_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM cwstore.graphs g WHERE g.graph_id = p_graph_id);
END $$;

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

-- 60_write_api

CREATE OR REPLACE FUNCTION cwstore.ensure_graph_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_key bigint := cwstore.graph_key(p_graph);
  v_id bigint;
  v_name text;
  v_tenant text;
BEGIN
  IF p_graph IS NULL OR p_graph = '' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
                               'a graph name must be a non-empty string');
  END IF;
  SELECT graph_id, name, tenant INTO v_id, v_name, v_tenant
    FROM cwstore.graphs WHERE graph_id = v_key;
  IF NOT FOUND THEN
    v_tenant := cwstore._new_graph_tenant();
    IF session_user <> current_user THEN
      PERFORM cwstore._check_writer(p_graph, v_tenant);
    END IF;
    INSERT INTO cwstore.graphs (graph_id, name, vocabulary, tenant)
    VALUES (v_key, p_graph, p_vocabulary, v_tenant)
    ON CONFLICT (graph_id) DO NOTHING RETURNING graph_id, name INTO v_id, v_name;
    IF v_id IS NULL THEN
      SELECT graph_id, name, tenant INTO v_id, v_name, v_tenant
        FROM cwstore.graphs WHERE graph_id = v_key;
    END IF;
  END IF;
  IF v_name <> p_graph THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
      format('graph name %L cannot be used: another graph holds its key (cwstore.graph_key); choose another name',
             p_graph));
  END IF;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v_tenant);
  END IF;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.ensure_graph_v1(text, text[]) IS
  'Create a graph if it does not exist (vocabulary NULL = dynamic); returns its graph_id.';

CREATE OR REPLACE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_len bigint;
BEGIN
  v_id := cwstore.ensure_graph_v1(p_graph, p_vocabulary);
  SELECT length INTO v_len FROM cwstore.graphs WHERE graph_id = v_id FOR UPDATE;
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
                             created_at_text, resource_key, xid)
  SELECT g.graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o],
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

  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

CREATE OR REPLACE FUNCTION cwstore.import_rows_v1(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                       p_kinds text[], p_parents text[], p_payloads text[],
                                       p_created text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
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
      v_all := ('[' || array_to_string(p_payloads, ',') || ']')::json;
      v_hidden := strpos(v_all::text, '\u0000') > 0;
      IF v_hidden THEN
        v_all := cwstore._nul_hide(v_all::text)::json;
      END IF;
      SELECT min(coalesce(p.o, e.o)) INTO v_bad
        FROM json_array_elements(v_all) WITH ORDINALITY AS e(v, o)
        FULL JOIN unnest(p_payloads) WITH ORDINALITY AS p(t, o) ON p.o = e.o
       WHERE e.o IS NULL OR p.o IS NULL
          OR (CASE WHEN v_hidden THEN cwstore._nul_show(e.v::text) ELSE e.v::text END) <> p.t;
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

-- 70_read_api

-- _frontier_at and _heads_at: the as-of queries name the graph (on Citus, one shard).

CREATE OR REPLACE FUNCTION cwstore._frontier_at(p_graph_id bigint, p_seq bigint)
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
    -- the boxes carry. The graph is named all the same: on Citus that sends the query
    -- to the graph's one shard, not to every shard.
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
  END IF;
END $$;

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
    -- As in _frontier_at: the box test is the index condition, the integer tests after
    -- it are exact whatever float8 rounding the boxes carry, and the graph is named for
    -- Citus.
    RETURN QUERY
    SELECT x.key, x.version, x.seq
      FROM (SELECT v.key, v.version, v.node_seq AS seq FROM cwstore.key_versions v
             WHERE v.graph_id = p_graph_id
               AND cwstore.span_band(v.graph_id, v.node_seq, v.to_seq)
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

CREATE OR REPLACE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_tenant text;
BEGIN
  SELECT g.graph_id, g.length, g.tenant INTO graph_id, length, v_tenant
    FROM cwstore.graphs g WHERE g.graph_id = cwstore.graph_key(p_graph) AND g.name = p_graph;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', p_graph),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._graph(text) IS
  'Private: resolve a graph name to (graph_id, length); CW404 if unknown.';

-- 80_listeners

CREATE OR REPLACE FUNCTION cwstore.tail_all_v1(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text)
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
         x.created_at_text, x.resource_key
    FROM (SELECT l.*, sum(octet_length(l.payload_text)) OVER (ORDER BY l.xid, l.graph_id, l.seq)
                      - octet_length(l.payload_text) AS before
            FROM (SELECT n.xid, n.graph_id, g.name, n.seq, n.id, n.kind, n.parents,
                         n.payload_text, n.created_at_text, n.resource_key
                    FROM cwstore.nodes n JOIN cwstore.graphs g ON g.graph_id = n.graph_id
                   WHERE n.xid >= p_xid
                     AND (n.xid, n.graph_id, n.seq) > (p_xid, p_graph_id, p_seq)
                     AND n.xid < v_horizon
                   ORDER BY n.xid, n.graph_id, n.seq
                   LIMIT p_limit) l) x
   WHERE p_max_bytes IS NULL OR x.before = 0 OR x.before < p_max_bytes
   ORDER BY x.xid, x.graph_id, x.seq;
END $$;
