-- 90_erasure: forgetting on request. A graph is erased whole, in one transaction, by
-- inserting its audit record in cwstore.erasures: the record's trigger locks the
-- graph's row (waiting for appends in flight), fills the record from it and removes
-- every row of the graph from every table. It runs at trigger depth 1, where the guards
-- of 30_guards.sql let removals through; nothing else removes history, and nothing
-- removes it without a record. The public functions decide who may erase, and which
-- graphs (by name, by tenant, by idleness), in batches a caller repeats. docs/erasure.md
-- says what is kept and why.
--
-- Who may erase: unrestricted roles (cwstore.sees_all), and members of the group role
-- cwstore_admin for the tenants they belong to (the membership that lets them read and
-- write those graphs). Another tenant's graph reads as no graph at all (CW404, the
-- answer a read gets).
--
-- SQLSTATEs raised: CW404 (unknown graph, or erased meanwhile: DETAIL {"graph",
-- "erased"} / {"graph_id"}), 42501 (a role that may not erase; DETAIL {"graph" or
-- "tenant", "role"}), 22023 (a bad interval or batch).

-- _erasure_recorded (BEFORE INSERT on erasures, per row): the erasure itself. The
-- inserted row names the graph's key and the life to erase (incarnation): that life's
-- row is locked, and only that life is erased; when it is gone (erased meanwhile, even
-- if another life or another graph holds the key by now), CW404. Whatever else the
-- inserted row says, the record holds what was erased: the graph's tenant and node
-- count, and its xid in the all-graphs feed (after the graph's last node's, like a
-- node's own). When and by whom are what the statement gives (the columns' defaults,
-- now() and session_user, unless _erase names the role).
CREATE FUNCTION cwstore._erasure_recorded() RETURNS trigger
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
  -- Open spans by their partial btree, closed ones by the box index: a box covering
  -- every sequence of the graph (neither index serves graph_id = alone).
  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq = cwstore.infinity_seq();
  DELETE FROM cwstore.frontier_spans
   WHERE graph_id = NEW.graph_id AND to_seq <> cwstore.infinity_seq()
     AND cwstore.span_band(graph_id, from_seq, to_seq)
         && cwstore.span_band(NEW.graph_id, 0, cwstore.infinity_seq());
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

-- _erase(graph_id, incarnation, reason) -> nodes erased: the record, and so the erasure
-- of that life of the graph (CW404 when it is gone). The login role is read here, where
-- the call was made (on Citus the record's trigger runs on a worker, as the cluster's
-- own connection).
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

-- erase_graph_v1(graph, reason) -> nodes erased
--   Erases one graph, recorded with the reason given. Unknown, or of a tenant the
--   caller is not in: CW404, as a read. A role that may read it but not erase it:
--   42501. Erased by another call meanwhile: CW404 (erased), even when the name has a
--   new graph by then (that one is not erased: the call erases the life it checked).
--   Waits for the appends and imports in flight on the graph; the writers that come
--   after get CW404.
CREATE FUNCTION cwstore.erase_graph_v1(p_graph text, p_reason text DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
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

-- erase_tenant_v1(tenant, reason, batch) -> (graph, nodes) of each graph erased
--   Erases up to batch graphs of the tenant, each recorded; call it until it returns
--   no row. The call that finds no graph left also removes the tenant's memberships
--   (tenant_members). A tenant the caller may not erase: 42501. Each graph is erased in
--   the life listed (of this tenant): one erased meanwhile is skipped, even when its
--   name has a new graph by then, of this tenant or another.
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

-- Retention. A graph is idle since its written_at: the time of the last statement of its
-- last write (40_derive.sql), or its creation when it holds no node. A retention group
-- (graphs.retention_group, within a tenant) is idle when every graph of it is, and is
-- erased whole or not at all.

-- _idle(idle, tenant, all, tenants, after, limit) -> up to limit (NULL: every) graphs
--   with a key above after, idle longer than idle, of the tenant (every tenant when
--   NULL) and of the tenants given (all of them when all), in key order; a graph of a
--   group only when no graph of its group was written since. Cost: a scan of graphs
--   (no node read). plpgsql: Citus cannot plan a SQL function's parameterized query
--   over distributed tables; the group test is an uncorrelated subquery for the same
--   reason.
CREATE FUNCTION cwstore._idle(p_idle interval, p_tenant text, p_all boolean,
                              p_tenants text[], p_after bigint, p_limit integer)
RETURNS TABLE (graph_id bigint, graph text, tenant text, length bigint,
               last_write timestamptz, retention_group text, incarnation bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN QUERY
  SELECT g.graph_id, g.name, g.tenant, g.length, g.written_at, g.retention_group,
         g.incarnation
    FROM cwstore.graphs g
   WHERE g.graph_id > p_after
     AND (p_tenant IS NULL OR g.tenant = p_tenant)
     AND (p_all OR g.tenant = ANY (p_tenants))
     AND g.written_at < now() - p_idle
     AND (g.retention_group IS NULL
          OR (g.tenant, g.retention_group) NOT IN (
               SELECT o.tenant, o.retention_group FROM cwstore.graphs o
                WHERE o.retention_group IS NOT NULL AND o.written_at >= now() - p_idle))
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
RETURNS TABLE (graph text, tenant text, length bigint, last_write timestamptz,
               retention_group text)
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_tenants text[] := cwstore._erasable_tenants();
BEGIN
  PERFORM cwstore._check_idle(p_idle);
  RETURN QUERY
  SELECT i.graph, i.tenant, i.length, i.last_write, i.retention_group
    FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, -1, NULL) i;
END $$;
COMMENT ON FUNCTION cwstore.idle_graphs_v1(interval, text) IS
  'The graphs idle longer than an interval (of a tenant, or every tenant when NULL) that the caller may erase: what erase_idle_v1 would erase. Idle: nothing written since (graphs.written_at), and likewise for every graph of its retention group. Erases nothing.';

-- _lock_idle(graph_id, incarnation, cutoff) -> the graph's row, locked, when it is still
--   that life and written before cutoff; NULL when a writer holds it (SKIP LOCKED: a
--   graph with a write in flight is not idle), it is gone, or it is another life or was
--   written since. A write kept open holds the lock until it ends.
CREATE FUNCTION cwstore._lock_idle(p_graph_id bigint, p_incarnation bigint,
                                   p_cutoff timestamptz) RETURNS cwstore.graphs
LANGUAGE plpgsql AS $$
DECLARE
  g cwstore.graphs;
BEGIN
  SELECT * INTO g FROM cwstore.graphs x WHERE x.graph_id = p_graph_id FOR UPDATE SKIP LOCKED;
  IF NOT FOUND OR g.incarnation <> p_incarnation OR g.written_at >= p_cutoff THEN
    RETURN NULL;
  END IF;
  RETURN g;
END $$;

-- _lock_idle_group(tenant, group, cutoff) -> every graph of the group, locked (in key
--   order), when every one is idle before cutoff under its lock; an empty array when a
--   graph of the group is being created (the group's lock, _retention_group_lock, is
--   held by its transaction), or any member is locked by a writer or was written since
--   (then nothing of it is erased). The group's lock, taken first and held to the end
--   of the transaction, keeps new members out until the erasure commits. Each member is
--   locked by its key (one shard on Citus).
CREATE FUNCTION cwstore._lock_idle_group(p_tenant text, p_group text, p_cutoff timestamptz)
RETURNS cwstore.graphs[] LANGUAGE plpgsql AS $$
DECLARE
  v_members cwstore.graphs[] := '{}';
  g cwstore.graphs;
  m record;
BEGIN
  IF NOT cwstore._retention_group_lock(p_tenant, p_group, true) THEN
    RETURN '{}';
  END IF;
  FOR m IN SELECT x.graph_id, x.incarnation FROM cwstore.graphs x
            WHERE x.tenant = p_tenant AND x.retention_group = p_group
            ORDER BY x.graph_id LOOP
    g := cwstore._lock_idle(m.graph_id, m.incarnation, p_cutoff);
    IF g IS NULL THEN
      RETURN '{}';
    END IF;
    v_members := v_members || g;
  END LOOP;
  RETURN v_members;
END $$;

-- erase_idle_v1(idle, tenant, reason, batch) -> the graphs erased
--   Erases up to batch graphs idle longer than idle, each checked again under its lock
--   (a graph written meanwhile, or another life of its name, is kept) and recorded; a
--   graph a writer holds locked is skipped (it is not idle). A retention group is
--   erased whole in one call (even past batch) or not at all: when any graph of it is
--   locked or not idle under the lock, none is. Call it until it returns no row: each
--   call is one short transaction.
CREATE FUNCTION cwstore.erase_idle_v1(p_idle interval, p_tenant text DEFAULT NULL,
                                      p_reason text DEFAULT NULL, p_batch integer DEFAULT 100)
RETURNS TABLE (graph text, tenant text, nodes bigint, last_write timestamptz,
               retention_group text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_tenants text[] := cwstore._erasable_tenants();
  v_cutoff timestamptz;
  v_after bigint := -1;
  v_left integer := p_batch;
  v_seen text[] := '{}';
  v_found boolean;
  v_unit cwstore.graphs[];
  r record;
  g cwstore.graphs;
BEGIN
  PERFORM cwstore._check_idle(p_idle);
  PERFORM cwstore._check_batch(p_batch);
  v_cutoff := now() - p_idle;
  -- Candidates in key order, a batch at a time, until batch graphs are erased.
  LOOP
    v_found := false;
    FOR r IN SELECT i.graph_id, i.tenant, i.retention_group, i.incarnation
               FROM cwstore._idle(p_idle, p_tenant, v_tenants IS NULL, v_tenants, v_after,
                                  p_batch) i LOOP
      v_found := true;
      v_after := r.graph_id;
      IF r.retention_group IS NULL THEN
        v_unit := ARRAY[cwstore._lock_idle(r.graph_id, r.incarnation, v_cutoff)];
        CONTINUE WHEN v_unit[1] IS NULL;
      ELSE
        CONTINUE WHEN jsonb_build_array(r.tenant, r.retention_group)::text = ANY (v_seen);
        v_seen := v_seen || jsonb_build_array(r.tenant, r.retention_group)::text;
        v_unit := cwstore._lock_idle_group(r.tenant, r.retention_group, v_cutoff);
      END IF;
      FOREACH g IN ARRAY v_unit LOOP
        graph := g.name;
        tenant := g.tenant;
        last_write := g.written_at;
        retention_group := g.retention_group;
        nodes := cwstore._erase(g.graph_id, g.incarnation, p_reason);
        RETURN NEXT;
        v_left := v_left - 1;
      END LOOP;
      IF v_left <= 0 THEN
        RETURN;
      END IF;
    END LOOP;
    EXIT WHEN NOT v_found;
  END LOOP;
END $$;
COMMENT ON FUNCTION cwstore.erase_idle_v1(interval, text, text, integer) IS
  'Erase up to batch graphs idle longer than an interval (of a tenant, or every tenant the caller may erase when NULL), each recorded in cwstore.erasures; a retention group goes whole or not at all. Call until no row.';
