-- 0005_faster_reads: a state as of s in one round trip, and the heads of every
-- resource key at s in one index scan.
--
-- Why (nodes.node_json, export_v1): reading a state back built each node's JSON text
-- from its columns on every read, about 1.5 us a node, most of the server's time for
-- a state of a few thousand nodes; the clients then needed five round trips (a
-- snapshot transaction, the graph, the nodes, the frontier). node_json is that text,
-- computed once when the node is stored (generated column; the payload is kept as
-- written, byte for byte), and export_v1 returns length, nodes and frontier from one
-- statement, so one snapshot, one round trip. It costs storage: the payload is held
-- twice.
--
-- Why (key_versions_closed_idx): _heads_at(graph, s) found each key's head at s by its own backward descent of
-- key_versions_seq_idx: O(k log n) for k keys, and about 4 us a key, so a graph of 90
-- keys spent 0.4-0.8 ms of a 2 ms projection there. A version is the head of its key
-- for node_seq <= s < to_seq, the same validity interval as a frontier span, so the
-- same box index (cwstore.span_band, see 0003) finds every closed version valid at s in
-- one GiST scan, O(log n + k); the versions still open are the current heads
-- (key_heads), which began at or before s when head_seq <= s.
-- Cost to writers: closing a version (to_seq set when its key gets a new version)
-- now also writes a GiST entry.
--
-- Safe with live writers: no. ADD COLUMN ... STORED rewrites cwstore.nodes under an
-- exclusive lock (a few seconds per million nodes); run it in a quiet moment. The
-- CREATE INDEX blocks writes to key_versions while it builds (about a second per million versions); on a large live database create it
-- first with CREATE INDEX CONCURRENTLY under the same name, and this migration keeps it
-- (IF NOT EXISTS). The function is replaced in place (same signature and results).

CREATE INDEX IF NOT EXISTS key_versions_closed_idx ON cwstore.key_versions
  USING gist (cwstore.span_band(graph_id, node_seq, to_seq))
  WHERE to_seq <> 9223372036854775807;

CREATE OR REPLACE FUNCTION cwstore._heads_at(p_graph_id bigint, p_seq bigint,
                                             p_semantic_only boolean)
RETURNS TABLE (key text, version integer, seq bigint)
LANGUAGE plpgsql STABLE ROWS 100 AS $$
BEGIN
  IF p_seq IS NULL THEN
    RETURN QUERY
    SELECT h.key, h.version, h.head_seq FROM cwstore.key_heads h
     WHERE h.graph_id = p_graph_id
       AND (NOT p_semantic_only OR starts_with(h.key, 'semantic:'))
     ORDER BY h.key COLLATE "C";
  ELSE
    -- As in _frontier_at: the box test is the index condition, the integer tests after
    -- it are exact whatever float8 rounding the boxes carry.
    RETURN QUERY
    SELECT x.key, x.version, x.seq
      FROM (SELECT v.key, v.version, v.node_seq AS seq FROM cwstore.key_versions v
             WHERE cwstore.span_band(v.graph_id, v.node_seq, v.to_seq)
                   @> cwstore.at_box(p_graph_id, p_seq)
               AND v.to_seq <> 9223372036854775807
               AND v.node_seq <= p_seq AND p_seq < v.to_seq
            UNION ALL
            SELECT h.key, h.version, h.head_seq FROM cwstore.key_heads h
             WHERE h.graph_id = p_graph_id AND h.head_seq <= p_seq) x
     WHERE NOT p_semantic_only OR starts_with(x.key, 'semantic:')
     ORDER BY x.key COLLATE "C";
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._heads_at(bigint, bigint, boolean) IS
  'Private: (key, version, seq) of every resource key''s head of a graph_id after node s (NULL = now): one GiST scan of key_versions_closed_idx plus the current heads that began by s.';

-- The runtime's JSON object of a node, fields in the runtime's order (the same text the
-- export query built before). IMMUTABLE is true here though to_json is STABLE in
-- general: for text and text[] its output depends on no setting.
CREATE FUNCTION cwstore.node_json(p_id text, p_kind text, p_parents text[], p_payload text,
                                  p_created_at text, p_seq bigint, p_resource_key text)
RETURNS text LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
  SELECT '{"id":' || to_json(p_id)::text || ',"kind":' || to_json(p_kind)::text
         || ',"parents":' || array_to_json(p_parents)::text || ',"payload":' || p_payload
         || ',"createdAt":' || to_json(p_created_at)::text || ',"sequence":' || p_seq
         || CASE WHEN p_resource_key IS NULL THEN ''
                 ELSE ',"resourceKey":' || to_json(p_resource_key)::text END
         || '}'
$$;
COMMENT ON FUNCTION cwstore.node_json(text, text, text[], text, text, bigint, text) IS
  'A node as the runtime''s JSON object text (id, kind, parents, payload, createdAt, sequence, resourceKey?), payload verbatim.';

ALTER TABLE cwstore.nodes ADD COLUMN node_json text
  GENERATED ALWAYS AS (cwstore.node_json(id, kind, parents, payload_text, created_at_text, seq,
                                         resource_key)) STORED;
COMMENT ON COLUMN cwstore.nodes.node_json IS
  'The node as the runtime''s JSON object, as export writes it (payload verbatim); computed when stored.';

-- export_v1(graph, s, t) -> (length, seq, nodes, frontier)
--   The graph as of node s, or as of time t (the last node whose createdAt <= t), or now
--   when both are NULL: nodes is the JSON array text of nodes 1..seq, frontier the ids
--   of the frontier in force there. When s is beyond the graph's length, nodes and
--   frontier are NULL and length tells the client why. One statement, one snapshot.
--   CW404 for an unknown graph (or one of another tenant).
CREATE FUNCTION cwstore.export_v1(p_graph text, p_seq bigint DEFAULT NULL,
                                  p_time timestamptz DEFAULT NULL)
RETURNS TABLE (length bigint, seq bigint, nodes text, frontier text[])
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_seq bigint;
BEGIN
  IF p_seq < 0 THEN
    RAISE EXCEPTION USING ERRCODE = '22023',
      MESSAGE = format('a sequence number is >= 0, got %s', p_seq),
      DETAIL = jsonb_build_object('seq', p_seq)::text;
  END IF;
  v_seq := CASE WHEN p_time IS NOT NULL THEN cwstore.seq_at_time(p_graph, p_time)
                ELSE coalesce(p_seq, g.length) END;
  IF v_seq > g.length THEN
    RETURN QUERY SELECT g.length, v_seq, NULL::text, NULL::text[];
    RETURN;
  END IF;
  RETURN QUERY
  SELECT g.length, v_seq,
         (SELECT '[' || coalesce(string_agg(x.node_json, ','), '') || ']'
            FROM (SELECT n.node_json FROM cwstore.nodes n
                   WHERE n.graph_id = g.graph_id AND n.seq <= v_seq ORDER BY n.seq) x),
         CASE WHEN v_seq = 0 THEN '{}'::text[] ELSE
           ARRAY(SELECT n.id FROM cwstore._frontier_at(g.graph_id, v_seq) f
                   JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq
                  ORDER BY f.position) END;
END $$;
COMMENT ON FUNCTION cwstore.export_v1(text, bigint, timestamptz) IS
  'The graph as of node s, time t, or now: (length, seq, nodes JSON array text, frontier ids), from one snapshot. nodes is NULL when s > length.';

-- projection_v2(graph, s) -> text
--   projection_v1's answer as JSON text with every payload embedded as the exact JSON
--   the runtime wrote, instead of jsonb with payloads as escaped strings: built by
--   concatenating stored texts (no jsonb to build, then print), and parsed by a client
--   in one pass. Semantic entries carry their whole payload ({type, key, content}).
--   Same checks, errors and costs as projection_v1, which stays for psql users who
--   want jsonb.
CREATE FUNCTION cwstore.projection_v2(p_graph text, p_seq bigint DEFAULT NULL)
RETURNS text LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  g record := cwstore._graph(p_graph);
  v_at bigint := cwstore._at(p_seq, g.length);
  v_len bigint := coalesce(v_at, g.length);
  v_counts text;
  v_goal bigint;
  v_answer bigint;
BEGIN
  SELECT coalesce(json_object_agg(k.kind, c.n)::text, '{}'),
         max(c.seq) FILTER (WHERE k.kind = 'goal'), max(c.seq) FILTER (WHERE k.kind = 'answer')
    INTO v_counts, v_goal, v_answer
    FROM unnest(ARRAY['system', 'goal', 'inference', 'answer', 'tool_call', 'tool_result',
                      'resource', 'semantic', 'protocol_error', 'verification']) AS k(kind)
   CROSS JOIN LATERAL (
         SELECT kc.seq, kc.n FROM cwstore.kind_counts kc
          WHERE kc.graph_id = g.graph_id AND kc.kind = k.kind AND kc.seq <= v_len
          ORDER BY kc.seq DESC LIMIT 1) c;
  RETURN (
  WITH h AS MATERIALIZED (
    SELECT h.key, h.version, h.seq, n.id, n.kind, n.payload_text,
           starts_with(h.key, 'semantic:') AND n.kind = 'semantic' AS memory
      FROM cwstore._heads_at(g.graph_id, v_at, false) h
      JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = h.seq
  )
  SELECT '{"length":' || v_len
    || ',"frontier":[' || coalesce((
      SELECT string_agg('{"id":"' || n.id || '","kind":"' || n.kind || '","seq":' || n.seq
                        || ',"payload":' || n.payload_text || '}', ',' ORDER BY f.position)
        FROM cwstore._frontier_at(g.graph_id, v_at) f
        JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq), '')
    || '],"resources":[' || coalesce((
      SELECT string_agg('{"key":' || to_json(h.key)::text || ',"version":' || h.version
                        || ',"seq":' || h.seq || ',"id":"' || h.id || '","kind":"' || h.kind
                        || '","payload":' || h.payload_text || '}', ',' ORDER BY h.key COLLATE "C")
        FROM h WHERE NOT h.memory), '')
    || '],"semantic":[' || coalesce((
      SELECT string_agg('{"key":' || to_json(h.key)::text || ',"version":' || h.version
                        || ',"seq":' || h.seq || ',"id":"' || h.id
                        || '","payload":' || h.payload_text || '}', ','
                        ORDER BY t.type COLLATE "C", substr(h.key, length(t.type) + 11) COLLATE "C")
        FROM h CROSS JOIN LATERAL (SELECT split_part(h.key, ':', 2) AS type) t
       WHERE h.memory), '')
    || '],"latest_goal":' || coalesce((
      SELECT '{"seq":' || n.seq || ',"id":"' || n.id || '","payload":' || n.payload_text || '}'
        FROM cwstore.nodes n WHERE n.graph_id = g.graph_id AND n.seq = v_goal), 'null')
    || ',"latest_answer":' || coalesce((
      SELECT '{"seq":' || n.seq || ',"id":"' || n.id || '","payload":' || n.payload_text || '}'
        FROM cwstore.nodes n WHERE n.graph_id = g.graph_id AND n.seq = v_answer), 'null')
    || ',"counts":' || v_counts || '}');
END $$;
COMMENT ON FUNCTION cwstore.projection_v2(text, bigint) IS
  'Projection after node s (NULL = now) as JSON text: length, frontier, resources, semantic, latest_goal, latest_answer, counts, with payloads embedded verbatim. The clients read this one.';
