-- 0012_frontier_watermark: the current frontier is a column of the graph's row, and
-- the frontier's history (frontier_spans) is written behind a watermark, a run of
-- nodes at a time.
--
-- Why (issue 37): an append closed its parents' spans (an UPDATE, which leaves the old
-- row's entry in frontier_spans_current_idx until VACUUM) and opened its own, and every
-- read of the current frontier read the graph's open spans through that index: after
-- 80,000 single-node appends without a VACUUM, one read of the frontier went through
-- 80,000 dead entries (0.09 ms -> 0.68 ms, and an append that reads it first 0.63 ms ->
-- 1.8 ms). Now:
--
--   * graphs.frontier_seqs is the current frontier (its heads' sequences, in order),
--     folded by the nodes trigger in the UPDATE that moves the length (cwstore._fold_frontier);
--   * graphs.derived_length is the watermark: frontier_spans holds the history through
--     that node. The write that takes a graph cwstore.derive_lag() (32) nodes past it
--     writes the spans of those nodes set-wise (cwstore._derive_spans), in the same
--     transaction; cwstore.derive_v1(graph) does it on request, and a declared frontier
--     first brings it to the graph's length;
--   * the reads answer at every point as before: now from the row, up to the watermark
--     from the spans, past it from the spans at the watermark folded with the nodes
--     after it (fewer than 32; cwstore._frontier_at).
--
-- The definitions below are those of cwstore/sql/schema/, where they are documented.
-- Existing graphs get their frontier from their open spans and a watermark at their
-- length.
--
-- Safe with live writers: no: appends wait on the graphs table's lock for the UPDATE
-- that fills the new columns (one pass over graphs), then take the new functions. On a
-- Citus cluster already distributed, the new trigger on graphs needs
-- citus.enable_unsafe_triggers, set below for this transaction as in 0004 (without
-- Citus an unused placeholder).

SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- 20_tables

ALTER TABLE cwstore.graphs
  ADD COLUMN frontier_seqs bigint[] NOT NULL DEFAULT '{}',
  ADD COLUMN derived_length bigint NOT NULL DEFAULT 0;
UPDATE cwstore.graphs g SET frontier_seqs = f.seqs
  FROM (SELECT s.graph_id, array_agg(s.head_seq ORDER BY s.from_seq, s.ord) AS seqs
          FROM cwstore.frontier_spans s
         WHERE s.to_seq = cwstore.infinity_seq()
         GROUP BY s.graph_id) f
 WHERE g.graph_id = f.graph_id;
UPDATE cwstore.graphs g SET derived_length = g.length WHERE g.length > 0;
COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name, key_probe), key_probe 0 unless another name held that key; incarnation tells this life of the graph from a later one of the same name. written_at is when the last write''s last statement moved its length (clock_timestamp(); its creation before any): retention measures idleness from it. retention_group, set at creation from the setting cwstore.retention_group, makes graphs one unit for retention (idle and erased together). frontier_seqs is the current frontier (its heads'' sequences, in order), kept by every write. derived_length is the watermark of frontier_spans, which holds the frontier''s history through node derived_length; reads as of a later node fold the nodes after it (fewer than cwstore.derive_lag()). The row is the per-graph lock of the append path.';

COMMENT ON TABLE cwstore.frontier_spans IS
  'Frontier history through the graph''s derived_length: node head_seq is a head for sequences from_seq <= s < to_seq. Heads are listed by (from_seq, ord). to_seq = infinity_seq() for heads still open at derived_length. cwstore.frontier_at answers at every s (it folds the nodes after the watermark); the current frontier is graphs.frontier_seqs.';

-- 10_helpers

-- How far a graph's frontier history (frontier_spans) may trail its nodes: the write
-- that takes the graph this many nodes past its watermark (graphs.derived_length)
-- derives the spans of those nodes, in one set-wise pass; a read as of a later node
-- folds at most this many minus one.
CREATE FUNCTION cwstore.derive_lag() RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT 32::bigint $$;
COMMENT ON FUNCTION cwstore.derive_lag() IS
  'How many nodes a graph''s frontier history may trail its length before the write that reaches it derives them.';

-- _fold_frontier(frontier, new heads, closed): SPEC 4's fold of a run of nodes onto a
-- frontier (heads' sequences, in order): the heads that a node of the run took as a
-- parent leave it, the run's folding nodes join it at the end in sequence order, unless
-- a later node of the run took them as a parent. new is the run's folding nodes
-- (semantic nodes and parentless system nodes leave the frontier alone), closed the
-- parents of those nodes. Set-wise: a node is only ever a parent of later nodes.
CREATE FUNCTION cwstore._fold_frontier(p_frontier bigint[], p_new bigint[], p_closed bigint[])
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

-- 30_guards

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

-- 40_derive

DROP FUNCTION cwstore._derive_node(bigint, bigint, text, text, text[], text);
DROP FUNCTION cwstore._derive_parents(bigint, bigint[], text[], boolean[], bigint[], text[],
                                      integer[], text[], text[], boolean[]);
DROP FUNCTION cwstore._advance_length(bigint, bigint, bigint, bigint);

-- _derive_node(graph_id, seq, id, kind, parents, resource_key) -> parent seqs: one new
-- node's derived rows, for a statement of a few nodes, called in sequence order. One
-- statement checks its parents (in order: sorted and listed once, existing, earlier),
-- records the edges and counts the node's kind; a keyed node then checks and moves its
-- chain. Returns its parents' sequences, for the frontier's fold.
CREATE FUNCTION cwstore._derive_node(p_graph_id bigint, p_seq bigint, p_id text, p_kind text,
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
CREATE FUNCTION cwstore._derive_parents(p_graph_id bigint, a_seq bigint[], a_id text[],
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
CREATE FUNCTION cwstore._derive_spans(p_graph_id bigint, p_from bigint, p_to bigint)
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
BEGIN
  SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.kind ORDER BY n.seq),
         array_agg(NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
                   ORDER BY n.seq)
    INTO a_seq, a_kind, a_folds
    FROM cwstore.nodes n
   WHERE n.graph_id = p_graph_id AND n.seq > p_from AND n.seq <= p_to;
  SELECT array_agg(e.child_seq), array_agg(e.parent_seq) INTO e_child, e_parent
    FROM cwstore.edges e
   WHERE e.graph_id = p_graph_id AND e.child_seq > p_from AND e.child_seq <= p_to;
  SELECT array_agg(x.parent_seq), array_agg(x.close_seq) INTO c_parent, c_at
    FROM (SELECT e.parent_seq, min(e.child_seq) AS close_seq
            FROM unnest(e_child, e_parent) AS e(child_seq, parent_seq)
            JOIN unnest(a_seq, a_kind) AS n(seq, kind) ON n.seq = e.child_seq
           WHERE n.kind <> 'semantic'
           GROUP BY e.parent_seq) x;
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
CREATE FUNCTION cwstore._advance_length(p_graph_id bigint, p_lo bigint, p_hi bigint,
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
CREATE FUNCTION cwstore._derive_history(p_graph_id bigint, p_to bigint) RETURNS void
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
CREATE FUNCTION cwstore._derive_requested() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM cwstore._derive_spans(NEW.graph_id, OLD.derived_length, NEW.derived_length);
  RETURN NULL;
END $$;

CREATE TRIGGER graphs_derive_requested AFTER UPDATE OF derived_length ON cwstore.graphs
  FOR EACH ROW WHEN (NEW.derived_length > OLD.derived_length AND pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derive_requested();

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

CREATE OR REPLACE FUNCTION cwstore._frontier_declared() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g_length bigint;
  g_name text;
  g_frontier bigint[];
  current_heads text[];
  missing text;
  seqs bigint[];
BEGIN
  SELECT length, name, frontier_seqs INTO g_length, g_name, g_frontier
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

  SELECT array_agg(n.id ORDER BY u.o) INTO current_heads
    FROM unnest(g_frontier) WITH ORDINALITY AS u(s, o)
    JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                   WHERE n.graph_id = NEW.graph_id AND n.seq = u.s LIMIT 1) n ON true;
  IF coalesce(current_heads, '{}') = NEW.heads THEN
    RETURN NULL;
  END IF;

  -- The spans are rewritten at the graph's length: their history first comes up to it.
  PERFORM cwstore._derive_history(NEW.graph_id, g_length);
  UPDATE cwstore.graphs g SET frontier_seqs = coalesce(seqs, '{}') WHERE g.graph_id = NEW.graph_id;
  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq() AND from_seq = NEW.seq;
  UPDATE cwstore.frontier_spans SET to_seq = NEW.seq
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq();
  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord)
  SELECT NEW.graph_id, s, NEW.seq, o::integer - 1
    FROM unnest(seqs) WITH ORDINALITY AS u(s, o);
  RETURN NULL;
END $$;

-- 50_tenancy

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
--   for the tenants it belongs to. The private functions that write (_erase,
--   _create_graph) are granted to nobody: the functions above call them as the owner.
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
                       WHEN p.proname IN ('_erase', '_create_graph') THEN NULL
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

-- 60_write_api

-- derive_v1(graph) -> the graph's length: the frontier's history (frontier_spans) of a
-- graph written up to its length, now, under the graph's lock. Writes do it on their
-- own every cwstore.derive_lag() nodes, and every read answers at every point without
-- it; this is for whoever wants the table itself current (SQL over frontier_spans) or
-- the work done before a burst of reads. CW404 for an unknown graph.
CREATE FUNCTION cwstore.derive_v1(p_graph text)
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

-- 70_read_api

-- _spans_at(graph_id, s) -> (position, seq)
--   The frontier after node s as the spans hold it: s at most the graph's watermark
--   (graphs.derived_length). One GiST descent of frontier_spans_closed_idx for the
--   closed spans containing s, plus the open spans that began at or before s (the
--   partial index frontier_spans_current_idx): O(log n + h).
CREATE FUNCTION cwstore._spans_at(p_graph_id bigint, p_seq bigint)
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
--   the spans (_spans_at), O(log n + h); past it, the spans at the watermark folded
--   with the nodes after it, fewer than cwstore.derive_lag(): their rows and edges by
--   two primary-key range scans.
CREATE OR REPLACE FUNCTION cwstore._frontier_at(p_graph_id bigint, p_seq bigint)
RETURNS TABLE ("position" integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 4 AS $$
DECLARE
  g record;
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
  ELSIF p_seq <= g.derived_length THEN
    RETURN QUERY SELECT f.position, f.seq FROM cwstore._spans_at(p_graph_id, p_seq) f;
  ELSE
    -- The run's folding nodes, and its semantic nodes: of the nodes with parents, the
    -- only ones that leave the frontier alone (usually none).
    SELECT array_agg(n.seq ORDER BY n.seq)
             FILTER (WHERE NOT (n.kind = 'semantic'
                                OR (n.kind = 'system' AND cardinality(n.parents) = 0))),
           coalesce(array_agg(n.seq) FILTER (WHERE n.kind = 'semantic'), '{}')
      INTO v_new, v_semantic
      FROM cwstore.nodes n
     WHERE n.graph_id = p_graph_id AND n.seq > g.derived_length AND n.seq <= p_seq;
    SELECT array_agg(e.parent_seq) FILTER (WHERE e.child_seq <> ALL (v_semantic)) INTO v_closed
      FROM cwstore.edges e
     WHERE e.graph_id = p_graph_id AND e.child_seq > g.derived_length AND e.child_seq <= p_seq;
    RETURN QUERY
    SELECT u.o::integer - 1, u.s
      FROM unnest(cwstore._fold_frontier(
             ARRAY(SELECT f.seq FROM cwstore._spans_at(p_graph_id, g.derived_length) f
                    ORDER BY f.position),
             v_new, v_closed)) WITH ORDINALITY AS u(s, o)
     ORDER BY u.o;
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._frontier_at(bigint, bigint) IS
  'Private: frontier (position, seq) of a graph_id after node s (NULL = now): the graph''s row now, the spans up to the watermark, the spans at the watermark folded with the nodes after it past it.';
