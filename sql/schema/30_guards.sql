-- 30_guards: history is append-only; derived tables are written by the nodes trigger
-- only; a graph's id, name and length are kept by cwstore; rows of a graph are removed
-- only by its erasure (the trigger of cwstore.erasures, 90_erasure.sql), which runs at
-- trigger depth 1 like the nodes trigger; the audit record itself is append-only; a
-- node row's own rules, which the nodes trigger checks (_node_row_check).
--
-- The guards of the derived tables and of graphs' UPDATE fire only for the writes they
-- refuse: a trigger's WHEN condition is evaluated without entering the function, and
-- pg_trigger_depth() there is the depth of the statement that writes (0 for a client's
-- own statement, 1 inside the nodes trigger). Entering a plpgsql function only to be let
-- through cost about a fifth of a single-node append.
--
-- SQLSTATEs raised: CW403 (DETAIL {"table", "operation"}, and "graph" for graphs);
-- 23514 with the rule's name as the constraint (graphs' settings, a node row's rules).

CREATE FUNCTION cwstore._refuse_change() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW403',
    MESSAGE = format('cwstore.%s is append-only history: %s refused', TG_TABLE_NAME, TG_OP),
    DETAIL = jsonb_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text,
    HINT = 'A graph is removed whole, and recorded, by cwstore.erase_graph_v1 (docs/erasure.md)';
END $$;

CREATE FUNCTION cwstore._derived_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_trigger_depth() < 2 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('cwstore.%s is derived from cwstore.nodes and written by its trigger only: %s refused',
                       TG_TABLE_NAME, TG_OP),
      DETAIL = jsonb_build_object('table', TG_TABLE_NAME, 'operation', TG_OP)::text;
  END IF;
  RETURN NULL;
END $$;

CREATE TRIGGER nodes_append_only BEFORE UPDATE ON cwstore.nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER nodes_erased_only BEFORE DELETE ON cwstore.nodes
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER nodes_no_truncate BEFORE TRUNCATE ON cwstore.nodes
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_append_only BEFORE UPDATE ON cwstore.edges
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_erased_only BEFORE DELETE ON cwstore.edges
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_no_truncate BEFORE TRUNCATE ON cwstore.edges
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER edges_derived BEFORE INSERT ON cwstore.edges
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER frontier_declarations_append_only BEFORE UPDATE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_declarations_erased_only BEFORE DELETE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_declarations_no_truncate BEFORE TRUNCATE
  ON cwstore.frontier_declarations
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER frontier_spans_derived BEFORE INSERT OR UPDATE OR DELETE
  ON cwstore.frontier_spans
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER frontier_spans_no_truncate BEFORE TRUNCATE ON cwstore.frontier_spans
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER key_versions_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.key_versions
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER key_versions_no_truncate BEFORE TRUNCATE ON cwstore.key_versions
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER key_heads_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.key_heads
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER key_heads_no_truncate BEFORE TRUNCATE ON cwstore.key_heads
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER kind_counts_derived BEFORE INSERT OR UPDATE OR DELETE ON cwstore.kind_counts
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER kind_counts_no_truncate BEFORE TRUNCATE ON cwstore.kind_counts
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER graph_key_detours_derived BEFORE INSERT OR UPDATE OR DELETE
  ON cwstore.graph_key_detours
  FOR EACH STATEMENT WHEN (pg_trigger_depth() < 1)
  EXECUTE FUNCTION cwstore._derived_only();
CREATE TRIGGER graph_key_detours_no_truncate BEFORE TRUNCATE ON cwstore.graph_key_detours
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER graphs_no_truncate BEFORE TRUNCATE ON cwstore.graphs
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();

CREATE FUNCTION cwstore._graphs_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.length > 0 THEN
      RAISE EXCEPTION USING ERRCODE = 'CW403',
        MESSAGE = format('graph %L holds %s nodes of history: DELETE refused', OLD.name, OLD.length),
        DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'DELETE', 'graph', OLD.name)::text;
    END IF;
    RETURN OLD;
  END IF;
  IF NEW.graph_id <> OLD.graph_id OR NEW.name <> OLD.name OR NEW.incarnation <> OLD.incarnation
     OR ((NEW.length <> OLD.length OR NEW.frontier_seqs IS DISTINCT FROM OLD.frontier_seqs)
         AND pg_trigger_depth() < 2)
     OR (NEW.derived_length <> OLD.derived_length AND NEW.derived_length <> NEW.length
         AND pg_trigger_depth() < 2) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L: its id, name, incarnation, length and frontier are kept by cwstore (derived_length moves only to its length, cwstore.derive_v1): UPDATE refused', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  IF NEW.vocabulary IS DISTINCT FROM OLD.vocabulary AND OLD.length > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW403',
      MESSAGE = format('graph %L holds nodes: its vocabulary cannot change', OLD.name),
      DETAIL = jsonb_build_object('table', 'graphs', 'operation', 'UPDATE', 'graph', OLD.name)::text;
  END IF;
  RETURN NEW;
END $$;


-- graphs: a DELETE is checked unless an erasure sends it; an UPDATE only when a client
-- sends it (graphs_guard) or when it sets what nobody may change (graphs_guard_identity:
-- the nodes trigger moves length, the frontier and the watermark, nothing else; a client
-- may move the watermark to the length, which derives the history up to there:
-- cwstore.derive_v1). Two triggers, the second on those columns: a trigger's WHEN
-- condition is prepared again in every statement that updates a row, a trigger on
-- columns is passed over without it when the statement sets none of them, and every
-- append updates its graph's row.
CREATE TRIGGER graphs_guard_delete BEFORE DELETE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard BEFORE UPDATE ON cwstore.graphs
  FOR EACH ROW WHEN (pg_trigger_depth() < 1) EXECUTE FUNCTION cwstore._graphs_guard();
CREATE TRIGGER graphs_guard_identity BEFORE UPDATE OF graph_id, incarnation, name, vocabulary
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_guard();

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

-- The audit record of erasures: written once, never changed.
CREATE TRIGGER erasures_append_only BEFORE UPDATE OR DELETE ON cwstore.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();
CREATE TRIGGER erasures_no_truncate BEFORE TRUNCATE ON cwstore.erasures
  FOR EACH STATEMENT EXECUTE FUNCTION cwstore._refuse_change();

-- _node_row_check(seq, id, kind, createdAt, resourceKey) -> the name of the first rule
-- a node row breaks, or NULL: its sequence counts from 1; its id is cw_ and 24 lowercase
-- hex digits; its kind one of the ten; its createdAt RFC 3339 with a zone (what makes
-- cwstore.parse_time IMMUTABLE); a resourceKey, when given, not empty. The nodes trigger
-- checks every new row by it before anything else (a NULL rule holds, as a CHECK's
-- would). A SQL expression, inlined where it is called.
CREATE FUNCTION cwstore._node_row_check(p_seq bigint, p_id text, p_kind text, p_created text,
                                        p_key text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT CASE
           WHEN NOT (p_seq >= 1) THEN 'nodes_seq_check'
           WHEN NOT (length(p_id) = 27 AND left(p_id, 3) = 'cw_'
                     AND translate(substr(p_id, 4), '0123456789abcdef', '') = '')
             THEN 'nodes_id_check'
           WHEN NOT (p_kind = ANY (cwstore.node_kinds())) THEN 'nodes_kind_check'
           WHEN NOT (p_created ~
                     '^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$')
             THEN 'nodes_created_at_check'
           WHEN p_key = '' THEN 'nodes_resource_key_check'
         END
$$;

-- _refuse_node_row(rule, graph_id, seq, id): a node row that breaks a rule of
-- _node_row_check refused as a CHECK constraint of that name would refuse it (23514,
-- the rule's name as the constraint, table cwstore.nodes).
CREATE FUNCTION cwstore._refuse_node_row(p_rule text, p_graph_id bigint, p_seq bigint,
                                         p_id text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = p_rule,
    SCHEMA = 'cwstore', TABLE = 'nodes',
    MESSAGE = format('new row for relation "nodes" violates check constraint "%s"', p_rule),
    DETAIL = format('node %s, sequence %s of graph id %s: %s', quote_literal(p_id), p_seq,
                    p_graph_id,
                    CASE p_rule
                      WHEN 'nodes_seq_check' THEN 'sequences count from 1'
                      WHEN 'nodes_id_check' THEN 'an id is cw_ and 24 lowercase hex digits'
                      WHEN 'nodes_kind_check' THEN 'a kind is one of cwstore.node_kinds()'
                      WHEN 'nodes_created_at_check'
                        THEN 'a createdAt is an RFC 3339 date-time with a zone'
                      ELSE 'a resourceKey is not empty'
                    END);
END $$;
