-- Named queries of the LangGraph checkpointer (cwstore.langgraph), one per "-- name:"
-- marker, $1, $2, ... for every driver. They only read cwstore's documented tables and
-- functions (docs/sql.md); every write goes through the public store (append_v1,
-- erase_graph_v1).

-- name: checkpoint_rows
-- What each checkpoint of graph $1 (graph_id) named $2 holds, the checkpoints being
-- the one whose key is $4 (lg:cp:<id>), or when $4 is NULL the newest (nodes of kind
-- $5) stored before sequence $6 (NULL: all) and before checkpoint id $7 (NULL: all)
-- whose metadata contains $8 (jsonb, NULL: any) or is not stored as JSON (the
-- serializer's bytes: the reader decides), at most $9 (NULL: all); $3 the prefix
-- of pending writes' keys. Either way the checkpoints are one range of nodes_pkey read
-- backwards, nodes of other kinds skipped (one plan serves both). Every table is read by the graph's key, $1 (so on Citus the
-- statement runs on the graph's one worker); no rows when the graph at that key is not
-- named $2 (the reader may remember a key the name has left, if the graph was erased
-- since). Rows, in no order (the reader orders a few rows per checkpoint rather than
-- the server sorting every payload): checkpoint seq, part, key, version, last, node
-- id, payload text. Per checkpoint: part -1, its own node; part 0, each value node its
-- "values" names, with its key and version; part 1, each segment of a message chain
-- its "messages" names (key, first and last version), the ids of its nodes, oldest
-- first, comma-separated (the reader reads by "payloads" those it does not hold
-- already); part 2, each version of its pending writes' key ($3 || its checkpoint id).
SELECT c.seq, p.part, p.key, p.version, p.last, p.id, p.payload_text
  FROM (SELECT n.seq, n.id, n.payload_text
          FROM cwstore.nodes n
         WHERE n.graph_id = $1::bigint AND n.kind = $5::text
           -- The checkpoint's own sequence (none when its key has no head), or every
           -- sequence below $6.
           AND n.seq BETWEEN (CASE WHEN $4::text IS NULL THEN 0
                                   ELSE (SELECT h.head_seq FROM cwstore.key_heads h
                                          WHERE h.graph_id = $1::bigint
                                            AND h.key = $4::text) END)
                         AND (CASE WHEN $4::text IS NULL
                                   THEN coalesce($6::bigint - 1, 9223372036854775807)
                                   ELSE (SELECT h.head_seq FROM cwstore.key_heads h
                                          WHERE h.graph_id = $1::bigint
                                            AND h.key = $4::text) END)
           AND ($7::text IS NULL
                OR (cwstore.payload_jsonb(n.payload_text) ->> 'checkpoint_id') COLLATE "C"
                   < $7::text)
           AND ($8::jsonb IS NULL
                OR NOT (cwstore.payload_jsonb(n.payload_text) -> 'metadata') ? 'json'
                OR cwstore.payload_jsonb(n.payload_text) -> 'metadata' -> 'json' @> $8::jsonb)
         ORDER BY n.seq DESC
         LIMIT $9) c
  JOIN cwstore.graphs g ON g.graph_id = $1::bigint AND g.name = $2::text
 CROSS JOIN LATERAL (SELECT cwstore.payload_jsonb(c.payload_text) AS head) cp
 CROSS JOIN LATERAL (
        SELECT -1 AS part, NULL::text AS key, 0 AS version, NULL::int AS last, c.id,
               c.payload_text
        UNION ALL
        SELECT 0, n.resource_key, v.version, NULL, n.id, n.payload_text
          FROM jsonb_each_text(cp.head -> 'values') e(channel, node_id)
          JOIN LATERAL (SELECT n.seq, n.id, n.resource_key, n.payload_text
                          FROM cwstore.nodes n
                         WHERE n.graph_id = $1::bigint AND n.id = e.node_id
                         LIMIT 1) n ON true
          JOIN LATERAL (SELECT v.version FROM cwstore.key_versions v
                         WHERE v.graph_id = $1::bigint
                           AND v.key = n.resource_key COLLATE "default"
                           AND v.node_seq = n.seq
                        UNION ALL
                        SELECT h.version FROM cwstore.key_heads h
                         WHERE h.graph_id = $1::bigint
                           AND h.key = n.resource_key COLLATE "default"
                           AND h.head_seq = n.seq
                         LIMIT 1) v ON true
        UNION ALL
        -- One set-returning function over the segments (not one per channel, then one
        -- per segment): its row estimate keeps the plan's cost, and so JIT, down. A
        -- segment's nodes are the nodes of its key from its first version's on, in
        -- order: one range scan of nodes_key_idx, which holds their ids.
        SELECT 1, s.seg ->> 0, (s.seg ->> 1)::int, (s.seg ->> 2)::int,
               (SELECT string_agg(n.id, ',' ORDER BY n.seq)
                  FROM (SELECT n.seq, n.id FROM cwstore.nodes n
                         WHERE n.graph_id = $1::bigint
                           AND n.resource_key = (s.seg ->> 0) COLLATE "C"
                           AND n.seq >= coalesce(
                                 (SELECT v.node_seq FROM cwstore.key_versions v
                                   WHERE v.graph_id = $1::bigint
                                     AND v.key = s.seg ->> 0
                                     AND v.version >= (s.seg ->> 1)::int
                                   ORDER BY v.node_seq
                                   LIMIT 1),
                                 (SELECT h.head_seq FROM cwstore.key_heads h
                                   WHERE h.graph_id = $1::bigint
                                     AND h.key = s.seg ->> 0
                                     AND h.version >= (s.seg ->> 1)::int))
                         ORDER BY n.seq
                         LIMIT (s.seg ->> 2)::int - (s.seg ->> 1)::int + 1) n),
               NULL
          FROM jsonb_array_elements(jsonb_path_query_array(cp.head, '$.messages.*[*]')) s(seg)
        UNION ALL
        SELECT 2, NULL, v.version, NULL, n.id, n.payload_text
          FROM (SELECT v.version, v.node_seq FROM cwstore.key_versions v
                 WHERE v.graph_id = $1::bigint
                   AND v.key = $3::text || (cp.head ->> 'checkpoint_id')
                UNION ALL
                SELECT h.version, h.head_seq FROM cwstore.key_heads h
                 WHERE h.graph_id = $1::bigint
                   AND h.key = $3::text || (cp.head ->> 'checkpoint_id')) v
          JOIN LATERAL (SELECT n.id, n.payload_text FROM cwstore.nodes n
                         WHERE n.graph_id = $1::bigint AND n.seq = v.node_seq
                         LIMIT 1) n ON true) p

-- name: payloads
-- The nodes (id, payload_text) of runs of message chains in graph $1 (graph_id) named $2
-- (none when the graph at that key is not named $2): run i is $5[i] nodes of the key
-- $3[i] from the node whose id is $4[i] on, oldest first (one range scan of
-- nodes_key_idx each). Rows in no order.
SELECT n.id, n.payload_text
  FROM unnest($3::text[], $4::text[], $5::int[]) r(key, first_id, count)
  JOIN cwstore.graphs g ON g.graph_id = $1::bigint AND g.name = $2::text
  JOIN LATERAL (SELECT f.seq FROM cwstore.nodes f
                 WHERE f.graph_id = $1::bigint AND f.id = r.first_id COLLATE "C"
                 LIMIT 1) f ON true
  JOIN LATERAL (SELECT n.id, n.payload_text FROM cwstore.nodes n
                 WHERE n.graph_id = $1::bigint
                   AND n.resource_key = r.key COLLATE "C"
                   AND n.seq >= f.seq
                 ORDER BY n.seq
                 LIMIT r.count) n ON true

-- name: parts
-- Versions $4..$5 of the key $3 (the parts of a value stored in parts,
-- lg:part:<sha256>) in graph $1 (graph_id) named $2 (none when the graph at that key is
-- not named $2): each version's payload text, in order.
SELECT v.version, n.payload_text
  FROM (SELECT v.version, v.node_seq FROM cwstore.key_versions v
         WHERE v.graph_id = $1::bigint AND v.key = $3::text
           AND v.version BETWEEN $4::int AND $5::int
        UNION ALL
        SELECT h.version, h.head_seq FROM cwstore.key_heads h
         WHERE h.graph_id = $1::bigint AND h.key = $3::text
           AND h.version BETWEEN $4::int AND $5::int) v
  JOIN cwstore.graphs g ON g.graph_id = $1::bigint AND g.name = $2::text
  JOIN LATERAL (SELECT n.payload_text FROM cwstore.nodes n
                 WHERE n.graph_id = $1::bigint AND n.seq = v.node_seq
                 LIMIT 1) n ON true
 ORDER BY v.node_seq

-- name: graph
-- The graph_id of the graph named $1 (NULL when there is none, or none the caller may
-- see): the key every other query of a graph is given; and whether the graph named $2
-- (its staged rewrite, left by a prune that stopped half-way) exists.
SELECT (SELECT graph_id FROM cwstore.find_graph($1)) AS graph_id,
       EXISTS (SELECT 1 FROM cwstore.find_graph($2)) AS staged

-- name: heads
-- The heads (node id, version) of keys $3 in graph $1 (graph_id) named $2 (none when the
-- graph at that key is not named $2); a key with no row has no version yet.
SELECT h.key, h.head_id, h.version
  FROM cwstore.key_heads h
  JOIN cwstore.graphs g ON g.graph_id = $1::bigint AND g.name = $2::text
 WHERE h.graph_id = $1::bigint AND h.key = ANY($3::text[])

-- name: thread_graphs
-- The graphs of a LangGraph thread: the root namespace's, named $1, and its
-- subgraphs', named $1 || ':' || namespace.
SELECT name FROM cwstore.graphs
 WHERE name = $1 OR starts_with(name, $1 || ':')
 ORDER BY name

-- name: all_graphs
-- Every LangGraph graph this role may read, and every staged rewrite (named $1 ||
-- graph), ordered by the graph's name.
SELECT name FROM cwstore.graphs
 WHERE starts_with(name, 'langgraph:') OR starts_with(name, $1 || 'langgraph:')
 ORDER BY replace(name, $1, '')

-- name: run_graphs
-- The LangGraph graphs holding a checkpoint whose metadata run_id is one of $1, or
-- whose metadata is not stored as JSON (the serializer's bytes: the reader decides),
-- with the kind $2 of checkpoint nodes.
SELECT DISTINCT g.name
  FROM cwstore.graphs g
  JOIN LATERAL (SELECT n.payload_text FROM cwstore.nodes n
                 WHERE n.graph_id = g.graph_id AND n.kind = $2::text ORDER BY n.seq) n ON true
 CROSS JOIN LATERAL (SELECT cwstore.payload_jsonb(n.payload_text) -> 'metadata' AS md) m
 WHERE starts_with(g.name, 'langgraph:')
   AND (m.md -> 'json' ->> 'run_id' = ANY($1::text[]) OR NOT m.md ? 'json')

-- name: thread_lengths
-- The graphs of the LangGraph threads whose root graphs are named $1 (an array): each
-- root graph and its subgraphs' (named root || ':' || namespace), with their lengths;
-- and their staged rewrites (named $2 || graph).
SELECT g.name, g.length
  FROM unnest($1::text[]) t(root)
  JOIN cwstore.graphs g ON g.name = t.root OR starts_with(g.name, t.root || ':')
                        OR g.name = $2 || t.root OR starts_with(g.name, $2 || t.root || ':')
 ORDER BY g.name

-- name: thread_metadata
-- The metadata (as stored, JSON text) of every checkpoint (nodes of kind $2) of the
-- LangGraph threads whose root graphs are named $1 (an array), every namespace's.
SELECT g.name, (cwstore.payload_jsonb(n.payload_text) -> 'metadata')::text AS metadata
  FROM unnest($1::text[]) t(root)
  JOIN cwstore.graphs g ON g.name = t.root OR starts_with(g.name, t.root || ':')
  JOIN LATERAL (SELECT n.payload_text FROM cwstore.nodes n
                 WHERE n.graph_id = g.graph_id AND n.kind = $2::text ORDER BY n.seq) n ON true

-- name: erase_graph
-- Erase graph $1 (reason $2) inside the caller's transaction (cwstore.erase_graph_v1);
-- the number of nodes it held.
SELECT cwstore.erase_graph_v1($1, $2)

-- name: set_retention_group
-- The retention group ($1) of the graphs the caller's transaction creates.
SELECT pg_catalog.set_config('cwstore.retention_group', $1, true)

-- name: append
-- Append a batch inside the caller's transaction: cwstore.append_v1 with the arguments
-- cwstore.prepare_append gives (graph, nodes, expected length, frontier, incarnation).
SELECT seq FROM cwstore.append_v1($1, $2::json, $3, $4::json, $5)

-- name: postgres_threads
-- Every thread id of a database written by LangGraph's PostgreSQL saver
-- (langgraph-checkpoint-postgres, its table "checkpoints"), for moving them over.
SELECT DISTINCT thread_id FROM checkpoints ORDER BY thread_id
