-- 0010_append_memory: an append of a 4 MiB payload takes about half the backend memory
-- it took (14.7 times the payload at worst, was 27 times).
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
--   * _nodes_inserted reads the columns it needs of the new rows (not the payload).
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
