-- Named queries of the LangGraph checkpointer (cwstore.langgraph), one per "-- name:"
-- marker, $1, $2, ... for every driver. They only read cwstore's documented tables and
-- functions (docs/sql.md); every write goes through the public store (append_v1,
-- erase_graph_v1).

-- name: checkpoint
-- The checkpoint node of graph $1 whose key is $2 (lg:cp:<id>), or, $2 NULL, the latest
-- one (the newest node of the checkpoints' kind $3): graph id, seq, node id, payload text.
SELECT g.graph_id, n.seq, n.id, n.payload_text
  FROM cwstore.find_graph($1) g
  JOIN LATERAL (
    SELECT h.head_seq AS seq
      FROM cwstore.key_heads h
     WHERE $2::text IS NOT NULL AND h.graph_id = g.graph_id AND h.key = $2::text
    UNION ALL
    (SELECT k.seq
       FROM cwstore.kind_counts k
      WHERE $2::text IS NULL AND k.graph_id = g.graph_id AND k.kind = $3::text
      ORDER BY k.seq DESC
      LIMIT 1)
  ) c ON true
  JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = c.seq

-- name: parts
-- What a checkpoint of graph id $1 holds: part 0, the value nodes with ids $2; part 1,
-- the message chains' versions (channel $3[i], key $4[i], versions $5[i]..$6[i]), in
-- order; part 2, every version of the pending writes' key $7, oldest first.
SELECT 0 AS part, NULL::text AS channel, n.resource_key AS key, 0::bigint AS ord,
       v.version, n.id, n.payload_text
  FROM cwstore.nodes n
  JOIN cwstore.key_versions v
    ON v.graph_id = n.graph_id AND v.key = n.resource_key AND v.node_seq = n.seq
 WHERE n.graph_id = $1 AND n.id = ANY($2::text[])
UNION ALL
SELECT 1, s.channel, s.key, s.ord, v.version, n.id, n.payload_text
  FROM unnest($3::text[], $4::text[], $5::int[], $6::int[])
       WITH ORDINALITY AS s(channel, key, first_version, last_version, ord)
  JOIN cwstore.key_versions v
    ON v.graph_id = $1 AND v.key = s.key
   AND v.version BETWEEN s.first_version AND s.last_version
  JOIN cwstore.nodes n ON n.graph_id = $1 AND n.seq = v.node_seq
UNION ALL
SELECT 2, NULL, NULL, 0, v.version, n.id, n.payload_text
  FROM cwstore.key_versions v
  JOIN cwstore.nodes n ON n.graph_id = v.graph_id AND n.seq = v.node_seq
 WHERE v.graph_id = $1 AND v.key = $7::text
 ORDER BY 1, 4, 5

-- name: heads
-- The heads (node id, version) of keys $2 in graph $1 (by name); a key with no row has
-- no version yet.
SELECT h.key, h.head_id, h.version
  FROM cwstore.find_graph($1) g
  JOIN cwstore.key_heads h ON h.graph_id = g.graph_id AND h.key = ANY($2::text[])

-- name: list
-- Checkpoint nodes of graph $1 (kind $2), newest first: before checkpoint id $3 (NULL:
-- all), whose metadata contains $4 (jsonb, NULL: any), at most $5 (NULL: all).
SELECT g.graph_id, n.seq, n.id, n.payload_text
  FROM cwstore.find_graph($1) g
  JOIN cwstore.kind_counts k ON k.graph_id = g.graph_id AND k.kind = $2::text
  JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = k.seq
 WHERE ($3::text IS NULL
        OR (cwstore.payload_jsonb(n.payload_text) ->> 'checkpoint_id') COLLATE "C" < $3::text)
   AND ($4::jsonb IS NULL
        OR cwstore.payload_jsonb(n.payload_text) -> 'metadata' -> 'json' @> $4::jsonb)
 ORDER BY k.seq DESC
 LIMIT $5

-- name: thread_graphs
-- The graphs of a LangGraph thread: the root namespace's, named $1, and its
-- subgraphs', named $1 || ':' || namespace.
SELECT name FROM cwstore.graphs
 WHERE name = $1 OR starts_with(name, $1 || ':')
 ORDER BY name

-- name: all_graphs
-- Every LangGraph graph this role may read.
SELECT name FROM cwstore.graphs WHERE starts_with(name, 'langgraph:') ORDER BY name

-- name: run_graphs
-- The LangGraph graphs holding a checkpoint whose metadata run_id is one of $1, with
-- the kind $2 of checkpoint nodes.
SELECT DISTINCT g.name
  FROM cwstore.graphs g
  JOIN cwstore.kind_counts k ON k.graph_id = g.graph_id AND k.kind = $2::text
  JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = k.seq
 WHERE starts_with(g.name, 'langgraph:')
   AND cwstore.payload_jsonb(n.payload_text) -> 'metadata' -> 'json' ->> 'run_id' = ANY($1::text[])
