-- 50_tenancy: tenants, who may see and write what, row-level security, and the grants
-- of the roles cwstore_reader and cwstore_writer.
--
-- One database serves many agents, and often many customers. A graph belongs to a
-- tenant (graphs.tenant); a role belongs to the tenants listed for it, or for any role
-- it is a member of, in cwstore.tenant_members. Reads are limited by row-level
-- security: every table keyed by graph carries a policy and the views run as the
-- caller (security_invoker, 70_read_api.sql), so a role sees the graphs of its tenants
-- and nothing else, whatever SQL it writes. The public read functions run as their
-- owner, so they keep their indexes, and check the graph's tenant once, when they
-- resolve its name (cwstore._graph; CW404 as for a missing graph). Writes go through the
-- write functions only (60_write_api.sql): SECURITY DEFINER too, so a writer role needs
-- no privilege on any table, and each checks that the login role (session_user) may
-- write the graph's tenant before it locks or writes anything.
--
-- Who is unrestricted: superusers, BYPASSRLS roles, and members of the role that owns
-- the schema cwstore (the role that ran the migrations). Table owners are not subject
-- to row-level security (it is enabled, not forced).
--
-- The roles cwstore_reader and cwstore_writer are made by `cwstore init --roles`
-- (roles.sql): roles are cluster-wide objects, created only when asked for, and need
-- CREATEROLE.
--
-- SQLSTATEs raised: 42501 (a write to a graph of a tenant the login role is not in;
-- DETAIL {"graph", "role"}), CW404 (a read of such a graph), 42704 (unknown role).

CREATE FUNCTION cwstore.sees_all(p_role name) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles r
                    WHERE r.rolname = p_role), false)
      OR pg_catalog.pg_has_role(p_role, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                          WHERE n.nspname = 'cwstore'), 'MEMBER')
$$;
COMMENT ON FUNCTION cwstore.sees_all(name) IS
  'Whether a role reads and writes every graph: a superuser, a BYPASSRLS role, or a member of the owner of schema cwstore.';

-- plpgsql, not sql: on Citus tenant_members is a reference table, and Citus cannot plan
-- a parameterized SQL-function query over it.
CREATE FUNCTION cwstore.tenants_of(p_role name) RETURNS SETOF text
LANGUAGE plpgsql STABLE ROWS 2 AS $$
BEGIN
  RETURN QUERY
  SELECT DISTINCT m.tenant
    FROM cwstore.tenant_members m
    JOIN pg_catalog.pg_roles r ON r.rolname = m.member
   WHERE pg_catalog.pg_has_role(p_role, r.oid, 'MEMBER');
END $$;
COMMENT ON FUNCTION cwstore.tenants_of(name) IS
  'The tenants a role belongs to: those listed in tenant_members for it or for any role it is a member of (directly or not).';

-- The tenant of a graph created now: the session's cwstore.tenant setting if set (the
-- clients' tenant= option sets it), else the login role's only tenant if it has exactly
-- one and is restricted, else 'default'. Choosing is not permitting: the writer is
-- checked against the result like against any existing graph.
CREATE FUNCTION cwstore._new_graph_tenant() RETURNS text
LANGUAGE sql STABLE AS $$
  SELECT coalesce(
    nullif(pg_catalog.current_setting('cwstore.tenant', true), ''),
    CASE WHEN NOT cwstore.sees_all(session_user) THEN
      (SELECT min(t) FROM cwstore.tenants_of(session_user) t HAVING count(*) = 1) END,
    'default')
$$;

-- _may_use(tenant): whether the login role may read and write the graphs of a tenant.
CREATE FUNCTION cwstore._may_use(p_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT cwstore.sees_all(session_user)
      OR EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant)
$$;

-- _check_writer(graph, tenant): 42501 unless the login role may write that tenant's
-- graphs. A NULL tenant (no such graph yet) passes: creating one is checked on its own.
-- Called by the SECURITY DEFINER write functions, where current_user is their owner
-- and session_user is who logged in.
CREATE FUNCTION cwstore._check_writer(p_graph text, p_tenant text) RETURNS void
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

CREATE FUNCTION cwstore.add_tenant_member(p_tenant text, p_role name) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.to_regrole(quote_ident(p_role)) IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = '42704', MESSAGE = format('role %s does not exist', p_role),
      DETAIL = jsonb_build_object('role', p_role)::text;
  END IF;
  INSERT INTO cwstore.tenant_members (tenant, member) VALUES (p_tenant, p_role)
  ON CONFLICT DO NOTHING;
END $$;
COMMENT ON FUNCTION cwstore.add_tenant_member(text, name) IS
  'Let a role (and every member of it) read and write the graphs of a tenant. Needs INSERT on tenant_members: the owner''s.';

-- plpgsql, as tenants_of: Citus cannot plan a SQL function's parameterized DELETE on
-- the reference table tenant_members.
CREATE FUNCTION cwstore.remove_tenant_member(p_tenant text, p_role name) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM cwstore.tenant_members WHERE tenant = p_tenant AND member = p_role;
  RETURN FOUND;
END $$;
COMMENT ON FUNCTION cwstore.remove_tenant_member(text, name) IS
  'Undo add_tenant_member; true if the role was listed. Its sessions lose access at their next statement.';

-- ---------------------------------------------------------------------------------
-- row-level security: a policy on every table keyed by graph
-- ---------------------------------------------------------------------------------

-- Every other table is visible through its graph's row, so one rule, graphs', decides
-- for all. Each policy calls a function of its own row's tenant or graph_id, and no
-- sub-select is written in a policy: Citus refuses policies with sub-selects, while a
-- policy calling a function is kept on every shard and evaluated there, on the worker,
-- as the role that queries (citus.sql lets these two functions read the shards they
-- name from there); plpgsql, as Citus cannot plan a SQL function's parameterized
-- query. They run as the caller (not SECURITY DEFINER), so the graphs policy applies
-- inside _sees_graph: a graph_id is visible when its graph is. Superusers and BYPASSRLS
-- roles are not subject to policies at all. The cost: one function call per row a
-- restricted role reads directly (the owner's reads and the read functions pay none).
--
-- Row-level security also keeps PostgreSQL from using an index through an operator
-- that is not LEAKPROOF (the GiST box test of the frontier history, starts_with):
-- such a test is applied after the policy, as a filter. So the public read functions
-- below run as their owner, with their indexes, after checking the graph once
-- (cwstore._graph), and row-level security guards the tables for every other query.

-- _sees_tenant(tenant): whether current_user reads the graphs of that tenant: a member
-- (directly or not) of a role listed for it in tenant_members, or of the owner of
-- schema cwstore. A role listed but since dropped grants nothing.
CREATE FUNCTION cwstore._sees_tenant(p_tenant text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN p_tenant IN (SELECT m.tenant FROM cwstore.tenant_members m
                       WHERE pg_catalog.pg_has_role(current_user,
                               pg_catalog.to_regrole(pg_catalog.quote_ident(m.member)),
                               'MEMBER'))
      OR pg_catalog.pg_has_role(current_user,
                                (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                  WHERE n.nspname = 'cwstore'), 'MEMBER');
END $$;

-- _sees_graph(graph_id): whether current_user sees that graph's row (the graphs
-- policy decides); false for a graph_id with no graph.
CREATE FUNCTION cwstore._sees_graph(p_graph_id bigint) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN EXISTS (SELECT 1 FROM cwstore.graphs g WHERE g.graph_id = p_graph_id);
END $$;

ALTER TABLE cwstore.graphs ENABLE ROW LEVEL SECURITY;
CREATE POLICY graphs_tenant ON cwstore.graphs USING (cwstore._sees_tenant(tenant));

ALTER TABLE cwstore.nodes ENABLE ROW LEVEL SECURITY;
CREATE POLICY nodes_tenant ON cwstore.nodes USING (cwstore._sees_graph(graph_id));
ALTER TABLE cwstore.edges ENABLE ROW LEVEL SECURITY;
CREATE POLICY edges_tenant ON cwstore.edges USING (cwstore._sees_graph(graph_id));
ALTER TABLE cwstore.frontier_spans ENABLE ROW LEVEL SECURITY;
CREATE POLICY frontier_spans_tenant ON cwstore.frontier_spans
  USING (cwstore._sees_graph(graph_id));
ALTER TABLE cwstore.frontier_declarations ENABLE ROW LEVEL SECURITY;
CREATE POLICY frontier_declarations_tenant ON cwstore.frontier_declarations
  USING (cwstore._sees_graph(graph_id));
ALTER TABLE cwstore.key_versions ENABLE ROW LEVEL SECURITY;
CREATE POLICY key_versions_tenant ON cwstore.key_versions
  USING (cwstore._sees_graph(graph_id));
ALTER TABLE cwstore.key_heads ENABLE ROW LEVEL SECURITY;
CREATE POLICY key_heads_tenant ON cwstore.key_heads
  USING (cwstore._sees_graph(graph_id));
ALTER TABLE cwstore.kind_counts ENABLE ROW LEVEL SECURITY;
CREATE POLICY kind_counts_tenant ON cwstore.kind_counts
  USING (cwstore._sees_graph(graph_id));
-- The audit record outlives its graph: it is visible by its own tenant.
ALTER TABLE cwstore.erasures ENABLE ROW LEVEL SECURITY;
CREATE POLICY erasures_tenant ON cwstore.erasures USING (cwstore._sees_tenant(tenant));

-- ---------------------------------------------------------------------------------
-- grants for the roles cwstore_reader and cwstore_writer
-- ---------------------------------------------------------------------------------

-- apply_grants() -> whether the roles exist (false: nothing done)
--   cwstore_reader: USAGE on the schema; SELECT on its tables and views but the audit
--   record of erasures, every row filtered by the policies above; EXECUTE on every
--   function but the write and erasure APIs (the read functions and their helpers, the
--   table-free tenant functions). No write privilege: add_tenant_member and
--   remove_tenant_member need the owner's INSERT and DELETE on tenant_members.
--   cwstore_writer: a member of cwstore_reader (made so by roles.sql), plus EXECUTE
--   on the write API, by name below. No INSERT, UPDATE, DELETE or TRUNCATE on any
--   table.
--   cwstore_admin, where it exists: a member of cwstore_writer (roles.sql), plus
--   EXECUTE on the erasure API (90_erasure.sql) and SELECT on cwstore.erasures, both
--   for the tenants it belongs to. The private functions that write or lock (_erase,
--   _create_graph, _retention_group_lock) are granted to nobody: the functions above
--   call them as the owner.
--   Functions are executable by PUBLIC unless revoked, so that is revoked everywhere in
--   the schema. Run by roles.sql, and by the migration runner after each later
--   migration in a database whose roles were set up, so new functions get their grants.
CREATE FUNCTION cwstore.apply_grants() RETURNS boolean
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
COMMENT ON FUNCTION cwstore.apply_grants() IS
  'Grant cwstore_reader reading (SELECT, every function but the write and erasure APIs), cwstore_writer the write API, cwstore_admin (if it exists) the erasure API and the audit record; false if the roles do not exist.';
