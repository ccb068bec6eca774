-- 80_listeners: who follows the channel cwstore, so appends wake followers only while
-- someone follows.
--
-- PostgreSQL queues a notification under one lock for the whole server at commit,
-- whether or not any session listens: with 16 writers on separate graphs an
-- unconditional NOTIFY cost about a quarter of the throughput. Followers (the clients'
-- tail and tail_all) register in cwstore.listeners after they LISTEN, and the nodes
-- triggers notify only while the table holds a row. NOTIFY stays a hint: a follower
-- that registers while a write is in flight may miss that one wake-up and finds the
-- node at its next poll.

-- listen_v1(): register this backend as a follower (call it after LISTEN cwstore), and
-- forget backends that are gone. unlisten_v1(): undo it. Both run as the owner, so
-- readers may follow without any write privilege.
CREATE FUNCTION cwstore.listen_v1() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  DELETE FROM cwstore.listeners l
   WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_stat_activity a WHERE a.pid = l.pid);
  INSERT INTO cwstore.listeners (pid) VALUES (pg_catalog.pg_backend_pid())
  ON CONFLICT (pid) DO NOTHING;
$$;
COMMENT ON FUNCTION cwstore.listen_v1() IS
  'Register this backend as a follower of channel cwstore (after LISTEN cwstore), so appends send their wake-up NOTIFY.';

CREATE FUNCTION cwstore.unlisten_v1() RETURNS void
LANGUAGE sql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  DELETE FROM cwstore.listeners WHERE pid = pg_catalog.pg_backend_pid();
$$;
COMMENT ON FUNCTION cwstore.unlisten_v1() IS
  'Undo listen_v1 for this backend.';

-- feed_horizon() -> xid
--   The all-graphs feed (tail_all_v1) reads rows whose xid is below this: every
--   transaction of this database that may write nodes and is still running has an xid
--   at or above it, and so does every transaction that starts later. A node's xid is
--   at least its writing transaction's (append_v1, import_rows_v1), so no node below
--   the horizon can still commit: a reader that follows by xid never skips one.
--   Only transactions of roles that may write cwstore nodes count (superusers, members
--   of the schema's owner or of cwstore_writer, roles with EXECUTE on the write API or
--   INSERT on cwstore.nodes), in this database, prepared ones included: a transaction of
--   any other role, or in another database, does not hold the feed back. A writer that
--   keeps a transaction with an xid open does, until it ends; idle_in_transaction_session_timeout
--   on writer roles bounds that.
--   Call it in its own statement, before the statement that reads nodes: that one's
--   snapshot must come after it (READ COMMITTED).
CREATE FUNCTION cwstore.feed_horizon() RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_xmax bigint := pg_catalog.pg_snapshot_xmax(pg_catalog.pg_current_snapshot())::text::bigint;
  v_min bigint;
BEGIN
  PERFORM pg_catalog.pg_stat_clear_snapshot();
  WITH running AS (
    SELECT l.transactionid::text::bigint AS xid32, a.usesysid AS role
      FROM pg_catalog.pg_locks l
      JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
     WHERE l.locktype = 'transactionid' AND l.mode = 'ExclusiveLock' AND l.granted
       AND a.datname = pg_catalog.current_database()
    UNION ALL
    SELECT p.transaction::text::bigint, r.oid
      FROM pg_catalog.pg_prepared_xacts p JOIN pg_catalog.pg_roles r ON r.rolname = p.owner
     WHERE p.database = pg_catalog.current_database()
  ), writers AS (
    SELECT x.xid32 FROM running x
     WHERE pg_catalog.pg_has_role(x.role, (SELECT n.nspowner FROM pg_catalog.pg_namespace n
                                            WHERE n.nspname = 'cwstore'), 'MEMBER')
        OR EXISTS (SELECT 1 FROM pg_catalog.pg_roles r WHERE r.oid = x.role AND r.rolsuper)
        OR CASE WHEN pg_catalog.to_regrole('cwstore_writer') IS NULL THEN false
                ELSE pg_catalog.pg_has_role(x.role, pg_catalog.to_regrole('cwstore_writer'),
                                            'MEMBER') END
        OR (pg_catalog.has_schema_privilege(x.role, 'cwstore', 'USAGE')
            AND (pg_catalog.has_function_privilege(x.role,
                   'cwstore.append_v1(text, json, bigint, json, bigint)', 'EXECUTE')
                 OR pg_catalog.has_table_privilege(x.role, 'cwstore.nodes', 'INSERT')))
  )
  -- A 32-bit xid of a running transaction is within 2^31 below the next one: widen it
  -- with the epoch of xmax.
  SELECT min(CASE WHEN (v_xmax >> 32 << 32) + w.xid32 > v_xmax
                  THEN (v_xmax >> 32 << 32) + w.xid32 - 4294967296
                  ELSE (v_xmax >> 32 << 32) + w.xid32 END)
    INTO v_min FROM writers w;
  RETURN least(v_xmax, v_min);
END $$;
COMMENT ON FUNCTION cwstore.feed_horizon() IS
  'The xid below which no node can still commit: the oldest running transaction of a role that may write cwstore nodes in this database, else the next xid. tail_all_v1 reads below it.';

-- _erasure_events(xid, graph_id, seq, horizon, limit) -> (xid, graph_id) of the
--   erasures after the cursor and below the horizon, of the tenants the login role may
--   read, in cursor order (an erasure sits at seq infinity_seq(), after every node of its
--   xid and graph). Runs as the owner: the audit record is not the readers' to read, the
--   fact that a graph they could read is gone is.
CREATE FUNCTION cwstore._erasure_events(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                        p_horizon bigint, p_limit integer)
RETURNS TABLE (xid bigint, graph_id bigint)
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  SELECT e.xid, e.graph_id FROM cwstore.erasures e
   WHERE e.xid >= p_xid
     AND (e.xid, e.graph_id, cwstore.infinity_seq()) > (p_xid, p_graph_id, p_seq)
     AND e.xid < p_horizon AND cwstore._may_use(e.tenant)
   ORDER BY e.xid, e.graph_id LIMIT p_limit
$$;

-- _tail_all(xid, graph_id, seq, limit, max_bytes, erasures) -> nodes of every graph the
--   caller may read, and with erasures also the erasure events: up to limit rows after
--   the cursor (xid, graph_id, seq), in cursor order, only below feed_horizon()
--   (computed first, in a statement of its own, so the read's snapshot comes after it),
--   and no more than max_bytes of payload text past the first row (NULL: no byte
--   bound). Runs as the caller: row-level security decides which nodes it sees. In a
--   REPEATABLE READ or SERIALIZABLE transaction the read's snapshot is the
--   transaction's, so the horizon is held to that snapshot's xmin as well.
--   Refused where cwstore.nodes is distributed by Citus (0A000): transaction ids and the
--   horizon are each node's own there, so a cursor by xid would skip or repeat nodes
--   across workers (docs/scaling.md says what to follow instead).
CREATE FUNCTION cwstore._tail_all(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                  p_limit integer, p_max_bytes bigint, p_erasures boolean)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text,
               erased boolean)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_horizon bigint;
  v_spread boolean := false;
BEGIN
  IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN
    EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition'
            ' WHERE logicalrelid = ''cwstore.nodes''::regclass)' INTO v_spread;
  END IF;
  IF v_spread THEN
    RAISE EXCEPTION USING ERRCODE = '0A000',
      MESSAGE = 'the all-graphs feed (tail_all) is not available on Citus: transaction ids are per node, so its cursor could skip or repeat nodes across workers',
      HINT = 'Follow each graph with tail (its sequence is exact on any node); see docs/scaling.md';
  END IF;
  v_horizon := cwstore.feed_horizon();
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    v_horizon := least(v_horizon,
      pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::bigint);
  END IF;
  RETURN QUERY
  SELECT x.xid, x.graph_id, x.name, x.seq, x.id, x.kind, x.parents, x.payload_text,
         x.created_at_text, x.resource_key, x.erased
    FROM (SELECT l.*, sum(coalesce(octet_length(l.payload_text), 0))
                        OVER (ORDER BY l.xid, l.graph_id, l.seq)
                      - coalesce(octet_length(l.payload_text), 0) AS before
            FROM (SELECT * FROM (
                    SELECT n.xid, n.graph_id, g.name, n.seq, n.id, n.kind, n.parents,
                           n.payload_text, n.created_at_text, n.resource_key, false AS erased
                      FROM cwstore.nodes n JOIN cwstore.graphs g ON g.graph_id = n.graph_id
                     WHERE n.xid >= p_xid
                       AND (n.xid, n.graph_id, n.seq) > (p_xid, p_graph_id, p_seq)
                       AND n.xid < v_horizon
                     ORDER BY n.xid, n.graph_id, n.seq
                     LIMIT p_limit) nodes
                  UNION ALL
                  SELECT e.xid, e.graph_id, NULL, cwstore.infinity_seq(), NULL, NULL, NULL,
                         NULL, NULL, NULL, true
                    FROM cwstore._erasure_events(p_xid, p_graph_id, p_seq, v_horizon, p_limit) e
                   WHERE p_erasures
                  ORDER BY 1, 2, 4
                  LIMIT p_limit) l) x
   WHERE p_max_bytes IS NULL OR x.before = 0 OR x.before < p_max_bytes
   ORDER BY x.xid, x.graph_id, x.seq;
END $$;

-- tail_all_v1(xid, graph_id, seq, limit, max_bytes) -> the nodes of the all-graphs feed
--   (_tail_all without erasure events): what a follower that predates erasure reads.
CREATE FUNCTION cwstore.tail_all_v1(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text)
LANGUAGE sql VOLATILE AS $$
  SELECT t.xid, t.graph_id, t.name, t.seq, t.id, t.kind, t.parents, t.payload_text,
         t.created_at_text, t.resource_key
    FROM cwstore._tail_all(p_xid, p_graph_id, p_seq, p_limit, p_max_bytes, false) t
$$;
COMMENT ON FUNCTION cwstore.tail_all_v1(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed: up to limit nodes (and max_bytes of payload past the first) after cursor (xid, graph_id, seq) that can no longer be overtaken (below feed_horizon()), in order; what the caller may read. No erasure events: tail_all_v2 has them.';

-- tail_all_v2(xid, graph_id, seq, limit, max_bytes) -> the all-graphs feed with its
--   erasure events: a row with erased true (seq infinity_seq(), name and node columns
--   NULL) where a graph the caller may read was erased, after every node of the erased
--   life and before any node of a later one (_check_after_erasure keeps those after).
CREATE FUNCTION cwstore.tail_all_v2(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text,
               erased boolean)
LANGUAGE sql VOLATILE AS $$
  SELECT * FROM cwstore._tail_all(p_xid, p_graph_id, p_seq, p_limit, p_max_bytes, true)
$$;
COMMENT ON FUNCTION cwstore.tail_all_v2(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed with erasure events: up to limit rows after cursor (xid, graph_id, seq), nodes and erasures (erased true, seq infinity) of graphs the caller may read, in order, below feed_horizon().';
