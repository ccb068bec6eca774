-- 0005_erasure: forgetting on request, graph names that never collide, and calls
-- bounded in time whatever their input.
--
-- Why: history was append-only with no way to remove a graph short of a superuser
-- turning the guards off; a graph's key, 48 bits of its name's MD5, refused for good a
-- second name with the same key (docs/erasure.md); and some calls cost the square of
-- their input (docs/reliability.md).
--
--   * cwstore.erasures, the audit record: inserting a row erases the graph (its trigger,
--     90_erasure.sql); erase_graph_v1, erase_tenant_v1, idle_graphs_v1, erase_idle_v1
--     decide who erases what (unrestricted roles; cwstore_admin for its tenants). The
--     guards of nodes, edges and frontier_declarations, and of graphs' DELETE, let
--     removals through only at trigger depth 1, as those of the derived tables do.
--   * graphs.key_probe and graph_key(name, probe): a name whose key is held takes the
--     next key of its chain; graph_key_detours records the keys passed over, and
--     graph_id_of walks the chain. graphs_key_check is a trigger now (on insert and on
--     updates of graph_id, name, key_probe), not a CHECK prepared again by every update
--     of a graph's length. Every existing graph is at probe 0 (collisions were
--     refused), so no graph_id changes.
--   * graphs.incarnation tells one life of a graph from a later one of the same name;
--     existing graphs take their graph_id (unique among them), new lives the sequence
--     graph_incarnations, which starts above every graph_id.
--   * append_v1 refuses a stale expected_length before it writes; a writer whose graph
--     is erased while it waits gets CW404 and never creates it again.
--   * tail_all_v2: the all-graphs feed with erasure events (tail_all_v1 unchanged in
--     what it returns).
--   * Linear where they were quadratic: ancestors/descendants (_walk no longer hands
--     every node reached to each level's query), a node's parents checked in order
--     (lag() instead of reading a text[] element by index, from the array's start).
--     ancestors/descendants read the walk before they join the nodes (_walk_nodes): on
--     Citus one statement doing both ran the walk on the worker, which refused it.
--   * _heads_at tests a closed version's range as int8range containment: PostgreSQL 18
--     ANDed its GiST scan with a btree scan of the graph's versions (2 ms at 50k).
--   * A graph name is at most max_graph_name_bytes() (2000) bytes wherever a graph is
--     created, as the clients already required; messages quote 200 characters of it.
--   * A payload is at most max_payload_bytes() (4 MiB) of JSON text (too_large), as the
--     validator requires; a payload over 64 kB is checked for repeated member names a
--     slice at a time (_members_unique) instead of whole in jsonb, which took about 80
--     times its text in memory.
--   * The nodes trigger and append_v1 split into functions named for what they do
--     (_check_semantic, _derive_node, _derive_parents, _derive_chains, _count_kinds,
--     _advance_length; _frontier_heads, _writer_graph, _batch_fields, _refuse_repeated,
--     _lock_for_append, _refuse_changed, _declare_after_append); nothing they accept or
--     write changed.
--   * Flat in the graph's length: a one-node append looks nodes up by id or sequence
--     as an index lookup (LATERAL ... LIMIT 1) in _derive_node and _frontier_declared,
--     whatever plan the session kept from when the graph was small; _nodes_inserted hands
--     _derive_node its ids and key in the default collation, so its lookups in
--     key_heads, key_versions and kind_counts use their indexes (a "C" argument made
--     them scans of the graph's rows). The same in append_v1's checks of the batch's
--     ids (_refuse_changed, _refuse_stale, _declare_after_append) and in the reads that
--     look up a node per head, key version or step (frontier_at, heads_at, semantic_at,
--     path, key_history, export_parts_v1, projection_v1, _walk_nodes) and in _idle
--     (a graph's last node): as joins, plans made while the table was small read every
--     node of the graph (of every graph, in _idle).
--
-- The definitions below are those of cwstore/sql/schema/, where they are documented.
--
-- Safe with live writers: yes, between transactions (graphs is rewritten for its new
-- columns under an exclusive lock, held for this migration's one transaction). On a
-- Citus cluster already distributed, `cwstore init` then re-applies cwstore/sql/citus.sql,
-- which distributes the two new tables.

SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- 10_helpers

ALTER TABLE cwstore.graphs DROP CONSTRAINT graphs_key_check;
DROP FUNCTION cwstore.graph_key(text);
CREATE FUNCTION cwstore.graph_key(p_name text, p_probe integer DEFAULT 0) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT ('x' || left(md5(CASE WHEN p_probe = 0 THEN p_name
                               ELSE p_probe::text || ':' || p_name END), 12))::bit(48)::bigint
$$;
COMMENT ON FUNCTION cwstore.graph_key(text, integer) IS
  'The key of a graph name at a probe of its chain (48 bits of md5; probe 0, the default, is the graph_id of almost every graph): graphs.graph_id = graph_key(name, key_probe).';

CREATE FUNCTION cwstore.max_graph_name_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 2000
$$;
COMMENT ON FUNCTION cwstore.max_graph_name_bytes() IS
  'The longest graph name, in bytes of UTF-8 (2000).';

CREATE FUNCTION cwstore.max_payload_bytes() RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT 4194304
$$;
COMMENT ON FUNCTION cwstore.max_payload_bytes() IS
  'The largest payload, in bytes of its JSON text (4 MiB).';

-- 20_tables

CREATE SEQUENCE cwstore.graph_incarnations AS bigint START WITH 281474976710656;

ALTER TABLE cwstore.graphs ADD COLUMN key_probe integer NOT NULL DEFAULT 0;
ALTER TABLE cwstore.graphs ADD COLUMN incarnation bigint;
UPDATE cwstore.graphs SET incarnation = graph_id;
ALTER TABLE cwstore.graphs ALTER COLUMN incarnation SET DEFAULT nextval('cwstore.graph_incarnations');
ALTER TABLE cwstore.graphs ALTER COLUMN incarnation SET NOT NULL;
COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name, key_probe), key_probe 0 unless another name held that key; incarnation tells this life of the graph from a later one of the same name. The row is the per-graph lock of the append path.';

CREATE TABLE cwstore.graph_key_detours (
  slot      bigint NOT NULL,
  graph_id  bigint NOT NULL,
  CONSTRAINT graph_key_detours_pkey PRIMARY KEY (slot, graph_id)
);
COMMENT ON TABLE cwstore.graph_key_detours IS
  'Keys a graph''s chain passed over: graph graph_id (key_probe > 0) found slot held by another name when it was created, so finding its name goes on past slot even once slot is free. Written when such a graph is created, removed when it is erased.';

CREATE TABLE cwstore.erasures (
  erasure_id   bigint GENERATED ALWAYS AS IDENTITY,
  graph_id     bigint NOT NULL,
  incarnation  bigint NOT NULL,
  tenant       text NOT NULL,
  nodes        bigint NOT NULL,
  erased_at    timestamptz NOT NULL DEFAULT now(),
  erased_by    name NOT NULL DEFAULT session_user,
  reason       text,
  xid          bigint NOT NULL,
  CONSTRAINT erasures_pkey PRIMARY KEY (graph_id, erasure_id),
  CONSTRAINT erasures_reason_check CHECK (octet_length(reason) <= 1000)
);
CREATE INDEX erasures_xid_idx ON cwstore.erasures (xid);
COMMENT ON TABLE cwstore.erasures IS
  'The audit record of erased graphs, one row each, append-only: the graph''s key (not its name, often personal data), which life of it, its tenant, how many nodes it held, when, by which login role, the reason given, and xid, its place in the all-graphs feed. Inserting a row is the erasure: its trigger removes the graph (90_erasure.sql). Nothing of the content is kept.';

-- 30_guards

CREATE OR REPLACE FUNCTION cwstore._refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW403',
    MESSAGE = format('cwstore.%s is append-only history: %s refused', TG_TABLE_NAME, TG_OP),
    DETAIL = jsonb_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text,
    HINT = 'A graph is removed whole, and recorded, by cwstore.erase_graph_v1 (docs/erasure.md)';
END $$;

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
     OR (NEW.length <> OLD.length AND pg_trigger_depth() < 2) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L: its id, name, incarnation and length are kept by cwstore: UPDATE refused', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  IF NEW.vocabulary IS DISTINCT FROM OLD.vocabulary AND OLD.length > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L holds nodes: its vocabulary cannot change', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  RETURN NEW;
END $$;

DROP TRIGGER nodes_append_only ON cwstore.nodes;
CREATE TRIGGER nodes_append_only BEFORE UPDATE ON cwstore.nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER nodes_erased_only BEFORE DELETE ON cwstore.nodes
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
DROP TRIGGER edges_append_only ON cwstore.edges;
CREATE TRIGGER edges_append_only BEFORE UPDATE ON cwstore.edges
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_erased_only BEFORE DELETE ON cwstore.edges
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
DROP TRIGGER frontier_declarations_append_only ON cwstore.frontier_declarations;
CREATE TRIGGER frontier_declarations_append_only BEFORE UPDATE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_declarations_erased_only BEFORE DELETE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
DROP TRIGGER graphs_guard_delete ON cwstore.graphs;
DROP TRIGGER graphs_guard ON cwstore.graphs;
CREATE TRIGGER graphs_guard_delete BEFORE DELETE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1 OR NEW.graph_id <> OLD.graph_id
                     OR NEW.incarnation <> OLD.incarnation
                     OR NEW.name <> OLD.name OR NEW.vocabulary IS DISTINCT FROM OLD.vocabulary)
  EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graph_key_detours_derived BEFORE INSERT OR UPDATE OR DELETE
  ON cwstore.graph_key_detours
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER graph_key_detours_no_truncate BEFORE TRUNCATE ON cwstore.graph_key_detours
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER erasures_append_only BEFORE UPDATE OR DELETE ON cwstore.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON cwstore.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();

-- 40_derive

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

CREATE FUNCTION cwstore._derive_node(p_graph_id bigint, p_seq bigint, p_id text, p_kind text,
                                     p_parents text[], p_key text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_folds boolean := NOT (p_kind = 'semantic' OR (p_kind = 'system' AND cardinality(p_parents) = 0));
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
  closed AS (
    UPDATE cwstore.frontier_spans s SET to_seq = p_seq
      FROM e
     WHERE v_folds AND s.graph_id = p_graph_id AND s.head_seq = e.parent_seq
       AND s.to_seq = cwstore.infinity_seq()),
  opened AS (
    INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
    SELECT p_graph_id, p_seq, p_seq, 0, cwstore.infinity_seq() WHERE v_folds)
  INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
  SELECT p_graph_id, p_kind, p_seq,
         coalesce((SELECT k.n FROM cwstore.kind_counts k
                    WHERE k.graph_id = p_graph_id AND k.kind = p_kind
                    ORDER BY k.seq DESC LIMIT 1), 0) + 1;

  IF p_key IS NULL THEN
    RETURN;
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
END $$;

CREATE FUNCTION cwstore._derive_parents(p_graph_id bigint, a_seq bigint[], a_id text[],
                                        a_folds boolean[], p_child bigint[], p_id text[],
                                        p_pos integer[], p_pid text[], p_prev text[],
                                        p_folds boolean[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  p_seq bigint[];
  c_parent bigint[];
  c_at bigint[];
BEGIN
  IF p_child IS NOT NULL THEN
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
    SELECT array_agg(x.parent_seq), array_agg(x.close_seq) INTO c_parent, c_at
      FROM (SELECT u.s AS parent_seq, min(u.c) AS close_seq
              FROM unnest(p_child, p_seq, p_folds) AS u(c, s, f)
             WHERE u.f GROUP BY u.s) x;
    -- Only open spans (the partial index), so this join stays small at any size.
    UPDATE cwstore.frontier_spans s SET to_seq = c.close_seq
      FROM unnest(c_parent, c_at) AS c(parent_seq, close_seq)
     WHERE s.graph_id = p_graph_id AND s.head_seq = c.parent_seq
       AND s.to_seq = cwstore.infinity_seq();
  END IF;
  INSERT INTO cwstore.frontier_spans (graph_id, head_seq, from_seq, ord, to_seq)
  SELECT p_graph_id, n.seq, n.seq, 0, coalesce(c.close_seq, cwstore.infinity_seq())
    FROM unnest(a_seq, a_folds) AS n(seq, folds)
    LEFT JOIN unnest(c_parent, c_at) AS c(parent_seq, close_seq) ON c.parent_seq = n.seq
   WHERE n.folds;
END $$;

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
  UPDATE cwstore.key_versions v SET to_seq = c.seq
    FROM unnest(v_key, v_seq, v_rn, v_base) AS c(key, seq, rn, head_seq)
   WHERE c.rn = 1 AND c.head_seq IS NOT NULL
     AND v.graph_id = p_graph_id AND v.key = c.key AND v.node_seq = c.head_seq;
  INSERT INTO cwstore.key_versions (graph_id, key, version, node_seq, to_seq)
  SELECT p_graph_id, u.key, u.version, u.seq, coalesce(u.next_seq, cwstore.infinity_seq())
    FROM unnest(v_key, v_version, v_seq, v_next) AS u(key, version, seq, next_seq);
  INSERT INTO cwstore.key_heads AS h (graph_id, key, head_seq, head_id, version, first_seq)
  SELECT p_graph_id, u.key, u.seq, u.id, u.version, u.batch_first
    FROM unnest(v_key, v_seq, v_id, v_version, v_next, v_first)
           AS u(key, seq, id, version, next_seq, batch_first)
   WHERE u.next_seq IS NULL
  ON CONFLICT (graph_id, key) DO UPDATE
    SET head_seq = excluded.head_seq, head_id = excluded.head_id,
        version = excluded.version;
END $$;

CREATE FUNCTION cwstore._count_kinds(p_graph_id bigint, a_seq bigint[], a_kind text[])
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  b_kind text[];
  b_n bigint[];
BEGIN
  SELECT array_agg(d.kind), array_agg(
           coalesce((SELECT k.n FROM cwstore.kind_counts k
                      WHERE k.graph_id = p_graph_id AND k.kind = d.kind
                      ORDER BY k.seq DESC LIMIT 1), 0))
    INTO b_kind, b_n
    FROM (SELECT DISTINCT u.kind FROM unnest(a_kind) AS u(kind)) d;
  INSERT INTO cwstore.kind_counts (graph_id, kind, seq, n)
  SELECT p_graph_id, n.kind, n.seq,
         b.n + row_number() OVER (PARTITION BY n.kind ORDER BY n.seq)
    FROM unnest(a_seq, a_kind) AS n(seq, kind)
    JOIN unnest(b_kind, b_n) AS b(kind, n) ON b.kind = n.kind;
END $$;

CREATE FUNCTION cwstore._advance_length(p_graph_id bigint, p_lo bigint, p_hi bigint,
                                        p_count bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  r record;
BEGIN
  UPDATE cwstore.graphs g SET length = p_hi
   WHERE g.graph_id = p_graph_id AND p_lo = g.length + 1 AND p_hi = g.length + p_count;
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
END $$;

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
  a_folds boolean[];
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

  IF v_rows <= 3 THEN
    FOR nd IN SELECT * FROM new_nodes ORDER BY graph_id, seq LOOP
      -- The ids and keys as the default collation: nodes' are "C", and a "C" argument
      -- would make every text comparison in _derive_node "C", which the indexes of
      -- key_heads, key_versions and kind_counts cannot serve (a scan of the graph's rows).
      PERFORM cwstore._derive_node(nd.graph_id, nd.seq, nd.id COLLATE "default", nd.kind,
                                   nd.parents, nd.resource_key COLLATE "default");
    END LOOP;
  ELSE
    v_work_mem := current_setting('work_mem');
    v_jit := current_setting('jit');
    PERFORM set_config('work_mem', '64MB', true), set_config('jit', 'off', true);
    FOREACH v_gid IN ARRAY v_gids LOOP
      SELECT array_agg(n.seq ORDER BY n.seq), array_agg(n.id ORDER BY n.seq),
             array_agg(n.kind ORDER BY n.seq),
             array_agg(NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
                       ORDER BY n.seq)
        INTO a_seq, a_id, a_kind, a_folds
        FROM new_nodes n WHERE n.graph_id = v_gid;
      -- One row per (child, parent), with the parent before it in the child's list.
      -- (lag(), not an element found by its index: a text[] element is read from the
      -- array's start, quadratic in a node's parents.)
      SELECT array_agg(u.seq), array_agg(u.id), array_agg(u.ord::integer - 1), array_agg(u.pid),
             array_agg(u.prev), array_agg(u.folds)
        INTO p_child, p_id, p_pos, p_pid, p_prev, p_folds
        FROM (SELECT n.seq, n.id, x.ord, x.pid,
                     lag(x.pid) OVER (PARTITION BY n.seq ORDER BY x.ord) AS prev,
                     NOT (n.kind = 'semantic' OR (n.kind = 'system' AND cardinality(n.parents) = 0))
                       AS folds
                FROM new_nodes n, unnest(n.parents) WITH ORDINALITY AS x(pid, ord)
               WHERE n.graph_id = v_gid) u;
      PERFORM cwstore._derive_parents(v_gid, a_seq, a_id, a_folds, p_child, p_id, p_pos, p_pid,
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
    END LOOP;
    PERFORM set_config('work_mem', v_work_mem, true), set_config('jit', v_jit, true);
  END IF;

  FOR i IN 1 .. cardinality(v_gids) LOOP
    PERFORM cwstore._advance_length(v_gids[i], v_los[i], v_his[i], v_cnts[i]);
  END LOOP;
  RETURN NULL;
END
$body$;

CREATE OR REPLACE FUNCTION cwstore._frontier_declared() RETURNS trigger
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
    LEFT JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                        WHERE n.graph_id = NEW.graph_id AND n.id = u.h LIMIT 1) n ON true;
  IF missing IS NOT NULL THEN
    PERFORM cwstore._violation('frontier_reference', NEW.graph_id, NULL, missing, '$.frontier',
      format('frontier references missing node %s', missing));
  END IF;

  SELECT array_agg(n.id ORDER BY s.from_seq, s.ord) INTO current_heads
    FROM cwstore.frontier_spans s
    JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                   WHERE n.graph_id = NEW.graph_id AND n.seq = s.head_seq LIMIT 1) n ON true
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

-- 50_tenancy

ALTER TABLE cwstore.erasures ENABLE ROW LEVEL SECURITY;
CREATE POLICY erasures_tenant ON cwstore.erasures USING (cwstore._sees_tenant(tenant));

CREATE OR REPLACE FUNCTION cwstore._check_writer(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_tenant IS NOT NULL AND NOT cwstore._may_use(p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not write graph %L: the graph belongs to a tenant the role is not a member of',
                       session_user, left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text,
      HINT = 'An administrator adds the role to the tenant: SELECT cwstore.add_tenant_member(tenant, role)';
  END IF;
END $$;

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
                                          'declare_frontier_v1') THEN 'cwstore_writer'
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

-- 55_graph_keys

CREATE FUNCTION cwstore.graph_id_of(p_name text) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
  v_key bigint;
  v_name text;
BEGIN
  FOR v_probe IN 0..63 LOOP
    v_key := cwstore.graph_key(p_name, v_probe);
    SELECT g.name INTO v_name FROM cwstore.graphs g WHERE g.graph_id = v_key;
    IF FOUND THEN
      IF v_name = p_name THEN
        RETURN v_key;
      END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM cwstore.graph_key_detours d WHERE d.slot = v_key) THEN
      RETURN NULL;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION cwstore.graph_id_of(text) IS
  'The graph_id of a graph name (the key of its chain it holds), or NULL when there is no such graph.';

CREATE FUNCTION cwstore.find_graph(p_name text)
RETURNS TABLE (graph_id bigint, length bigint, vocabulary text[], incarnation bigint)
LANGUAGE plpgsql STABLE STRICT ROWS 1 AS $$
DECLARE
  v_key bigint := cwstore.graph_id_of(p_name);
BEGIN
  RETURN QUERY
  SELECT g.graph_id, g.length, g.vocabulary, g.incarnation
    FROM cwstore.graphs g WHERE g.graph_id = v_key AND g.name = p_name;
END $$;
COMMENT ON FUNCTION cwstore.find_graph(text) IS
  'The graph of a name: graph_id, length, vocabulary (NULL = dynamic) and incarnation (which life of the name); no row when there is none the caller may see.';

CREATE FUNCTION cwstore._create_graph(p_name text, p_vocabulary text[], p_tenant text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_key bigint;
  v_name text;
  v_free integer;
  v_id bigint;
BEGIN
  PERFORM pg_catalog.pg_advisory_xact_lock(cwstore.graph_key(p_name, 0));
  LOOP
    v_free := NULL;
    FOR v_probe IN 0..63 LOOP
      v_key := cwstore.graph_key(p_name, v_probe);
      SELECT g.name INTO v_name FROM cwstore.graphs g WHERE g.graph_id = v_key;
      IF FOUND THEN
        IF v_name = p_name THEN
          RETURN v_key;
        END IF;
        CONTINUE;
      END IF;
      v_free := coalesce(v_free, v_probe);
      EXIT WHEN NOT EXISTS (SELECT 1 FROM cwstore.graph_key_detours d WHERE d.slot = v_key);
    END LOOP;
    IF v_free IS NULL THEN
      PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
        format('graph name %L cannot be used: no free key within 64 probes of its chain',
               left(p_name, 200)));
    END IF;
    -- Another name may take the same key meanwhile (one whose chain crosses this one):
    -- then walk again.
    INSERT INTO cwstore.graphs (graph_id, name, vocabulary, tenant, key_probe)
    VALUES (cwstore.graph_key(p_name, v_free), p_name, p_vocabulary, p_tenant, v_free)
    ON CONFLICT (graph_id) DO NOTHING RETURNING graph_id INTO v_id;
    IF v_id IS NOT NULL THEN
      RETURN v_id;  -- its detours: cwstore._graph_detoured
    END IF;
  END LOOP;
END $$;

-- _graphs_key (BEFORE INSERT, or UPDATE of graph_id, name or key_probe, on graphs):
-- graph_id is the key of the name at its probe, graph_key(name, key_probe), and
-- key_probe >= 0; refused as the check constraint graphs_key_check would be (23514,
-- that name). A trigger on those columns, not a CHECK: PostgreSQL prepares a table's
-- CHECK expressions again in every statement that updates a row, and the append path
-- updates its graph's length in every call.
CREATE FUNCTION cwstore._graphs_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.key_probe < 0 OR NEW.graph_id <> cwstore.graph_key(NEW.name, NEW.key_probe) THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'graphs_key_check',
      SCHEMA = 'cwstore', TABLE = 'graphs',
      MESSAGE = 'new row for relation "graphs" violates check constraint "graphs_key_check"',
      DETAIL = format('graph_id %s is not the key of its name at probe %s', NEW.graph_id,
                      NEW.key_probe);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER graphs_key_check BEFORE INSERT OR UPDATE OF graph_id, name, key_probe
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_key();

CREATE FUNCTION cwstore._graph_detoured() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  FOR p IN 0 .. NEW.key_probe - 1 LOOP
    INSERT INTO cwstore.graph_key_detours (slot, graph_id)
    VALUES (cwstore.graph_key(NEW.name, p), NEW.graph_id);
  END LOOP;
  RETURN NULL;
END $$;

CREATE TRIGGER graphs_detoured AFTER INSERT ON cwstore.graphs
  FOR EACH ROW WHEN (NEW.key_probe > 0) EXECUTE FUNCTION cwstore._graph_detoured();

CREATE FUNCTION cwstore._erased_meanwhile(p_graph text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW404',
    MESSAGE = format('graph %L was erased while this call waited for it', left(p_graph, 200)),
    DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
END $$;

CREATE FUNCTION cwstore._check_after_erasure(p_graph text, p_graph_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL
     AND EXISTS (SELECT 1 FROM cwstore.erasures e
                  WHERE e.graph_id = p_graph_id
                    AND e.xid >= pg_catalog.pg_current_xact_id()::text::bigint) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L was erased by a transaction newer than this one: write it again in a new transaction',
                       left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
  END IF;
END $$;

-- 60_write_api

CREATE FUNCTION cwstore._json_values(p_bare text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT length(b) - length(translate(b, '{[', '')) + (length(b) - length(replace(b, '""', ''))) / 2
         + regexp_count(b, '-?[0-9][0-9.eE+-]*|true|false|null')
    FROM (SELECT replace(p_bare, '"":', ':') AS b) x
$$;

CREATE FUNCTION cwstore._members_unique_small(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_doc jsonb := cwstore.payload_jsonb(p_text);
BEGIN
  IF length(p_bare) - length(translate(p_bare, '{[', '')) > 1000 THEN
    RETURN cwstore._json_values(p_bare)
           = cwstore._json_values(regexp_replace(v_doc::text, '"(\\.|[^"\\])*"', '""', 'g'));
  END IF;
  RETURN cwstore._json_values(p_bare)
         = jsonb_array_length(jsonb_path_query_array(v_doc, 'strict $.**.type()'));
END $$;

CREATE FUNCTION cwstore._json_slices(p_values text[]) RETURNS SETOF text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT '[' || string_agg(v, ',' ORDER BY o) || ']'
    FROM (SELECT v, o, sum(octet_length(v) + 1) OVER (ORDER BY o) / 32768 AS slice
            FROM unnest(p_values) WITH ORDINALITY AS u(v, o)) x
   GROUP BY slice
$$;

CREATE FUNCTION cwstore._members_unique(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_todo text[];
  v_doc json;
  v_parts text[];
BEGIN
  IF octet_length(p_text) <= 65536 THEN
    RETURN cwstore._members_unique_small(p_text, p_bare);
  END IF;
  -- json's functions refuse \u0000 where they unescape (names): shown as U+FFFD, as
  -- payload_jsonb does.
  v_todo := ARRAY[CASE WHEN strpos(p_text, '\u0000') = 0 THEN p_text
                       ELSE replace(replace(replace(p_text, '\\', E'\x01'), '\u0000', '\ufffd'),
                                    E'\x01', '\\') END];
  WHILE cardinality(v_todo) > 0 LOOP
    v_doc := v_todo[cardinality(v_todo)]::json;
    v_todo := trim_array(v_todo, 1);
    IF json_typeof(v_doc) = 'object' THEN
      IF EXISTS (SELECT 1 FROM json_object_keys(v_doc) k GROUP BY k HAVING count(*) > 1) THEN
        RETURN false;
      END IF;
      v_parts := ARRAY(SELECT e.value::text FROM json_each(v_doc) e);
    ELSIF json_typeof(v_doc) = 'array' THEN
      v_parts := ARRAY(SELECT e::text FROM json_array_elements(v_doc) e);
    ELSE
      CONTINUE;
    END IF;
    IF EXISTS (SELECT 1 FROM cwstore._json_slices(
                 ARRAY(SELECT v FROM unnest(v_parts) v WHERE octet_length(v) <= 32768)) t
                WHERE NOT cwstore._members_unique_small(
                        t, regexp_replace(t, '"(\\.|[^"\\])*"', '""', 'g'))) THEN
      RETURN false;
    END IF;
    v_todo := v_todo || ARRAY(SELECT v FROM unnest(v_parts) v WHERE octet_length(v) > 32768);
  END LOOP;
  RETURN true;
END $$;

CREATE FUNCTION cwstore._refuse_stale(p_graph text, p_graph_id bigint, p_nodes json,
                                      p_expected bigint, p_length bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_held bigint := 0;
BEGIN
  -- A batch with a \u escape (a U+0000 or a lone surrogate may be among them, which
  -- ->> refuses) is left to the check under the lock.
  IF strpos(p_nodes::text, '\u') > 0 THEN
    RETURN;
  END IF;
  v_ids := ARRAY(SELECT DISTINCT e ->> 'id' FROM json_array_elements(p_nodes) e);
  IF p_graph_id IS NOT NULL AND array_position(v_ids, NULL) IS NULL THEN
    SELECT count(*) INTO v_held
      FROM unnest(v_ids) AS u(id)
      JOIN LATERAL (SELECT 1 FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.id = u.id LIMIT 1) n ON true;
  END IF;
  IF v_held < cardinality(v_ids) OR cardinality(v_ids) = 0 AND p_graph_id IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200),
                       p_length, p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', p_length)::text;
  END IF;
END $$;

CREATE OR REPLACE FUNCTION cwstore._payload_problem(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_rest text;
  v_bare text;
  v_tok text;
  v_js text;
BEGIN
  -- Escapes: take out those JSON.stringify writes (escaped backslashes first, pair by
  -- pair from the left, so each backslash left starts an escape); none may remain.
  v_rest := replace(p_text, '\\', '');
  IF strpos(v_rest, '\') > 0 THEN
    v_rest := replace(replace(replace(replace(replace(replace(v_rest, '\"', ''), '\n', ''),
                                                      '\t', ''), '\r', ''), '\b', ''), '\f', '');
    IF strpos(v_rest, '\') > 0 THEN
      v_rest := regexp_replace(v_rest, '\\u00(0[0-7bef]|1[0-9a-f])', '', 'g');
      IF strpos(v_rest, '\') > 0 THEN
        IF cwstore._lone_surrogate(p_text) THEN
          RETURN 'unrepresentable|$.payload|a string holds a lone surrogate (not valid Unicode)';
        END IF;
        RETURN format('shape|$.payload|the escape %s is not how JSON.stringify writes that character',
                      substring(v_rest FROM '\\(?:u[0-9a-fA-F]{4}|.)'));
      END IF;
    END IF;
  END IF;
  -- What is left outside strings: punctuation, literals and numbers, nothing else.
  v_bare := regexp_replace(v_rest, '"[^"]*"', '""', 'g');
  IF v_bare ~ '[ \t\n\r]' THEN
    RETURN 'shape|$.payload|whitespace outside strings: send the payload as JSON.stringify writes it (compact)';
  END IF;
  IF v_bare ~ '[.eE]|[0-9]{16}|-0' THEN
    SELECT m[1] INTO v_tok
      FROM regexp_matches(v_bare, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
     WHERE m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
     LIMIT 1;
    IF FOUND THEN
      v_js := cwstore.js_number(v_tok);
      IF v_js IS NULL AND v_tok ~ '^-?[0-9.]+[eE]\+?[0-9]+$' THEN
        RETURN format('unrepresentable|$.payload|%s is not a finite number', v_tok);
      ELSIF v_tok ~ '^-?[0-9]+$' AND v_tok <> '-0' THEN
        RETURN format('unrepresentable|$.payload|integer %s is beyond +-(2^53-1): JavaScript cannot hold it exactly',
                      v_tok);
      END IF;
      RETURN format('shape|$.payload|the number %s is written %s by JSON.stringify', v_tok,
                    coalesce(v_js, 'as 0'));
    END IF;
  END IF;
  -- Nesting depth: the deepest point of the running count of brackets outside strings.
  IF length(v_bare) - length(translate(v_bare, '{[', '')) > 10000
     AND (SELECT max(d) FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1 ELSE -1 END)
                                       OVER (ORDER BY o) AS d
                                FROM string_to_table(regexp_replace(v_bare, '[^][{}]', '', 'g'),
                                                     NULL) WITH ORDINALITY AS t(c, o)) x) > 10000 THEN
    RETURN 'unrepresentable|$.payload|nesting deeper than 10000 levels';
  END IF;
  -- Repeated member names (after the depth, which bounds the stack their check takes):
  -- jsonb keeps one member per name, so it holds fewer values than the text when a name
  -- repeats. Values in the text: containers, strings that are not member names, numbers
  -- and literals.
  IF length(v_bare) - length(replace(v_bare, '"":', '')) >= 6
     AND NOT cwstore._members_unique(p_text, v_bare) THEN
    RETURN 'shape|$.payload|an object repeats a member name (JSON.parse would keep only the last)';
  END IF;
  RETURN NULL;
END $$;

CREATE OR REPLACE FUNCTION cwstore._node_problem(p_kind text, p_payload text, p_created text, p_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_content text;
  v_units bigint;
BEGIN
  IF NOT cwstore._created_at_ok(p_created) THEN
    RETURN format('created_at|$.createdAt|createdAt %s is not an RFC 3339 date-time with a zone that JavaScript reads as written',
                  to_json(p_created));
  END IF;
  IF octet_length(p_key) > 2000 THEN
    RETURN format('shape|$.resourceKey|resourceKey is %s bytes of UTF-8; at most 2000 are allowed',
                  octet_length(p_key));
  END IF;
  IF p_payload IS NULL THEN
    RETURN 'shape|$.payload|payload is missing';
  END IF;
  IF octet_length(p_payload) > cwstore.max_payload_bytes() THEN
    RETURN format('too_large|$.payload|payload is %s bytes of JSON; at most %s are allowed',
                  octet_length(p_payload), cwstore.max_payload_bytes());
  END IF;
  IF p_kind = 'semantic' THEN
    v_content := cwstore._json_member_text(p_payload, 'content');
    v_units := char_length(v_content)
               + (SELECT count(*) FROM regexp_matches(v_content, '[\U00010000-\U0010FFFF]', 'g'));
    IF v_units > 100000 THEN
      RETURN format('semantic_payload|$.payload.content|semantic content is %s characters of JSON; at most 100000',
                    v_units);
    END IF;
  END IF;
  RETURN cwstore._payload_problem(p_payload);
END $$;

CREATE OR REPLACE FUNCTION cwstore.ensure_graph_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_tenant text;
BEGIN
  IF p_graph IS NULL OR p_graph = '' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
                               'a graph name must be a non-empty string');
  END IF;
  IF octet_length(p_graph) > cwstore.max_graph_name_bytes() THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
      format('a graph name is at most %s bytes of UTF-8 (this one has %s)',
             cwstore.max_graph_name_bytes(), octet_length(p_graph)));
  END IF;
  v_id := cwstore.graph_id_of(p_graph);
  IF v_id IS NULL THEN
    v_tenant := cwstore._new_graph_tenant();
    IF session_user <> current_user THEN
      PERFORM cwstore._check_writer(p_graph, v_tenant);
    END IF;
    v_id := cwstore._create_graph(p_graph, p_vocabulary, v_tenant);
  END IF;
  SELECT g.tenant INTO v_tenant FROM cwstore.graphs g WHERE g.graph_id = v_id;
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
  IF NOT FOUND THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  IF v_len = 0 THEN
    PERFORM cwstore._check_after_erasure(p_graph, v_id);
  END IF;
  IF v_len > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph %L already holds %s nodes; import needs an empty graph', left(p_graph, 200), v_len),
      DETAIL = jsonb_build_object('graph', p_graph, 'length', v_len)::text;
  END IF;
  UPDATE cwstore.graphs SET vocabulary = p_vocabulary
   WHERE graph_id = v_id AND vocabulary IS DISTINCT FROM p_vocabulary;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.begin_import_v1(text, text[]) IS
  'Start importing into an empty graph: create or lock it; CW412 if it holds nodes. COPY rows into cwstore.nodes next, then declare_frontier_v1.';

CREATE FUNCTION cwstore._frontier_heads(p_frontier json) RETURNS text[]
LANGUAGE plpgsql AS $$
BEGIN
  IF p_frontier IS NULL THEN
    RETURN NULL;
  END IF;
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
  RETURN ARRAY(SELECT json_array_elements_text(p_frontier));
END $$;

CREATE FUNCTION cwstore._writer_graph(p_graph text, OUT found_id bigint, OUT found_length bigint,
                                      OUT found_tenant text)
LANGUAGE plpgsql AS $$
BEGIN
  found_id := cwstore.graph_key(p_graph);
  SELECT g.length, g.tenant INTO found_length, found_tenant FROM cwstore.graphs g
   WHERE g.graph_id = found_id AND g.name = p_graph;
  IF NOT FOUND THEN
    found_id := cwstore.graph_id_of(p_graph);
    IF found_id IS NOT NULL THEN
      SELECT g.length, g.tenant INTO found_length, found_tenant
        FROM cwstore.graphs g WHERE g.graph_id = found_id;
    END IF;
  END IF;
END $$;

CREATE FUNCTION cwstore._batch_fields(p_nodes json, OUT b_ids text[], OUT b_kinds text[],
                                      OUT b_parents text[], OUT b_payloads text[],
                                      OUT b_created text[], OUT b_keys text[])
LANGUAGE plpgsql AS $$
DECLARE
  v_hidden boolean := false;
  v_bad bigint;
  v_problem text;
  v_bad_id text;
BEGIN
  IF cwstore._lone_surrogate(p_nodes::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$',
      'a string holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  -- PostgreSQL's JSON functions refuse the escape \u0000: hide it (reversibly) first.
  IF strpos(p_nodes::text, '\u0000') > 0 THEN
    v_hidden := true;
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;
  SELECT array_agg(f.id #>> '{}' ORDER BY f.o), array_agg(f.kind #>> '{}' ORDER BY f.o),
         array_agg(f.parents::text ORDER BY f.o),
         array_agg(f.payload ORDER BY f.o),
         array_agg(f."createdAt" #>> '{}' ORDER BY f.o),
         array_agg(f."resourceKey" #>> '{}' ORDER BY f.o),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem ORDER BY f.o) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END ORDER BY f.o)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO b_ids, b_kinds, b_parents, b_payloads, b_created, b_keys, v_bad, v_problem, v_bad_id
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
  IF v_bad IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_bad, v_bad_id, v_bad - 1);
  END IF;
  b_ids := coalesce(b_ids, '{}');
END $$;

CREATE FUNCTION cwstore._refuse_repeated(p_ids text[], p_kinds text[], p_parents text[],
                                         p_payloads text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_bad bigint;
  v_bad_id text;
BEGIN
  SELECT b.o, b.id INTO v_bad, v_bad_id
    FROM unnest(p_ids) WITH ORDINALITY AS b(id, o)
    JOIN unnest(p_ids) WITH ORDINALITY AS a(id, o) ON a.id = b.id AND a.o < b.o
   WHERE NOT cwstore._same_content(
           p_kinds[a.o], ARRAY(SELECT json_array_elements_text(p_parents[a.o]::json)),
           p_payloads[a.o], p_keys[a.o],
           p_kinds[b.o], ARRAY(SELECT json_array_elements_text(p_parents[b.o]::json)),
           p_payloads[b.o], p_keys[b.o])
   ORDER BY b.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', NULL, v_bad, v_bad_id, format('$[%s].id', v_bad - 1),
      format('id %s is used by an earlier node of the batch with other content', v_bad_id));
  END IF;
END $$;

CREATE FUNCTION cwstore._lock_for_append(p_graph text, p_graph_id bigint, p_expected bigint,
                                         p_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint;
BEGIN
  SELECT g.length INTO v_len
    FROM cwstore.graphs g WHERE g.graph_id = p_graph_id AND g.name = p_graph FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  IF v_len = 0 THEN
    PERFORM cwstore._check_after_erasure(p_graph, p_graph_id);
  END IF;
  IF p_expected IS NOT NULL AND p_expected <> v_len
     AND EXISTS (SELECT 1 FROM unnest(p_ids) AS u(id)
                  WHERE NOT EXISTS (SELECT 1 FROM cwstore.nodes n
                                     WHERE n.graph_id = p_graph_id AND n.id = u.id)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200), v_len,
                       p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', v_len)::text;
  END IF;
  RETURN v_len;
END $$;

CREATE FUNCTION cwstore._refuse_changed(p_graph_id bigint, p_len bigint, p_ids text[],
                                        p_kinds text[], p_parents text[], p_payloads text[],
                                        p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_bad bigint;
  v_bad_id text;
  v_seq bigint;
BEGIN
  -- One index lookup per id (LATERAL ... LIMIT 1): as a join, a plan kept from a small
  -- graph scanned the graph's nodes up to p_len on every append.
  SELECT u.o, u.id, n.seq INTO v_bad, v_bad_id, v_seq
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT n.seq, n.kind, n.parents, n.payload_text, n.resource_key
                    FROM cwstore.nodes n
                   WHERE n.graph_id = p_graph_id AND n.id = u.id
                   LIMIT 1) n ON n.seq <= p_len
   WHERE NOT cwstore._same_content(
           n.kind, n.parents, n.payload_text, n.resource_key,
           p_kinds[u.o], ARRAY(SELECT json_array_elements_text(p_parents[u.o]::json)),
           p_payloads[u.o], p_keys[u.o])
   ORDER BY u.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', p_graph_id, v_bad, v_bad_id,
      format('$[%s].id', v_bad - 1),
      format('id %s is node %s of the graph, with other content', v_bad_id, v_seq));
  END IF;
END $$;

CREATE FUNCTION cwstore._declare_after_append(p_graph_id bigint, p_len bigint, p_new bigint,
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
            SELECT coalesce(array_agg(n.id ORDER BY s.from_seq, s.ord), '{}')
              FROM cwstore.frontier_spans s
              JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq
             WHERE s.graph_id = p_graph_id AND s.to_seq = cwstore.infinity_seq()) THEN
      RETURN;
    END IF;
  END IF;
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, p_len + p_new, p_heads);
END $$;

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
  v_heads text[];
  v_found record;
  v_batch record;
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
    v_heads := cwstore._frontier_heads(p_frontier);
  END IF;

  -- The graph's row is read first, without a lock, on its own: the tenant check comes
  -- before anything else (a refused caller learns nothing of the graph, and must not
  -- hold another tenant's counter row while it sits in its aborted transaction), a
  -- statement that both reads a distributed table and calls the check would run the
  -- check on the worker, where session_user is not the caller (Citus), and a graph found
  -- here but gone once locked was erased meanwhile: the call must not create it again.
  v_found := cwstore._writer_graph(p_graph);
  v_graph_id := v_found.found_id;
  v_len := v_found.found_length;
  v_tenant := v_found.found_tenant;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v_tenant);
  END IF;
  -- A stale expected length is refused before the batch is read: within a graph's life
  -- its length only grows, so a length seen here that differs from the expected one
  -- differs under the lock too (or the graph is gone by then: CW404). Unless every node
  -- of the batch is held already (a retry of a write that committed: not a conflict).
  IF p_expected_length IS NOT NULL AND p_expected_length <> coalesce(v_len, 0) THEN
    PERFORM cwstore._refuse_stale(p_graph, v_graph_id, p_nodes, p_expected_length,
                                  coalesce(v_len, 0));
  END IF;

  v_batch := cwstore._batch_fields(p_nodes);
  v_ids := v_batch.b_ids;
  v_kinds := v_batch.b_kinds;
  v_parents := v_batch.b_parents;
  v_payloads := v_batch.b_payloads;
  v_created := v_batch.b_created;
  v_keys := v_batch.b_keys;
  IF cardinality(v_ids) > 1 THEN
    PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
  END IF;
  IF v_graph_id IS NULL THEN
    v_graph_id := cwstore.ensure_graph_v1(p_graph);
  END IF;
  v_len := cwstore._lock_for_append(p_graph, v_graph_id, p_expected_length, v_ids);

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
  -- Only when the insert skipped some (raising undoes the insert).
  IF v_new < cardinality(v_ids) THEN
    PERFORM cwstore._refuse_changed(v_graph_id, v_len, v_ids, v_kinds, v_parents, v_payloads,
                                    v_keys);
  END IF;
  IF v_heads IS NOT NULL THEN
    PERFORM cwstore._declare_after_append(v_graph_id, v_len, v_new, v_heads, v_ids,
                                          p_expected_length);
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


CREATE OR REPLACE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
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

CREATE OR REPLACE FUNCTION cwstore._node_seq(p_graph_id bigint, p_graph text, p_node_id text)
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

CREATE OR REPLACE FUNCTION cwstore._walk(p_graph_id bigint, p_start bigint, p_up boolean,
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

CREATE OR REPLACE FUNCTION cwstore.ancestors(p_graph text, p_node_id text, p_max_depth integer DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION cwstore.descendants(p_graph text, p_node_id text, p_max_depth integer DEFAULT NULL)
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

-- 80_listeners

CREATE FUNCTION cwstore._erasure_events(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                        p_horizon bigint, p_limit integer)
RETURNS TABLE (xid bigint, graph_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT e.xid, e.graph_id FROM cwstore.erasures e
   WHERE e.xid >= p_xid
     AND (e.xid, e.graph_id, cwstore.infinity_seq()) > (p_xid, p_graph_id, p_seq)
     AND e.xid < p_horizon AND cwstore._may_use(e.tenant)
   ORDER BY e.xid, e.graph_id LIMIT p_limit
$$;

CREATE FUNCTION cwstore._tail_all(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                  p_limit integer, p_max_bytes bigint, p_erasures boolean)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text,
               erased boolean)
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
         x.created_at_text, x.resource_key, x.erased
    FROM (SELECT l.*, sum(coalesce(octet_length(l.payload_text), 0))
                        OVER (ORDER BY l.xid, l.graph_id, l.seq)
                      - coalesce(octet_length(l.payload_text), 0) AS before
            FROM (SELECT * FROM (
                    SELECT n.xid, n.graph_id, g.name, n.seq, n.id, n.kind, n.parents,
                           n.payload_text, n.created_at_text, n.resource_key, false AS erased
                      FROM cwstore.nodes n JOIN cwstore.graphs g ON g.graph_id = n.graph_id
                     WHERE n.xid >= p_xid
                       AND (n.xid, n.graph_id, n.seq) > (p_xid, p_graph_id, p_seq)
                       AND n.xid < v_horizon
                     ORDER BY n.xid, n.graph_id, n.seq
                     LIMIT p_limit) nodes
                  UNION ALL
                  SELECT e.xid, e.graph_id, NULL, cwstore.infinity_seq(), NULL, NULL, NULL,
                         NULL, NULL, NULL, true
                    FROM cwstore._erasure_events(p_xid, p_graph_id, p_seq, v_horizon, p_limit) e
                   WHERE p_erasures
                  ORDER BY 1, 2, 4
                  LIMIT p_limit) l) x
   WHERE p_max_bytes IS NULL OR x.before = 0 OR x.before < p_max_bytes
   ORDER BY x.xid, x.graph_id, x.seq;
END $$;

CREATE OR REPLACE FUNCTION cwstore.tail_all_v1(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text)
LANGUAGE sql VOLATILE AS $$
  SELECT t.xid, t.graph_id, t.name, t.seq, t.id, t.kind, t.parents, t.payload_text,
         t.created_at_text, t.resource_key
    FROM cwstore._tail_all(p_xid, p_graph_id, p_seq, p_limit, p_max_bytes, false) t
$$;
COMMENT ON FUNCTION cwstore.tail_all_v1(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed: up to limit nodes (and max_bytes of payload past the first) after cursor (xid, graph_id, seq) that can no longer be overtaken (below feed_horizon()), in order; what the caller may read. No erasure events: tail_all_v2 has them.';

CREATE FUNCTION cwstore.tail_all_v2(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text,
               erased boolean)
LANGUAGE sql VOLATILE AS $$
  SELECT * FROM cwstore._tail_all(p_xid, p_graph_id, p_seq, p_limit, p_max_bytes, true)
$$;
COMMENT ON FUNCTION cwstore.tail_all_v2(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed with erasure events: up to limit rows after cursor (xid, graph_id, seq), nodes and erasures (erased true, seq infinity) of graphs the caller may read, in order, below feed_horizon().';

-- 90_erasure

CREATE FUNCTION cwstore._erasure_recorded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g record;
BEGIN
  SELECT x.name, x.length, x.tenant, x.incarnation, x.key_probe INTO g
    FROM cwstore.graphs x WHERE x.graph_id = NEW.graph_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', NEW.graph_id),
      DETAIL = jsonb_build_object('graph_id', NEW.graph_id)::text;
  END IF;
  NEW.incarnation := g.incarnation;
  NEW.tenant := g.tenant;
  NEW.nodes := g.length;
  NEW.xid := greatest(pg_catalog.pg_current_xact_id()::text::bigint,
                      (SELECT n.xid FROM cwstore.nodes n
                        WHERE n.graph_id = NEW.graph_id AND n.seq = g.length));
  DELETE FROM cwstore.edges WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.frontier_spans WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.frontier_declarations WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.key_versions WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.key_heads WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.kind_counts WHERE graph_id = NEW.graph_id;
  DELETE FROM cwstore.nodes WHERE graph_id = NEW.graph_id;
  -- A statement per key passed over: each names its key (its one shard on Citus).
  FOR p IN 0 .. g.key_probe - 1 LOOP
    DELETE FROM cwstore.graph_key_detours
     WHERE slot = cwstore.graph_key(g.name, p) AND graph_id = NEW.graph_id;
  END LOOP;
  DELETE FROM cwstore.graphs WHERE graph_id = NEW.graph_id;
  IF EXISTS (SELECT 1 FROM cwstore.listeners) THEN
    PERFORM pg_notify('cwstore', NEW.graph_id || ':erased');
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER erasures_erase BEFORE INSERT ON cwstore.erasures
  FOR EACH ROW EXECUTE FUNCTION cwstore._erasure_recorded();

-- may_erase(role, tenant): whether a role may erase the graphs of a tenant.
CREATE FUNCTION cwstore.may_erase(p_role name, p_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT cwstore.sees_all(p_role)
      OR (pg_catalog.to_regrole('cwstore_admin') IS NOT NULL
          AND pg_catalog.pg_has_role(p_role, pg_catalog.to_regrole('cwstore_admin'), 'MEMBER')
          AND EXISTS (SELECT 1 FROM cwstore.tenants_of(p_role) t WHERE t = p_tenant))
$$;
COMMENT ON FUNCTION cwstore.may_erase(name, text) IS
  'Whether a role may erase the graphs of a tenant: an unrestricted role, or a member of cwstore_admin that belongs to the tenant.';

-- _erase(graph_id, reason) -> nodes erased: the record, and so the erasure. The login
-- role is read here, where the call was made (on Citus the record's trigger runs on a
-- worker, as the cluster's own connection).
CREATE FUNCTION cwstore._erase(p_graph_id bigint, p_reason text) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_by name := session_user;
  v_nodes bigint;
BEGIN
  INSERT INTO cwstore.erasures (graph_id, incarnation, tenant, nodes, erased_by, reason, xid)
  VALUES (p_graph_id, 0, '', 0, v_by, p_reason, 0)
  RETURNING nodes INTO v_nodes;
  RETURN v_nodes;
END $$;

-- erase_graph_v1(graph, reason) -> nodes erased
--   Erases one graph, recorded with the reason given. Unknown, or of a tenant the
--   caller is not in: CW404, as a read. A role that may read it but not erase it:
--   42501. Erased by another call meanwhile: CW404 (erased). Waits for the appends and
--   imports in flight on the graph; the writers that come after get CW404.
CREATE FUNCTION cwstore.erase_graph_v1(p_graph text, p_reason text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_tenant text;
BEGIN
  v_id := (cwstore._graph(p_graph)).graph_id;
  SELECT g.tenant INTO v_tenant FROM cwstore.graphs g WHERE g.graph_id = v_id;
  IF NOT cwstore.may_erase(session_user, v_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not erase graph %L: erasing needs membership in cwstore_admin',
                       session_user, left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text;
  END IF;
  BEGIN
    RETURN cwstore._erase(v_id, p_reason);
  EXCEPTION WHEN SQLSTATE 'CW404' THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION cwstore.erase_graph_v1(text, text) IS
  'Erase a graph: every row of it in every cwstore table, in this transaction, with an audit record in cwstore.erasures (no content, no name). Returns how many nodes it held.';

-- erase_tenant_v1(tenant, reason, batch) -> (graph, nodes) of each graph erased
--   Erases up to batch graphs of the tenant, each recorded; call it until it returns
--   no row. The call that finds no graph left also removes the tenant's memberships
--   (tenant_members). A tenant the caller may not erase: 42501.
CREATE FUNCTION cwstore.erase_tenant_v1(p_tenant text, p_reason text DEFAULT NULL,
                                        p_batch integer DEFAULT 100)
RETURNS TABLE (graph text, nodes bigint)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  r record;
BEGIN
  PERFORM cwstore._check_batch(p_batch);
  IF NOT cwstore.may_erase(session_user, p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not erase tenant %L: erasing needs membership in cwstore_admin and in the tenant',
                       session_user, left(p_tenant, 200)),
      DETAIL = jsonb_build_object('tenant', p_tenant, 'role', session_user)::text;
  END IF;
  FOR r IN SELECT g.graph_id, g.name FROM cwstore.graphs g
            WHERE g.tenant = p_tenant ORDER BY g.graph_id LIMIT p_batch LOOP
    BEGIN
      graph := r.name;
      nodes := cwstore._erase(r.graph_id, p_reason);
      RETURN NEXT;
    EXCEPTION WHEN SQLSTATE 'CW404' THEN
      NULL;  -- erased by another call meanwhile
    END;
  END LOOP;
  IF NOT FOUND THEN
    DELETE FROM cwstore.tenant_members m WHERE m.tenant = p_tenant;
  END IF;
END $$;
COMMENT ON FUNCTION cwstore.erase_tenant_v1(text, text, integer) IS
  'Erase up to batch graphs of a tenant (each recorded in cwstore.erasures); call until no row. The call that finds none left removes the tenant''s memberships.';

CREATE FUNCTION cwstore._check_batch(p_batch integer) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_batch IS NULL OR p_batch < 1 OR p_batch > 10000 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('a batch is 1 to 10000 graphs, got %s', coalesce(p_batch::text, 'NULL')),
      DETAIL = jsonb_build_object('batch', p_batch)::text;
  END IF;
END $$;

-- _check_idle(idle): 22023 unless idle is an interval >= 0.
CREATE FUNCTION cwstore._check_idle(p_idle interval) RETURNS void
LANGUAGE plpgsql IMMUTABLE AS $$
BEGIN
  IF p_idle IS NULL OR p_idle < interval '0' THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('an idle time is an interval >= 0, got %s', coalesce(p_idle::text, 'NULL')),
      DETAIL = jsonb_build_object('idle', p_idle::text)::text;
  END IF;
END $$;

-- _idle(idle, tenant, all, tenants, after, limit) -> up to limit (NULL: every) graphs
--   with a key above after, idle longer than idle, of the tenant (every tenant when
--   NULL) and of the tenants given (all of them when all), in key order: idle since the
--   last node was recorded, or since creation when the graph holds none. Cost: one
--   lookup of the last node per graph read. plpgsql: Citus cannot plan a SQL
--   function's parameterized query over distributed tables.
CREATE FUNCTION cwstore._idle(p_idle interval, p_tenant text, p_all boolean,
                              p_tenants text[], p_after bigint, p_limit integer)
RETURNS TABLE (graph_id bigint, graph text, tenant text, length bigint,
               last_write timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN QUERY
  SELECT g.graph_id, g.name, g.tenant, g.length, coalesce(n.recorded_at, g.created_at)
    FROM cwstore.graphs g
    LEFT JOIN LATERAL (SELECT n.recorded_at FROM cwstore.nodes n
                        WHERE n.graph_id = g.graph_id AND n.seq = g.length LIMIT 1) n ON true
   WHERE g.graph_id > p_after
     AND (p_tenant IS NULL OR g.tenant = p_tenant)
     AND (p_all OR g.tenant = ANY (p_tenants))
     AND coalesce(n.recorded_at, g.created_at) < now() - p_idle
   ORDER BY g.graph_id
   LIMIT p_limit;
END $$;

-- _erasable_tenants() -> the tenants the login role may erase; NULL: every tenant.
CREATE FUNCTION cwstore._erasable_tenants() RETURNS text[]
LANGUAGE sql STABLE AS $$
  SELECT CASE WHEN cwstore.sees_all(session_user) THEN NULL
              ELSE ARRAY(SELECT t FROM cwstore.tenants_of(session_user) t
                          WHERE cwstore.may_erase(session_user, t)) END
$$;

-- idle_graphs_v1(idle, tenant) -> what erase_idle_v1 would erase now (a dry run).
CREATE FUNCTION cwstore.idle_graphs_v1(p_idle interval, p_tenant text DEFAULT NULL)
RETURNS TABLE (graph text, tenant text, length bigint, last_write timestamptz)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_tenants text[] := cwstore._erasable_tenants();
BEGIN
  PERFORM cwstore._check_idle(p_idle);
  RETURN QUERY
  SELECT i.graph, i.tenant, i.length, i.last_write
    FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, -1, NULL) i;
END $$;
COMMENT ON FUNCTION cwstore.idle_graphs_v1(interval, text) IS
  'The graphs idle longer than an interval (of a tenant, or every tenant when NULL) that the caller may erase: what erase_idle_v1 would erase. Erases nothing.';

-- erase_idle_v1(idle, tenant, reason, batch) -> the graphs erased
--   Erases up to batch graphs idle longer than idle, each checked again under its lock
--   (a graph written meanwhile is kept) and recorded; a graph a writer holds locked is
--   skipped (it is not idle). Call it until it returns no row: each call is one short
--   transaction.
CREATE FUNCTION cwstore.erase_idle_v1(p_idle interval, p_tenant text DEFAULT NULL,
                                      p_reason text DEFAULT NULL, p_batch integer DEFAULT 100)
RETURNS TABLE (graph text, tenant text, nodes bigint, last_write timestamptz)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_tenants text[] := cwstore._erasable_tenants();
  v_after bigint := -1;
  v_left integer := p_batch;
  v_found boolean;
  v_last timestamptz;
  r record;
  c record;
BEGIN
  PERFORM cwstore._check_idle(p_idle);
  PERFORM cwstore._check_batch(p_batch);
  -- Candidates in key order, a batch at a time, until batch graphs are erased.
  LOOP
    v_found := false;
    FOR r IN SELECT i.graph_id, i.graph
               FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, v_after,
                                  p_batch) i LOOP
      v_found := true;
      v_after := r.graph_id;
      -- Locked, then checked again: still the same graph, still idle.
      SELECT g.name, g.tenant, g.length, g.created_at INTO c
        FROM cwstore.graphs g WHERE g.graph_id = r.graph_id FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND OR c.name <> r.graph;
      v_last := coalesce((SELECT n.recorded_at FROM cwstore.nodes n
                           WHERE n.graph_id = r.graph_id AND n.seq = c.length), c.created_at);
      CONTINUE WHEN v_last >= now() - p_idle;
      graph := r.graph;
      tenant := c.tenant;
      last_write := v_last;
      nodes := cwstore._erase(r.graph_id, p_reason);
      RETURN NEXT;
      v_left := v_left - 1;
      IF v_left = 0 THEN
        RETURN;
      END IF;
    END LOOP;
    EXIT WHEN NOT v_found;
  END LOOP;
END $$;
COMMENT ON FUNCTION cwstore.erase_idle_v1(interval, text, text, integer) IS
  'Erase up to batch graphs idle longer than an interval (of a tenant, or every tenant the caller may erase when NULL), each recorded in cwstore.erasures; call until no row.';

-- 70_read_api: a node per head, version or step by index lookup (see above).

CREATE OR REPLACE FUNCTION cwstore.frontier_at(p_graph text, p_seq bigint DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION cwstore.heads_at(p_graph text, p_seq bigint DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION cwstore.semantic_at(p_graph text, p_seq bigint DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION cwstore.path(p_graph text, p_from_id text, p_to_id text)
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

CREATE OR REPLACE FUNCTION cwstore.key_history(p_graph text, p_key text)
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
    FROM cwstore.key_versions v
    JOIN LATERAL (SELECT n.id, n.kind, n.created_at, n.recorded_at, n.payload_text
                    FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq = v.node_seq LIMIT 1) n ON true
   WHERE v.graph_id = g.graph_id AND v.key = p_key
   ORDER BY v.version;
END $$;

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

CREATE OR REPLACE FUNCTION cwstore.projection_v1(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_at bigint := cwstore._at(p_seq, g.length);
  v_len bigint := coalesce(v_at, g.length);
  v_counts text;
  v_goal bigint;
  v_answer bigint;
BEGIN
  SELECT coalesce(json_object_agg(k.kind, c.n)::text, '{}'),
         max(c.seq) FILTER (WHERE k.kind = 'goal'), max(c.seq) FILTER (WHERE k.kind = 'answer')
    INTO v_counts, v_goal, v_answer
    FROM unnest(cwstore.node_kinds()) AS k(kind)
   CROSS JOIN LATERAL (
         SELECT kc.seq, kc.n FROM cwstore.kind_counts kc
          WHERE kc.graph_id = g.graph_id AND kc.kind = k.kind AND kc.seq <= v_len
          ORDER BY kc.seq DESC LIMIT 1) c;
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
