-- 0016_declarations_behind_the_watermark: a declared frontier no longer brings the
-- frontier's history up to the graph's length.
--
-- Why (issues 35 and 37): a declaration that changed the frontier derived every node
-- since the watermark and rewrote the open spans on the spot. A LangGraph put declares
-- its checkpoint as the frontier, and the pending writes of its parent, being written
-- beside it, usually stay heads: the put then paid for a derive of its own (in the
-- tool agent of benchmarks/langgraph_saver.py, 350 of 450 puts). Now the declaration
-- sets the current frontier (the graph's row) and stays in frontier_declarations; the
-- run that passes it writes its spans set-wise (_derive_spans, _derive_declared_spans),
-- and a read past the watermark folds from the last declaration after it
-- (_frontier_at). Only when the spans are already written up to the length is it
-- applied to them at once, as before.
--
-- Also: a retried append that wrote nothing compares its frontier with the current one
-- (the graph's row), not with the spans open at the watermark.
--
-- Every read answers as before (tests/contract/test_frontier_watermark.py). The
-- definitions below are those of cwstore/sql/schema/, where they are documented.
--
-- Safe with live writers: the index is rebuilt (frontier_declarations is locked
-- against writes while it is); functions otherwise.

-- On Citus the index is rebuilt on every shard: one at a time
-- (citus.multi_shard_modify_mode, for this transaction, as in 0012), or the functions
-- after it could not be created in the same transaction.
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

DROP INDEX cwstore.frontier_declarations_seq_idx;
CREATE INDEX frontier_declarations_seq_idx ON cwstore.frontier_declarations (graph_id, seq, declaration_id);

COMMENT ON TABLE cwstore.frontier_spans IS
  'Frontier history through the graph''s derived_length: node head_seq is a head for sequences from_seq <= s < to_seq. Heads are listed by (from_seq, ord). to_seq = infinity_seq() for heads still open at derived_length. cwstore.frontier_at answers at every s (past the watermark it folds the nodes after it, from the last frontier declared there if any); the current frontier is graphs.frontier_seqs.';

COMMENT ON TABLE cwstore.frontier_declarations IS
  'Frontiers declared by writers (an imported document''s, or one given with an append), exactly as given, at the graph length when declared (the last at a length is the frontier there). One declared past the graph''s derived_length enters frontier_spans when that run is derived.';

CREATE FUNCTION cwstore._derive_declared_spans(p_graph_id bigint, p_from bigint,
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
