-- 0008_retention: retention never takes a live graph and sees a group as one unit;
-- erasing a graph reads its own frontier spans only; no planner statistics on content.
--
-- Why (issue 34): a graph's idleness was its last node's recorded_at, the writing
-- transaction's start (now()), so a long transaction or import looked idle the moment
-- it committed and retention erased it; a LangGraph thread is several graphs (one per
-- checkpoint namespace) and retention erased an idle namespace of a thread in use; the
-- erasure's DELETE on frontier_spans had no usable index and read every graph's spans;
-- and ANALYZE kept names, payloads and keys of erased graphs in pg_statistic.
--
--   * graphs.written_at: the time of the last statement of the graph's last write
--     (clock_timestamp(), set where the length moves: _advance_length), backfilled from
--     the last node's recorded_at (created_at for an empty graph). Retention reads it
--     from the graph's row (no node read).
--   * graphs.retention_group, set at creation from the setting cwstore.retention_group
--     (the LangGraph saver sets its thread), and graphs_retention_group_idx: a group is
--     idle when all its graphs are, and erase_idle_v1 erases it whole or not at all,
--     every member locked (SKIP LOCKED) and checked again (same life, still idle) first.
--     idle_graphs_v1 and erase_idle_v1 return the group too (a column added: dropped
--     and created again).
--   * _erasure_recorded deletes a graph's frontier spans by the two indexes of the
--     table (open spans by the partial btree, closed ones by the box index).
--   * A statistics target of 0 on every column that holds content (20_tables.sql says
--     which and why), and the statistics ANALYZE already gathered for them removed: an
--     ANALYZE leaves the old rows of a column it now skips. PostgreSQL 18 lets the
--     tables' owner remove them (pg_clear_attribute_stats); before 18 only a superuser
--     can (pg_statistic), so a migration run by another role warns and leaves them:
--     docs/erasure.md gives the one-time step.
--
-- The definitions below are those of cwstore/sql/schema/, where they are documented.
--
-- Safe with live writers: yes. The backfill updates every graph's row once (writers of
-- a graph wait for it, a moment each); a writer on the old release keeps working (its
-- functions are replaced here in the same transaction). Retention calls made by the old
-- release's clients read the same functions by the same names. On a Citus cluster
-- already distributed, the DDL below must reach the shards one at a time to be followed
-- by function definitions in this transaction (citus.multi_shard_modify_mode; without
-- Citus an unused placeholder), and `cwstore init` then re-applies citus.sql.

SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- 20_tables

ALTER TABLE cwstore.graphs ADD COLUMN written_at timestamptz;
UPDATE cwstore.graphs g
   SET written_at = coalesce((SELECT n.recorded_at FROM cwstore.nodes n
                               WHERE n.graph_id = g.graph_id AND n.seq = g.length),
                             g.created_at);
ALTER TABLE cwstore.graphs ALTER COLUMN written_at SET DEFAULT clock_timestamp(),
  ALTER COLUMN written_at SET NOT NULL;
ALTER TABLE cwstore.graphs ADD COLUMN retention_group text;
ALTER TABLE cwstore.graphs ALTER COLUMN retention_group
  SET DEFAULT nullif(pg_catalog.current_setting('cwstore.retention_group', true), '');
-- A statement of its own: Citus runs ADD CONSTRAINT alone.
ALTER TABLE cwstore.graphs ADD CONSTRAINT graphs_retention_group_check CHECK (
  retention_group <> '' AND octet_length(retention_group) <= 2000);
CREATE INDEX graphs_retention_group_idx ON cwstore.graphs (tenant, retention_group)
  WHERE retention_group IS NOT NULL;
COMMENT ON TABLE cwstore.graphs IS
  'One row per agent graph: its name, semantic vocabulary (NULL = dynamic) and length (nodes stored). graph_id is cwstore.graph_key(name, key_probe), key_probe 0 unless another name held that key; incarnation tells this life of the graph from a later one of the same name. written_at is when the last write''s last statement moved its length (clock_timestamp(); its creation before any): retention measures idleness from it. retention_group, set at creation from the setting cwstore.retention_group, makes graphs one unit for retention (idle and erased together). The row is the per-graph lock of the append path.';

-- A statistics target of 0 on each content column (20_tables.sql). Citus refuses SET
-- STATISTICS on a distributed table: there it is set on the coordinator's table alone,
-- and citus.sql (run after the migrations) gives each shard its table's targets.
DO $stats$
DECLARE
  c record;
  v_citus boolean := pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL;
  v_dist boolean;
BEGIN
  FOR c IN SELECT t.tbl, t.col
             FROM (VALUES ('graphs', 'name'),
            ('graphs', 'vocabulary'),
            ('graphs', 'created_at'),
            ('graphs', 'written_at'),
            ('graphs', 'retention_group'),
            ('nodes', 'id'),
            ('nodes', 'parents'),
            ('nodes', 'payload_text'),
            ('nodes', 'created_at_text'),
            ('nodes', 'created_at'),
            ('nodes', 'resource_key'),
            ('nodes', 'recorded_at'),
            ('frontier_declarations', 'heads'),
            ('frontier_declarations', 'declared_at'),
            ('key_versions', 'key'),
            ('key_heads', 'key'),
            ('key_heads', 'head_id')) AS t(tbl, col) LOOP
    v_dist := false;
    IF v_citus THEN
      EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition WHERE logicalrelid = $1)'
        INTO v_dist USING format('cwstore.%I', c.tbl)::regclass;
    END IF;
    IF v_dist THEN
      PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'off', true);
    END IF;
    EXECUTE format('ALTER TABLE cwstore.%I ALTER COLUMN %I SET STATISTICS 0', c.tbl, c.col);
    IF v_dist THEN
      PERFORM pg_catalog.set_config('citus.enable_ddl_propagation', 'on', true);
    END IF;
  END LOOP;
END $stats$;

-- What ANALYZE gathered for these columns before: removed (see above).
DO $$
DECLARE
  c record;
  v_clear boolean := pg_catalog.to_regprocedure(
    'pg_catalog.pg_clear_attribute_stats(text, text, text, boolean)') IS NOT NULL;
  v_left integer := 0;
BEGIN
  FOR c IN SELECT a.attrelid, r.relname, a.attname, a.attnum
             FROM pg_catalog.pg_attribute a
             JOIN pg_catalog.pg_class r ON r.oid = a.attrelid
            WHERE r.relnamespace = 'cwstore'::regnamespace AND r.relkind = 'r'
              AND a.attstattarget = 0 AND a.attnum > 0 AND NOT a.attisdropped
              AND EXISTS (SELECT 1 FROM pg_catalog.pg_statistic s
                           WHERE s.starelid = a.attrelid AND s.staattnum = a.attnum) LOOP
    IF v_clear THEN
      EXECUTE 'SELECT pg_catalog.pg_clear_attribute_stats($1, $2, $3, false)'
        USING 'cwstore', c.relname::text, c.attname::text;
    ELSIF (SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) THEN
      DELETE FROM pg_catalog.pg_statistic s
       WHERE s.starelid = c.attrelid AND s.staattnum = c.attnum;
    ELSE
      v_left := v_left + 1;
    END IF;
  END LOOP;
  IF v_left > 0 THEN
    RAISE WARNING USING
      MESSAGE = format('%s cwstore columns keep planner statistics gathered before this migration, which may hold content of erased graphs', v_left),
      HINT = 'As a superuser: DELETE FROM pg_statistic WHERE starelid IN (SELECT oid FROM pg_class WHERE relnamespace = ''cwstore''::regnamespace) AND staattnum IN (SELECT attnum FROM pg_attribute WHERE attrelid = starelid AND attstattarget = 0) (docs/erasure.md)';
  END IF;
END $$;

-- 40_derive

CREATE OR REPLACE FUNCTION cwstore._advance_length(p_graph_id bigint, p_lo bigint, p_hi bigint,
                                        p_count bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  r record;
  v_now timestamptz := clock_timestamp();  -- a value: Citus refuses a volatile call in an UPDATE
BEGIN
  UPDATE cwstore.graphs g SET length = p_hi, written_at = v_now
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

-- 90_erasure

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

DROP FUNCTION cwstore.erase_idle_v1(interval, text, text, integer);
DROP FUNCTION cwstore.idle_graphs_v1(interval, text);
DROP FUNCTION cwstore._idle(interval, text, boolean, text[], bigint, integer);

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

CREATE FUNCTION cwstore._lock_idle_group(p_tenant text, p_group text, p_cutoff timestamptz)
RETURNS cwstore.graphs[] LANGUAGE plpgsql AS $$
DECLARE
  v_members cwstore.graphs[] := '{}';
  g cwstore.graphs;
  m record;
BEGIN
  FOR m IN SELECT x.graph_id, x.incarnation FROM cwstore.graphs x
            WHERE x.tenant = p_tenant AND x.retention_group = p_group
            ORDER BY x.graph_id LOOP
    g := cwstore._lock_idle(m.graph_id, m.incarnation, p_cutoff);
    IF g IS NULL THEN
      RETURN '{}';
    END IF;
    v_members := v_members || g;
  END LOOP;
  -- A graph that joined the group meanwhile (created since the list was read).
  IF (SELECT count(*) FROM cwstore.graphs x
       WHERE x.tenant = p_tenant AND x.retention_group = p_group)
     <> cardinality(v_members) THEN
    RETURN '{}';
  END IF;
  RETURN v_members;
END $$;

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

-- 55_graph_keys

CREATE FUNCTION cwstore._check_retention_group() RETURNS void
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_group text := pg_catalog.current_setting('cwstore.retention_group', true);
BEGIN
  IF octet_length(v_group) > 2000 THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation',
      CONSTRAINT = 'graphs_retention_group_check', SCHEMA = 'cwstore', TABLE = 'graphs',
      MESSAGE = 'new row for relation "graphs" violates check constraint "graphs_retention_group_check"',
      DETAIL = format('a retention group is at most 2000 bytes of UTF-8 (this one has %s)',
                      octet_length(v_group));
  END IF;
END $$;

CREATE OR REPLACE FUNCTION cwstore._create_graph(p_name text, p_vocabulary text[], p_tenant text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_key bigint;
  v_name text;
  v_free integer;
  v_id bigint;
BEGIN
  PERFORM cwstore._check_retention_group();
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
