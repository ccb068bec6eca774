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

-- _create_graph(name, vocabulary, tenant) -> graph_id
--   The graph of that name, created in the first free key of its chain unless it exists.
--   Creations of one name (and of names sharing its first key) take turns on a
--   transaction-level advisory lock on that key, so two of them never place one name
--   at two keys. Called as the owner (ensure_graph_v1), who sees every graph.
CREATE FUNCTION cwstore._create_graph(p_name text, p_vocabulary text[], p_tenant text)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_key bigint;
  v_name text;
  v_free integer;
  v_id bigint;
BEGIN
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
      INSERT INTO cwstore.graph_key_detours (slot, graph_id)
      SELECT cwstore.graph_key(p_name, p), v_id FROM generate_series(0, v_free - 1) p;
      RETURN v_id;
    END IF;
  END LOOP;
END $$;

-- _erased_meanwhile(name): raise CW404 for a graph found at the start of a call and
-- gone when its row was locked: erased while the call waited.
CREATE FUNCTION cwstore._erased_meanwhile(p_graph text) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION USING ERRCODE = 'CW404',
    MESSAGE = format('graph %L was erased while this call waited for it', p_graph),
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
                       p_graph),
      DETAIL = jsonb_build_object('graph', p_graph, 'erased', true)::text;
  END IF;
END $$;
