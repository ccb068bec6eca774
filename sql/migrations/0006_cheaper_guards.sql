-- 0006_cheaper_guards: the guards of the derived tables and of graphs no longer run a
-- trigger function on every append.
--
-- Why: each derived table (edges, frontier_spans, key_versions, key_heads,
-- kind_counts) had a BEFORE statement trigger whose function refused the write unless
-- it came from inside the nodes trigger (pg_trigger_depth() >= 2 in the function), and
-- graphs a BEFORE UPDATE row trigger that let the nodes trigger move length. Every
-- append wrote three to six of these tables and updated graphs, so it entered that
-- many plpgsql functions only to be let through: about a fifth of a single-node
-- append's time in the database. A trigger's WHEN condition is evaluated without
-- entering the function; pg_trigger_depth() there is the depth of the statement that
-- writes (0 for a client's own statement, 1 inside the nodes trigger), so
-- WHEN (pg_trigger_depth() < 1) calls the same guard function for exactly the writes
-- it refuses. The rules and the errors are unchanged.
--
-- Safe with live writers: yes; each trigger is replaced in its own short lock.

DO $do$
DECLARE
  t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['edges', 'frontier_spans', 'key_versions', 'key_heads',
                           'kind_counts'] LOOP
    EXECUTE format('DROP TRIGGER %I ON cwstore.%I', t || '_derived', t);
    EXECUTE format('CREATE TRIGGER %I BEFORE INSERT%s ON cwstore.%I FOR EACH STATEMENT '
                   'WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._derived_only()',
                   t || '_derived',
                   CASE WHEN t = 'edges' THEN '' ELSE ' OR UPDATE OR DELETE' END, t);
  END LOOP;
END
$do$;

-- graphs: DELETE is always checked; an UPDATE only when a client sends it or when it
-- touches what nobody may change (the nodes trigger moves length, nothing else).
DROP TRIGGER graphs_guard ON cwstore.graphs;
CREATE TRIGGER graphs_guard_delete BEFORE DELETE ON cwstore.graphs
  FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1 OR NEW.graph_id <> OLD.graph_id
                     OR NEW.name <> OLD.name OR NEW.vocabulary IS DISTINCT FROM OLD.vocabulary)
  EXECUTE FUNCTION cwstore._graphs_guard();
