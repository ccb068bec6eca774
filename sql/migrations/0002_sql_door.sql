-- 0002_sql_door: the write API refuses what cwstore import refuses, whoever calls it;
-- another tenant's graph reads exactly as unknown; tail_all cannot be stalled by a role
-- that may not write; reads of big graphs come in parts.
--
-- Why: the TypeScript runtime (through pg) and psql write through these functions with
-- no Python in front of them. append_v1 stored createdAt values, numbers, duplicate
-- member names and semantic contents that import refuses (so export -> import failed);
-- a batch could reuse an id with other content; import_rows_v1 pasted any text into the
-- stored node JSON, outside an import and into graphs that held nodes; a retried append
-- moved the frontier back; declare_frontier_v1 raced appends. Refusals by graph id named
-- the other tenant's graph, and a reader's refusal for another tenant's graph had
-- another CONTEXT than for a missing one. tail_all waited for every transaction on the
-- server. export_v1 built a graph as one text value (at most 1 GB).
--
-- The definitions below are those of cwstore/sql/schema/ (50_tenancy, 60_write_api,
-- 70_read_api, 80_listeners), where they are documented.
--
-- Safe with live writers: yes. Functions are replaced in place (same signatures; export_v1
-- becomes LANGUAGE sql) and new ones added; cwstore._check_reader, now unused, is dropped;
-- no table is touched.

-- 50_tenancy

-- _may_use(tenant): whether the login role may read and write the graphs of a tenant.
CREATE FUNCTION cwstore._may_use(p_tenant text) RETURNS boolean
LANGUAGE sql STABLE AS $$
  SELECT cwstore.sees_all(session_user)
      OR EXISTS (SELECT 1 FROM cwstore.tenants_of(session_user) t WHERE t = p_tenant)
$$;

-- _check_writer(graph, tenant): 42501 unless the login role may write that tenant's
-- graphs. A NULL tenant (no such graph yet) passes: creating one is checked on its own.
-- Called by the SECURITY DEFINER write functions, where current_user is their owner
-- and session_user is who logged in.
CREATE OR REPLACE FUNCTION cwstore._check_writer(p_graph text, p_tenant text) RETURNS void
LANGUAGE plpgsql STABLE AS $$
BEGIN
  IF p_tenant IS NOT NULL AND NOT cwstore._may_use(p_tenant) THEN
    RAISE EXCEPTION USING ERRCODE = '42501',
      MESSAGE = format('role %s may not write graph %L: the graph belongs to a tenant the role is not a member of',
                       session_user, p_graph),
      DETAIL = jsonb_build_object('graph', p_graph, 'role', session_user)::text,
      HINT = 'An administrator adds the role to the tenant: SELECT cwstore.add_tenant_member(tenant, role)';
  END IF;
END $$;

-- 60_write_api

-- js_number(token) -> String(Number(token)) in JavaScript, for a JSON number token;
-- NULL when the value is beyond a double (1e400) or rounds to zero from a non-zero
-- token (1e-400). PostgreSQL prints a double with the shortest digits that read back
-- (extra_float_digits = 1, fixed here), as JavaScript does; only the layout differs
-- (ECMAScript Number::toString: plain for exponents -7 < e < 21, else d.ddde+N).
CREATE FUNCTION cwstore.js_number(p_token text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SET extra_float_digits = 1 AS $$
DECLARE
  v_f float8;
  v_s text;
  v_neg boolean;
  v_mant text;
  v_exp integer;
  v_digits text;
  v_n integer;
  v_k integer;
BEGIN
  BEGIN
    v_f := p_token::float8;
  EXCEPTION WHEN numeric_value_out_of_range OR invalid_text_representation THEN
    RETURN NULL;
  END;
  IF v_f = 0 THEN
    RETURN '0';
  END IF;
  v_s := v_f::text;
  v_neg := left(v_s, 1) = '-';
  IF v_neg THEN
    v_s := substr(v_s, 2);
  END IF;
  v_mant := split_part(v_s, 'e', 1);
  v_exp := coalesce(nullif(split_part(v_s, 'e', 2), '')::integer, 0);
  IF strpos(v_mant, '.') > 0 THEN
    v_n := strpos(v_mant, '.') - 1 + v_exp;
    v_digits := replace(v_mant, '.', '');
  ELSE
    v_n := length(v_mant) + v_exp;
    v_digits := v_mant;
  END IF;
  v_k := length(v_digits);
  v_digits := ltrim(v_digits, '0');
  v_n := v_n - (v_k - length(v_digits));
  v_digits := rtrim(v_digits, '0');
  v_k := length(v_digits);
  IF v_k <= v_n AND v_n <= 21 THEN
    v_s := v_digits || repeat('0', v_n - v_k);
  ELSIF 0 < v_n AND v_n <= 21 THEN
    v_s := left(v_digits, v_n) || '.' || substr(v_digits, v_n + 1);
  ELSIF -6 < v_n AND v_n <= 0 THEN
    v_s := '0.' || repeat('0', -v_n) || v_digits;
  ELSE
    v_s := left(v_digits, 1) || CASE WHEN v_k > 1 THEN '.' || substr(v_digits, 2) ELSE '' END
           || 'e' || CASE WHEN v_n - 1 >= 0 THEN '+' ELSE '-' END || abs(v_n - 1);
  END IF;
  RETURN CASE WHEN v_neg THEN '-' ELSE '' END || v_s;
END $$;
COMMENT ON FUNCTION cwstore.js_number(text) IS
  'String(Number(token)) in JavaScript for a JSON number token (1e21 -> 1e+21, 1E2 -> 100); NULL when JavaScript would read it as Infinity or as 0 from a non-zero token.';

-- _created_at_ok(text): createdAt is an RFC 3339 date-time with a zone that
-- JavaScript's Date.parse reads as written: a real calendar date (year >= 1), hour
-- 00-23, minute and second 00-59 (no leap second), offset up to +-23:59. The same rule
-- as cwstore.rules (Python).
CREATE FUNCTION cwstore._created_at_ok(p text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_y integer;
  v_m integer;
  v_d integer;
  v_zoned boolean;
BEGIN
  IF p !~ '^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?([Zz]|[+-][0-9]{2}:[0-9]{2})$' THEN
    RETURN false;
  END IF;
  v_y := left(p, 4)::integer;
  v_m := substr(p, 6, 2)::integer;
  v_d := substr(p, 9, 2)::integer;
  v_zoned := right(p, 1) NOT IN ('Z', 'z');
  RETURN v_y >= 1 AND v_m BETWEEN 1 AND 12 AND v_d >= 1
     AND v_d <= CASE WHEN v_m = 2 THEN
                       CASE WHEN (v_y % 4 = 0 AND v_y % 100 <> 0) OR v_y % 400 = 0 THEN 29 ELSE 28 END
                     WHEN v_m IN (4, 6, 9, 11) THEN 30 ELSE 31 END
     AND substr(p, 12, 2)::integer <= 23 AND substr(p, 15, 2)::integer <= 59
     AND substr(p, 18, 2)::integer <= 59
     AND (NOT v_zoned OR (substr(p, length(p) - 4, 2)::integer <= 23
                          AND right(p, 2)::integer <= 59));
END $$;

-- _lone_surrogate(json text): whether a string in it escapes half of a surrogate pair
-- (\ud800 alone): not Unicode, so no text can hold it. PostgreSQL's json input takes
-- it and fails later, wherever the string is first read as text.
CREATE FUNCTION cwstore._lone_surrogate(p_text text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  RETURN strpos(p_text, '\u') > 0
     AND (replace(p_text, '\\', '') ~ '\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F])'
          OR replace(p_text, '\\', '') ~ '(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F]');
END $$;

-- _payload_problem(payload text) -> 'code|path|message', or NULL when the payload is
-- JSON the runtime can write and cwstore can keep exactly. The text must already be
-- one JSON value (append_v1 reads it out of a json batch; import_rows_v1 parses its
-- slice first). Checks, in order:
--   * spelling: exactly as JSON.stringify writes the value (no whitespace outside
--     strings, no escape it would not write, numbers as Number::toString writes them),
--     since the text is stored and given back byte for byte (code shape);
--   * numbers: finite, integers within +-(2^53-1) unless JavaScript writes them back
--     digit for digit (unrepresentable);
--   * no object repeats a member name (shape; JSON.parse keeps only the last);
--   * nesting at most 10,000 levels (cwstore.jsontext.MAX_DEPTH; unrepresentable).
CREATE FUNCTION cwstore._payload_problem(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_rest text;
  v_bare text;
  v_tok text;
  v_js text;
BEGIN
  -- Escapes: take out those JSON.stringify writes (escaped backslashes first, pair by
  -- pair from the left, so each backslash left starts an escape); none may remain.
  v_rest := replace(p_text, '\\', '');
  IF strpos(v_rest, '\') > 0 THEN
    v_rest := replace(replace(replace(replace(replace(replace(v_rest, '\"', ''), '\n', ''),
                                                      '\t', ''), '\r', ''), '\b', ''), '\f', '');
    IF strpos(v_rest, '\') > 0 THEN
      v_rest := regexp_replace(v_rest, '\\u00(0[0-7bef]|1[0-9a-f])', '', 'g');
      IF strpos(v_rest, '\') > 0 THEN
        IF cwstore._lone_surrogate(p_text) THEN
          RETURN 'unrepresentable|$.payload|a string holds a lone surrogate (not valid Unicode)';
        END IF;
        RETURN format('shape|$.payload|the escape %s is not how JSON.stringify writes that character',
                      substring(v_rest FROM '\\(?:u[0-9a-fA-F]{4}|.)'));
      END IF;
    END IF;
  END IF;
  -- What is left outside strings: punctuation, literals and numbers, nothing else.
  v_bare := regexp_replace(v_rest, '"[^"]*"', '""', 'g');
  IF v_bare ~ '[ \t\n\r]' THEN
    RETURN 'shape|$.payload|whitespace outside strings: send the payload as JSON.stringify writes it (compact)';
  END IF;
  IF v_bare ~ '[.eE]|[0-9]{16}|-0' THEN
    SELECT m[1] INTO v_tok
      FROM regexp_matches(v_bare, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
     WHERE m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
     LIMIT 1;
    IF FOUND THEN
      v_js := cwstore.js_number(v_tok);
      IF v_js IS NULL AND v_tok ~ '^-?[0-9.]+[eE]\+?[0-9]+$' THEN
        RETURN format('unrepresentable|$.payload|%s is not a finite number', v_tok);
      ELSIF v_tok ~ '^-?[0-9]+$' AND v_tok <> '-0' THEN
        RETURN format('unrepresentable|$.payload|integer %s is beyond +-(2^53-1): JavaScript cannot hold it exactly',
                      v_tok);
      END IF;
      RETURN format('shape|$.payload|the number %s is written %s by JSON.stringify', v_tok,
                    coalesce(v_js, 'as 0'));
    END IF;
  END IF;
  -- Repeated member names: jsonb keeps one member per name, so it holds fewer values
  -- than the text when a name repeats. Values in the text: containers, strings that
  -- are not member names, numbers and literals.
  IF length(v_bare) - length(replace(v_bare, '"":', '')) >= 6 THEN
    v_bare := replace(v_bare, '"":', ':');
    IF length(v_bare) - length(translate(v_bare, '{[', ''))
       + (length(v_bare) - length(replace(v_bare, '""', ''))) / 2
       + regexp_count(v_bare, '-?[0-9][0-9.eE+-]*|true|false|null')
       <> jsonb_array_length(jsonb_path_query_array(cwstore.payload_jsonb(p_text),
                                                    'strict $.**.type()')) THEN
      RETURN 'shape|$.payload|an object repeats a member name (JSON.parse would keep only the last)';
    END IF;
  END IF;
  IF length(v_bare) - length(translate(v_bare, '{[', '')) > 10000
     AND jsonb_path_exists(cwstore.payload_jsonb(p_text),
                           'strict $.**{10000} ? (@.type() == "object" || @.type() == "array")') THEN
    RETURN 'unrepresentable|$.payload|nesting deeper than 10000 levels';
  END IF;
  RETURN NULL;
END $$;

-- _node_problem(kind, payload, createdAt, resourceKey) -> 'code|path|message' or NULL:
-- what append_v1 and import_rows_v1 check per node beyond the table's constraints and
-- the nodes trigger (parents, chains, sequences, semantic shape): createdAt, the
-- resourceKey's length (cwstore.rules.RESOURCE_KEY_MAX_BYTES: the key is indexed, and
-- a btree entry holds about 2,700 bytes), the payload, and a semantic content's length
-- (100,000 UTF-16 code units of JSON.stringify(content), as the runtime counts).
CREATE FUNCTION cwstore._node_problem(p_kind text, p_payload text, p_created text, p_key text)
RETURNS text LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
DECLARE
  v_content text;
  v_units bigint;
BEGIN
  IF NOT cwstore._created_at_ok(p_created) THEN
    RETURN format('created_at|$.createdAt|createdAt %s is not an RFC 3339 date-time with a zone that JavaScript reads as written',
                  to_json(p_created));
  END IF;
  IF octet_length(p_key) > 2000 THEN
    RETURN format('shape|$.resourceKey|resourceKey is %s bytes of UTF-8; at most 2000 are allowed',
                  octet_length(p_key));
  END IF;
  IF p_payload IS NULL THEN
    RETURN 'shape|$.payload|payload is missing';
  END IF;
  IF p_kind = 'semantic' THEN
    v_content := cwstore._json_member_text(p_payload, 'content');
    v_units := char_length(v_content)
               + (SELECT count(*) FROM regexp_matches(v_content, '[\U00010000-\U0010FFFF]', 'g'));
    IF v_units > 100000 THEN
      RETURN format('semantic_payload|$.payload.content|semantic content is %s characters of JSON; at most 100000',
                    v_units);
    END IF;
  END IF;
  RETURN cwstore._payload_problem(p_payload);
END $$;

-- _node_violation(problem, graph_id, seq, node_id, index): raise a problem of
-- _node_problem (or append_v1's own) as CW400, its path under the node's ($[i].path).
CREATE FUNCTION cwstore._node_violation(p_problem text, p_graph_id bigint, p_seq bigint,
                                        p_node_id text, p_index bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_code text := split_part(p_problem, '|', 1);
  v_path text := split_part(p_problem, '|', 2);
BEGIN
  RETURN cwstore._violation(v_code, p_graph_id, p_seq, p_node_id,
                            format('$[%s]', p_index) || substr(v_path, 2),
                            substr(p_problem, length(v_code) + length(v_path) + 3));
END $$;

-- _same_content(a, b): two nodes with one id hold the same content (kind, parents,
-- payload, resourceKey: what the id is computed from). Payloads compare as values
-- (member order aside), unless either holds U+0000, which jsonb cannot hold.
CREATE FUNCTION cwstore._same_content(a_kind text, a_parents text[], a_payload text, a_key text,
                                      b_kind text, b_parents text[], b_payload text, b_key text)
RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
BEGIN
  RETURN a_kind = b_kind AND a_parents = b_parents AND a_key IS NOT DISTINCT FROM b_key
     AND (a_payload = b_payload
          OR (strpos(a_payload, '\u0000') = 0 AND strpos(b_payload, '\u0000') = 0
              AND cwstore.payload_jsonb(a_payload) = cwstore.payload_jsonb(b_payload)));
END $$;

-- _writable_graph(graph_id) -> the graph's length, with its counter row locked until
-- commit. A graph of a tenant the login role may not write reads exactly as a graph id
-- that does not exist (CW404, one RAISE), and is checked before the lock, so a refused
-- caller holds nothing.
CREATE FUNCTION cwstore._writable_graph(p_graph_id bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text;
  v_len bigint;
BEGIN
  SELECT g.tenant INTO v_tenant FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
  END IF;
  SELECT g.length INTO v_len FROM cwstore.graphs g WHERE g.graph_id = p_graph_id FOR UPDATE;
  RETURN v_len;
END $$;

-- import_rows_v1(graph_id, seqs, ids, kinds, parents, payloads, created, keys)
--   The import path of roles that may not COPY into cwstore.nodes (cwstore_writer):
--   one slice of an import as parallel arrays (parents as array literals, e.g.
--   '{cw_…,cw_…}'), inserted in one statement, so the nodes trigger checks and
--   materializes it like a COPY. Call it after begin_import_v1, in the same transaction,
--   once per slice, then declare_frontier_v1. Returns the rows inserted.
--   Only within an import: the graph must be empty, or hold only nodes this transaction
--   wrote (CW412). Each payload must be one JSON value as JSON.stringify writes it, and
--   every node passes the checks of append_v1 (CW400 with the node's index and path).
CREATE OR REPLACE FUNCTION cwstore.import_rows_v1(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                       p_kinds text[], p_parents text[], p_payloads text[],
                                       p_created text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_len bigint;
  v_xid bigint;
  v_n bigint;
  v_all json;
  v_hidden boolean;
  v_bad integer;
  v_problem text;
BEGIN
  v_len := cwstore._writable_graph(p_graph_id);
  v_xid := pg_current_xact_id()::text::bigint;
  IF v_len > 0 AND (SELECT n.xid FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.seq = 1) <> v_xid THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph id %s already held nodes before this transaction; import_rows_v1 continues an import that begin_import_v1 started in this transaction',
                       p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id, 'length', v_len)::text;
  END IF;
  IF cardinality(p_seqs) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_ids) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_kinds) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_parents) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_created) IS DISTINCT FROM cardinality(p_payloads)
     OR cardinality(p_keys) IS DISTINCT FROM cardinality(p_payloads) THEN
    PERFORM cwstore._violation('shape', p_graph_id, NULL, NULL, '$',
                               'import_rows_v1 takes arrays of one length, one element per node');
  END IF;
  -- Every payload is one JSON value: parsed together as one array, whose elements must
  -- be the payloads' texts exactly (text pasted into a payload shows as an extra or a
  -- different element).
  v_bad := array_position(p_payloads, NULL);
  IF v_bad IS NULL THEN
    BEGIN
      v_all := ('[' || array_to_string(p_payloads, ',') || ']')::json;
      v_hidden := strpos(v_all::text, '\u0000') > 0;
      IF v_hidden THEN
        v_all := cwstore._nul_hide(v_all::text)::json;
      END IF;
      SELECT min(coalesce(p.o, e.o)) INTO v_bad
        FROM json_array_elements(v_all) WITH ORDINALITY AS e(v, o)
        FULL JOIN unnest(p_payloads) WITH ORDINALITY AS p(t, o) ON p.o = e.o
       WHERE e.o IS NULL OR p.o IS NULL
          OR (CASE WHEN v_hidden THEN cwstore._nul_show(e.v::text) ELSE e.v::text END) <> p.t;
    EXCEPTION WHEN invalid_text_representation THEN
      v_bad := 0;
    END;
    IF v_bad = 0 THEN
      FOR v_n IN 1 .. cardinality(p_payloads) LOOP
        BEGIN
          PERFORM cwstore._nul_hide(p_payloads[v_n])::json;
        EXCEPTION WHEN invalid_text_representation THEN
          v_bad := v_n;
          EXIT;
        END;
      END LOOP;
    END IF;
  END IF;
  IF v_bad IS NOT NULL THEN
    v_bad := least(v_bad, cardinality(p_payloads));
    PERFORM cwstore._violation('shape', p_graph_id, p_seqs[v_bad], p_ids[v_bad],
                               format('$[%s].payload', v_bad - 1),
                               'payload must be exactly one JSON value');
  END IF;
  SELECT x.o, x.problem INTO v_bad, v_problem
    FROM (SELECT r.o, cwstore._node_problem(r.kind, r.payload, r.created, r.key) AS problem
            FROM unnest(p_kinds, p_payloads, p_created, p_keys)
                 WITH ORDINALITY AS r(kind, payload, created, key, o)
          OFFSET 0) x  -- a fence: each node's problem is computed once
   WHERE x.problem IS NOT NULL
   ORDER BY x.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._node_violation(v_problem, p_graph_id, p_seqs[v_bad], p_ids[v_bad], v_bad - 1);
  END IF;
  -- As in append_v1: within a graph the feed's xid never goes back.
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,
                             resource_key, xid)
  SELECT p_graph_id, r.seq, r.id, r.kind, r.parents::text[], r.payload, r.created, r.key, v_xid
    FROM unnest(p_seqs, p_ids, p_kinds, p_parents, p_payloads, p_created, p_keys)
         AS r(seq, id, kind, parents, payload, created, key);
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
COMMENT ON FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[]) IS
  'Import one slice of nodes as parallel arrays after begin_import_v1 (the import path of roles without INSERT on cwstore.nodes). Returns how many rows it inserted.';

-- declare_frontier_v1(graph_id, heads) : the frontier after the graph's last node, as
-- given and in its order, with the graph locked (so it is declared at the length an
-- append that committed first left). CW400 frontier_reference for unknown or repeated
-- ids, CW404 for an unknown graph id (or one of another tenant).
CREATE OR REPLACE FUNCTION cwstore.declare_frontier_v1(p_graph_id bigint, p_heads text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_len bigint;
BEGIN
  v_len := cwstore._writable_graph(p_graph_id);
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, v_len, coalesce(p_heads, '{}'));
END $$;
COMMENT ON FUNCTION cwstore.declare_frontier_v1(bigint, text[]) IS
  'Declare the frontier after the graph''s last node (graph by graph_id), as given and in its order: after an import, or to set it by hand. CW400 frontier_reference for unknown or repeated ids.';

-- append_v1(graph, nodes, expected_length, frontier)
--   nodes: a JSON array of runtime nodes {id, kind, parents, payload, createdAt,
--   resourceKey?} (sequence is assigned here; one given is ignored). Each payload is
--   stored byte for byte, so it must be written as JSON.stringify writes it (compact;
--   the runtime's and cwstore's clients' own form); the same checks as cwstore import
--   apply to every node (createdAt, numbers, member names, semantic content and key
--   forms, resourceKey length), each refused with CW400, its code, index and path.
--   expected_length: NULL, or the length the writer last saw (CW409 when stale).
--   frontier: NULL (the fold applies) or a JSON array of ids, the frontier after
--   the batch.
--   Nodes whose id the graph already holds, with the same content, are returned as
--   stored and not written (idempotent retries); an id given again with other content,
--   in the graph or earlier in the batch, is refused (duplicate_id). When a call writes
--   nothing, its frontier is declared only if expected_length is current, or, with no
--   expected_length, if no node was appended after the batch's own: a retry after
--   others moved on never moves their frontier back.
--   Locks: the graph row (FOR UPDATE) until commit; nothing else.
--   Raises: CW400 (shape, kind, parents, semantic...), CW409, CW410 (chain race).
-- Its statements take arrays and ids as parameters; custom plans would be re-made on
-- every call, and the generic ones are right for every batch size that takes this path.
CREATE OR REPLACE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_bad bigint;
  v_last bigint;
  v_problem text;
  v_bad_id text;
  v_hidden boolean := false;
  v_heads text[];
  v_ids text[];
  v_kinds text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_keys text[];
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
    IF cwstore._lone_surrogate(p_frontier::text) THEN
      PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$.frontier',
        'a frontier id holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
    END IF;
    IF json_typeof(p_frontier) <> 'array'
       OR EXISTS (SELECT 1 FROM json_array_elements(p_frontier) f WHERE json_typeof(f) <> 'string')
    THEN
      PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.frontier',
                                 'frontier must be a JSON array of node ids');
    END IF;
    v_heads := ARRAY(SELECT json_array_elements_text(p_frontier));
  END IF;

  IF cwstore._lone_surrogate(p_nodes::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$',
      'a string holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;

  -- PostgreSQL's JSON functions refuse the escape \u0000: hide it (reversibly) first.
  IF strpos(p_nodes::text, '\u0000') > 0 THEN
    v_hidden := true;
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;

  -- Read the batch once: each node's fields as JSON, checked for their JSON types, for
  -- what the table's constraints would refuse and for _node_problem, so every client
  -- gets a CW400 with the safeguard code, the node's position and the path.
  SELECT array_agg(f.id #>> '{}' ORDER BY f.o), array_agg(f.kind #>> '{}' ORDER BY f.o),
         array_agg(f.parents::text ORDER BY f.o),
         array_agg(f.payload ORDER BY f.o),
         array_agg(f."createdAt" #>> '{}' ORDER BY f.o),
         array_agg(f."resourceKey" #>> '{}' ORDER BY f.o),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem ORDER BY f.o) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END ORDER BY f.o)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys, v_new, v_problem, v_bad_id
    FROM (SELECT c.*,
                 coalesce(c.problem0,
                          cwstore._node_problem(c.kind #>> '{}', c.payload, c."createdAt" #>> '{}',
                                                c."resourceKey" #>> '{}')) AS problem
            FROM (SELECT a.o, r.id, r.kind, r.parents, r."createdAt", r."resourceKey",
                         CASE WHEN v_hidden THEN cwstore._nul_show(r.payload::text)
                              ELSE r.payload::text END AS payload,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|$|node must be a JSON object'
                   WHEN (SELECT count(*) <> count(DISTINCT k) FROM json_object_keys(a.e) k)
                     THEN 'shape|$|node repeats a member name (JSON.parse would keep only the last)'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|$.id|id must be a string'
                   WHEN r.kind IS NULL AND json_typeof(a.e -> 'kind') IS NULL
                     THEN 'shape|$|node is missing field kind'
                   WHEN json_typeof(r.kind) IS DISTINCT FROM 'string'
                     THEN 'kind|$.kind|kind must be one of the ten kinds (a string)'
                   WHEN json_typeof(r.parents) IS DISTINCT FROM 'array'
                     THEN 'shape|$.parents|parents must be an array'
                   WHEN r.payload IS NULL THEN 'shape|$|payload is missing'
                   WHEN json_typeof(r."createdAt") IS DISTINCT FROM 'string'
                     THEN 'shape|$.createdAt|createdAt must be a string'
                   WHEN r."resourceKey" IS NOT NULL AND json_typeof(r."resourceKey") <> 'string'
                     THEN 'shape|$.resourceKey|resourceKey must be a string when present'
                   WHEN EXISTS (SELECT 1 FROM json_object_keys(a.e) k
                                 WHERE k NOT IN ('id', 'kind', 'parents', 'payload', 'createdAt',
                                                 'sequence', 'resourceKey'))
                     THEN 'shape|$|unknown node field'
                   WHEN EXISTS (SELECT 1 FROM json_array_elements(r.parents) pe
                                 WHERE json_typeof(pe) <> 'string')
                     THEN 'shape|$.parents|parents must be string ids'
                   WHEN v_hidden AND strpos(r.id::text || r.kind::text || r."createdAt"::text
                                            || coalesce(r."resourceKey"::text, '')
                                            || r.parents::text, '\\u0000') > 0
                     THEN 'unrepresentable|$|U+0000 outside a payload cannot be stored'
                   WHEN NOT ((r.kind #>> '{}') = ANY (cwstore.node_kinds()))
                     THEN 'kind|$.kind|kind is not one of the ten'
                   WHEN (r.id #>> '{}') !~ '^cw_[0-9a-f]{24}$'
                     THEN 'identity|$.id|id must be cw_ and 24 lowercase hex digits'
                   WHEN (r."resourceKey" #>> '{}') = ''
                     THEN 'shape|$.resourceKey|resourceKey must not be empty'
                 END AS problem0
            FROM json_array_elements(p_nodes) WITH ORDINALITY AS a(e, o)
            CROSS JOIN LATERAL json_to_record(CASE json_typeof(a.e) WHEN 'object' THEN a.e
                                                ELSE '{}' END)
                 AS r(id json, kind json, parents json, payload json, "createdAt" json,
                      "resourceKey" json)) c
          OFFSET 0) f;  -- a fence: each node's problem is computed once
  IF v_new IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_new, v_bad_id, v_new - 1);
  END IF;
  IF v_ids IS NULL THEN
    v_ids := '{}';
  END IF;

  -- One id, one content: a node given again later in the batch must be the same node.
  IF cardinality(v_ids) > 1 THEN
  SELECT b.o, b.id INTO v_bad, v_bad_id
    FROM unnest(v_ids) WITH ORDINALITY AS b(id, o)
    JOIN unnest(v_ids) WITH ORDINALITY AS a(id, o) ON a.id = b.id AND a.o < b.o
   WHERE NOT cwstore._same_content(
           v_kinds[a.o], ARRAY(SELECT json_array_elements_text(v_parents[a.o]::json)),
           v_payloads[a.o], v_keys[a.o],
           v_kinds[b.o], ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
           v_payloads[b.o], v_keys[b.o])
   ORDER BY b.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', NULL, v_bad, v_bad_id, format('$[%s].id', v_bad - 1),
      format('id %s is used by an earlier node of the batch with other content', v_bad_id));
  END IF;
  END IF;

  -- The tenant check comes before the lock: a refused caller must not hold another
  -- tenant's counter row while it sits in its aborted transaction.
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, (SELECT g.tenant FROM cwstore.graphs g
                                             WHERE g.name = p_graph));
  END IF;

  -- The counter row: lock it (create the graph on first use). Held until commit.
  SELECT g.graph_id, g.length INTO v_graph_id, v_len
    FROM cwstore.graphs g WHERE g.name = p_graph FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore.ensure_graph_v1(p_graph);
    SELECT g.graph_id, g.length INTO v_graph_id, v_len
      FROM cwstore.graphs g WHERE g.name = p_graph FOR UPDATE;
  END IF;

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's.
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                             created_at_text, resource_key, xid)
  SELECT v_graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o],
         greatest(pg_current_xact_id()::text::bigint,
                  (SELECT l.xid FROM cwstore.nodes l
                    WHERE l.graph_id = v_graph_id AND l.seq = v_len))
    FROM (SELECT DISTINCT ON (u.id) u.id, u.o
            FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
           ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;

  -- A node the graph held must be the same node: a retry, not other content under its
  -- id. Only when the insert skipped some (raising undoes the insert).
  IF v_new < cardinality(v_ids) THEN
  SELECT u.o, u.id, n.seq INTO v_bad, v_bad_id, v_last
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN cwstore.nodes n ON n.graph_id = v_graph_id AND n.id = u.id AND n.seq <= v_len
   WHERE NOT cwstore._same_content(
           n.kind, n.parents, n.payload_text, n.resource_key,
           v_kinds[u.o], ARRAY(SELECT json_array_elements_text(v_parents[u.o]::json)),
           v_payloads[u.o], v_keys[u.o])
   ORDER BY u.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', v_graph_id, v_bad, v_bad_id,
      format('$[%s].id', v_bad - 1),
      format('id %s is node %s of the graph, with other content', v_bad_id, v_last));
  END IF;
  END IF;

  -- Checked after the insert so the batch is read once; raising undoes the insert.
  IF v_new > 0 AND p_expected_length IS NOT NULL AND p_expected_length <> v_len THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', p_graph, v_len,
                       p_expected_length),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected_length,
                                  'actual_length', v_len)::text;
  END IF;

  -- The declared frontier is recorded after new nodes. When this call wrote nothing it
  -- is recorded only if it changes the frontier and, with an expected_length, that is
  -- current, or, without one, no node came after the batch's last: a retry after others
  -- moved on must not move their frontier back.
  IF v_heads IS NOT NULL AND v_new = 0 THEN
    SELECT max(n.seq) INTO v_last
      FROM unnest(v_ids) AS u(id)
      JOIN cwstore.nodes n ON n.graph_id = v_graph_id AND n.id = u.id;
  END IF;
  IF v_heads IS NOT NULL AND (v_new > 0 OR (
         coalesce(p_expected_length, v_last, v_len) = v_len
     AND v_heads IS DISTINCT FROM (
           SELECT coalesce(array_agg(n.id ORDER BY s.from_seq, s.ord), '{}')
             FROM cwstore.frontier_spans s
             JOIN cwstore.nodes n ON n.graph_id = s.graph_id AND n.seq = s.head_seq
            WHERE s.graph_id = v_graph_id AND s.to_seq = cwstore.infinity_seq()))) THEN
    INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
    VALUES (v_graph_id, v_len + v_new, v_heads);
  END IF;

  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

-- 70_read_api

-- _graph(graph) -> (graph_id, length)
--   Resolves a graph name. Raises CW404 when there is no such graph, or when the login
--   role may not read it (cwstore._may_use), from one RAISE: the two must read the same,
--   message, detail and context, or the difference tells that the graph exists. Every
--   public read function resolves its graph here first: the one check they need.
--   Cost: log.
CREATE OR REPLACE FUNCTION cwstore._graph(p_graph text, OUT graph_id bigint, OUT length bigint)
LANGUAGE plpgsql STABLE AS $$
DECLARE
  v_tenant text;
BEGIN
  SELECT g.graph_id, g.length, g.tenant INTO graph_id, length, v_tenant
    FROM cwstore.graphs g WHERE g.name = p_graph;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph %L does not exist', p_graph),
      DETAIL = jsonb_build_object('graph', p_graph)::text;
  END IF;
END $$;
COMMENT ON FUNCTION cwstore._graph(text) IS
  'Private: resolve a graph name to (graph_id, length); CW404 if unknown.';

DROP FUNCTION cwstore._check_reader(text, text);

-- export_parts_v1(graph, s, t, part_bytes) -> (length, seq, part, nodes, frontier)
--   export_v1 as several rows, so a graph whose JSON exceeds what one text value holds
--   (1 GB) still exports: the first row (part -1) carries length, seq and the frontier;
--   each following row a part of the nodes array, nodes in order, joined by commas,
--   about part_bytes each (a part ends after the node that reaches the size). A client
--   writes '[' || the parts joined by ',' || ']'. One statement, so one snapshot. When
--   s is beyond the graph's length, the first row alone, with a NULL frontier.
CREATE FUNCTION cwstore.export_parts_v1(p_graph text, p_seq bigint DEFAULT NULL,
                                        p_time timestamptz DEFAULT NULL,
                                        p_part_bytes bigint DEFAULT 67108864)
RETURNS TABLE (length bigint, seq bigint, part bigint, nodes text, frontier text[])
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
    RETURN QUERY SELECT g.length, v_seq, -1::bigint, NULL::text, NULL::text[];
    RETURN;
  END IF;
  RETURN QUERY
  SELECT g.length, v_seq, -1::bigint, NULL::text,
         CASE WHEN v_seq = 0 THEN '{}'::text[] ELSE
           ARRAY(SELECT n.id FROM cwstore._frontier_at(g.graph_id, v_seq) f
                   JOIN cwstore.nodes n ON n.graph_id = g.graph_id AND n.seq = f.seq
                  ORDER BY f.position) END;
  RETURN QUERY
  SELECT g.length, v_seq, c.part, string_agg(c.node_json, ',' ORDER BY c.seq), NULL::text[]
    FROM (SELECT n.seq, n.node_json,
                 (sum(octet_length(n.node_json)) OVER (ORDER BY n.seq)
                  - octet_length(n.node_json)) / greatest(p_part_bytes, 1) AS part
            FROM cwstore.nodes n WHERE n.graph_id = g.graph_id AND n.seq <= v_seq) c
   GROUP BY c.part
   ORDER BY c.part;
END $$;
COMMENT ON FUNCTION cwstore.export_parts_v1(text, bigint, timestamptz, bigint) IS
  'export_v1 in rows: part -1 carries (length, seq, frontier), parts 0.. the nodes array''s text in order, about part_bytes each, so graphs over 1 GB export. One snapshot.';

-- export_v1(graph, s, t) -> (length, seq, nodes, frontier)
--   The graph as of node s, or as of time t (the last node whose createdAt <= t), or now
--   when both are NULL: nodes is the JSON array text of nodes 1..seq, frontier the ids
--   of the frontier in force there. When s is beyond the graph's length, nodes and
--   frontier are NULL and length tells the client why. One statement, one snapshot.
--   CW404 for an unknown graph (or one of another tenant).
--   It is export_parts_v1 in one part: one text value, so at most 1 GB (the clients
--   read export_parts_v1).
CREATE OR REPLACE FUNCTION cwstore.export_v1(p_graph text, p_seq bigint DEFAULT NULL,
                                  p_time timestamptz DEFAULT NULL)
RETURNS TABLE (length bigint, seq bigint, nodes text, frontier text[])
LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
  WITH p AS (SELECT * FROM cwstore.export_parts_v1(p_graph, p_seq, p_time,
                                                   4611686018427387904))
  SELECT h.length, h.seq,
         CASE WHEN h.frontier IS NOT NULL THEN
           '[' || coalesce((SELECT string_agg(x.nodes, ',' ORDER BY x.part) FROM p x
                             WHERE x.part >= 0), '') || ']' END,
         h.frontier
    FROM p h WHERE h.part = -1
$$;
COMMENT ON FUNCTION cwstore.export_v1(text, bigint, timestamptz) IS
  'The graph as of node s, time t, or now: (length, seq, nodes JSON array text, frontier ids), from one snapshot. nodes is NULL when s > length.';

-- 80_listeners

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
                   'cwstore.append_v1(text, json, bigint, json)', 'EXECUTE')
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

-- tail_all_v1(xid, graph_id, seq, limit, max_bytes) -> nodes of every graph the caller
--   may read: up to limit nodes after the cursor (xid, graph_id, seq), in cursor order,
--   only below feed_horizon() (computed first, in a statement of its own, so the read's
--   snapshot comes after it), and no more than max_bytes of payload text past the first
--   node (NULL: no byte bound). Runs as the caller: row-level security decides what it
--   sees. In a REPEATABLE READ or SERIALIZABLE transaction the read's snapshot is the
--   transaction's, so the horizon is held to that snapshot's xmin as well.
CREATE FUNCTION cwstore.tail_all_v1(p_xid bigint, p_graph_id bigint, p_seq bigint,
                                    p_limit integer, p_max_bytes bigint DEFAULT NULL)
RETURNS TABLE (xid bigint, graph_id bigint, name text, seq bigint, id text, kind text,
               parents text[], payload_text text, created_at_text text, resource_key text)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  v_horizon bigint := cwstore.feed_horizon();
BEGIN
  IF pg_catalog.current_setting('transaction_isolation') <> 'read committed' THEN
    v_horizon := least(v_horizon,
      pg_catalog.pg_snapshot_xmin(pg_catalog.pg_current_snapshot())::text::bigint);
  END IF;
  RETURN QUERY
  SELECT x.xid, x.graph_id, x.name, x.seq, x.id, x.kind, x.parents, x.payload_text,
         x.created_at_text, x.resource_key
    FROM (SELECT l.*, sum(octet_length(l.payload_text)) OVER (ORDER BY l.xid, l.graph_id, l.seq)
                      - octet_length(l.payload_text) AS before
            FROM (SELECT n.xid, n.graph_id, g.name, n.seq, n.id, n.kind, n.parents,
                         n.payload_text, n.created_at_text, n.resource_key
                    FROM cwstore.nodes n JOIN cwstore.graphs g ON g.graph_id = n.graph_id
                   WHERE n.xid >= p_xid
                     AND (n.xid, n.graph_id, n.seq) > (p_xid, p_graph_id, p_seq)
                     AND n.xid < v_horizon
                   ORDER BY n.xid, n.graph_id, n.seq
                   LIMIT p_limit) l) x
   WHERE p_max_bytes IS NULL OR x.before = 0 OR x.before < p_max_bytes
   ORDER BY x.xid, x.graph_id, x.seq;
END $$;
COMMENT ON FUNCTION cwstore.tail_all_v1(bigint, bigint, bigint, integer, bigint) IS
  'The all-graphs feed: up to limit nodes (and max_bytes of payload past the first) after cursor (xid, graph_id, seq) that can no longer be overtaken (below feed_horizon()), in order; what the caller may read.';
