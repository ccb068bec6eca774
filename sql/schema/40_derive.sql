-- 40_derive: the nodes triggers, which check a whole statement's new rows and write
-- what is derived from them, in the same transaction: edges, resource key heads and
-- closed versions, the graph's new length and current frontier; the frontier's history
-- (frontier_spans) and running counts by kind (kind_counts) behind a watermark, a run
-- of nodes at a time; and the trigger of declared frontiers.
--
-- Whoever writes (append_v1, import_rows_v1, a COPY by the owner, psql), every invariant
-- the database can hold is checked here: a row's own rules (_node_row_check,
-- 30_guards.sql), parents that exist, come earlier and are sorted, semantic payloads of
-- the right shape and vocabulary, resource chains that link to the key's head, gapless
-- sequences.
--
-- The frontier's history and the counts trail the nodes: graphs.derived_length is the
-- last node whose spans and counts are written. The write that takes a graph
-- cwstore.derive_lag() nodes past it writes those of the nodes after it in one
-- set-wise pass (_derive_spans), in its own transaction, so a crash can only lose both;
-- cwstore.derive_v1 does it on request. The reads fold the nodes after the watermark
-- (70_read_api.sql, _frontier_at; _kind_counts_at). Closing a
-- span is an UPDATE that leaves an index entry behind until VACUUM: per node, as this
-- was before, a graph's current heads were read through an index entry per node it ever
-- held; per run, the current frontier is a column of the graph's row.
--
-- SQLSTATEs raised: CW400 validation (detail: code, index, node_id, path, message),
-- CW404 unknown graph, CW410 chain conflict on a resource key.

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

-- _check_semantic(graph_id, seqs, ids, payloads, keys): CW400 for the first of a graph's
-- new semantic nodes (their sequences, ids, payload texts and resource keys) whose
-- payload is not {type, key, content} of the right forms, whose resourceKey is not
-- semantic:<type>:<key>, or whose type is outside the graph's fixed vocabulary.
CREATE FUNCTION cwstore._check_semantic(p_graph_id bigint, p_seqs bigint[], p_ids text[],
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

-- _derive_node(graph_id, seq, id, parents, resource_key) -> parent seqs: one new node's
-- derived rows, for a statement of a few nodes, called in sequence order. One statement
-- checks its parents (in order: sorted and listed once, existing, earlier) and records
-- the edges (a single parent, which is sorted and once by itself, by an index lookup and
-- an INSERT of its own: cheaper to start); a keyed node then checks and moves its chain: the key's head becomes a
-- closed version (key_versions), the node the key's head (key_heads). Returns its
-- parents' sequences, for the frontier's fold.
CREATE FUNCTION cwstore._derive_node(p_graph_id bigint, p_seq bigint, p_id text,
                                     p_parents text[], p_key text) RETURNS bigint[]
LANGUAGE plpgsql AS $$
DECLARE
  v_parent_seqs bigint[];
  v_head record;
  v_pid text;
  v_parent bigint;
BEGIN
  IF cardinality(p_parents) = 1 THEN
    v_pid := p_parents[1];
    SELECT m.seq INTO v_parent FROM cwstore.nodes m
     WHERE m.graph_id = p_graph_id AND m.id = v_pid LIMIT 1;
    IF v_parent IS NULL THEN
      PERFORM cwstore._violation('missing_parent', p_graph_id, p_seq, p_id, '$.parents[0]',
                                 format('parent %s does not exist', v_pid));
    ELSIF v_parent >= p_seq THEN
      PERFORM cwstore._violation('parent_order', p_graph_id, p_seq, p_id, '$.parents[0]',
                                 format('parent %s is not earlier in sequence', v_pid));
    END IF;
    INSERT INTO cwstore.edges (graph_id, child_seq, position, parent_seq)
    VALUES (p_graph_id, p_seq, 0, v_parent);
    v_parent_seqs := ARRAY[v_parent];
  ELSIF cardinality(p_parents) > 1 THEN
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
  END IF;

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

-- _drop_own_span(graph_id, seq, to): node seq's own span, still open, is about to close
-- at to: removed instead when it would last that one sequence (to = seq + 1) and no
-- frontier was declared at seq, as such a span is not stored (_derive_spans). Then
-- the spans a graph holds do not depend on where its runs were cut.
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

-- _derive_spans(graph_id, from, to): the frontier spans of nodes from+1 .. to, the run
-- after the watermark (graphs.derived_length = from), and the counts by kind of the
-- blocks it completes (_count_run), set-wise: the spans still open at the watermark
-- whose head a folding node of the run took as a parent are closed at the first such
-- node; each folding node of the run gets its span, closed where a later one took it as
-- a parent, else open; but not a span of one sequence (closed by the next node: a
-- chain's), which the reads know without it (_spans_at). The caller holds the graph's
-- row and moves the watermark. (Only semantic nodes among those with parents leave the
-- frontier alone.)
-- A frontier declared within the run (the last one at its sequence d) closes every span
-- open at d, and opens one per declared head at d, in the declared order, closed where a
-- later folding node takes it as a parent or the next declaration comes.
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

-- _derive_declared_spans(graph_id, from, run nodes, run edges, first closings,
-- declarations): _derive_spans for a run holding declared frontiers (d_seq, ascending):
-- every span ends at the first of its closing node and the first declaration at or
-- after its start (a node's own span is empty when a declaration comes at its own
-- sequence, and is not written, nor, as in _derive_spans, one of one sequence); each
-- declaration's heads (its last at that sequence)
-- open at it. The next declaration is found by width_bucket (a binary search of d_seq:
-- how many declarations come at or before a sequence).
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

-- _derive_chains(graph_id, keys, seqs, ids, parents): a batch's keyed nodes (in sequence
-- order; parents as text[] literals) moved onto their resource chains. The first new
-- version of a key must link to the key's head, each later one in the batch to the one
-- before it; a node that does not is a lost race (CW410), whoever wrote it. The versions
-- the batch closes enter key_versions, each key's last becomes its head (key_heads).
CREATE FUNCTION cwstore._derive_chains(p_graph_id bigint, k_key text[], k_seq bigint[],
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
  -- The versions this batch closes: each key's head before it (closed at its first
  -- new version), and every new version but the key's last (closed at the next).
  INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
  SELECT p_graph_id, u.key, u.version - 1, u.head_seq, u.seq
    FROM unnest(v_key, v_version, v_seq, v_rn, v_base) AS u(key, version, seq, rn, head_seq)
   WHERE u.rn = 1 AND u.head_seq IS NOT NULL
  UNION ALL
  SELECT p_graph_id, u.key, u.version, u.seq, u.next_seq
    FROM unnest(v_key, v_version, v_seq, v_next) AS u(key, version, seq, next_seq)
   WHERE u.next_seq IS NOT NULL;
  INSERT INTO cwstore.key_heads AS h (graph_id, key, head_seq, head_id, version, first_seq)
  SELECT p_graph_id, u.key, u.seq, u.id, u.version, u.batch_first
    FROM unnest(v_key, v_seq, v_id, v_version, v_next, v_first)
           AS u(key, seq, id, version, next_seq, batch_first)
   WHERE u.next_seq IS NULL
  ON CONFLICT (graph_id, key) DO UPDATE
    SET head_seq = excluded.head_seq, head_id = excluded.head_id,
        version = excluded.version;
END $$;

-- _kind_counts_at(graph_id, s, derived) -> (kind, n, last_seq): for each kind the
-- graph holds in nodes 1..s, how many and the sequence of the latest, given its
-- watermark (derived: graphs.derived_length). Every block boundary at or before the
-- watermark has, for each kind, its latest node before it in kind_counts (the last of
-- the kind in its block), so the count is the newest row at or before the last such
-- boundary at or before s, plus the nodes after that boundary: fewer than
-- count_block() + derive_lag() (a range of nodes_pkey), whatever the graph's size.
-- Rows by kind in cwstore.node_kinds()' order.
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

-- _count_run(graph_id, from, to): the counts by kind of the blocks of count_block()
-- sequences that the run of nodes from+1 .. to after the watermark (from) completes:
-- for each kind, a row for its last node in each such block, with the kind's running
-- count there. A block is counted once, whole, when the watermark passes its end, so
-- the rows do not depend on how the nodes were split into runs.
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
-- (_derive_parents, _derive_chains; with more work_mem: they sort and
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
CREATE FUNCTION cwstore._nodes_inserted() RETURNS trigger
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
  v_one_id text;
  v_one_kind text;
  v_one_parents text[];
  v_one_key text;
  v_rule text;
  v_rows_ok boolean;
BEGIN
  -- Every new row is checked by the rules of a node row first (_node_row_check).
  -- A statement of one node (no second row; most appends) is read by a scan of its one
  -- row, and derived here unless it is semantic: two scans and a few calls cost less
  -- than starting the aggregates and the arrays a statement of several nodes needs.
  PERFORM FROM new_nodes n OFFSET 1 LIMIT 1;
  IF NOT FOUND THEN
    SELECT n.graph_id, n.seq, n.id, n.kind, n.parents, n.resource_key,
           cwstore._node_row_check(n.seq, n.id, n.kind, n.created_at_text, n.resource_key)
      INTO v_gid, v_lo, v_one_id, v_one_kind, v_one_parents, v_one_key, v_rule
      FROM new_nodes n;
    IF NOT FOUND THEN
      RETURN NULL;
    END IF;
    IF v_rule IS NOT NULL THEN
      PERFORM cwstore._refuse_node_row(v_rule, v_gid, v_lo, v_one_id);
    END IF;
    IF v_one_kind <> 'semantic' THEN
      v_parent_seqs := cwstore._derive_node(v_gid, v_lo, v_one_id COLLATE "default",
                                            v_one_parents, v_one_key COLLATE "default");
      IF v_one_kind = 'system' AND cardinality(v_one_parents) = 0 THEN
        v_lag := cwstore._advance_length(v_gid, v_lo, v_lo, 1, NULL, NULL);
      ELSE
        v_lag := cwstore._advance_length(v_gid, v_lo, v_lo, 1, ARRAY[v_lo], v_parent_seqs);
      END IF;
      IF v_lag >= cwstore.derive_lag() THEN
        PERFORM cwstore._derive_history(v_gid, v_lo);
      END IF;
      RETURN NULL;
    END IF;
    v_gid_last := v_gid;
    v_hi := v_lo;
    v_rows := 1;
    v_semantic := true;
    v_keyed := true;
  ELSE
    -- The batch's graphs (usually one: then one aggregate gives its first and last
    -- sequence and count, the others only when there are more) and what its nodes hold.
    SELECT min(n.graph_id), max(n.graph_id), min(n.seq), max(n.seq), count(*),
           bool_or(n.kind = 'semantic'), bool_or(n.resource_key IS NOT NULL),
           bool_and(cwstore._node_row_check(n.seq, n.id, n.kind, n.created_at_text,
                                            n.resource_key) IS NULL)
      INTO v_gid, v_gid_last, v_lo, v_hi, v_rows, v_semantic, v_keyed, v_rows_ok
      FROM new_nodes n;
    IF NOT v_rows_ok THEN
      -- The first row written that breaks a rule (the transition table keeps their order).
      SELECT x.rule, n.graph_id, n.seq, n.id INTO v_rule, v_gid, v_lo, v_one_id
        FROM new_nodes n
       CROSS JOIN LATERAL (SELECT cwstore._node_row_check(n.seq, n.id, n.kind, n.created_at_text,
                                                          n.resource_key) AS rule) x
       WHERE x.rule IS NOT NULL
       LIMIT 1;
      PERFORM cwstore._refuse_node_row(v_rule, v_gid, v_lo, v_one_id);
    END IF;
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

CREATE TRIGGER nodes_inserted AFTER INSERT ON cwstore.nodes
  REFERENCING NEW TABLE AS new_nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._nodes_inserted();

-- ---------------------------------------------------------------------------------
-- declared frontiers
-- ---------------------------------------------------------------------------------

-- A declared frontier (a row of frontier_declarations) is checked (declared at the
-- graph's length, its heads nodes of the graph, each once) and, when it differs from
-- the current frontier, becomes it; the frontier's history takes it where it was
-- declared: now when the spans are written up to the length, else when the run that
-- holds it is derived (_derive_spans), reads past the watermark folding from it.
CREATE FUNCTION cwstore._frontier_declared() RETURNS trigger
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

CREATE TRIGGER frontier_declared AFTER INSERT ON cwstore.frontier_declarations
  FOR EACH ROW EXECUTE FUNCTION cwstore._frontier_declared();
