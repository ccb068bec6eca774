-- 0013_retention_group_lock: retention cannot take a group while a graph of it is
-- being created.
--
-- Why (issue 34): erase_idle_v1 locked every committed graph of an idle retention group
-- and erased them; a graph of the group created by a transaction still open was not
-- seen, so a LangGraph thread whose new namespace was being written lost the rest of
-- the thread. Now a creation in a group holds the group's advisory lock shared until
-- its transaction ends (cwstore._retention_group_lock), and erase_idle_v1 takes it
-- exclusive, without waiting, before it reads the group's members: a group with a
-- creation in flight is skipped, and no member joins it until the erasure commits
-- (which replaces the recount of the members).
--
-- The definitions below are those of cwstore/sql/schema/, where they are documented.
--
-- Safe with live writers: yes (functions only).

CREATE FUNCTION cwstore._retention_group_lock(p_tenant text, p_group text,
                                              p_exclusive boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  v_class constant integer := 1668772455;  -- 'cwrg'
  v_key integer := pg_catalog.hashtext(p_tenant || '/' || p_group);
BEGIN
  IF p_exclusive THEN
    RETURN pg_catalog.pg_try_advisory_xact_lock(v_class, v_key);
  END IF;
  PERFORM pg_catalog.pg_advisory_xact_lock_shared(v_class, v_key);
  RETURN true;
END $$;

CREATE OR REPLACE FUNCTION cwstore._create_graph(p_name text, p_vocabulary text[], p_tenant text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_key bigint;
  v_name text;
  v_free integer;
  v_id bigint;
  v_group text := nullif(pg_catalog.current_setting('cwstore.retention_group', true), '');
BEGIN
  PERFORM cwstore._check_retention_group();
  IF v_group IS NOT NULL THEN
    PERFORM cwstore._retention_group_lock(p_tenant, v_group, false);
  END IF;
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

CREATE OR REPLACE FUNCTION cwstore._lock_idle_group(p_tenant text, p_group text, p_cutoff timestamptz)
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
                                          'declare_frontier_v1', 'derive_v1')
                         THEN 'cwstore_writer'
                       WHEN p.proname IN ('erase_graph_v1', 'erase_tenant_v1',
                                          'idle_graphs_v1', 'erase_idle_v1')
                         THEN 'cwstore_admin'
                       WHEN p.proname IN ('_erase', '_create_graph', '_retention_group_lock') THEN NULL
                       ELSE 'cwstore_reader' END AS grantee
             FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'cwstore'::regnamespace AND p.prokind = 'f'
              AND p.prorettype <> 'pg_catalog.trigger'::regtype LOOP
    CONTINUE WHEN f.grantee IS NULL OR (f.grantee = 'cwstore_admin' AND NOT v_admin);
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.sig, f.grantee);
  END LOOP;
  RETURN true;
END $$;
