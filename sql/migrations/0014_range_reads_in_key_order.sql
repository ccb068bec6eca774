-- 0014_range_reads_in_key_order: the watermark's reads of a run of nodes and edges,
-- and the declared frontier's lookup of the current heads, go through the primary keys
-- whatever plan a connection keeps.
--
-- Why (issue 35): 0012's new reads of a graph's nodes by seq (the run past the
-- watermark in _derive_spans and _frontier_at, the current heads in _frontier_declared)
-- tie, in a plan made while the tables were tiny, with nodes_id_key, which leads with
-- graph_id too; the plans took it and read the graph's whole range. A LangGraph put
-- declares its frontier, so each put read the thread twice over: on tables analyzed
-- while empty, 1,000 steps read 363,242 index entries of nodes_id_key in their last 50
-- puts (7,300 a put). Each read now asks for the primary key's order (a range of one
-- seq for a single head), which only the primary key gives.
--
-- The definitions below are those of cwstore/sql/schema/, where they are documented.
--
-- Safe with live writers: yes (functions only).

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
    -- only ones that leave the frontier alone (usually none). Nodes and edges in their
    -- primary keys' order, as in _derive_spans.
    SELECT array_agg(n.seq ORDER BY n.seq)
             FILTER (WHERE NOT (n.kind = 'semantic'
                                OR (n.kind = 'system' AND cardinality(n.parents) = 0))),
           coalesce(array_agg(n.seq) FILTER (WHERE n.kind = 'semantic'), '{}')
      INTO v_new, v_semantic
      FROM (SELECT r.seq, r.kind, r.parents FROM cwstore.nodes r
             WHERE r.graph_id = p_graph_id AND r.seq > g.derived_length AND r.seq <= p_seq
             ORDER BY r.seq) n;
    SELECT array_agg(e.parent_seq) FILTER (WHERE e.child_seq <> ALL (v_semantic)) INTO v_closed
      FROM (SELECT r.child_seq, r.parent_seq FROM cwstore.edges r
             WHERE r.graph_id = p_graph_id AND r.child_seq > g.derived_length
               AND r.child_seq <= p_seq
             ORDER BY r.child_seq) e;
    RETURN QUERY
    SELECT u.o::integer - 1, u.s
      FROM unnest(cwstore._fold_frontier(
             ARRAY(SELECT f.seq FROM cwstore._spans_at(p_graph_id, g.derived_length) f
                    ORDER BY f.position),
             v_new, v_closed)) WITH ORDINALITY AS u(s, o)
     ORDER BY u.o;
  END IF;
END $$;
