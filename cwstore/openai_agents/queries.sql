-- Named queries of the OpenAI Agents SDK session (cwstore.openai_agents), one per
-- "-- name:" marker. They only read cwstore's documented tables and functions
-- (docs/sql.md); every write goes through the public store (append_v1, erase_graph_v1).

-- name: state
-- The graph named $1 as a writer needs it: its length, the id of its last node, the id
-- of the head of key $2 (the latest clear node) and the ids of its frontier's heads; no
-- row when there is no such graph.
SELECT f.length,
       (SELECT t.id FROM cwstore.nodes t
         WHERE t.graph_id = f.graph_id AND t.seq = f.length) AS tail_id,
       (SELECT h.head_id FROM cwstore.key_heads h
         WHERE h.graph_id = f.graph_id AND h.key = $2::text) AS clear_id,
       ARRAY(SELECT n.id FROM cwstore.graphs g
              CROSS JOIN LATERAL unnest(g.frontier_seqs) WITH ORDINALITY AS h(seq, ord)
               JOIN cwstore.nodes n ON n.graph_id = f.graph_id AND n.seq = h.seq
              WHERE g.graph_id = f.graph_id
              ORDER BY h.ord) AS heads
  FROM cwstore.find_graph($1::text) f

-- name: nodes
-- The graph named $1, as "state" gives it (part 0, one row), then its newest nodes
-- after the head of key $2 (the latest clear) and below sequence $3 (NULL: all), at
-- most $4 (NULL: all): part 1, newest first. No row when there is no such graph. The
-- state is read once (a materialized CTE), not once per node row.
WITH s AS MATERIALIZED (
  SELECT f.graph_id, f.length, c.head_id AS clear_id, coalesce(c.head_seq, 0) AS clear_seq,
         (SELECT t.id FROM cwstore.nodes t
           WHERE t.graph_id = f.graph_id AND t.seq = f.length) AS tail_id,
         ARRAY(SELECT h.id FROM cwstore.graphs g
                CROSS JOIN LATERAL unnest(g.frontier_seqs) WITH ORDINALITY AS fs(seq, ord)
                 JOIN cwstore.nodes h ON h.graph_id = f.graph_id AND h.seq = fs.seq
                WHERE g.graph_id = f.graph_id
                ORDER BY fs.ord) AS heads
    FROM cwstore.find_graph($1::text) f
    LEFT JOIN cwstore.key_heads c ON c.graph_id = f.graph_id AND c.key = $2::text)
SELECT 0 AS part, s.length, s.tail_id, s.clear_id, s.heads,
       NULL::bigint AS seq, NULL::text AS id, NULL::text AS payload_text
  FROM s
UNION ALL
SELECT 1, NULL, NULL, NULL, NULL, n.seq, n.id, n.payload_text
  FROM s
  JOIN LATERAL (
        SELECT n.seq, n.id, n.payload_text FROM cwstore.nodes n
         WHERE n.graph_id = s.graph_id
           AND n.seq > s.clear_seq
           AND n.seq < coalesce($3::bigint, s.length + 1)
         ORDER BY n.seq DESC
         LIMIT $4::bigint) n ON true
 ORDER BY part, seq DESC

-- name: append
-- Append a prepared batch (cwstore.prepare_append's args): the nodes as stored, with
-- whether this call wrote each (false: the graph held it already).
SELECT seq, id, created_at, written, payload_text
  FROM cwstore.append_v1($1::text, $2::json, $3::bigint, $4::json, $5::bigint)

-- name: set_retention_group
-- The retention group a graph created by this transaction joins.
SELECT pg_catalog.set_config('cwstore.retention_group', $1::text, true)
