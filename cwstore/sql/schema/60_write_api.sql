-- 60_write_api: the write API, as SQL functions, so every client (asyncpg, psycopg,
-- psql, the TypeScript runtime through pg) meets the same rules and errors.
--
-- The append path locks the graph's counter row, numbers the batch from its length and
-- inserts in one statement; the nodes triggers (40_derive.sql) check and materialize.
-- One round trip, no session state (works behind a transaction-mode pooler). Every
-- function runs as its owner (SECURITY DEFINER, a fixed search_path), so a writer role
-- needs no privilege on any table, and checks that the login role may write the graph's
-- tenant (cwstore._check_writer, 50_tenancy.sql) before it locks or writes anything.
-- Functions are versioned (_v1) so a new signature can live beside the old; each takes
-- the graph (its name, or its graph_id within an import) first.
--
-- SQLSTATEs raised: CW400 validation, CW404 unknown graph, CW409 expected length is
-- stale, CW410 chain conflict on a resource key, CW412 import into a non-empty graph,
-- 42501 a graph of a tenant the login role is not in.

-- ensure_graph_v1(graph, vocabulary) -> graph_id
--   Creates the graph on first use. vocabulary NULL = dynamic. Takes no lock.
CREATE FUNCTION cwstore.ensure_graph_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_tenant text;
BEGIN
  IF p_graph IS NULL OR p_graph = '' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
                               'a graph name must be a non-empty string');
  END IF;
  SELECT graph_id, tenant INTO v_id, v_tenant FROM cwstore.graphs WHERE name = p_graph;
  IF NOT FOUND THEN
    v_tenant := cwstore._new_graph_tenant();
    IF session_user <> current_user THEN
      PERFORM cwstore._check_writer(p_graph, v_tenant);
    END IF;
    INSERT INTO cwstore.graphs (name, vocabulary, tenant) VALUES (p_graph, p_vocabulary, v_tenant)
    ON CONFLICT (name) DO NOTHING RETURNING graph_id INTO v_id;
    IF v_id IS NULL THEN
      SELECT graph_id, tenant INTO v_id, v_tenant FROM cwstore.graphs WHERE name = p_graph;
    END IF;
  END IF;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v_tenant);
  END IF;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.ensure_graph_v1(text, text[]) IS
  'Create a graph if it does not exist (vocabulary NULL = dynamic); returns its graph_id.';

-- begin_import_v1(graph, vocabulary) -> graph_id
--   Locks the graph row for the rest of the transaction. Raises CW412 when the graph
--   already holds nodes. Sets the vocabulary.
CREATE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_id bigint;
  v_len bigint;
BEGIN
  PERFORM cwstore.ensure_graph_v1(p_graph, p_vocabulary);
  SELECT graph_id, length INTO v_id, v_len FROM cwstore.graphs WHERE name = p_graph FOR UPDATE;
  IF v_len > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph %L already holds %s nodes; import needs an empty graph', p_graph, v_len),
      DETAIL = jsonb_build_object('graph', p_graph, 'length', v_len)::text;
  END IF;
  UPDATE cwstore.graphs SET vocabulary = p_vocabulary
   WHERE graph_id = v_id AND vocabulary IS DISTINCT FROM p_vocabulary;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.begin_import_v1(text, text[]) IS
  'Start importing into an empty graph: create or lock it; CW412 if it holds nodes. COPY rows into cwstore.nodes next, then declare_frontier_v1.';

-- import_rows_v1(graph_id, seqs, ids, kinds, parents, payloads, created, keys)
--   The import path of roles that may not COPY into cwstore.nodes (cwstore_writer):
--   one slice of an import as parallel arrays (parents as array literals, e.g.
--   '{cw_…,cw_…}'), inserted in one statement, so the nodes trigger checks and
--   materializes it like a COPY. Call it after begin_import_v1, in the same transaction,
--   once per slice, then declare_frontier_v1. Returns the rows inserted.
CREATE FUNCTION cwstore.import_rows_v1(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                       p_kinds text[], p_parents text[], p_payloads text[],
                                       p_created text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_name text;
  v_tenant text;
  v_len bigint;
  v_xid bigint;
  v_n bigint;
BEGIN
  SELECT name, tenant INTO v_name, v_tenant FROM cwstore.graphs WHERE graph_id = p_graph_id;
  IF FOUND AND session_user <> current_user THEN
    PERFORM cwstore._check_writer(v_name, v_tenant);
  END IF;
  -- The counter row, as append_v1 takes it (already held after begin_import_v1).
  SELECT length INTO v_len FROM cwstore.graphs WHERE graph_id = p_graph_id FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
  END IF;
  -- As in append_v1: within a graph the feed's xid never goes back.
  v_xid := greatest(pg_current_xact_id()::text::bigint,
                    (SELECT n.xid FROM cwstore.nodes n
                      WHERE n.graph_id = p_graph_id AND n.seq = v_len));
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,
                             resource_key, xid)
  SELECT p_graph_id, r.seq, r.id, r.kind, r.parents::text[], r.payload, r.created, r.key, v_xid
    FROM unnest(p_seqs, p_ids, p_kinds, p_parents, p_payloads, p_created, p_keys)
         AS r(seq, id, kind, parents, payload, created, key);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
COMMENT ON FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[]) IS
  'Import one slice of nodes as parallel arrays after begin_import_v1 (the import path of roles without INSERT on cwstore.nodes). Returns how many rows it inserted.';

-- declare_frontier_v1(graph_id, heads) : the frontier after the graph's last node, as
-- given and in its order. CW400 frontier_reference for unknown or repeated ids.
CREATE FUNCTION cwstore.declare_frontier_v1(p_graph_id bigint, p_heads text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(g.name, g.tenant) FROM cwstore.graphs g
      WHERE g.graph_id = p_graph_id;
  END IF;
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  SELECT p_graph_id, g.length, coalesce(p_heads, '{}') FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id;
END $$;
COMMENT ON FUNCTION cwstore.declare_frontier_v1(bigint, text[]) IS
  'Declare the frontier after the graph''s last node (graph by graph_id), as given and in its order: after an import, or to set it by hand. CW400 frontier_reference for unknown or repeated ids.';

-- append_v1(graph, nodes, expected_length, frontier)
--   nodes: a JSON array of runtime nodes {id, kind, parents, payload, createdAt,
--   resourceKey?} (sequence is assigned here; one given is ignored). Send compact JSON:
--   payload text is stored exactly as received.
--   expected_length: NULL, or the length the writer last saw (CW409 when stale).
--   frontier: NULL (the fold applies) or a JSON array of ids, the frontier after
--   the batch.
--   Nodes whose id the graph already holds are returned as stored and not written
--   (idempotent retries); if every node exists, expected_length is not checked, and
--   the frontier is declared only when expected_length is NULL or current.
--   Locks: the graph row (FOR UPDATE) until commit; nothing else.
--   Raises: CW400 (shape, kind, parents, semantic...), CW409, CW410 (chain race).
-- Its statements take arrays and ids as parameters; custom plans would be re-made on
-- every call, and the generic ones are right for every batch size that takes this path.
CREATE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_problem text;
  v_bad_id text;
  v_hidden boolean := false;
  v_heads text[];
  v_ids text[];
  v_kinds text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_keys text[];
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
    IF json_typeof(p_frontier) <> 'array'
       OR EXISTS (SELECT 1 FROM json_array_elements(p_frontier) f WHERE json_typeof(f) <> 'string')
    THEN
      PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.frontier',
                                 'frontier must be a JSON array of node ids');
    END IF;
    v_heads := ARRAY(SELECT json_array_elements_text(p_frontier));
  END IF;

  -- PostgreSQL's JSON functions refuse the escape \u0000: hide it (reversibly) first.
  IF strpos(p_nodes::text, '\u0000') > 0 THEN
    v_hidden := true;
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;

  -- Read the batch once: each node's fields as JSON, checked for their JSON types and
  -- for what the table's constraints would refuse, so every client gets a CW400 with
  -- the safeguard code and the node's position.
  SELECT array_agg(f.id #>> '{}' ORDER BY f.o), array_agg(f.kind #>> '{}' ORDER BY f.o),
         array_agg(f.parents::text ORDER BY f.o),
         array_agg(CASE WHEN v_hidden THEN cwstore._nul_show(f.payload::text)
                        ELSE f.payload::text END ORDER BY f.o),
         array_agg(f."createdAt" #>> '{}' ORDER BY f.o),
         array_agg(f."resourceKey" #>> '{}' ORDER BY f.o),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem ORDER BY f.o) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END ORDER BY f.o)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys, v_new, v_problem, v_bad_id
    FROM (SELECT a.o, r.*,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|node must be a JSON object'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|id must be a string'
                   WHEN json_typeof(r.kind) IS DISTINCT FROM 'string'
                     THEN 'shape|kind must be a string'
                   WHEN json_typeof(r.parents) IS DISTINCT FROM 'array'
                     THEN 'shape|parents must be an array'
                   WHEN r.payload IS NULL THEN 'shape|payload is missing'
                   WHEN json_typeof(r."createdAt") IS DISTINCT FROM 'string'
                     THEN 'shape|createdAt must be a string'
                   WHEN r."resourceKey" IS NOT NULL AND json_typeof(r."resourceKey") <> 'string'
                     THEN 'shape|resourceKey must be a string when present'
                   WHEN EXISTS (SELECT 1 FROM json_object_keys(a.e) k
                                 WHERE k NOT IN ('id', 'kind', 'parents', 'payload', 'createdAt',
                                                 'sequence', 'resourceKey'))
                     THEN 'shape|unknown node field'
                   WHEN EXISTS (SELECT 1 FROM json_array_elements(r.parents) pe
                                 WHERE json_typeof(pe) <> 'string')
                     THEN 'shape|parents must be string ids'
                   WHEN v_hidden AND strpos(r.id::text || r.kind::text || r."createdAt"::text
                                            || coalesce(r."resourceKey"::text, '')
                                            || r.parents::text, '\\u0000') > 0
                     THEN 'unrepresentable|U+0000 outside a payload cannot be stored'
                   WHEN NOT ((r.kind #>> '{}') = ANY (cwstore.node_kinds()))
                     THEN 'kind|kind is not one of the ten'
                   WHEN (r.id #>> '{}') !~ '^cw_[0-9a-f]{24}$'
                     THEN 'identity|id must be cw_ and 24 lowercase hex digits'
                   WHEN (r."createdAt" #>> '{}') !~
                        '^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$'
                     THEN 'created_at|createdAt is not an RFC 3339 timestamp with a zone'
                   WHEN (r."resourceKey" #>> '{}') = ''
                     THEN 'shape|resourceKey must not be empty'
                 END AS problem
            FROM json_array_elements(p_nodes) WITH ORDINALITY AS a(e, o)
            CROSS JOIN LATERAL json_to_record(CASE json_typeof(a.e) WHEN 'object' THEN a.e
                                                ELSE '{}' END)
                 AS r(id json, kind json, parents json, payload json, "createdAt" json,
                      "resourceKey" json)) f;
  IF v_new IS NOT NULL THEN
    PERFORM cwstore._violation(split_part(v_problem, '|', 1), NULL, v_new, v_bad_id,
                               format('$[%s]', v_new - 1), split_part(v_problem, '|', 2));
  END IF;
  IF v_ids IS NULL THEN
    v_ids := '{}';
  END IF;

  -- The tenant check comes before the lock: a refused caller must not hold another
  -- tenant's counter row while it sits in its aborted transaction.
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, (SELECT g.tenant FROM cwstore.graphs g
                                             WHERE g.name = p_graph));
  END IF;

  -- The counter row: lock it (create the graph on first use). Held until commit.
  SELECT g.graph_id, g.length INTO v_graph_id, v_len
    FROM cwstore.graphs g WHERE g.name = p_graph FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore.ensure_graph_v1(p_graph);
    SELECT g.graph_id, g.length INTO v_graph_id, v_len
      FROM cwstore.graphs g WHERE g.name = p_graph FOR UPDATE;
  END IF;

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's.
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                             created_at_text, resource_key, xid)
  SELECT v_graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o],
         greatest(pg_current_xact_id()::text::bigint,
                  (SELECT l.xid FROM cwstore.nodes l
                    WHERE l.graph_id = v_graph_id AND l.seq = v_len))
    FROM (SELECT DISTINCT ON (u.id) u.id, u.o
            FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
           ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;

  -- Checked after the insert so the batch is read once; raising undoes the insert.
  IF v_new > 0 AND p_expected_length IS NOT NULL AND p_expected_length <> v_len THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', p_graph, v_len,
                       p_expected_length),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected_length,
                                  'actual_length', v_len)::text;
  END IF;

  -- The declared frontier is recorded after new nodes. When this call wrote nothing it
  -- is recorded only if it changes the frontier and expected_length is NULL or current:
  -- a retry after others moved on must not move their frontier back.
  IF v_heads IS NOT NULL AND (v_new > 0 OR (
         (p_expected_length IS NULL OR p_expected_length = v_len)
     AND v_heads IS DISTINCT FROM (
           SELECT coalesce(array_agg(n.id ORDER BY s.from_seq, s.ord), '{}')
             FROM cwstore.frontier_spans s
             JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq
            WHERE s.graph_id = v_graph_id AND s.to_seq = cwstore.infinity_seq()))) THEN
    INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
    VALUES (v_graph_id, v_len + v_new, v_heads);
  END IF;

  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

COMMENT ON FUNCTION cwstore.append_v1(text, json, bigint, json) IS
  'Append a batch of runtime nodes to a graph (created on first use), optionally declaring the frontier after it. Idempotent by id. Returns each node''s sequence, whether this call wrote it, and for nodes it did not write the stored createdAt and payload.';
