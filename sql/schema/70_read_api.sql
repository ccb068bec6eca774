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
CREATE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
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
CREATE FUNCTION cwstore._node_seq(p_graph_id bigint, p_graph text, p_node_id text)
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

-- _spans_at(graph_id, s) -> (position, seq)
--   The frontier after node s as the spans hold it: s at most the graph's watermark
--   (graphs.derived_length). One GiST descent of frontier_spans_closed_idx for the
--   closed spans containing s, plus the open spans that began at or before s (the
--   partial index frontier_spans_current_idx), plus node s itself when it folds and no
--   frontier was declared at s: its span begins at s, and is not stored when it ends at
--   s + 1 (_derive_spans). O(log n + h).
CREATE FUNCTION cwstore._spans_at(p_graph_id bigint, p_seq bigint)
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

-- _frontier_at(graph_id, s) -> (position, seq)
--   The frontier after node s, in order (position from 0). s NULL = now.
--   Cost: now, the graph's row (graphs.frontier_seqs), O(h); at s up to the watermark,
--   the spans (_spans_at), O(log n + h); past it, the frontier at the watermark (the
--   spans), or the last frontier declared after it, folded with the nodes after that,
--   fewer than cwstore.derive_lag(): their rows and edges by two primary-key range scans.
CREATE FUNCTION cwstore._frontier_at(p_graph_id bigint, p_seq bigint)
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
CREATE FUNCTION cwstore._walk(p_graph_id bigint, p_start bigint, p_up boolean,
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
CREATE FUNCTION cwstore._walk_nodes(p_graph_id bigint, p_start bigint, p_up boolean,
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
CREATE FUNCTION cwstore.heads_at(p_graph text, p_seq bigint DEFAULT NULL)
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
--   Cost: O(v log n) for the v versions (the closed ones by key_versions_seq_idx, the
--   head by key_heads_pkey, then nodes_pkey).
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
    FROM (SELECT v.version, v.node_seq FROM cwstore.key_versions v
           WHERE v.graph_id = g.graph_id AND v.key = p_key
          UNION ALL
          SELECT h.version, h.head_seq FROM cwstore.key_heads h
           WHERE h.graph_id = g.graph_id AND h.key = p_key) v
    JOIN LATERAL (SELECT n.id, n.kind, n.created_at, n.recorded_at, n.payload_text
                    FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = v.node_seq LIMIT 1) n ON true
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
CREATE FUNCTION cwstore.export_parts_v1(p_graph text, p_seq bigint DEFAULT NULL,
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
CREATE FUNCTION cwstore.export_v1(p_graph text, p_seq bigint DEFAULT NULL,
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
--   goal and answer: one backward descent of kind_counts_pkey per kind (ten) and a
--   range of fewer than count_block() + derive_lag() nodes (cwstore._kind_counts_at).
--   Nothing else grows with n.
CREATE FUNCTION cwstore.projection_v1(p_graph text, p_seq bigint DEFAULT NULL)
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
