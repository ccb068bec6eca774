-- 0007_sealed_doors: every door that names a graph decides on what it holds under the
-- graph's lock.
--
-- Why: a door read a graph's tenant without a lock, then locked the graph by its key
-- (and name). A graph erased and made again meanwhile, by another tenant, holds the same
-- key and name: an append, an import or an erasure of tenant A could then write or erase
-- tenant B's graph, and the audit record said tenant B. A life of a graph
-- (graphs.incarnation) has one tenant and one name, so each door now locks the life it
-- checked, and only that life; one gone meanwhile is CW404 (erased).
--
--   * _writer_graph also gives the life; _writer_life (find, create if asked, check the
--     tenant on that read) and _lock_life (lock that life, or CW404 erased) are the two
--     steps every write door takes. append_v1, begin_import_v1, _writable_graph
--     (import_rows_v1, declare_frontier_v1) and _lock_for_append use them.
--   * append_v1 takes the life its writer means (p_incarnation: CW404 erased when the
--     graph's life is another, and no graph is created) and returns the life it wrote
--     (column incarnation): save() appends to the life it remembers, closing the
--     "across lives" gap of docs/erasure.md.
--   * Erasure names the life: _erase(graph_id, incarnation, reason), and the record's
--     trigger locks and erases that life only. erase_graph_v1 checks the tenant and
--     erases on one read of the graph; erase_tenant_v1 erases each graph in the life it
--     listed; erase_idle_v1 re-checks the tenant under the lock.
--   * feed_horizon names append_v1's new signature.
--
-- The definitions below are those of cwstore/sql/schema/ (60_write_api.sql,
-- 80_listeners.sql, 90_erasure.sql), where they are documented.
--
-- Safe with live writers: yes. append_v1 is replaced (a new signature with one more
-- argument, defaulted, and one more result column): calls that name the four arguments
-- by position or name keep working; the migration runner grants it again where the
-- roles exist.

-- 60_write_api

DROP FUNCTION cwstore.append_v1(text, json, bigint, json);
DROP FUNCTION cwstore._lock_for_append(text, bigint, bigint, text[]);
DROP FUNCTION cwstore._writer_graph(text);

CREATE OR REPLACE FUNCTION cwstore._writable_graph(p_graph_id bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text;
  v_incarnation bigint;
  v_len bigint;
BEGIN
  SELECT g.tenant, g.incarnation INTO v_tenant, v_incarnation
    FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
  END IF;
  SELECT g.length INTO v_len FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id AND g.incarnation = v_incarnation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s was erased while this call waited for it', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id, 'erased', true)::text;
  END IF;
  RETURN v_len;
END $$;

CREATE OR REPLACE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_life record;
  v_len bigint;
BEGIN
  v_life := cwstore._writer_life(p_graph, true, p_vocabulary);
  v_len := cwstore._lock_life(p_graph, v_life.life_id, v_life.life_incarnation);
  IF v_len > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph %L already holds %s nodes; import needs an empty graph', left(p_graph, 200), v_len),
      DETAIL = jsonb_build_object('graph', p_graph, 'length', v_len)::text;
  END IF;
  UPDATE cwstore.graphs SET vocabulary = p_vocabulary
   WHERE graph_id = v_life.life_id AND vocabulary IS DISTINCT FROM p_vocabulary;
  RETURN v_life.life_id;
END $$;
COMMENT ON FUNCTION cwstore.begin_import_v1(text, text[]) IS
  'Start importing into an empty graph: create or lock it; CW412 if it holds nodes. COPY rows into cwstore.nodes next, then declare_frontier_v1.';

CREATE FUNCTION cwstore._writer_graph(p_graph text, OUT found_id bigint, OUT found_length bigint,
                                      OUT found_tenant text, OUT found_incarnation bigint)
LANGUAGE plpgsql AS $$
BEGIN
  found_id := cwstore.graph_key(p_graph);
  SELECT g.length, g.tenant, g.incarnation INTO found_length, found_tenant, found_incarnation
    FROM cwstore.graphs g
   WHERE g.graph_id = found_id AND g.name = p_graph;
  IF NOT FOUND THEN
    found_id := cwstore.graph_id_of(p_graph);
    IF found_id IS NOT NULL THEN
      SELECT g.length, g.tenant, g.incarnation INTO found_length, found_tenant, found_incarnation
        FROM cwstore.graphs g WHERE g.graph_id = found_id AND g.name = p_graph;
      IF NOT FOUND THEN
        found_id := NULL;
      END IF;
    END IF;
  END IF;
END $$;

CREATE FUNCTION cwstore._writer_life(p_graph text, p_create boolean, p_vocabulary text[],
                                     OUT life_id bigint, OUT life_length bigint,
                                     OUT life_incarnation bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v record;
BEGIN
  v := cwstore._writer_graph(p_graph);
  IF v.found_id IS NULL AND p_create THEN
    PERFORM cwstore.ensure_graph_v1(p_graph, p_vocabulary);
    v := cwstore._writer_graph(p_graph);
    IF v.found_id IS NULL THEN
      PERFORM cwstore._erased_meanwhile(p_graph);
    END IF;
  END IF;
  IF v.found_id IS NOT NULL AND session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v.found_tenant);
  END IF;
  life_id := v.found_id;
  life_length := v.found_length;
  life_incarnation := v.found_incarnation;
END $$;

CREATE FUNCTION cwstore._lock_life(p_graph text, p_graph_id bigint, p_incarnation bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint;
BEGIN
  SELECT g.length INTO v_len FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id AND g.incarnation = p_incarnation FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  IF v_len = 0 THEN
    PERFORM cwstore._check_after_erasure(p_graph, p_graph_id);
  END IF;
  RETURN v_len;
END $$;

CREATE FUNCTION cwstore._lock_for_append(p_graph text, p_graph_id bigint, p_incarnation bigint,
                                         p_expected bigint, p_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint := cwstore._lock_life(p_graph, p_graph_id, p_incarnation);
BEGIN
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

CREATE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
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
COMMENT ON FUNCTION cwstore.append_v1(text, json, bigint, json, bigint) IS
  'Append a batch of runtime nodes to a graph (created on first use unless a life is named), optionally declaring the frontier after it, optionally to one life of the graph only. Idempotent by id. Returns each node''s sequence, whether this call wrote it, for nodes it did not write the stored createdAt and payload, and the graph''s life (incarnation).';

-- 80_listeners

CREATE OR REPLACE FUNCTION cwstore.feed_horizon() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_xmax bigint := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
  v_min bigint;
BEGIN
  PERFORM pg_catalog.pg_stat_clear_snapshot();
  WITH running AS (
    SELECT l.transactionid::text::bigint AS xid32, a.usesysid AS role
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
       AND a.datname = pg_catalog.current_database()
    UNION ALL
    SELECT p.transaction::text::bigint, r.oid
      FROM pg_catalog.pg_prepared_xacts p JOIN pg_catalog.pg_roles r ON r.rolname = p.owner
     WHERE p.database = pg_catalog.current_database()
  ), writers AS (
    SELECT x.xid32 FROM running x
     WHERE pg_catalog.pg_has_role(x.role, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                            WHERE n.nspname = 'cwstore'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = x.role AND r.rolsuper)
        OR CASE WHEN pg_catalog.to_regrole('cwstore_writer') IS NULL THEN false
                ELSE pg_catalog.pg_has_role(x.role, pg_catalog.to_regrole('cwstore_writer'),
                                            'MEMBER') END
        OR (pg_catalog.has_schema_privilege(x.role, 'cwstore', 'USAGE')
            AND (pg_catalog.has_function_privilege(x.role,
                   'cwstore.append_v1(text, json, bigint, json, bigint)', 'EXECUTE')
                 OR pg_catalog.has_table_privilege(x.role, 'cwstore.nodes', 'INSERT')))
  )
  -- A 32-bit xid of a running transaction is within 2^31 below the next one: widen it
  -- with the epoch of xmax.
  SELECT min(CASE WHEN (v_xmax >> 32 << 32) + w.xid32 > v_xmax
                  THEN (v_xmax >> 32 << 32) + w.xid32 - 4294967296
                  ELSE (v_xmax >> 32 << 32) + w.xid32 END)
    INTO v_min FROM writers w;
  RETURN least(v_xmax, v_min);
END $$;
COMMENT ON FUNCTION cwstore.feed_horizon() IS
  'The xid below which no node can still commit: the oldest running transaction of a role that may write cwstore nodes in this database, else the next xid. tail_all_v1 reads below it.';

-- 90_erasure

DROP FUNCTION cwstore._erase(bigint, text);

CREATE OR REPLACE FUNCTION cwstore._erasure_recorded() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  g record;
BEGIN
  SELECT x.name, x.length, x.tenant, x.key_probe INTO g
    FROM cwstore.graphs x
   WHERE x.graph_id = NEW.graph_id AND x.incarnation = NEW.incarnation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s (life %s) does not exist', NEW.graph_id, NEW.incarnation),
      DETAIL = jsonb_build_object('graph_id', NEW.graph_id)::text;
  END IF;
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

CREATE FUNCTION cwstore._erase(p_graph_id bigint, p_incarnation bigint, p_reason text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_by name := session_user;
  v_nodes bigint;
BEGIN
  INSERT INTO cwstore.erasures (graph_id, incarnation, tenant, nodes, erased_by, reason, xid)
  VALUES (p_graph_id, p_incarnation, '', 0, v_by, p_reason, 0)
  RETURNING nodes INTO v_nodes;
  RETURN v_nodes;
END $$;

CREATE OR REPLACE FUNCTION cwstore.erase_graph_v1(p_graph text, p_reason text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v record := cwstore._writer_graph(p_graph);
BEGIN
  IF v.found_id IS NULL
     OR (session_user <> current_user AND NOT cwstore._may_use(v.found_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
  IF NOT cwstore.may_erase(session_user, v.found_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not erase graph %L: erasing needs membership in cwstore_admin',
                       session_user, left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text;
  END IF;
  BEGIN
    RETURN cwstore._erase(v.found_id, v.found_incarnation, p_reason);
  EXCEPTION WHEN SQLSTATE 'CW404' THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION cwstore.erase_graph_v1(text, text) IS
  'Erase a graph: every row of it in every cwstore table, in this transaction, with an audit record in cwstore.erasures (no content, no name). Returns how many nodes it held.';

CREATE OR REPLACE FUNCTION cwstore.erase_tenant_v1(p_tenant text, p_reason text DEFAULT NULL,
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
  FOR r IN SELECT g.graph_id, g.name, g.incarnation FROM cwstore.graphs g
            WHERE g.tenant = p_tenant ORDER BY g.graph_id LIMIT p_batch LOOP
    BEGIN
      graph := r.name;
      nodes := cwstore._erase(r.graph_id, r.incarnation, p_reason);
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

CREATE OR REPLACE FUNCTION cwstore.erase_idle_v1(p_idle interval, p_tenant text DEFAULT NULL,
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
    FOR r IN SELECT i.graph_id, i.graph, i.tenant
               FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, v_after,
                                  p_batch) i LOOP
      v_found := true;
      v_after := r.graph_id;
      -- Locked, then checked again: still the same graph of the same tenant, still idle.
      SELECT g.name, g.tenant, g.length, g.created_at, g.incarnation INTO c
        FROM cwstore.graphs g WHERE g.graph_id = r.graph_id FOR UPDATE SKIP LOCKED;
      CONTINUE WHEN NOT FOUND OR c.name <> r.graph OR c.tenant <> r.tenant;
      v_last := coalesce((SELECT n.recorded_at FROM cwstore.nodes n
                           WHERE n.graph_id = r.graph_id AND n.seq = c.length), c.created_at);
      CONTINUE WHEN v_last >= now() - p_idle;
      graph := r.graph;
      tenant := c.tenant;
      last_write := v_last;
      nodes := cwstore._erase(r.graph_id, c.incarnation, p_reason);
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
