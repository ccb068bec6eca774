-- 0004_graph_row_checks: the checks on a graph's row that every append paid for, moved
-- to where they are due. graphs_vocabulary_check and graphs_retention_group_check
-- become a trigger on those columns (refusing as the constraints did: 23514, their
-- names), and graphs_guard's long WHEN condition becomes two triggers: one for a
-- client's UPDATE (WHEN pg_trigger_depth() < 1), one on the columns nobody may change.
-- PostgreSQL prepares a table's CHECK expressions and its triggers' WHEN conditions
-- again in every statement that updates a row, and every append updates its graph's
-- row; triggers on columns are passed over without that when a statement sets none of
-- them.
--
-- The truth about the schema is sql/schema/; the definitions below are copies of it,
-- and tests/migration proves a database migrated here equal to one made from schema/.
--
-- Safe with live writers: yes (each statement is one short catalog change; the rows
-- already stored passed the constraints, so none is checked again).

SET LOCAL citus.enable_unsafe_triggers = on;

ALTER TABLE cwstore.graphs DROP CONSTRAINT graphs_vocabulary_check,
  DROP CONSTRAINT graphs_retention_group_check;

-- _graphs_settings (BEFORE INSERT, or UPDATE of vocabulary or retention_group, on
-- graphs): a vocabulary is NULL (dynamic) or 1 to 32 names, none NULL; a retention
-- group is NULL or 1 to 2000 bytes of UTF-8. Refused as the check constraints
-- graphs_vocabulary_check and graphs_retention_group_check would be (23514, those
-- names). Triggers on those columns, not CHECKs, for the reason _graphs_key gives: an
-- append updates its graph's row, and PostgreSQL prepares every CHECK of the table
-- again for each statement that does.
CREATE FUNCTION cwstore._graphs_settings() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
  v_check text;
  v_detail text;
BEGIN
  IF NOT (NEW.vocabulary IS NULL OR (cardinality(NEW.vocabulary) BETWEEN 1 AND 32
                                     AND array_position(NEW.vocabulary, NULL) IS NULL)) THEN
    v_check := 'graphs_vocabulary_check';
    v_detail := format('a vocabulary is NULL or 1 to 32 names, none NULL (this one has %s)',
                       cardinality(NEW.vocabulary));
  ELSIF NEW.retention_group = '' OR octet_length(NEW.retention_group) > 2000 THEN
    v_check := 'graphs_retention_group_check';
    v_detail := format('a retention group is 1 to 2000 bytes of UTF-8 (this one has %s)',
                       octet_length(NEW.retention_group));
  ELSE
    RETURN NEW;
  END IF;
  RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = v_check,
    SCHEMA = 'cwstore', TABLE = 'graphs',
    MESSAGE = format('new row for relation "graphs" violates check constraint "%s"', v_check),
    DETAIL = v_detail;
END $$;

CREATE TRIGGER graphs_settings_check BEFORE INSERT OR UPDATE OF vocabulary, retention_group
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_settings();

DROP TRIGGER graphs_guard ON cwstore.graphs;
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard_identity BEFORE UPDATE OF graph_id, incarnation, name, vocabulary
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_guard();
