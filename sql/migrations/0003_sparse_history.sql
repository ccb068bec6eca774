-- 0003_sparse_history: fewer rows of history per node. Counts by kind behind the
-- watermark, a row per kind per block of sequences instead of one per node; no stored
-- frontier span for a node that is a head for one sequence only (a chain's nodes).
--
-- kind_counts held a row for every node (about 160 bytes a node with its index),
-- written by the append's statement. Now the derive of a run (with the frontier's
-- history, every derive_lag() nodes) writes, for each block of count_block() sequences
-- the watermark passes, a row per kind for its last node in the block; a count as of s
-- reads the newest row at or before the last block boundary at or before s and the
-- watermark, and counts the nodes after it (cwstore._kind_counts_at).
--
-- frontier_spans held a span per folding node, [s, s + 1) for each node of a chain
-- (a row and two index entries, one of them GiST). Such a span is no longer stored:
-- _spans_at adds node s as the last head at s when it folds and no frontier was
-- declared at s, unless a span stored from s says otherwise.
--
-- The truth about the schema is sql/schema/; the definitions below are copies of it,
-- and tests/migration proves a database migrated here equal to one made from schema/.
--
-- Safe with live writers: no (it replaces the nodes trigger's function): stop the
-- writers first. On Citus, `cwstore init --citus` runs it and applies sql/citus.sql
-- after it.

SET LOCAL citus.enable_unsafe_triggers = on;

CREATE FUNCTION cwstore.count_block() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 32::bigint $$;
COMMENT ON FUNCTION cwstore.count_block() IS
  'The width of the blocks of sequences kind_counts keeps a running count per kind in (the last node of the kind in each block).';

CREATE FUNCTION cwstore._kind_counts_at(p_graph_id bigint, p_seq bigint, p_derived bigint)
RETURNS TABLE (kind text, n bigint, last_seq bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_base bigint := least(p_seq, p_derived) / cwstore.count_block() * cwstore.count_block();
  c_kind text[];
  c_n bigint[];
  c_seq bigint[];
  t_kind text[];
  t_seq bigint[];
BEGIN
  SELECT array_agg(k.kind ORDER BY k.o), array_agg(c.n ORDER BY k.o),
         array_agg(c.seq ORDER BY k.o)
    INTO c_kind, c_n, c_seq
    FROM unnest(cwstore.node_kinds()) WITH ORDINALITY AS k(kind, o)
   CROSS JOIN LATERAL (
         SELECT r.seq, r.n FROM cwstore.kind_counts r
          WHERE r.graph_id = p_graph_id AND r.kind = k.kind AND r.seq <= v_base
          ORDER BY r.seq DESC LIMIT 1) c;
  -- The nodes after the boundary in nodes_pkey's order (a plan made while the table was
  -- tiny cannot read the graph's whole range through another index).
  SELECT array_agg(t.kind ORDER BY t.seq), array_agg(t.seq ORDER BY t.seq)
    INTO t_kind, t_seq
    FROM (SELECT r.kind, r.seq FROM cwstore.nodes r
           WHERE r.graph_id = p_graph_id AND r.seq > v_base AND r.seq <= p_seq
           ORDER BY r.seq) t;
  RETURN QUERY
  SELECT k.kind, coalesce(c.n, 0) + coalesce(t.n, 0), coalesce(t.last_seq, c.seq)
    FROM unnest(cwstore.node_kinds()) WITH ORDINALITY AS k(kind, o)
    LEFT JOIN unnest(c_kind, c_n, c_seq) AS c(kind, n, seq) ON c.kind = k.kind
    LEFT JOIN (SELECT u.kind, count(*) AS n, max(u.seq) AS last_seq
                 FROM unnest(t_kind, t_seq) AS u(kind, seq) GROUP BY u.kind) t
      ON t.kind = k.kind
   WHERE c.n IS NOT NULL OR t.n IS NOT NULL
   ORDER BY k.o;
END $$;

CREATE FUNCTION cwstore._count_run(p_graph_id bigint, p_from bigint, p_to bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_lo bigint := p_from / cwstore.count_block() * cwstore.count_block();
  v_hi bigint := p_to / cwstore.count_block() * cwstore.count_block();
  a_seq bigint[];
  a_kind text[];
  b_kind text[];
  b_n bigint[];
BEGIN
  IF v_hi <= v_lo THEN
    RETURN;
  END IF;
  SELECT array_agg(b.kind), array_agg(b.n) INTO b_kind, b_n
    FROM cwstore._kind_counts_at(p_graph_id, v_lo, v_lo) b;
  -- The blocks' nodes in nodes_pkey's order (see _kind_counts_at).
  SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.kind ORDER BY n.seq)
    INTO a_seq, a_kind
    FROM (SELECT r.seq, r.kind FROM cwstore.nodes r
           WHERE r.graph_id = p_graph_id AND r.seq > v_lo AND r.seq <= v_hi
           ORDER BY r.seq) n;
  INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
  SELECT p_graph_id, r.kind, r.seq, coalesce(b.n, 0) + r.n
    FROM (SELECT u.kind, u.seq, row_number() OVER w AS n, lead(u.seq) OVER w AS next_seq
            FROM unnest(a_seq, a_kind) AS u(seq, kind)
          WINDOW w AS (PARTITION BY u.kind ORDER BY u.seq)) r
    LEFT JOIN unnest(b_kind, b_n) AS b(kind, n) ON b.kind = r.kind
   WHERE r.next_seq IS NULL
      OR (r.next_seq - 1) / cwstore.count_block() <> (r.seq - 1) / cwstore.count_block();
END $$;

DROP FUNCTION cwstore._count_kinds(bigint, bigint[], text[]);
DROP FUNCTION cwstore._derive_node(bigint, bigint, text, text, text[], text);

CREATE FUNCTION cwstore._derive_node(p_graph_id bigint, p_seq bigint, p_id text,
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
    RETURNING parent_seq)
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
    INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
    VALUES (p_graph_id, p_key, v_head.version, v_head.head_seq, p_seq);
    UPDATE cwstore.key_heads SET head_seq = p_seq, head_id = p_id, version = v_head.version + 1
     WHERE graph_id = p_graph_id AND key = p_key;
  ELSE
    INSERT INTO cwstore.key_heads (graph_id, key, head_seq, head_id, version, first_seq)
    VALUES (p_graph_id, p_key, p_seq, p_id, 1, p_seq);
  END IF;
  RETURN v_parent_seqs;
END $$;

CREATE FUNCTION cwstore._drop_own_span(p_graph_id bigint, p_seq bigint, p_to bigint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_to = p_seq + 1 AND NOT EXISTS (SELECT 1 FROM cwstore.frontier_declarations f
                                       WHERE f.graph_id = p_graph_id AND f.seq >= p_seq
                                         AND f.seq <= p_seq) THEN
    DELETE FROM cwstore.frontier_spans s
     WHERE s.graph_id = p_graph_id AND s.head_seq = p_seq AND s.from_seq = p_seq
       AND s.to_seq = cwstore.infinity_seq();
  END IF;
END $$;

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
  PERFORM cwstore._count_run(p_graph_id, p_from, p_to);
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
    PERFORM cwstore._drop_own_span(p_graph_id, p_from,
      (SELECT c.close_seq FROM unnest(c_parent, c_at) AS c(parent_seq, close_seq)
        WHERE c.parent_seq = p_from));
    -- Only open spans (the partial index), so this join stays small at any size.
    UPDATE cwstore.frontier_spans s SET to_seq = c.close_seq
      FROM unnest(c_parent, c_at) AS c(parent_seq, close_seq)
     WHERE s.graph_id = p_graph_id AND s.head_seq = c.parent_seq AND c.parent_seq <= p_from
       AND s.to_seq = cwstore.infinity_seq();
    INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
    SELECT p_graph_id, n.seq, n.seq, 0, coalesce(c.close_seq, cwstore.infinity_seq())
      FROM unnest(a_seq, a_folds) AS n(seq, folds)
      LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq) ON c.parent_seq = n.seq
     WHERE n.folds AND c.close_seq IS DISTINCT FROM n.seq + 1;
    RETURN;
  END IF;
  PERFORM cwstore._derive_declared_spans(p_graph_id, p_from, a_seq, a_folds, a_kind,
                                         e_child, e_parent, c_parent, c_at, d_seq);
END $$;

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
  PERFORM cwstore._drop_own_span(p_graph_id, p_from,
    least(coalesce((SELECT c.close_seq FROM unnest(c_parent, c_at) AS c(parent_seq, close_seq)
                     WHERE c.parent_seq = p_from), v_first), v_first));
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
    FROM (SELECT n.seq AS head_seq, n.seq AS from_seq, 0 AS ord, true AS own,
                 least(coalesce(c.close_seq, cwstore.infinity_seq()),
                       CASE WHEN d_seq[width_bucket(n.seq, d_seq)] = n.seq THEN n.seq
                            ELSE coalesce(d_seq[width_bucket(n.seq, d_seq) + 1],
                                          cwstore.infinity_seq()) END) AS to_seq
            FROM unnest(a_seq, a_folds) AS n(seq, folds)
            LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq) ON c.parent_seq = n.seq
           WHERE n.folds
          UNION ALL
          SELECT h.head_seq, h.at, h.ord, false,
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
   WHERE x.from_seq < x.to_seq AND NOT (x.own AND x.to_seq = x.from_seq + 1);
END $$;

CREATE OR REPLACE FUNCTION cwstore._nodes_inserted() RETURNS trigger
LANGUAGE plpgsql AS $body$
DECLARE
  nd record;
  v_rows bigint;
  v_semantic boolean;
  v_keyed boolean;
  v_gid bigint;
  v_gid_last bigint;
  v_lo bigint;
  v_hi bigint;
  v_gids bigint[];
  v_los bigint[];
  v_his bigint[];
  v_cnts bigint[];
  v_work_mem text;
  v_jit text;
  a_seq bigint[];
  a_id text[];
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
  -- The batch's graphs (usually one: then one aggregate gives its first and last
  -- sequence and count, the others only when there are more) and what its nodes hold.
  SELECT min(n.graph_id), max(n.graph_id), min(n.seq), max(n.seq), count(*),
         bool_or(n.kind = 'semantic'), bool_or(n.resource_key IS NOT NULL)
    INTO v_gid, v_gid_last, v_lo, v_hi, v_rows, v_semantic, v_keyed
    FROM new_nodes n;
  IF v_gid IS NULL THEN
    RETURN NULL;
  END IF;
  IF v_gid = v_gid_last THEN
    v_gids := ARRAY[v_gid];
    v_los := ARRAY[v_lo];
    v_his := ARRAY[v_hi];
    v_cnts := ARRAY[v_rows];
  ELSE
    SELECT array_agg(x.graph_id), array_agg(x.lo), array_agg(x.hi), array_agg(x.cnt)
      INTO v_gids, v_los, v_his, v_cnts
      FROM (SELECT n.graph_id, min(n.seq) AS lo, max(n.seq) AS hi, count(*) AS cnt
              FROM new_nodes n GROUP BY n.graph_id) x;
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
        -- key_heads and key_versions cannot serve (a scan of the graph's rows).
        v_parent_seqs := cwstore._derive_node(v_gid, nd.seq, nd.id COLLATE "default",
                                              nd.parents, nd.resource_key COLLATE "default");
        IF NOT (nd.kind = 'semantic' OR (nd.kind = 'system' AND cardinality(nd.parents) = 0)) THEN
          v_new := v_new || nd.seq;
          v_closed := v_closed || v_parent_seqs;
        END IF;
      END LOOP;
    ELSE
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.seq ORDER BY n.seq)
               FILTER (WHERE NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0)))
        INTO a_seq, a_id, v_new
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

CREATE OR REPLACE FUNCTION cwstore._frontier_declared() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g_length bigint;
  g_derived bigint;
  g_name text;
  g_frontier bigint[];
  current_heads text[];
  missing text;
  repeated boolean;
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
  repeated := array_position(NEW.heads, NULL) IS NOT NULL;
  IF NOT repeated AND cardinality(NEW.heads) > 1 THEN
    repeated := cardinality(NEW.heads) <> (SELECT count(DISTINCT h) FROM unnest(NEW.heads) h);
  END IF;
  IF repeated THEN
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
  PERFORM cwstore._drop_own_span(NEW.graph_id, NEW.seq - 1, NEW.seq);
  UPDATE cwstore.frontier_spans SET to_seq = NEW.seq
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq();
  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord)
  SELECT NEW.graph_id, s, NEW.seq, o::integer - 1
    FROM unnest(seqs) WITH ORDINALITY AS u(s, o);
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cwstore._spans_at(p_graph_id bigint, p_seq bigint)
RETURNS TABLE ("position" integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
DECLARE
  v_heads bigint[];
  v_from bigint[];
  v_own boolean;
BEGIN
  -- The box test is the index condition (it implies the graph: boxes of different
  -- graphs are apart); the integer tests after it are exact whatever float8 rounding
  -- the boxes carry. The graph is named all the same: on Citus that sends the query
  -- to the graph's one shard, not to every shard. (plpgsql: Citus plans no SQL
  -- function that reads a distributed table with parameters.)
  SELECT array_agg(x.head_seq ORDER BY x.from_seq, x.ord),
         array_agg(x.from_seq ORDER BY x.from_seq, x.ord)
    INTO v_heads, v_from
    FROM (SELECT s.head_seq, s.from_seq, s.ord FROM cwstore.frontier_spans s
           WHERE s.graph_id = p_graph_id
             AND cwstore.span_band(s.graph_id, s.from_seq, s.to_seq)
                 @> cwstore.at_box(p_graph_id, p_seq)
             AND s.to_seq <> cwstore.infinity_seq()
             AND s.from_seq <= p_seq AND p_seq < s.to_seq
          UNION ALL
          SELECT s.head_seq, s.from_seq, s.ord FROM cwstore.frontier_spans s
           WHERE s.graph_id = p_graph_id AND s.to_seq = cwstore.infinity_seq()
             AND s.from_seq <= p_seq) x;
  -- Node s's own span, when no stored span begins at s: the last head, if the node
  -- folds and no frontier was declared at s (a range of one seq in nodes_pkey's and
  -- frontier_declarations_seq_idx's order, as elsewhere).
  IF p_seq >= 1 AND NOT (p_seq = ANY (coalesce(v_from, '{}'))) THEN
    SELECT NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
      INTO v_own
      FROM cwstore.nodes n
     WHERE n.graph_id = p_graph_id AND n.seq >= p_seq AND n.seq <= p_seq
     ORDER BY n.seq LIMIT 1;
    IF v_own AND NOT EXISTS (SELECT 1 FROM cwstore.frontier_declarations f
                              WHERE f.graph_id = p_graph_id AND f.seq >= p_seq
                                AND f.seq <= p_seq) THEN
      v_heads := coalesce(v_heads, '{}') || p_seq;
    END IF;
  END IF;
  RETURN QUERY
  SELECT u.o::integer - 1, u.h FROM unnest(v_heads) WITH ORDINALITY AS u(h, o) ORDER BY u.o;
END $$;
COMMENT ON FUNCTION cwstore._spans_at(bigint, bigint) IS
  'Private: frontier (position, seq) of a graph_id after node s as frontier_spans hold it (s at most the watermark).';

CREATE OR REPLACE FUNCTION cwstore.projection_v1(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_at bigint := cwstore._at(p_seq, g.length);
  v_len bigint := coalesce(v_at, g.length);
  v_counts text;
  v_goal bigint;
  v_answer bigint;
  v_derived bigint;
BEGIN
  SELECT w.derived_length INTO v_derived FROM cwstore.graphs w WHERE w.graph_id = g.graph_id;
  SELECT coalesce(json_object_agg(c.kind, c.n)::text, '{}'),
         max(c.last_seq) FILTER (WHERE c.kind = 'goal'),
         max(c.last_seq) FILTER (WHERE c.kind = 'answer')
    INTO v_counts, v_goal, v_answer
    FROM cwstore._kind_counts_at(g.graph_id, v_len, v_derived) c;
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

COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name, key_probe), key_probe 0 unless another name held that key; incarnation tells this life of the graph from a later one of the same name. written_at is when the last write''s last statement moved its length (clock_timestamp(); its creation before any): retention measures idleness from it. retention_group, set at creation from the setting cwstore.retention_group, makes graphs one unit for retention (idle and erased together). frontier_seqs is the current frontier (its heads'' sequences, in order), kept by every write. derived_length is the watermark of frontier_spans and kind_counts, which hold the frontier''s history and the counts by kind through node derived_length; reads as of a later node fold the nodes after it (fewer than cwstore.derive_lag()). The row is the per-graph lock of the append path.';
COMMENT ON TABLE cwstore.frontier_spans IS
  'Frontier history through the graph''s derived_length: node head_seq is a head for sequences from_seq <= s < to_seq. Heads are listed by (from_seq, ord). to_seq = infinity_seq() for heads still open at derived_length. A node''s own span [s, s + 1) is not stored: node s is the last head at s when it folds and no frontier was declared at s, unless a span stored from s says otherwise. cwstore.frontier_at answers at every s (past the watermark it folds the nodes after it, from the last frontier declared there if any); the current frontier is graphs.frontier_seqs.';
COMMENT ON TABLE cwstore.kind_counts IS
  'Running counts by kind, behind the watermark (graphs.derived_length): a row for the last node of its kind in each block of cwstore.count_block() sequences that ends at or before the watermark; n is how many nodes of its kind the graph holds up to and including seq. Counts by kind at any sequence, and the latest node of a kind, are an index lookup here plus at most a block and the watermark''s lag of nodes (cwstore._kind_counts_at).';

-- The rows the new layout does not keep. Of kind_counts: those of a block the
-- watermark has not passed (the run that passes it writes them), and all but the last
-- of a kind in each block; every row kept is a true running count. Of frontier_spans:
-- a node's own span of one sequence, where no frontier was declared at it.
ALTER TABLE cwstore.kind_counts DISABLE TRIGGER kind_counts_derived;
DELETE FROM cwstore.kind_counts k
 USING (SELECT c.graph_id, c.kind, c.seq
          FROM (SELECT r.graph_id, r.kind, r.seq, g.derived_length,
                       lead(r.seq) OVER (PARTITION BY r.graph_id, r.kind ORDER BY r.seq) AS next_seq
                  FROM cwstore.kind_counts r
                  JOIN cwstore.graphs g ON g.graph_id = r.graph_id) c
         WHERE c.seq > c.derived_length / cwstore.count_block() * cwstore.count_block()
            OR (c.next_seq - 1) / cwstore.count_block() = (c.seq - 1) / cwstore.count_block()) d
 WHERE k.graph_id = d.graph_id AND k.kind = d.kind AND k.seq = d.seq;
ALTER TABLE cwstore.kind_counts ENABLE TRIGGER kind_counts_derived;

ALTER TABLE cwstore.frontier_spans DISABLE TRIGGER frontier_spans_derived;
DELETE FROM cwstore.frontier_spans s
 WHERE s.head_seq = s.from_seq AND s.to_seq = s.from_seq + 1
   AND NOT EXISTS (SELECT 1 FROM cwstore.frontier_declarations f
                    WHERE f.graph_id = s.graph_id AND f.seq = s.from_seq);
ALTER TABLE cwstore.frontier_spans ENABLE TRIGGER frontier_spans_derived;
