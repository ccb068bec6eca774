-- 40_derive: the nodes triggers, which check a whole statement's new rows and write
-- what is derived from them, in the same transaction: edges, frontier spans, resource
-- key versions and heads, running counts by kind, and the graph's new length; and the
-- trigger of declared frontiers.
--
-- Whoever writes (append_v1, import_rows_v1, a COPY by the owner, psql), every invariant
-- the database can hold is checked here: parents that exist, come earlier and are sorted,
-- semantic payloads of the right shape and vocabulary, resource chains that link to the
-- key's head, gapless sequences.
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

-- One trigger function, fired once per statement that inserts nodes. Its statements
-- are planned once per session and the plans kept, so a plan made for a one-node
-- append must not be reused for a 100,000-node import or the other way round: the
-- function has two ways to derive, each with statements of its own. For a batch of up
-- to 3 rows it derives node by node, one statement of short index lookups and writes
-- per node (and one more per keyed node), cheaper than the set-based statements for so
-- few; for a larger one, with set-based statements over the whole batch (with more
-- work_mem: they sort and hash whole batches; and no JIT: statements over unnest() have
-- no statistics, their cost estimates run high, and compiling them took longer than
-- running them). Both ways check the same rules and write the same rows
-- (tests/contract/test_derive_paths.py); the test suites run both.

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
                 WHEN u.prev COLLATE "C" >= u.pid COLLATE "C"
                   THEN cwstore._violation('parent_order', nd.graph_id, nd.seq, nd.id,
                     format('$.parents[%s]', u.o - 1), 'parents must be sorted ascending and listed once')
                 WHEN m.seq IS NULL THEN cwstore._violation('missing_parent', nd.graph_id, nd.seq,
                   nd.id, format('$.parents[%s]', u.o - 1), format('parent %s does not exist', u.pid))
                 WHEN m.seq >= nd.seq THEN cwstore._violation('parent_order', nd.graph_id, nd.seq,
                   nd.id, format('$.parents[%s]', u.o - 1),
                   format('parent %s is not earlier in sequence', u.pid))
                 ELSE m.seq
               END
          FROM (SELECT x.pid, x.o, lag(x.pid) OVER (ORDER BY x.o) AS prev
                  FROM unnest(nd.parents) WITH ORDINALITY AS x(pid, o)) u
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
      -- (Each parent's predecessor by lag(): a text[] element found by its index is
      -- read from the array's start, quadratic in a node's parents.)
      SELECT array_agg(u.seq), array_agg(u.id), array_agg(u.ord::integer - 1), array_agg(u.pid),
             array_agg(u.prev), array_agg(u.folds)
        INTO p_child, p_id, p_pos, p_pid, p_prev, p_folds
        FROM (SELECT n.seq, n.id, x.ord, x.pid,
                     lag(x.pid) OVER (PARTITION BY n.seq ORDER BY x.ord) AS prev,
                     NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
                       AS folds
                FROM new_nodes n, unnest(n.parents) WITH ORDINALITY AS x(pid, ord)
               WHERE n.graph_id = v_gid) u;
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
   WHERE s.graph_id = NEW.graph_id AND s.to_seq = cwstore.infinity_seq();
  IF coalesce(current_heads, '{}') = NEW.heads THEN
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

CREATE TRIGGER frontier_declared AFTER INSERT ON cwstore.frontier_declarations
  FOR EACH ROW EXECUTE FUNCTION cwstore._frontier_declared();
