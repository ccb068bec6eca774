-- 55_graph_keys: from a graph's name to its key (graph_id), and the making of a new one.
--
-- A name's keys form a chain, cwstore.graph_key(name, 0), graph_key(name, 1), ... A graph
-- holds the first key of its chain that was free when it was created (graphs.key_probe),
-- and each key it passed over is recorded in graph_key_detours. Finding a name walks
-- the chain: a key held by the name is its graph; a key held by another name, or free
-- but passed over by some graph's chain, means go on; a key neither held nor passed
-- over ends the walk: no such graph. So two names sharing a key both live (the second
-- one probe further), an erased graph's key stays passable for the chains that went
-- past it, and nothing is refused for a collision. Almost every name is found at probe
-- 0, by one primary-key lookup: what a name cost before chains.
--
-- Chains are bounded at 64 probes: at 10^9 graphs among 2^48 keys the chance that a
-- name's first key is held is about 4e-6, that 64 are, nil; a tenant that searched for
-- names blocking another's would need 64 preimages of 48 bits to end one chain, and even
-- then only makes that one name refused (CW400 shape, as for a bad name).
--
-- SQLSTATEs raised: CW400 (no free key within 64 probes), CW404 (DETAIL {"graph",
-- "erased": true}: the graph was erased while the caller's transaction ran).

-- graph_id_of(name) -> graph_id, or NULL when no graph has that name (or none the
--   caller may see: it runs as the caller, and a graph of another tenant reads as a
--   free key, still passable when passed over). Cost: one lookup per probe walked,
--   almost always one.
CREATE FUNCTION cwstore.graph_id_of(p_name text) RETURNS bigint
LANGUAGE plpgsql STABLE STRICT AS $$
DECLARE
  v_key bigint;
  v_name text;
BEGIN
  FOR v_probe IN 0..63 LOOP
    v_key := cwstore.graph_key(p_name, v_probe);
    SELECT g.name INTO v_name FROM cwstore.graphs g WHERE g.graph_id = v_key;
    IF FOUND THEN
      IF v_name = p_name THEN
        RETURN v_key;
      END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM cwstore.graph_key_detours d WHERE d.slot = v_key) THEN
      RETURN NULL;
    END IF;
  END LOOP;
  RETURN NULL;
END $$;
COMMENT ON FUNCTION cwstore.graph_id_of(text) IS
  'The graph_id of a graph name (the key of its chain it holds), or NULL when there is no such graph.';

-- find_graph(name) -> (graph_id, length, vocabulary, incarnation) of the graph of that
--   name, no row when there is none (or none the caller may see: it runs as the
--   caller). The key is found first, in a statement of its own: on Citus the row is then
--   read from the graph's one shard.
CREATE FUNCTION cwstore.find_graph(p_name text)
RETURNS TABLE (graph_id bigint, length bigint, vocabulary text[], incarnation bigint)
LANGUAGE plpgsql STABLE STRICT ROWS 1 AS $$
DECLARE
  v_key bigint := cwstore.graph_id_of(p_name);
BEGIN
  RETURN QUERY
  SELECT g.graph_id, g.length, g.vocabulary, g.incarnation
    FROM cwstore.graphs g WHERE g.graph_id = v_key AND g.name = p_name;
END $$;
COMMENT ON FUNCTION cwstore.find_graph(text) IS
  'The graph of a name: graph_id, length, vocabulary (NULL = dynamic) and incarnation (which life of the name); no row when there is none the caller may see.';

-- _check_retention_group(): the group a graph created now would take (the setting
-- cwstore.retention_group, graphs' column default) must pass graphs_retention_group_check;
-- refused here, before the insert, as the constraint would refuse it (23514, that name):
-- on Citus a constraint refused on a worker reaches the client without its name.
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

-- _retention_group_lock(tenant, group, exclusive) -> whether the lock is held
--   The transaction-level advisory lock that makes a retention group's creations and
--   its retention take turns: a transaction that creates a graph in a group holds it
--   shared until it ends (waiting while a retention holds it), erase_idle_v1 takes it
--   exclusive, without waiting, before it reads the group's members (false: a creation
--   is in flight, the group is not idle). Two groups whose keys collide only make one
--   another wait or be skipped.
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

-- _create_graph(name, vocabulary, tenant) -> graph_id
--   The graph of that name, created in the first free key of its chain unless it exists.
--   Creations of one name (and of names sharing its first key) take turns on a
--   transaction-level advisory lock on that key, so two of them never place one name
--   at two keys. A creation in a retention group holds the group's lock shared
--   (_retention_group_lock) until its transaction ends, so retention cannot take the
--   rest of the group meanwhile. Called as the owner (ensure_graph_v1), who sees every
--   graph.
CREATE FUNCTION cwstore._create_graph(p_name text, p_vocabulary text[], p_tenant text)
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

-- _graphs_key (BEFORE INSERT, or UPDATE of graph_id, name or key_probe, on graphs):
-- graph_id is the key of the name at its probe, graph_key(name, key_probe), and
-- key_probe >= 0; refused as the check constraint graphs_key_check would be (23514,
-- that name). A trigger on those columns, not a CHECK: PostgreSQL prepares a table's
-- CHECK expressions again in every statement that updates a row, and the append path
-- updates its graph's length in every call.
CREATE FUNCTION cwstore._graphs_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.key_probe < 0 OR NEW.graph_id <> cwstore.graph_key(NEW.name, NEW.key_probe) THEN
    RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'graphs_key_check',
      SCHEMA = 'cwstore', TABLE = 'graphs',
      MESSAGE = 'new row for relation "graphs" violates check constraint "graphs_key_check"',
      DETAIL = format('graph_id %s is not the key of its name at probe %s', NEW.graph_id,
                      NEW.key_probe);
  END IF;
  RETURN NEW;
END $$;

CREATE TRIGGER graphs_key_check BEFORE INSERT OR UPDATE OF graph_id, name, key_probe
  ON cwstore.graphs FOR EACH ROW EXECUTE FUNCTION cwstore._graphs_key();

-- _graph_detoured (AFTER INSERT on graphs, for a graph past probe 0): records the keys
-- its chain passed over, one statement per key (each names its key: its one shard on
-- Citus). A trigger, so that graph_key_detours is written at trigger depth 1 only, as
-- the tables derived from nodes are (30_guards.sql).
CREATE FUNCTION cwstore._graph_detoured() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  FOR p IN 0 .. NEW.key_probe - 1 LOOP
    INSERT INTO cwstore.graph_key_detours (slot, graph_id)
    VALUES (cwstore.graph_key(NEW.name, p), NEW.graph_id);
  END LOOP;
  RETURN NULL;
END $$;

CREATE TRIGGER graphs_detoured AFTER INSERT ON cwstore.graphs
  FOR EACH ROW WHEN (NEW.key_probe > 0) EXECUTE FUNCTION cwstore._graph_detoured();

-- _erased_meanwhile(name): raise CW404 for a graph found at the start of a call and
-- gone when its row was locked: erased while the call waited.
CREATE FUNCTION cwstore._erased_meanwhile(p_graph text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW404',
    MESSAGE = format('graph %L was erased while this call waited for it', left(p_graph, 200)),
    DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
END $$;

-- _check_after_erasure(name, graph_id): before the first node of a graph's life is
-- written, refuse (CW404, erased) a transaction older than an erasure of the same key:
-- its nodes' xids would come before that erasure in the all-graphs feed (tail_all_v2),
-- and a follower would apply the erasure to them. A new transaction passes. Without
-- Citus only: there xids are each node's own and the feed is not offered.
CREATE FUNCTION cwstore._check_after_erasure(p_graph text, p_graph_id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF pg_catalog.to_regclass('pg_catalog.pg_dist_partition') IS NULL
     AND EXISTS (SELECT 1 FROM cwstore.erasures e
                  WHERE e.graph_id = p_graph_id
                    AND e.xid >= pg_catalog.pg_current_xact_id()::text::bigint) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L was erased by a transaction newer than this one: write it again in a new transaction',
                       left(p_graph, 200)),
      DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
  END IF;
END $$;
