-- citus.sql: the Citus-only steps of `cwstore init --citus`, run on the coordinator after
-- the schema (sql/schema/, through the migrations), in one transaction. The
-- schema itself is the same as on one server; this file only tells Citus where its
-- rows live (docs/scaling.md):
--
--   * every table keyed by graph is distributed by graph_id, all co-located with
--     graphs, so one graph's rows (its counter row, nodes, edges, spans, versions,
--     heads, counts, declarations, and the audit record of its erasure) sit in one
--     shard group, on one worker: erasing a graph runs there, in one phase;
--     graph_key_detours is distributed by the key a chain passed over;
--   * the small shared tables (tenant_members, listeners, schema_migrations) are
--     reference tables, a copy on every node;
--   * the write and read functions run on the coordinator, and each of their
--     statements names the graph's key, so it goes to the one worker that holds the
--     graph: one worker connection per call, committed there in one phase. They are not
--     delegated whole to the worker (create_distributed_function): Citus delegates only
--     by an argument of the distribution column's type (most take the graph's name, a
--     text), and the two that take graph_id, delegated, reported errors with the
--     worker's address in them (so another tenant's graph and a missing one differed)
--     and did not wait for an uncommitted append's lock in tests/contract.
--
-- What Citus cannot do and what replaces it:
--   * row-level security policies with sub-selects: the policies of 50_tenancy.sql call
--     functions instead (cwstore._sees_tenant, cwstore._sees_graph), which Citus keeps
--     on every shard and evaluates on the workers as the querying role. Those two read
--     tenant_members (a reference table) and graphs (the row's own graph, on the same
--     worker) from inside a query on a shard, which Citus allows only when told so.
--   * triggers on distributed tables: allowed here (citus.enable_unsafe_triggers, for
--     this transaction only); they fire on the shards, on the workers, and read and
--     write only their own graph's rows, so they stay on the local shard group.
--
-- Idempotent: a table already distributed, or a function already distributed, is left
-- as it is. Needs the citus extension and at least one worker (citus_add_node).

-- Each shard keeps no planner statistics of a column its table keeps none of (the
-- content columns, 20_tables.sql): a table distributed before its columns had those
-- targets (by a development build before 0.1.0) had its shards made without them, and
-- Citus does not carry SET STATISTICS to shards.
-- First in this file, before this transaction locks any shard: run_command_on_shards
-- works on connections of its own (what it sets stays even if a later step fails).
DO $shard_stats$
DECLARE
  t record;
  v_super boolean := (SELECT r.rolsuper FROM pg_catalog.pg_roles r
                       WHERE r.rolname = current_user);
BEGIN
  FOR t IN SELECT p.logicalrelid AS rel,
                  string_agg(format('ALTER COLUMN %I SET STATISTICS 0', a.attname), ', '
                             ORDER BY a.attnum) AS alters
             FROM pg_catalog.pg_dist_partition p
             JOIN pg_catalog.pg_class r ON r.oid = p.logicalrelid
             JOIN pg_catalog.pg_attribute a ON a.attrelid = p.logicalrelid
            WHERE r.relnamespace = 'cwstore'::regnamespace AND p.partmethod = 'h'
              AND a.attnum > 0 AND NOT a.attisdropped AND a.attstattarget = 0
            GROUP BY p.logicalrelid LOOP
    PERFORM count(*) FROM run_command_on_shards(t.rel, 'ALTER TABLE %s ' || t.alters);
    IF v_super THEN
      PERFORM count(*) FROM run_command_on_shards(t.rel,
        'DELETE FROM pg_catalog.pg_statistic s USING pg_catalog.pg_attribute a'
        ' WHERE a.attrelid = ''%s''::regclass AND s.starelid = a.attrelid'
        ' AND s.staattnum = a.attnum AND a.attstattarget = 0');
    END IF;
  END LOOP;
END
$shard_stats$;

SET LOCAL citus.enable_unsafe_triggers = on;
SET LOCAL citus.multi_shard_modify_mode = 'sequential';

DO $citus$
DECLARE
  t text;
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_catalog.pg_extension WHERE extname = 'citus') THEN
    RAISE EXCEPTION USING ERRCODE = '0A000',
      MESSAGE = 'cwstore init --citus needs the citus extension in this database',
      HINT = 'CREATE EXTENSION citus, and add the workers (citus_add_node), first';
  END IF;

  FOREACH t IN ARRAY ARRAY['tenant_members', 'listeners', 'schema_migrations'] LOOP
    IF NOT EXISTS (SELECT 1 FROM pg_dist_partition
                    WHERE logicalrelid = format('cwstore.%I', t)::regclass) THEN
      PERFORM create_reference_table(format('cwstore.%I', t));
    END IF;
  END LOOP;

  -- (A table a schema older than this file lacks is left for the `cwstore init` that
  -- migrates it, which applies this file again.) The rows a table holds are copied into
  -- its shards as they are, the derived rows with the others: its triggers, which would
  -- derive them again (or erase a graph, for a row of erasures), are off for the copy.
  FOREACH t IN ARRAY ARRAY['graphs', 'nodes', 'edges', 'frontier_spans',
                           'frontier_declarations', 'key_versions', 'key_heads',
                           'kind_counts', 'erasures'] LOOP
    IF to_regclass(format('cwstore.%I', t)) IS NOT NULL
       AND NOT EXISTS (SELECT 1 FROM pg_dist_partition
                        WHERE logicalrelid = to_regclass(format('cwstore.%I', t))) THEN
      EXECUTE format('ALTER TABLE cwstore.%I DISABLE TRIGGER USER', t);
      PERFORM create_distributed_table(format('cwstore.%I', t), 'graph_id',
                                       colocate_with => CASE WHEN t = 'graphs' THEN 'default'
                                                             ELSE 'cwstore.graphs' END);
      EXECUTE format('ALTER TABLE cwstore.%I ENABLE TRIGGER USER', t);
    END IF;
  END LOOP;

  -- The keys a chain passed over, by the key passed over: finding a name looks up its
  -- keys one by one, each on that key's worker.
  IF to_regclass('cwstore.graph_key_detours') IS NOT NULL
     AND NOT EXISTS (SELECT 1 FROM pg_dist_partition
                      WHERE logicalrelid = to_regclass('cwstore.graph_key_detours')) THEN
    ALTER TABLE cwstore.graph_key_detours DISABLE TRIGGER USER;
    PERFORM create_distributed_table('cwstore.graph_key_detours', 'slot',
                                     colocate_with => 'cwstore.graphs');
    ALTER TABLE cwstore.graph_key_detours ENABLE TRIGGER USER;
  END IF;
END
$citus$;

-- append_v1 plans its statements generically on one server (force_generic_plan); Citus
-- cannot plan its INSERT ... SELECT with parameters generically ("could not create
-- distributed plan"), so here it plans them with the call's values. Whatever its
-- signature (a database distributed at an earlier migration holds an older one).
DO $append$
DECLARE
  f regprocedure;
BEGIN
  FOR f IN SELECT p.oid::regprocedure FROM pg_catalog.pg_proc p
            WHERE p.pronamespace = 'cwstore'::regnamespace AND p.proname = 'append_v1' LOOP
    EXECUTE format('ALTER FUNCTION %s SET plan_cache_mode = auto', f);
  END LOOP;
END
$append$;

-- The private read functions that the public ones call inside a query over a table
-- keyed by graph: Citus sends that query to the graph's shard on its worker, and the
-- call runs there, reading the same graph's rows (on the same worker). Citus refuses
-- such a nested read unless told it is one: each reads one graph only, by graph_id.
ALTER FUNCTION cwstore._frontier_at(bigint, bigint)
  SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION cwstore._heads_at(bigint, bigint, boolean)
  SET citus.allow_nested_distributed_execution = on;

-- The functions the row-level security policies call (50_tenancy.sql): evaluated on a
-- shard, on its worker, each reads a reference table (tenant_members) or the row's own
-- graph (graphs, co-located with the row), both on that worker.
ALTER FUNCTION cwstore._sees_tenant(text) SET citus.allow_nested_distributed_execution = on;
ALTER FUNCTION cwstore._sees_graph(bigint) SET citus.allow_nested_distributed_execution = on;

-- The creation and the erasure of a graph that took a probe past 0 (the triggers
-- cwstore._graph_detoured, 55_graph_keys.sql, and cwstore._erasure_recorded,
-- 90_erasure.sql) run on the graph's shard, on its worker, and write its rows of
-- graph_key_detours, kept under other keys, on their shards: a nested query Citus
-- refuses unless told it is one. Each statement names one key.
DO $nested$
BEGIN
  IF to_regprocedure('cwstore._erasure_recorded()') IS NOT NULL THEN
    ALTER FUNCTION cwstore._graph_detoured() SET citus.allow_nested_distributed_execution = on;
    ALTER FUNCTION cwstore._erasure_recorded() SET citus.allow_nested_distributed_execution = on;
  END IF;
END
$nested$;
