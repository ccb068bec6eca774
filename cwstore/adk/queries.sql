-- Named queries of the Google ADK session service (cwstore.adk), one per "-- name:"
-- marker, $1, $2, ... for every driver. They only read cwstore's documented tables and
-- functions (docs/sql.md); every write goes through the public store (append_v1,
-- erase_graph_v1). A session's graph is its opening node (seq 1) and its events, the
-- ones that change its state being the versions of the key 'state' (docs/adk.md).

-- name: session
-- One session as get_session and append_event need it. $1 the session's graph, $2 the
-- app's, $3 the user's graph; $4 how many of the latest events (NULL: all), $5 the
-- earliest event time (NULL: no bound; the reader filters the exact float again).
-- Rows by part: 'graph' (length, incarnation, seq, id, createdAt and payload of the
-- last node: the last event or the opening node; none when the session's graph does
-- not exist), 'version' (seq, id and state change of each version of the key 'state':
-- the opening node's initial state, then each event's state delta), 'state' (scope
-- 'app' or 'user', key, id and payload of each state key's head in those graphs),
-- 'event' (seq, id, createdAt, payload of the events asked for, newest first).
WITH s AS (SELECT f.graph_id, f.length, f.incarnation FROM cwstore.find_graph($1::text) f),
     a AS (SELECT f.graph_id FROM cwstore.find_graph($2::text) f),
     u AS (SELECT f.graph_id FROM cwstore.find_graph($3::text) f)
SELECT 'graph' AS part, NULL::text AS scope, s.length, s.incarnation, n.seq, n.id,
       NULL::text AS key, n.created_at_text, n.payload_text
  FROM s JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.length
UNION ALL
SELECT 'version', NULL, NULL, NULL, n.seq, n.id, NULL, NULL,
       (CASE WHEN n.seq = 1 THEN p.doc -> 'state' ELSE p.doc #> '{actions,state_delta}' END)::text
  FROM s JOIN cwstore.nodes n
         ON n.graph_id = s.graph_id AND n.resource_key = 'state' COLLATE "C"
 CROSS JOIN LATERAL (SELECT cwstore.payload_jsonb(n.payload_text) AS doc) p
UNION ALL
SELECT 'state', h.scope, NULL, NULL, n.seq, n.id, h.key, NULL, n.payload_text
  FROM (SELECT 'app' AS scope, k.graph_id, k.key, k.head_seq
          FROM a JOIN cwstore.key_heads k ON k.graph_id = a.graph_id
        UNION ALL
        SELECT 'user', k.graph_id, k.key, k.head_seq
          FROM u JOIN cwstore.key_heads k ON k.graph_id = u.graph_id) h
  JOIN cwstore.nodes n ON n.graph_id = h.graph_id AND n.seq = h.head_seq
 WHERE starts_with(h.key, 'state:')
UNION ALL
SELECT 'event', NULL, NULL, NULL, e.seq, e.id, NULL, e.created_at_text, e.payload_text
  FROM s JOIN LATERAL (
         SELECT n.seq, n.id, n.created_at_text, n.payload_text
           FROM cwstore.nodes n
          WHERE n.graph_id = s.graph_id AND n.seq > 1
            AND ($5::timestamptz IS NULL OR n.created_at >= $5::timestamptz)
          ORDER BY n.seq DESC
          LIMIT $4::bigint) e ON true

-- name: scoped_state
-- The state heads of the app's graph $1 and the user's graph $2: scope ('app',
-- 'user'), key, id and payload of each key's head.
WITH a AS (SELECT f.graph_id FROM cwstore.find_graph($1::text) f),
     u AS (SELECT f.graph_id FROM cwstore.find_graph($2::text) f)
SELECT h.scope, h.key, n.id, n.payload_text
  FROM (SELECT 'app' AS scope, k.graph_id, k.key, k.head_seq
          FROM a JOIN cwstore.key_heads k ON k.graph_id = a.graph_id
        UNION ALL
        SELECT 'user', k.graph_id, k.key, k.head_seq
          FROM u JOIN cwstore.key_heads k ON k.graph_id = u.graph_id) h
  JOIN cwstore.nodes n ON n.graph_id = h.graph_id AND n.seq = h.head_seq
 WHERE starts_with(h.key, 'state:')

-- name: sessions
-- The sessions list_sessions lists: every session graph whose name starts with $1,
-- with the versions of its key 'state'; the app's graph $4's state heads and the user
-- graphs' state heads (the graph named $2 when $3, else every graph whose name starts
-- with $2). Rows: part 'session' (graph name, length, incarnation, createdAt and
-- payload of its last node), 'version' (graph name, seq, state change), 'state' (graph
-- name, key, payload of the head). A listing reads cwstore.graphs by name prefix
-- (every graph's row the role may see).
WITH g AS (
  SELECT g.graph_id, g.name, g.length, g.incarnation
    FROM cwstore.graphs g
   WHERE starts_with(g.name, $1::text) OR g.name = $4::text
      OR (CASE WHEN $3::boolean THEN g.name = $2::text ELSE starts_with(g.name, $2::text) END))
SELECT 'session' AS part, g.name, g.length, g.incarnation, NULL::bigint AS seq,
       NULL::text AS key, n.created_at_text, n.payload_text
  FROM g JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = g.length
 WHERE starts_with(g.name, $1::text)
UNION ALL
SELECT 'version', g.name, NULL, NULL, n.seq, NULL, NULL,
       (CASE WHEN n.seq = 1 THEN p.doc -> 'state' ELSE p.doc #> '{actions,state_delta}' END)::text
  FROM g JOIN cwstore.nodes n
         ON n.graph_id = g.graph_id AND n.resource_key = 'state' COLLATE "C"
 CROSS JOIN LATERAL (SELECT cwstore.payload_jsonb(n.payload_text) AS doc) p
 WHERE starts_with(g.name, $1::text)
UNION ALL
SELECT 'state', g.name, NULL, NULL, NULL, k.key, NULL, n.payload_text
  FROM g
  JOIN cwstore.key_heads k ON k.graph_id = g.graph_id AND starts_with(k.key, 'state:')
  JOIN cwstore.nodes n ON n.graph_id = k.graph_id AND n.seq = k.head_seq
 WHERE NOT starts_with(g.name, $1::text)

-- name: heads
-- The state heads of graph $1 for the keys $2: key, id (to link the next versions).
SELECT k.key, k.head_id AS id
  FROM cwstore.find_graph($1::text) f
  JOIN cwstore.key_heads k ON k.graph_id = f.graph_id AND k.key = ANY ($2::text[])

-- name: append
-- One batch through cwstore's write door: the arguments of a cwstore.PreparedAppend
-- (graph, nodes JSON, expected length, frontier JSON, incarnation).
SELECT seq, id, created_at, written, payload_text
  FROM cwstore.append_v1($1, $2::json, $3, $4::json, $5)
