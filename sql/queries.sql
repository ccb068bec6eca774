-- Runtime queries of the Python clients, one per "-- name:" marker. Placeholders are
-- $1, $2, ... for every driver. Writes go through the SQL functions of schema/.

-- name: graph_get
-- A graph's id, length, vocabulary (NULL = dynamic) and incarnation (its life), by name
-- (cwstore.find_graph: the name's key first, then its row, on Citus from its one shard).
SELECT graph_id, length, vocabulary, incarnation FROM cwstore.find_graph($1)

-- name: graph_alive
-- Whether the life $2 (incarnation) of graph id $1 still exists.
SELECT EXISTS (SELECT 1 FROM cwstore.graphs WHERE graph_id = $1 AND incarnation = $2)

-- name: read_snapshot
-- The first statement of a transaction whose reads must all see one snapshot.
SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY

-- name: graphs_list
-- Every graph the role may read, with its length and tenant.
SELECT name, length, vocabulary, created_at, tenant, incarnation FROM cwstore.graphs
 ORDER BY name

-- name: begin_import
-- Create or lock an empty graph for import (CW412 if it holds nodes).
SELECT cwstore.begin_import_v1($1, $2::text[])

-- name: declare_frontier
-- Declare the frontier after the graph's last node.
SELECT cwstore.declare_frontier_v1($1, $2::text[])

-- name: append
-- Append a batch (JSON array of runtime nodes), optionally with the frontier after it,
-- optionally to one life ($5) of the graph only.
SELECT seq, id, created_at, recorded_at, written, payload_text, incarnation
  FROM cwstore.append_v1($1, $2::json, $3, $4::json, $5)

-- name: set_retention_group
-- The retention group of the graphs this transaction creates (graphs.retention_group).
SELECT pg_catalog.set_config('cwstore.retention_group', $1, true)

-- name: export
-- Graph $1 as of sequence $2, or time $3, or now: (length, seq, part, nodes, frontier)
-- rows; the first (part -1) has the frontier, the others the nodes array in parts.
SELECT length, seq, part, nodes, frontier FROM cwstore.export_parts_v1($1, $2, $3)

-- name: analyze_graph_tables
-- Fresh statistics after a bulk load, so the next reads get plans for its size.
ANALYZE cwstore.nodes, cwstore.edges, cwstore.frontier_spans, cwstore.key_versions,
        cwstore.key_heads, cwstore.kind_counts, cwstore.graphs

-- name: frontier_now
-- The current frontier of graph $1.
SELECT n.id
  FROM cwstore.graphs g
 CROSS JOIN LATERAL unnest(g.frontier_seqs) WITH ORDINALITY AS f(seq, ord)
  JOIN cwstore.nodes n ON n.graph_id = $1 AND n.seq = f.seq
 WHERE g.graph_id = $1
 ORDER BY f.ord

-- name: first_mismatch
-- The first position (1-based) where the stored ids differ from $2, or none.
SELECT u.ord
  FROM unnest($2::text[]) WITH ORDINALITY AS u(id, ord)
  LEFT JOIN cwstore.nodes n ON n.graph_id = $1 AND n.seq = u.ord
 WHERE n.id IS DISTINCT FROM u.id
 ORDER BY u.ord LIMIT 1

-- name: tail_graph
-- Up to $3 nodes of graph $1 after sequence $2, in order, and no more than $4 bytes of
-- payload text past the first (a batch of large nodes stops early; the first node is
-- always sent); none unless life $5 (incarnation) of the graph exists in the same
-- snapshot, so a new life of the name never shows through.
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

-- name: tail_all
-- Up to $4 nodes and erasures (and $5 bytes of payload past the first) of every graph
-- after cursor ($1 xid, $2 graph, $3 seq), only from transactions that can no longer
-- commit behind the cursor (cwstore.feed_horizon). An erasure is a row with erased
-- true, seq the largest bigint and no name or node columns.
SELECT xid, graph_id, name, seq, id, kind, parents, payload_text, created_at_text,
       resource_key, erased
  FROM cwstore.tail_all_v2($1, $2, $3, $4, $5)

-- name: projection_at
-- The projection of graph $1 after sequence $2, or as of time $3 (both NULL = now), as
-- JSON text: one statement, one snapshot, one round trip.
SELECT cwstore.projection_v1($1, CASE WHEN $3::timestamptz IS NULL THEN $2::bigint
                                      ELSE cwstore.seq_at_time($1, $3::timestamptz) END)

-- name: key_history
-- Every version of key $2 in graph $1, oldest first: the closed ones, then the head.
SELECT v.version, n.seq, n.id, n.kind, n.created_at_text, n.recorded_at, n.payload_text
  FROM (SELECT v.version, v.node_seq FROM cwstore.key_versions v
         WHERE v.graph_id = $1 AND v.key = $2
        UNION ALL
        SELECT h.version, h.head_seq FROM cwstore.key_heads h
         WHERE h.graph_id = $1 AND h.key = $2) v
  JOIN cwstore.nodes n ON n.graph_id = $1 AND n.seq = v.node_seq
 ORDER BY v.version

-- name: may_copy_nodes
-- Whether this role may COPY into cwstore.nodes (the owner may; cwstore_writer imports
-- through import_rows_v1 instead).
SELECT has_table_privilege('cwstore.nodes', 'INSERT')

-- name: import_rows
-- One slice of an import as parallel arrays, for roles without INSERT on cwstore.nodes.
SELECT cwstore.import_rows_v1($1, $2::bigint[], $3::text[], $4::text[], $5::text[],
                              $6::text[], $7::text[], $8::text[])

-- name: listen
-- Register this backend as a follower (after LISTEN cwstore), so appends wake it.
SELECT cwstore.listen_v1()

-- name: unlisten
-- Stop being woken (the row also goes when the backend exits and someone registers).
SELECT cwstore.unlisten_v1()

-- name: erase_graph
-- Erase graph $1 (reason $2, may be NULL); the number of nodes it held.
SELECT cwstore.erase_graph_v1($1, $2)

-- name: erase_tenant
-- Erase up to $3 graphs of tenant $1 (reason $2); the graphs erased (none = done).
SELECT graph, nodes FROM cwstore.erase_tenant_v1($1, $2, $3)

-- name: idle_graphs
-- The graphs idle longer than $1 (of tenant $2, or every tenant when NULL) that the
-- caller may erase, by name.
SELECT graph, tenant, length, last_write, retention_group
  FROM cwstore.idle_graphs_v1($1::interval, $2)
 ORDER BY graph

-- name: erase_idle
-- Erase up to $4 graphs idle longer than $1 (of tenant $2, or all when NULL; reason
-- $3); the graphs erased (none = done).
SELECT graph, tenant, nodes, last_write, retention_group
  FROM cwstore.erase_idle_v1($1::interval, $2, $3, $4)
