-- 0004_tenancy: tenants, row-level security, and a write API that runs as its owner.
--
-- Why: one database serves many agents, and often many customers. A graph belongs to a
-- tenant (graphs.tenant); a role belongs to the tenants listed for it, or for any role
-- it is a member of, in cwstore.tenant_members. Reads are limited by row-level
-- security: every table keyed by graph carries a policy and the views run as the
-- caller (security_invoker), so a role sees the graphs of its tenants and nothing
-- else, whatever SQL it writes. The public read functions (projection_v1,
-- frontier_at, ...) run as their owner, so they keep their indexes, and check the
-- graph's tenant once, when they resolve its name (CW404 as for a missing graph).
-- Writes go through the write functions only (ensure_graph_v1, begin_import_v1,
-- import_rows_v1, append_v1, declare_frontier_v1): SECURITY DEFINER too, so a writer
-- role needs no privilege on any table, and each checks that the login role
-- (session_user) may write the graph's tenant before it locks or writes anything.
--
-- Who is unrestricted: superusers, BYPASSRLS roles, and members of the role that owns
-- the schema cwstore (the role that ran the migrations). Table owners are not subject
-- to row-level security (it is enabled, not forced), so the owner's own sessions run
-- exactly as before this migration.
--
-- The roles cwstore_reader and cwstore_writer and their grants are made by
-- `cwstore init --roles` (sql/roles.sql): roles are cluster-wide objects, created
-- only when asked for, and need CREATEROLE.
--
-- Safe with live writers: yes. The functions are replaced in place (same signatures);
-- policies and new objects take brief locks.
--
-- SQLSTATEs raised: 42501 (a write to a graph of a tenant the login role is not in;
-- DETAIL {"graph", "role"}), and those of 0002.

CREATE TABLE cwstore.tenant_members (
  tenant    text NOT NULL,
  member    name NOT NULL,
  added_at  timestamptz NOT NULL DEFAULT now(),
  CONSTRAINT tenant_members_pkey PRIMARY KEY (tenant, member),
  CONSTRAINT tenant_members_tenant_check CHECK (tenant <> '')
);
COMMENT ON TABLE cwstore.tenant_members IS
  'Which roles belong to which tenant: member (a role name) and every role that is a member of it may read and write the graphs whose tenant is tenant. Not secret, like pg_auth_members: every cwstore role may read it.';

-- ---------------------------------------------------------------------------------
-- who may see what
-- ---------------------------------------------------------------------------------

CREATE FUNCTION cwstore.sees_all(p_role name) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT coalesce((SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles r
                    WHERE r.rolname = p_role), false)
      OR pg_catalog.pg_has_role(p_role, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                          WHERE n.nspname = 'cwstore'), 'MEMBER')
$$;
COMMENT ON FUNCTION cwstore.sees_all(name) IS
  'Whether a role reads and writes every graph: a superuser, a BYPASSRLS role, or a member of the owner of schema cwstore.';

CREATE FUNCTION cwstore.tenants_of(p_role name) RETURNS SETOF text
LANGUAGE sql STABLE ROWS 2 AS $$
  SELECT DISTINCT m.tenant
    FROM cwstore.tenant_members m
    JOIN pg_catalog.pg_roles r ON r.rolname = m.member
   WHERE pg_catalog.pg_has_role(p_role, r.oid, 'MEMBER')
$$;
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

-- _check_writer(graph, tenant): 42501 unless the login role may write that tenant's
-- graphs. A NULL tenant (no such graph yet) passes: creating one is checked on its own.
-- Called by the SECURITY DEFINER write functions, where current_user is their owner
-- and session_user is who logged in.
CREATE FUNCTION cwstore._check_writer(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_tenant IS NOT NULL AND NOT cwstore.sees_all(session_user)
     AND NOT EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not write graph %L: the graph belongs to a tenant the role is not a member of',
                       session_user, p_graph),
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

CREATE FUNCTION cwstore.remove_tenant_member(p_tenant text, p_role name) RETURNS boolean
LANGUAGE sql AS $$
  WITH d AS (DELETE FROM cwstore.tenant_members WHERE tenant = p_tenant AND member = p_role
             RETURNING 1)
  SELECT EXISTS (SELECT 1 FROM d)
$$;
COMMENT ON FUNCTION cwstore.remove_tenant_member(text, name) IS
  'Undo add_tenant_member; true if the role was listed. Its sessions lose access at their next statement.';

-- ---------------------------------------------------------------------------------
-- row-level security: a policy on every table keyed by graph
-- ---------------------------------------------------------------------------------

-- Every other table is visible through its graph's row, so one rule, graphs', decides
-- for all. It is sees_all and tenants_of written out, not called: a policy's text is
-- planned with the query (and cached with it), while a SQL function call with
-- sub-selects is planned again at every execution. The sub-selects that do not depend
-- on the row run once per query; each row is then a hash probe.
--
-- Row-level security also keeps PostgreSQL from using an index through an operator
-- that is not LEAKPROOF (the GiST box test of the frontier history, starts_with):
-- such a test is applied after the policy, as a filter. So the public read functions
-- below run as their owner, with their indexes, after checking the graph once
-- (_check_reader), and row-level security guards the tables for every other query.
ALTER TABLE cwstore.graphs ENABLE ROW LEVEL SECURITY;
CREATE POLICY graphs_tenant ON cwstore.graphs
  USING (tenant IN (SELECT m.tenant FROM cwstore.tenant_members m
                      JOIN pg_catalog.pg_roles r ON r.rolname = m.member
                     WHERE pg_catalog.pg_has_role(current_user, r.oid, 'MEMBER'))
         OR (SELECT r.rolsuper OR r.rolbypassrls FROM pg_catalog.pg_roles r
              WHERE r.rolname = current_user)
         OR pg_catalog.pg_has_role(current_user,
                                   (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                     WHERE n.nspname = 'cwstore'), 'MEMBER'));

DO $do$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['nodes', 'edges', 'frontier_spans', 'frontier_declarations',
                           'key_versions', 'key_heads', 'kind_counts'] LOOP
    EXECUTE format('ALTER TABLE cwstore.%I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY %I ON cwstore.%I USING '
                   '(graph_id IN (SELECT g.graph_id FROM cwstore.graphs g))', t || '_tenant', t);
  END LOOP;
END
$do$;

ALTER VIEW cwstore.node_view SET (security_invoker = true);
ALTER VIEW cwstore.edge_view SET (security_invoker = true);

-- ---------------------------------------------------------------------------------
-- the read API runs as its owner, after the tenant check
-- ---------------------------------------------------------------------------------

-- _check_reader(graph, tenant): CW404, as for a graph that does not exist, unless the
-- login role may read that tenant's graphs. Like _check_writer, it judges session_user,
-- because inside a SECURITY DEFINER function current_user is the owner.
CREATE FUNCTION cwstore._check_reader(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF NOT cwstore.sees_all(session_user)
     AND NOT EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', p_graph),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
END $$;

-- Every public read function resolves its graph here first: the one check they need.
CREATE OR REPLACE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_tenant text;
BEGIN
  SELECT g.graph_id, g.length, g.tenant INTO graph_id, length, v_tenant
    FROM cwstore.graphs g WHERE g.name = p_graph;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', p_graph),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_reader(p_graph, v_tenant);
  END IF;
END $$;

DO $do$
DECLARE
  f text;
BEGIN
  FOREACH f IN ARRAY ARRAY[
      'seq_at_time(text, timestamptz)', 'frontier_at(text, bigint)',
      'heads_at(text, bigint)', 'semantic_at(text, bigint)',
      'ancestors(text, text, integer)', 'descendants(text, text, integer)',
      'path(text, text, text)', 'key_history(text, text)', 'projection_v1(text, bigint)'] LOOP
    EXECUTE format('ALTER FUNCTION cwstore.%s SECURITY DEFINER '
                   'SET search_path = pg_catalog, pg_temp', f);
  END LOOP;
END
$do$;

-- ---------------------------------------------------------------------------------
-- grants for the roles cwstore_reader and cwstore_writer
-- ---------------------------------------------------------------------------------

-- apply_grants() -> whether the roles exist (false: nothing done)
--   cwstore_reader: USAGE on the schema; SELECT on its tables and views, every row
--   filtered by the policies above; EXECUTE on every function but the write API (the
--   read functions and their helpers, the table-free tenant functions). No write
--   privilege: add_tenant_member and remove_tenant_member need the owner's INSERT and
--   DELETE on tenant_members.
--   cwstore_writer: a member of cwstore_reader (made so by sql/roles.sql), plus EXECUTE
--   on the write API, by name below. No INSERT, UPDATE, DELETE or TRUNCATE on any
--   table.
--   Functions are executable by PUBLIC unless revoked, so that is revoked everywhere in
--   the schema. Run by sql/roles.sql, and by the migration runner after each later
--   migration in a database whose roles were set up, so new functions get their grants.
CREATE FUNCTION cwstore.apply_grants() RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
  f record;
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
  REVOKE ALL ON ALL FUNCTIONS IN SCHEMA cwstore FROM PUBLIC, cwstore_reader, cwstore_writer;
  FOR f IN SELECT p.oid::regprocedure AS sig,
                  p.proname IN ('ensure_graph_v1', 'begin_import_v1', 'import_rows_v1',
                                'append_v1', 'declare_frontier_v1') AS writes
             FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'cwstore'::regnamespace AND p.prokind = 'f'
              AND p.prorettype <> 'pg_catalog.trigger'::regtype LOOP
    EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %I', f.sig,
                   CASE WHEN f.writes THEN 'cwstore_writer' ELSE 'cwstore_reader' END);
  END LOOP;
  RETURN true;
END $$;
COMMENT ON FUNCTION cwstore.apply_grants() IS
  'Grant cwstore_reader reading (SELECT, every function but the write API) and cwstore_writer the write API; false if the roles do not exist.';

-- ---------------------------------------------------------------------------------
-- the write API runs as its owner, after the tenant check
-- ---------------------------------------------------------------------------------

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

CREATE OR REPLACE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
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

CREATE OR REPLACE FUNCTION cwstore.declare_frontier_v1(p_graph_id bigint, p_heads text[])
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
                   WHEN (r.kind #>> '{}') NOT IN ('system', 'goal', 'inference', 'answer',
                          'tool_call', 'tool_result', 'resource', 'semantic', 'protocol_error',
                          'verification')
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
            WHERE s.graph_id = v_graph_id AND s.to_seq = 9223372036854775807))) THEN
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
