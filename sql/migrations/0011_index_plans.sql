-- 0011_index_plans: the write doors plan with enable_seqscan off, and a plan made while
-- nodes was tiny takes the index its lookup names.
--
-- Why (issue 35): with the tables analyzed while empty, 150 LangGraph puts made about
-- 2,250 sequential scans of cwstore.nodes. A caller's connection keeps a plpgsql
-- function's plans for its life (append_v1's are generic by design), so a plan made
-- while the tables were small went on scanning them as they grew. Every lookup of
-- these functions has an index; enable_seqscan off makes the plan use it whatever the
-- statistics said (off is a penalty, not a ban). The store's own connections also set
-- it for the session (cwstore.drivers._protocol.INDEX_PLANS); this covers every other
-- caller (psql, the TypeScript runtime).
--
-- With sequential scans off, such a plan took nodes_created_at_idx, the index made
-- last (the planner's tie among equally cheap indexes that lead with graph_id), for the
-- lookups by id and seq, and read the graph's whole range on every append (10 appends
-- read 1,534 index entries early in a connection, 158,391 120 appends later). That
-- index is partial now (only a condition on created_at uses it), and append_v1 reads
-- the previous node's xid in nodes_pkey's order (the one index that gives it).
--
-- Safe with live writers: yes; the function and its settings are taken by the next
-- call. The index is built again under a lock that blocks writes (not reads) for the
-- build: a moment on a small database, longer on a large one. On a Citus cluster
-- already distributed, the index's DDL reaches the shards one at a time, to be followed
-- by a function definition in this transaction (without Citus an unused placeholder).

SET LOCAL citus.multi_shard_modify_mode = 'sequential';

-- 20_tables

DROP INDEX cwstore.nodes_created_at_idx;
CREATE INDEX nodes_created_at_idx ON cwstore.nodes (graph_id, created_at)
  WHERE created_at IS NOT NULL;

-- 60_write_api

ALTER FUNCTION cwstore.ensure_graph_v1(text, text[]) SET enable_seqscan = off;
ALTER FUNCTION cwstore.begin_import_v1(text, text[]) SET enable_seqscan = off;
ALTER FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[])
  SET enable_seqscan = off;
ALTER FUNCTION cwstore.declare_frontier_v1(bigint, text[]) SET enable_seqscan = off;
CREATE OR REPLACE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL,
                                  p_incarnation bigint DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text, incarnation bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_heads text[];
  v_life record;
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

  SELECT f.b_ids, f.b_kinds, f.b_parents, f.b_payloads, f.b_created, f.b_keys
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys
    FROM cwstore._batch_fields(p_nodes) f;
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
  -- greater of this transaction's and the graph's last node's (read as the last at or
  -- before the length, in nodes_pkey's order: only that index gives the order, so a
  -- plan made while the table was tiny cannot take another one and read the graph).
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
                    WHERE l.graph_id = v_graph_id AND l.seq <= v_len
                    ORDER BY l.seq DESC LIMIT 1))
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

-- 90_erasure

ALTER FUNCTION cwstore.erase_graph_v1(text, text) SET enable_seqscan = off;
