-- 0010_batch_reads: an append of a 4 MiB payload takes about half the backend memory
-- it took (about 15 times the payload at worst, was 27 times); import_rows_v1 about 13
-- times (was 18).
--
-- Why (issue 34): one append_v1 call of one node at the 4 MiB payload limit grew its
-- backend by 108 MB (27 times the payload, 200,000 objects {"a":1}), where cwstore
-- import takes 6 times. PostgreSQL's JSON functions keep a small allocation for every
-- name and scalar they read until the row is done, and _batch_fields read each node
-- up to five times in one row (json_to_record, json_object_keys twice, ->, the payload
-- cast) and kept the payload through sorts (array_agg ... ORDER BY).
--
--   * _batch_fields reads each node's members once (json_each), in the batch's order
--     without a sort; the checks and refusals are the same.
--   * append_v1 takes the batch's fields into its variables, not through a record
--     that held every payload once more.
--   * _nodes_inserted reads the columns it needs of the new rows (not the payload).
--   * import_rows_v1 compares each payload with its element of the slice side by side
--     (ROWS FROM), not through a full join that sorted or hashed the payloads, and finds
--     U+0000 in the payloads, not in a text copy of the whole slice.
--
-- The same batches are accepted and refused (with the same code, index and path). The
-- definitions below are those of cwstore/sql/schema/, where they are documented.
--
-- Safe with live writers: yes; functions only, replaced between transactions.

-- 40_derive

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
    FOR nd IN SELECT n.graph_id, n.seq, n.id, n.kind, n.parents, n.resource_key
                FROM new_nodes n ORDER BY n.graph_id, n.seq LOOP
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

-- 60_write_api

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
      v_hidden := EXISTS (SELECT 1 FROM unnest(p_payloads) AS p(t) WHERE strpos(p.t, '\u0000') > 0);
      v_all := (CASE WHEN v_hidden THEN cwstore._nul_hide('[' || array_to_string(p_payloads, ',') || ']')
                     ELSE '[' || array_to_string(p_payloads, ',') || ']' END)::json;
      -- Element and payload side by side (ROWS FROM pads the shorter with NULLs): no
      -- join, so no sort or hash holds the payloads again.
      SELECT min(x.o) INTO v_bad
        FROM ROWS FROM (json_array_elements(v_all), unnest(p_payloads)) WITH ORDINALITY AS x(v, t, o)
       WHERE x.v IS NULL OR x.t IS NULL
          OR (CASE WHEN v_hidden THEN cwstore._nul_show(x.v::text) ELSE x.v::text END) <> x.t;
      v_all := NULL;  -- not held while the payloads are checked and inserted
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

CREATE OR REPLACE FUNCTION cwstore._batch_fields(p_nodes json, OUT b_ids text[], OUT b_kinds text[],
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
  SELECT coalesce(array_agg(f.id #>> '{}'), '{}'), array_agg(f.kind #>> '{}'),
         array_agg(f.parents::text), array_agg(f.payload), array_agg(f."createdAt" #>> '{}'),
         array_agg(f."resourceKey" #>> '{}'),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO b_ids, b_kinds, b_parents, b_payloads, b_created, b_keys, v_bad, v_problem, v_bad_id
    FROM (SELECT c.*,
                 coalesce(c.problem0,
                          cwstore._node_problem(c.kind #>> '{}', c.payload, c."createdAt" #>> '{}',
                                                c."resourceKey" #>> '{}')) AS problem
            FROM (SELECT a.o, r.id, r.kind, r.parents, r."createdAt", r."resourceKey",
                         CASE WHEN v_hidden THEN cwstore._nul_show(r.payload)
                              ELSE r.payload END AS payload,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|$|node must be a JSON object'
                   WHEN r.fields <> r.names
                     THEN 'shape|$|node repeats a member name (JSON.parse would keep only the last)'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|$.id|id must be a string'
                   WHEN NOT r.has_kind
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
                   WHEN r.unknown
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
            CROSS JOIN LATERAL (
                   SELECT count(*) AS fields, count(DISTINCT m.k) AS names,
                          coalesce(bool_or(m.k = 'kind'), false) AS has_kind,
                          coalesce(bool_or(m.k NOT IN ('id', 'kind', 'parents', 'payload',
                                                       'createdAt', 'sequence', 'resourceKey')),
                                   false) AS unknown,
                          min(m.v::text) FILTER (WHERE m.k = 'id' AND json_typeof(m.v) <> 'null')::json AS id,
                          min(m.v::text) FILTER (WHERE m.k = 'kind' AND json_typeof(m.v) <> 'null')::json AS kind,
                          min(m.v::text) FILTER (WHERE m.k = 'parents' AND json_typeof(m.v) <> 'null')::json AS parents,
                          min(m.v::text) FILTER (WHERE m.k = 'payload' AND json_typeof(m.v) <> 'null') AS payload,
                          min(m.v::text) FILTER (WHERE m.k = 'createdAt' AND json_typeof(m.v) <> 'null')::json AS "createdAt",
                          min(m.v::text) FILTER (WHERE m.k = 'resourceKey' AND json_typeof(m.v) <> 'null')::json AS "resourceKey"
                     FROM json_each(CASE json_typeof(a.e) WHEN 'object' THEN a.e ELSE '{}' END)
                          AS m(k, v)) r) c
          OFFSET 0) f;  -- a fence: each node's problem is computed once
  IF v_bad IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_bad, v_bad_id, v_bad - 1);
  END IF;
END $$;

CREATE OR REPLACE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL,
                                  p_incarnation bigint DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text, incarnation bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_heads text[];
  v_life record;
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

  -- The graph's row is read first, without a lock: the tenant check comes before
  -- anything else (a refused caller learns nothing of the graph, and must not hold
  -- another tenant's counter row while it sits in its aborted transaction). The life
  -- read here is the one locked below, or none: a graph found here but gone once locked
  -- was erased meanwhile, and the call must not write whatever holds its key by then.
  v_life := cwstore._writer_life(p_graph, false, NULL);
  IF p_incarnation IS NOT NULL AND v_life.life_incarnation IS DISTINCT FROM p_incarnation THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  v_graph_id := v_life.life_id;
  v_len := v_life.life_length;
  -- A stale expected length is refused before the batch is read: within a graph's life
  -- its length only grows, so a length seen here that differs from the expected one
  -- differs under the lock too (or the graph is gone by then: CW404). Unless every node
  -- of the batch is held already (a retry of a write that committed: not a conflict).
  IF p_expected_length IS NOT NULL AND p_expected_length <> coalesce(v_len, 0) THEN
    PERFORM cwstore._refuse_stale(p_graph, v_graph_id, p_nodes, p_expected_length,
                                  coalesce(v_len, 0));
  END IF;

  SELECT f.b_ids, f.b_kinds, f.b_parents, f.b_payloads, f.b_created, f.b_keys
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys
    FROM cwstore._batch_fields(p_nodes) f;
  IF cardinality(v_ids) > 1 THEN
    PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
  END IF;
  IF v_graph_id IS NULL THEN
    v_life := cwstore._writer_life(p_graph, true, NULL);
    v_graph_id := v_life.life_id;
  END IF;
  v_len := cwstore._lock_for_append(p_graph, v_graph_id, v_life.life_incarnation,
                                    p_expected_length, v_ids);

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
    SELECT v_len + u.o, u.id, v_created[u.o], v_now, true, NULL::text, v_life.life_incarnation
      FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
     ORDER BY u.o;
    RETURN;
  END IF;
  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END, v_life.life_incarnation
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;
