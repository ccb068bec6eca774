-- Queries of `cwstore view`, one per "-- name:" marker, read by cwstore.view.app.
-- Every one runs in a read-only transaction, as the login role: row-level security
-- shows a role only its tenants' graphs. The psql_* entries are never run by the
-- view: they are the SQL the page shows a user to paste into psql, with psql
-- variables (:'graph', :'node', :'key') set by \set lines the page puts before them.

-- name: view_graphs
-- The graphs the role may read whose name holds $1 (case-insensitive; NULL = all),
-- with the time the last node was stored; at most $2 rows, by name.
SELECT g.name, g.length, g.tenant, g.created_at, n.recorded_at AS last_write
  FROM cwstore.graphs AS g
  LEFT JOIN LATERAL (SELECT n.recorded_at FROM cwstore.nodes AS n
                      WHERE n.graph_id = g.graph_id AND n.seq = g.length LIMIT 1) AS n ON true
 WHERE $1::text IS NULL OR strpos(lower(g.name), lower($1::text)) > 0
 ORDER BY g.name
 LIMIT $2

-- name: view_roles_on
-- Whether `cwstore init --roles` was run on this database (then the list shows tenants).
SELECT CASE WHEN pg_catalog.to_regrole('cwstore_reader') IS NULL THEN false
            ELSE pg_catalog.has_schema_privilege('cwstore_reader', 'cwstore', 'USAGE') END

-- name: view_graph
-- A graph's id, length and incarnation (its life), if the role may read it.
SELECT graph_id, length, incarnation FROM cwstore.find_graph($1)

-- name: view_live_nodes
-- What a live stream sends (the node columns cwstore.node_from_row reads): up to $3
-- nodes of graph id $1 after sequence $2, in order, and no more than $4 bytes of
-- payload text past the first (the first node is always sent); none unless life $5
-- (incarnation) of the graph exists in the same snapshot, so a new life of the name
-- never shows through.
SELECT seq, id, kind, parents, payload_text, created_at_text, resource_key
  FROM (SELECT l.*, sum(octet_length(l.payload_text)) OVER (ORDER BY l.seq)
                    - octet_length(l.payload_text) AS before
          FROM (SELECT n.seq, n.id, n.kind, n.parents, n.payload_text, n.created_at_text,
                       n.resource_key
                  FROM cwstore.nodes n
                 WHERE n.graph_id = $1 AND n.seq > $2
                   AND EXISTS (SELECT 1 FROM cwstore.graphs g
                                WHERE g.graph_id = $1 AND g.incarnation = $5)
                 ORDER BY n.seq LIMIT $3) l) x
 WHERE x.before < $4 OR x.before = 0
 ORDER BY seq

-- name: view_graph_alive
-- Whether the life $2 (incarnation) of graph id $1 still exists.
SELECT EXISTS (SELECT 1 FROM cwstore.graphs WHERE graph_id = $1 AND incarnation = $2)

-- name: view_window_nodes
-- Nodes $2..$3 of graph id $1, with the first 160 characters of their payload text.
SELECT seq, id, kind, created_at_text, resource_key, left(payload_text, 160) AS preview
  FROM cwstore.nodes
 WHERE graph_id = $1 AND seq BETWEEN $2 AND $3
 ORDER BY seq

-- name: view_window_edges
-- The parent edges of nodes $2..$3 of graph id $1 (parents may lie before $2).
SELECT child_seq, parent_seq
  FROM cwstore.edges
 WHERE graph_id = $1 AND child_seq BETWEEN $2 AND $3
 ORDER BY child_seq, position

-- name: view_node
-- One node of graph id $1 by id $2: its payload's first $3 characters of the exact
-- text stored, and the whole text's length in characters.
SELECT seq, id, kind, parents, left(payload_text, $3) AS payload_text, created_at_text,
       resource_key, recorded_at, length(payload_text) AS payload_chars
  FROM cwstore.nodes
 WHERE graph_id = $1 AND id = $2

-- name: view_ancestors
-- What node $2 of graph $1 depends on, up to depth $3 (NULL = all), at most $4 rows.
SELECT seq, id, kind, depth FROM cwstore.ancestors($1, $2, $3) ORDER BY depth, seq LIMIT $4

-- name: view_descendants
-- What depends on node $2 of graph $1, up to depth $3 (NULL = all), at most $4 rows.
SELECT seq, id, kind, depth FROM cwstore.descendants($1, $2, $3) ORDER BY depth, seq LIMIT $4

-- name: view_key_versions
-- How many versions key $2 of graph id $1 has: its head's version (0: no such key).
SELECT coalesce(max(version), 0) FROM cwstore.key_heads WHERE graph_id = $1 AND key = $2

-- name: view_key_history
-- The last $3 versions of key $2 of graph id $1, newest first, with the first $4
-- characters of each payload text and its size in bytes (never the whole payload).
SELECT v.version, n.seq, n.id, n.kind, n.created_at_text,
       left(n.payload_text, $4) AS preview, octet_length(n.payload_text) AS bytes
  FROM (SELECT v.version, v.node_seq FROM cwstore.key_versions v
         WHERE v.graph_id = $1 AND v.key = $2
        UNION ALL
        SELECT h.version, h.head_seq FROM cwstore.key_heads h
         WHERE h.graph_id = $1 AND h.key = $2) v
  JOIN cwstore.nodes n ON n.graph_id = $1 AND n.seq = v.node_seq
 ORDER BY v.version DESC
 LIMIT $3

-- name: view_payload
-- The payload of node $2 of graph id $1, as the exact text stored.
SELECT payload_text FROM cwstore.nodes WHERE graph_id = $1 AND id = $2

-- name: psql_node
-- The node, what it depends on (ancestors), what depends on it (descendants).
SELECT seq, id, kind, parents, created_at_text, resource_key, payload_text
  FROM cwstore.node_view WHERE graph = :'graph' AND id = :'node';
SELECT * FROM cwstore.ancestors(:'graph', :'node');
SELECT * FROM cwstore.descendants(:'graph', :'node');

-- name: psql_key
-- Every version of the node's resource key, oldest first.
SELECT version, seq, id, kind, created_at, payload_text
  FROM cwstore.key_history(:'graph', :'key');

-- name: psql_state
-- Frontier, resource heads and semantic memory as of sequence :at.
SELECT * FROM cwstore.frontier_at(:'graph', :at);
SELECT * FROM cwstore.heads_at(:'graph', :at);
SELECT type, key, content_text, version, seq FROM cwstore.semantic_at(:'graph', :at);
