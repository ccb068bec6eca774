-- 60_write_api: the write API, as SQL functions, so every client (asyncpg, psycopg,
-- psql, the TypeScript runtime through pg) meets the same rules and errors.
--
-- The append path locks the graph's counter row, numbers the batch from its length and
-- inserts in one statement; the nodes triggers (40_derive.sql) check and materialize.
-- One round trip, no session state (works behind a transaction-mode pooler). Every
-- function runs as its owner (SECURITY DEFINER, a fixed search_path), so a writer role
-- needs no privilege on any table, and checks that the login role may write the graph's
-- tenant (cwstore._check_writer, 50_tenancy.sql) before it locks or writes anything.
-- Functions are versioned (_v1) so a new signature can live beside the old; each takes
-- the graph (its name, or its graph_id within an import) first. The write doors plan
-- with enable_seqscan off: a caller's connection keeps a plpgsql function's plans for
-- its life, and one made while the tables were small would go on scanning them as they
-- grow; every lookup here has an index (off is a penalty, not a ban).
--
-- SQLSTATEs raised: CW400 validation, CW404 unknown graph, CW409 expected length is
-- stale, CW410 chain conflict on a resource key, CW412 import into a non-empty graph,
-- 42501 a graph of a tenant the login role is not in.

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
-- as cwstore.document (Python).
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

-- _ascii_depth_change(text) -> opening minus closing brackets in an ASCII text, read in
-- slices of 64 kB (so a long text costs no more than a slice).
CREATE FUNCTION cwstore._ascii_depth_change(p_text text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT coalesce(sum(length(translate(t, '}]', '')) - length(translate(t, '{[', ''))), 0)
    FROM (SELECT convert_from(substring(b.b FROM i FOR 65536), 'UTF8') AS t
            FROM (SELECT convert_to(p_text, 'UTF8') AS b) b,
                 generate_series(1, octet_length(p_text), 65536) AS i) x
$$;

-- _members_unique(text, bare) -> whether no object of a JSON text (as JSON.stringify
--   writes it; bare: the same with every string written "") repeats a member name.
--   jsonb keeps one member per name, so the text holds more values than its jsonb when
--   a name repeats: up to 64 kB the two counts are compared (_members_unique_small).
--   Building the jsonb of many small objects takes about 80 times the text in memory,
--   so a longer text is read as a stream of its names instead (_members_unique_large).
CREATE FUNCTION cwstore._members_unique(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
BEGIN
  IF octet_length(p_text) <= 65536 THEN
    RETURN cwstore._members_unique_small(p_text, p_bare);
  END IF;
  RETURN cwstore._members_unique_large(p_text);
END $$;

-- _members_unique_large(text): _members_unique for a text of any length and depth, in
-- memory bounded by work_mem (set low here: its rows spill to temporary files) and time
-- n log n. The text is cut at every double quote (string_to_table): a quote after an
-- odd run of backslashes is escaped, the others alternate opening and closing strings.
-- Each string is one row, each stretch between strings another; a stretch's brackets
-- give the depth at its end. A member name is a string followed by ':'; its object is
-- the last stretch ending with '{' at its depth (objects at one depth follow one
-- another). Names are compared as written (JSON.stringify writes each string one way),
-- each part between escaped quotes over 64 bytes by its SHA-256, so that no long text
-- goes through the sorts. An outside stretch is ASCII (punctuation, numbers, literals),
-- so one over 64 kB is counted in slices (translate takes 4 bytes a character).
CREATE FUNCTION cwstore._members_unique_large(p_text text) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT NOT EXISTS (
    SELECT 1
      FROM (SELECT s.k, s.is_name,
                   max(s.r) FILTER (WHERE s.opens) OVER (PARTITION BY s.d ORDER BY s.r) AS c
              FROM (SELECT g.r, g.opens, g.k,
                           g.r % 2 = 1 AND lead(g.first) OVER (ORDER BY g.r) = ':' AS is_name,
                           sum(g.delta) OVER (ORDER BY g.r) AS d
                      FROM (SELECT p.r,
                                   CASE WHEN p.r % 2 = 1 THEN string_agg(p.k, '"' ORDER BY p.o) END AS k,
                                   min(p.first) AS first,
                                   p.r % 2 = 0 AND min(p.last) = '{' AS opens,
                                   CASE WHEN p.r % 2 = 1 THEN 0 ELSE min(p.delta) END AS delta
                              FROM (SELECT x.o, x.k, x.first, x.last, x.delta,
                                           count(*) FILTER (WHERE x.real)
                                             OVER (ORDER BY x.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS r
                                      FROM (SELECT o, left(t, 1) AS first, right(t, 1) AS last,
                                                   right(t, 1) <> '\' OR (length(t) - length(rtrim(t, '\'))) % 2 = 0 AS real,
                                                   CASE WHEN octet_length(t) <= 64 THEN t
                                                        ELSE sha256(convert_to(t, 'UTF8'))::text END AS k,
                                                   CASE WHEN octet_length(t) <= 65536
                                                          THEN length(translate(t, '}]', ''))
                                                               - length(translate(t, '{[', ''))
                                                        WHEN octet_length(t) = length(t)
                                                          THEN cwstore._ascii_depth_change(t) END AS delta
                                              FROM string_to_table(p_text, '"') WITH ORDINALITY AS y(t, o)) x) p
                             GROUP BY p.r) g) s) n
     WHERE n.is_name
     GROUP BY n.c, n.k
    HAVING count(*) > 1)
$$;

-- _occurrences(text, piece) -> how many times a text holds a piece, counted in bytes
-- (octet_length, replace): a one-byte character is never part of another's UTF-8, and
-- length() and translate() read a text a character at a time, several times slower
-- (translate about 180 instructions a character). A SQL expression that PostgreSQL
-- inlines where it is called.
CREATE FUNCTION cwstore._occurrences(p_text text, p_piece text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT (octet_length(p_text) - octet_length(replace(p_text, p_piece, '')))
         / octet_length(p_piece)
$$;

-- _brackets_opened(text) -> how many '{' and '[' a text holds (outside its strings, for
-- a text with every string written ""), as _occurrences counts, both at once: every
-- payload's check counts them, and each more node in an expression costs every
-- transaction that runs it (plpgsql prepares its expressions again in each).
CREATE FUNCTION cwstore._brackets_opened(p_text text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT octet_length(p_text) - octet_length(replace(replace(p_text, '{', ''), '[', ''))
$$;

-- _json_values(bare) -> how many values a JSON text holds, its root included, given
-- with every string written "": every value but the root follows a comma or opens a
-- container that is not empty, so 1 + commas + containers - empty containers (counted
-- apart: '[{}]' holds one empty container, not two).
CREATE FUNCTION cwstore._json_values(p_bare text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 1 + cwstore._occurrences(p_bare, ',') + cwstore._brackets_opened(p_bare)
         - cwstore._occurrences(p_bare, '{}') - cwstore._occurrences(p_bare, '[]')
$$;

-- _members_unique_small(text, bare): _members_unique by counting values in the text
-- and in its jsonb (for texts of tens of kB: the jsonb costs about 80 times them). The
-- jsonb's values are counted by a JSON path, which is fast but takes stack at every
-- level; a text of over 1,000 containers (it may nest that deep) has them counted in
-- the jsonb's own text instead, as in the text's: slower, at any depth.
CREATE FUNCTION cwstore._members_unique_small(p_text text, p_bare text) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_doc jsonb := cwstore.payload_jsonb(p_text);
BEGIN
  IF cwstore._brackets_opened(p_bare) > 1000 THEN
    RETURN cwstore._json_values(p_bare)
           = cwstore._json_values(regexp_replace(v_doc::text, '"(\\.|[^"\\])*"', '""', 'g'));
  END IF;
  RETURN cwstore._json_values(p_bare)
         = jsonb_array_length(jsonb_path_query_array(v_doc, 'strict $.**.type()'));
END $$;

-- _json_bare(text without escapes) -> the text with every string written "": the
-- text cut at its quotes (string_to_table, rows that spill to temporary files past
-- work_mem), its odd parts joined by "".
CREATE FUNCTION cwstore._json_bare(p_rest text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT string_agg(t, '""' ORDER BY o)
    FROM string_to_table(p_rest, '"') WITH ORDINALITY AS x(t, o)
   WHERE o % 2 = 1
$$;

-- _bare_number_problem(bare) -> the first number of a bare JSON text that
-- JSON.stringify would not write as it is written, or NULL; read between commas (no
-- number spans one). Only parts that may hold such a number are read: a fraction or an
-- exponent (after a digit: true and false hold an e), 16 digits or more, or -0.
CREATE FUNCTION cwstore._bare_number_problem(p_bare text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT m[1]
    FROM string_to_table(p_bare, ',') WITH ORDINALITY AS x(t, o)
   CROSS JOIN LATERAL regexp_matches(x.t, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
   WHERE x.t ~ '[0-9][.eE]|[0-9]{16}|-0'
     AND m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
   ORDER BY x.o
   LIMIT 1
$$;

-- _too_deep(bare, limit) -> whether a bare JSON text nests deeper than limit levels, read
-- between commas: a part is walked a character at a time only when the depth at its
-- start plus its opening brackets exceeds the limit.
CREATE FUNCTION cwstore._too_deep(p_bare text, p_limit integer) RETURNS boolean
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT EXISTS (
    SELECT 1
      FROM (SELECT x.t, x.opens,
                   coalesce(sum(x.opens - x.closes)
                              OVER (ORDER BY x.o ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING),
                            0) AS depth
              FROM (SELECT t, o, length(t) - length(translate(t, '{[', '')) AS opens,
                           length(t) - length(translate(t, '}]', '')) AS closes
                      FROM string_to_table(p_bare, ',') WITH ORDINALITY AS s(t, o)) x) p
     WHERE p.depth + p.opens > p_limit
       AND p.depth + (SELECT max(d)
                        FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1
                                              WHEN c IN ('}', ']') THEN -1 ELSE 0 END)
                                       OVER (ORDER BY i) AS d
                                FROM string_to_table(p.t, NULL) WITH ORDINALITY AS c(c, i)) y)
           > p_limit)
$$;

-- _payload_problem(payload text) -> 'code|path|message', or NULL when the payload is
-- JSON the runtime can write and cwstore can keep exactly. The text must already be
-- one JSON value (append_v1 reads it out of a json batch; import_rows_v1 parses its
-- slice first). Checks, in order:
--   * spelling: exactly as JSON.stringify writes the value (no whitespace outside
--     strings, no escape it would not write, numbers as Number::toString writes them),
--     since the text is stored and given back byte for byte (code shape);
--   * numbers: finite, integers within +-(2^53-1) unless JavaScript writes them back
--     digit for digit (unrepresentable);
--   * nesting at most 10,000 levels (cwstore._jsontext.MAX_DEPTH; unrepresentable);
--   * no object repeats a member name (shape; JSON.parse keeps only the last).
CREATE FUNCTION cwstore._payload_problem(p_text text) RETURNS text
LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS $$
DECLARE
  v_rest text;
  v_bare text;
  v_tok text;
  v_js text;
  v_deep boolean;
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
  -- What is left outside strings: punctuation, literals and numbers, nothing else: the
  -- text cut at its quotes, its odd parts joined by "" (a regular expression replacing
  -- each string starts again at every string, several times the cost for a payload of
  -- many). Over 64 kB, each check reads the text in parts (_json_bare,
  -- _bare_number_problem, _too_deep): a regular expression over the whole text takes 4
  -- bytes a character.
  IF octet_length(v_rest) <= 65536 THEN
    v_bare := array_to_string(ARRAY(SELECT x.t FROM string_to_table(v_rest, '"') WITH ORDINALITY AS x(t, o)
                                     WHERE x.o % 2 = 1), '""');
  ELSE
    v_bare := cwstore._json_bare(v_rest);
  END IF;
  IF strpos(v_bare, ' ') > 0 OR strpos(v_bare, E'\n') > 0 OR strpos(v_bare, E'\t') > 0
     OR strpos(v_bare, E'\r') > 0 THEN
    RETURN 'shape|$.payload|whitespace outside strings: send the payload as JSON.stringify writes it (compact)';
  END IF;
  IF octet_length(v_bare) <= 65536 THEN
    IF v_bare ~ '[0-9][.eE]|[0-9]{16}|-0' THEN
      SELECT m[1] INTO v_tok
        FROM regexp_matches(v_bare, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
       WHERE m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
       LIMIT 1;
    END IF;
  ELSE
    v_tok := cwstore._bare_number_problem(v_bare);
  END IF;
  IF v_tok IS NOT NULL THEN
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
  -- Nesting depth: the deepest point of the running count of brackets outside strings,
  -- walked only when there are more opening brackets than the limit. (A condition
  -- holding a subquery is a statement of its own, made ready on every call, however
  -- the condition ends: hence the IFs around the queries here and in the door's other
  -- functions.)
  IF octet_length(v_bare) > 65536 THEN
    v_deep := cwstore._too_deep(v_bare, 10000);
  ELSIF cwstore._brackets_opened(v_bare) > 10000 THEN
    v_deep := (SELECT max(d) FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1 ELSE -1 END)
                                            OVER (ORDER BY o) AS d
                                     FROM string_to_table(regexp_replace(v_bare, '[^][{}]', '', 'g'),
                                                          NULL) WITH ORDINALITY AS t(c, o)) x) > 10000;
  END IF;
  IF v_deep THEN
    RETURN 'unrepresentable|$.payload|nesting deeper than 10000 levels';
  END IF;
  -- Repeated member names (after the depth, which bounds the stack their check takes):
  -- jsonb keeps one member per name, so it holds fewer values than the text when a name
  -- repeats. Values in the text: containers, strings that are not member names, numbers
  -- and literals.
  IF strpos(v_bare, '"":') > 0
     AND strpos(substr(v_bare, strpos(v_bare, '"":') + 3), '"":') > 0
     AND NOT cwstore._members_unique(p_text, v_bare) THEN
    RETURN 'shape|$.payload|an object repeats a member name (JSON.parse would keep only the last)';
  END IF;
  RETURN NULL;
END $$;

-- _node_problem(kind, payload, createdAt, resourceKey) -> 'code|path|message' or NULL:
-- what append_v1 and import_rows_v1 check per node beyond the table's constraints and
-- the nodes trigger (parents, chains, sequences, semantic shape): createdAt, the
-- resourceKey's length (cwstore.document.RESOURCE_KEY_MAX_BYTES: the key is indexed, and
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
  IF octet_length(p_payload) > cwstore.max_payload_bytes() THEN
    RETURN format('too_large|$.payload|payload is %s bytes of JSON; at most %s are allowed',
                  octet_length(p_payload), cwstore.max_payload_bytes());
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
-- caller holds nothing; the lock is then taken on the life that was checked only
-- (CW404 erased when it is gone, whatever holds the key by then).
CREATE FUNCTION cwstore._writable_graph(p_graph_id bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_tenant text;
  v_incarnation bigint;
  v_len bigint;
BEGIN
  SELECT g.tenant, g.incarnation INTO v_tenant, v_incarnation
    FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
  IF NOT FOUND OR (session_user <> current_user AND NOT cwstore._may_use(v_tenant)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s does not exist', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id)::text;
  END IF;
  SELECT g.length INTO v_len FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id AND g.incarnation = v_incarnation FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION USING ERRCODE = 'CW404',
      MESSAGE = format('graph id %s was erased while this call waited for it', p_graph_id),
      DETAIL = jsonb_build_object('graph_id', p_graph_id, 'erased', true)::text;
  END IF;
  RETURN v_len;
END $$;

-- ensure_graph_v1(graph, vocabulary) -> graph_id
--   Creates the graph on first use. vocabulary NULL = dynamic. Takes no lock on the
--   graph's row. The graph_id is the key of the name's chain it holds
--   (cwstore.graph_id_of, 55_graph_keys.sql); a name whose first key another graph
--   holds takes the next one.
CREATE FUNCTION cwstore.ensure_graph_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_id bigint;
  v_tenant text;
BEGIN
  IF p_graph IS NULL OR p_graph = '' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
                               'a graph name must be a non-empty string');
  END IF;
  IF octet_length(p_graph) > cwstore.max_graph_name_bytes() THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.graph',
      format('a graph name is at most %s bytes of UTF-8 (this one has %s)',
             cwstore.max_graph_name_bytes(), octet_length(p_graph)));
  END IF;
  v_id := cwstore.graph_id_of(p_graph);
  IF v_id IS NULL THEN
    v_tenant := cwstore._new_graph_tenant();
    IF session_user <> current_user THEN
      PERFORM cwstore._check_writer(p_graph, v_tenant);
    END IF;
    v_id := cwstore._create_graph(p_graph, p_vocabulary, v_tenant);
  END IF;
  SELECT g.tenant INTO v_tenant FROM cwstore.graphs g WHERE g.graph_id = v_id;
  IF session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v_tenant);
  END IF;
  RETURN v_id;
END $$;
COMMENT ON FUNCTION cwstore.ensure_graph_v1(text, text[]) IS
  'Create a graph if it does not exist (vocabulary NULL = dynamic); returns its graph_id.';

-- begin_import_v1(graph, vocabulary) -> graph_id
--   Locks the graph row for the rest of the transaction. Raises CW412 when the graph
--   already holds nodes. Sets the vocabulary.
CREATE FUNCTION cwstore.begin_import_v1(p_graph text, p_vocabulary text[] DEFAULT NULL)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_life record;
  v_len bigint;
BEGIN
  v_life := cwstore._writer_life(p_graph, true, p_vocabulary);
  v_len := cwstore._lock_life(p_graph, v_life.life_id, v_life.life_incarnation);
  IF v_len > 0 THEN
    RAISE EXCEPTION USING ERRCODE = 'CW412',
      MESSAGE = format('graph %L already holds %s nodes; import needs an empty graph', left(p_graph, 200), v_len),
      DETAIL = jsonb_build_object('graph', p_graph, 'length', v_len)::text;
  END IF;
  UPDATE cwstore.graphs SET vocabulary = p_vocabulary
   WHERE graph_id = v_life.life_id AND vocabulary IS DISTINCT FROM p_vocabulary;
  RETURN v_life.life_id;
END $$;
COMMENT ON FUNCTION cwstore.begin_import_v1(text, text[]) IS
  'Start importing into an empty graph: create or lock it; CW412 if it holds nodes. COPY rows into cwstore.nodes next, then declare_frontier_v1.';

-- import_rows_v1(graph_id, seqs, ids, kinds, parents, payloads, created, keys)
--   The import path of roles that may not COPY into cwstore.nodes (cwstore_writer):
--   one slice of an import as parallel arrays (parents as array literals, e.g.
--   '{cw_…,cw_…}'), inserted in one statement, so the nodes trigger checks and
--   materializes it like a COPY. Call it after begin_import_v1, in the same transaction,
--   once per slice, then declare_frontier_v1. Returns the rows inserted.
--   Only within an import: the graph must be empty, or hold only nodes this transaction
--   wrote (CW412). Each payload must be one JSON value as JSON.stringify writes it, and
--   every node passes the checks of append_v1 (CW400 with the node's index and path).
CREATE FUNCTION cwstore.import_rows_v1(p_graph_id bigint, p_seqs bigint[], p_ids text[],
                                       p_kinds text[], p_parents text[], p_payloads text[],
                                       p_created text[], p_keys text[])
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
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
      v_hidden := EXISTS (SELECT 1 FROM unnest(p_payloads) AS p(t) WHERE strpos(p.t, '\u0000') > 0);
      v_all := (CASE WHEN v_hidden THEN cwstore._nul_hide('[' || array_to_string(p_payloads, ',') || ']')
                     ELSE '[' || array_to_string(p_payloads, ',') || ']' END)::json;
      -- Element and payload side by side (ROWS FROM pads the shorter with NULLs): no
      -- join, so no sort or hash holds the payloads again.
      SELECT min(x.o) INTO v_bad
        FROM ROWS FROM (json_array_elements(v_all), unnest(p_payloads)) WITH ORDINALITY AS x(v, t, o)
       WHERE x.v IS NULL OR x.t IS NULL
          OR (CASE WHEN v_hidden THEN cwstore._nul_show(x.v::text) ELSE x.v::text END) <> x.t;
      v_all := NULL;  -- not held while the payloads are checked and inserted
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
  -- As in append_v1: within a graph the feed's xid never goes back; the rows come
  -- joined to the graph's counter row (one statement on the graph's worker on Citus).
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text, created_at_text,
                             resource_key, xid)
  SELECT g.graph_id, r.seq, r.id, r.kind, r.parents::text[], r.payload, r.created, r.key, v_xid
    FROM cwstore.graphs g
   CROSS JOIN unnest(p_seqs, p_ids, p_kinds, p_parents, p_payloads, p_created, p_keys)
         AS r(seq, id, kind, parents, payload, created, key)
   WHERE g.graph_id = p_graph_id;
  GET DIAGNOSTICS v_n = ROW_COUNT;
  RETURN v_n;
END $$;
COMMENT ON FUNCTION cwstore.import_rows_v1(bigint, bigint[], text[], text[], text[], text[], text[], text[]) IS
  'Import one slice of nodes as parallel arrays after begin_import_v1 (the import path of roles without INSERT on cwstore.nodes). Returns how many rows it inserted.';

-- declare_frontier_v1(graph_id, heads) : the frontier after the graph's last node, as
-- given and in its order, with the graph locked (so it is declared at the length an
-- append that committed first left). CW400 frontier_reference for unknown or repeated
-- ids, CW404 for an unknown graph id (or one of another tenant).
CREATE FUNCTION cwstore.declare_frontier_v1(p_graph_id bigint, p_heads text[])
RETURNS void LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_len bigint;
BEGIN
  v_len := cwstore._writable_graph(p_graph_id);
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, v_len, coalesce(p_heads, '{}'));
END $$;
COMMENT ON FUNCTION cwstore.declare_frontier_v1(bigint, text[]) IS
  'Declare the frontier after the graph''s last node (graph by graph_id), as given and in its order: after an import, or to set it by hand. CW400 frontier_reference for unknown or repeated ids.';

-- derive_v1(graph) -> the graph's length: the frontier's history (frontier_spans) of a
-- graph written up to its length, now, under the graph's lock. Writes do it on their
-- own every cwstore.derive_lag() nodes, and every read answers at every point without
-- it; this is for whoever wants the table itself current (SQL over frontier_spans) or
-- the work done before a burst of reads. CW404 for an unknown graph.
CREATE FUNCTION cwstore.derive_v1(p_graph text)
RETURNS bigint LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp
SET enable_seqscan = off AS $$
DECLARE
  v_life record;
  v_len bigint;
BEGIN
  v_life := cwstore._writer_life(p_graph, false, NULL);
  IF v_life.life_id IS NULL THEN
    PERFORM cwstore._graph(p_graph);
  END IF;
  v_len := cwstore._lock_life(p_graph, v_life.life_id, v_life.life_incarnation);
  UPDATE cwstore.graphs g SET derived_length = g.length
   WHERE g.graph_id = v_life.life_id AND g.derived_length < g.length;
  RETURN v_len;
END $$;
COMMENT ON FUNCTION cwstore.derive_v1(text) IS
  'Write a graph''s frontier history (frontier_spans) up to its length now; returns the length. Reads never need it: they fold the nodes past the watermark (graphs.derived_length).';

-- _refuse_stale(graph, graph_id, nodes, expected, length): CW409 for an append whose
-- expected length is not the graph's, unless every node of the batch (by id) is held by
-- the graph already. The ids are read from the batch as given, before any other check:
-- a conflict costs a lookup, not the batch's validation. Called without the graph's
-- lock; append_v1 checks again under it.
CREATE FUNCTION cwstore._refuse_stale(p_graph text, p_graph_id bigint, p_nodes json,
                                      p_expected bigint, p_length bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_ids text[];
  v_held bigint := 0;
BEGIN
  -- A batch with a \u escape (a U+0000 or a lone surrogate may be among them, which
  -- ->> refuses) is left to the check under the lock.
  IF strpos(p_nodes::text, '\u') > 0 THEN
    RETURN;
  END IF;
  v_ids := ARRAY(SELECT DISTINCT e ->> 'id' FROM json_array_elements(p_nodes) e);
  IF p_graph_id IS NOT NULL AND array_position(v_ids, NULL) IS NULL THEN
    SELECT count(*) INTO v_held
      FROM unnest(v_ids) AS u(id)
      JOIN LATERAL (SELECT 1 FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.id = u.id LIMIT 1) n ON true;
  END IF;
  IF v_held < cardinality(v_ids) OR cardinality(v_ids) = 0 AND p_graph_id IS NULL THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200),
                       p_length, p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', p_length)::text;
  END IF;
END $$;

-- _frontier_heads(frontier): a declared frontier (a JSON array of node ids) as text[];
-- NULL for NULL; CW400 at $.frontier for anything else.
CREATE FUNCTION cwstore._frontier_heads(p_frontier json) RETURNS text[]
LANGUAGE plpgsql AS $$
DECLARE
  v_heads text[];
  v_ids boolean;
BEGIN
  IF p_frontier IS NULL THEN
    RETURN NULL;
  END IF;
  IF cwstore._lone_surrogate(p_frontier::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$.frontier',
      'a frontier id holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  IF json_typeof(p_frontier) = 'array' THEN
    SELECT coalesce(array_agg(f #>> '{}'), '{}'), coalesce(bool_and(json_typeof(f) = 'string'), true)
      INTO v_heads, v_ids
      FROM json_array_elements(p_frontier) AS f;
  END IF;
  IF NOT coalesce(v_ids, false) THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$.frontier',
                               'frontier must be a JSON array of node ids');
  END IF;
  RETURN v_heads;
END $$;

-- _writer_graph(graph): the graph's id, length, tenant and life (incarnation), read
-- without a lock, by its key (one shard on Citus): the name's first key, else its chain
-- (cwstore.graph_id_of). NULLs for a name no graph has.
CREATE FUNCTION cwstore._writer_graph(p_graph text, OUT found_id bigint, OUT found_length bigint,
                                      OUT found_tenant text, OUT found_incarnation bigint)
LANGUAGE plpgsql AS $$
BEGIN
  found_id := cwstore.graph_key(p_graph);
  SELECT g.length, g.tenant, g.incarnation INTO found_length, found_tenant, found_incarnation
    FROM cwstore.graphs g
   WHERE g.graph_id = found_id AND g.name = p_graph;
  IF NOT FOUND THEN
    found_id := cwstore.graph_id_of(p_graph);
    IF found_id IS NOT NULL THEN
      SELECT g.length, g.tenant, g.incarnation INTO found_length, found_tenant, found_incarnation
        FROM cwstore.graphs g WHERE g.graph_id = found_id AND g.name = p_graph;
      IF NOT FOUND THEN
        found_id := NULL;
      END IF;
    END IF;
  END IF;
END $$;

-- _writer_life(graph, create, vocabulary) -> (life_id, life_length, life_incarnation):
-- the graph's life that the login role may write, read without a lock (42501 for a
-- graph of a tenant the role is not in); NULLs for a name no graph has, unless create:
-- then the graph is created first (ensure_graph_v1, with vocabulary). The tenant is
-- checked on the same read that gives the life, and a life's tenant and name never
-- change, so locking that life (cwstore._lock_life) and nothing else keeps the check
-- true under the lock. The check is a statement of its own, after the read (on Citus a
-- statement that reads a distributed table runs on the worker, as another role).
CREATE FUNCTION cwstore._writer_life(p_graph text, p_create boolean, p_vocabulary text[],
                                     OUT life_id bigint, OUT life_length bigint,
                                     OUT life_incarnation bigint)
LANGUAGE plpgsql AS $$
DECLARE
  v record;
BEGIN
  v := cwstore._writer_graph(p_graph);
  IF v.found_id IS NULL AND p_create THEN
    PERFORM cwstore.ensure_graph_v1(p_graph, p_vocabulary);
    v := cwstore._writer_graph(p_graph);
    IF v.found_id IS NULL THEN
      PERFORM cwstore._erased_meanwhile(p_graph);
    END IF;
  END IF;
  IF v.found_id IS NOT NULL AND session_user <> current_user THEN
    PERFORM cwstore._check_writer(p_graph, v.found_tenant);
  END IF;
  life_id := v.found_id;
  life_length := v.found_length;
  life_incarnation := v.found_incarnation;
END $$;

-- _lock_life(graph, graph_id, incarnation) -> the graph's length, with its counter row
-- locked until commit: that life's row, and no other. CW404 (erased) when the life is
-- gone, even if another life (or another graph) holds the key by now. Before the first
-- node of a life, _check_after_erasure.
CREATE FUNCTION cwstore._lock_life(p_graph text, p_graph_id bigint, p_incarnation bigint)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint;
BEGIN
  SELECT g.length INTO v_len FROM cwstore.graphs g
   WHERE g.graph_id = p_graph_id AND g.incarnation = p_incarnation FOR UPDATE;
  IF NOT FOUND THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  IF v_len = 0 THEN
    PERFORM cwstore._check_after_erasure(p_graph, p_graph_id);
  END IF;
  RETURN v_len;
END $$;

-- _batch_fields(nodes, hidden): append_v1's batch (a JSON array), each node's fields as
-- arrays in the batch's order (parents as JSON array texts; payloads byte for byte, a
-- \u0000 in them kept: hidden says the batch's \u0000 escapes were hidden by
-- cwstore._nul_hide, which PostgreSQL's JSON functions refuse), and the first node with
-- a problem, if any: its position (bad, from 1), the problem ('code|path|message') and
-- its id when that is a string. Every node is checked for its JSON types, for what the
-- table's constraints would refuse and for _node_problem; append_v1 raises the problem
-- (CW400, with the safeguard code, the node's position and the path). Each node's
-- members are read once (json_each): PostgreSQL's JSON functions keep an allocation for
-- every name and scalar they read until the row is done, so each more reading of a 4
-- MiB payload of small values would cost tens of MB. The rows come in the array's
-- order, aggregated without a sort (a sort would hold every payload again). A SQL
-- function of one SELECT, set-returning, so that PostgreSQL inlines it into the
-- statement that reads it: a call of a function of its own costs more than its checks
-- of a small node.
CREATE FUNCTION cwstore._batch_fields(p_nodes json, p_hidden boolean)
RETURNS TABLE (b_ids text[], b_kinds text[], b_parents text[], b_payloads text[],
               b_created text[], b_keys text[], bad bigint, problem text, bad_id text)
LANGUAGE sql STABLE AS $$
  SELECT coalesce(array_agg(f.id #>> '{}'), '{}'), array_agg(f.kind #>> '{}'),
         array_agg(f.parents::text), array_agg(f.payload), array_agg(f."createdAt" #>> '{}'),
         array_agg(f."resourceKey" #>> '{}'),
         min(f.o) FILTER (WHERE f.problem IS NOT NULL),
         (array_agg(f.problem) FILTER (WHERE f.problem IS NOT NULL))[1],
         (array_agg(CASE json_typeof(f.id) WHEN 'string' THEN f.id #>> '{}' END)
            FILTER (WHERE f.problem IS NOT NULL))[1]
    FROM (SELECT c.*,
                 coalesce(c.problem0,
                          cwstore._node_problem(c.kind #>> '{}', c.payload, c."createdAt" #>> '{}',
                                                c."resourceKey" #>> '{}')) AS problem
            FROM (SELECT a.o, r.id, r.kind, r.parents, r."createdAt", r."resourceKey",
                         CASE WHEN p_hidden THEN cwstore._nul_show(r.payload)
                              ELSE r.payload END AS payload,
                 CASE
                   WHEN json_typeof(a.e) <> 'object' THEN 'shape|$|node must be a JSON object'
                   WHEN r.fields <> r.names
                     THEN 'shape|$|node repeats a member name (JSON.parse would keep only the last)'
                   WHEN json_typeof(r.id) IS DISTINCT FROM 'string'
                     THEN 'shape|$.id|id must be a string'
                   WHEN NOT r.has_kind
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
                   WHEN r.unknown
                     THEN 'shape|$|unknown node field'
                   WHEN EXISTS (SELECT 1 FROM json_array_elements(r.parents) pe
                                 WHERE json_typeof(pe) <> 'string')
                     THEN 'shape|$.parents|parents must be string ids'
                   WHEN p_hidden AND strpos(r.id::text || r.kind::text || r."createdAt"::text
                                            || coalesce(r."resourceKey"::text, '')
                                            || r.parents::text, '\\u0000') > 0
                     THEN 'unrepresentable|$|U+0000 outside a payload cannot be stored'
                   WHEN NOT ((r.kind #>> '{}') = ANY (cwstore.node_kinds()))
                     THEN 'kind|$.kind|kind is not one of the ten'
                   WHEN NOT (length(r.id #>> '{}') = 27
                             AND rtrim(r.id #>> '{}', '0123456789abcdef') = 'cw_')
                     THEN 'identity|$.id|id must be cw_ and 24 lowercase hex digits'
                   WHEN (r."resourceKey" #>> '{}') = ''
                     THEN 'shape|$.resourceKey|resourceKey must not be empty'
                 END AS problem0
            FROM json_array_elements(p_nodes) WITH ORDINALITY AS a(e, o)
            CROSS JOIN LATERAL (
                   SELECT count(*) AS fields, count(DISTINCT m.k) AS names,
                          coalesce(bool_or(m.k = 'kind'), false) AS has_kind,
                          coalesce(bool_or(m.k NOT IN ('id', 'kind', 'parents', 'payload',
                                                       'createdAt', 'sequence', 'resourceKey')),
                                   false) AS unknown,
                          min(m.v::text) FILTER (WHERE m.k = 'id' AND json_typeof(m.v) <> 'null')::json AS id,
                          min(m.v::text) FILTER (WHERE m.k = 'kind' AND json_typeof(m.v) <> 'null')::json AS kind,
                          min(m.v::text) FILTER (WHERE m.k = 'parents' AND json_typeof(m.v) <> 'null')::json AS parents,
                          min(m.v::text) FILTER (WHERE m.k = 'payload' AND json_typeof(m.v) <> 'null') AS payload,
                          min(m.v::text) FILTER (WHERE m.k = 'createdAt' AND json_typeof(m.v) <> 'null')::json AS "createdAt",
                          min(m.v::text) FILTER (WHERE m.k = 'resourceKey' AND json_typeof(m.v) <> 'null')::json AS "resourceKey"
                     FROM json_each(CASE json_typeof(a.e) WHEN 'object' THEN a.e ELSE '{}' END)
                          AS m(k, v)) r) c
          OFFSET 0) f
$$;

-- _refuse_repeated(ids, kinds, parents, payloads, keys): one id, one content: CW400
-- duplicate_id for the first node of a batch (its fields as _batch_fields gives them)
-- given again later with other content.
CREATE FUNCTION cwstore._refuse_repeated(p_ids text[], p_kinds text[], p_parents text[],
                                         p_payloads text[], p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_bad bigint;
  v_bad_id text;
BEGIN
  SELECT b.o, b.id INTO v_bad, v_bad_id
    FROM unnest(p_ids) WITH ORDINALITY AS b(id, o)
    JOIN unnest(p_ids) WITH ORDINALITY AS a(id, o) ON a.id = b.id AND a.o < b.o
   WHERE NOT cwstore._same_content(
           p_kinds[a.o], ARRAY(SELECT json_array_elements_text(p_parents[a.o]::json)),
           p_payloads[a.o], p_keys[a.o],
           p_kinds[b.o], ARRAY(SELECT json_array_elements_text(p_parents[b.o]::json)),
           p_payloads[b.o], p_keys[b.o])
   ORDER BY b.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', NULL, v_bad, v_bad_id, format('$[%s].id', v_bad - 1),
      format('id %s is used by an earlier node of the batch with other content', v_bad_id));
  END IF;
END $$;

-- _lock_for_append(graph, graph_id, incarnation, expected_length, ids): that life of
-- the graph locked (until commit, cwstore._lock_life) and its length. CW409 for a stale
-- expected length, unless every node of the batch (ids) is held already (a retry of a
-- write that committed: not a conflict).
CREATE FUNCTION cwstore._lock_for_append(p_graph text, p_graph_id bigint, p_incarnation bigint,
                                         p_expected bigint, p_ids text[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
  v_len bigint := cwstore._lock_life(p_graph, p_graph_id, p_incarnation);
BEGIN
  IF p_expected IS NULL OR p_expected = v_len THEN
    RETURN v_len;
  END IF;
  IF EXISTS (SELECT 1 FROM unnest(p_ids) AS u(id)
              WHERE NOT EXISTS (SELECT 1 FROM cwstore.nodes n
                                 WHERE n.graph_id = p_graph_id AND n.id = u.id)) THEN
    RAISE EXCEPTION USING ERRCODE = 'CW409',
      MESSAGE = format('graph %L has length %s, the writer expected %s', left(p_graph, 200), v_len,
                       p_expected),
      DETAIL = jsonb_build_object('graph', p_graph, 'expected_length', p_expected,
                                  'actual_length', v_len)::text;
  END IF;
  RETURN v_len;
END $$;

-- _refuse_changed(graph_id, length, ids, kinds, parents, payloads, keys): a node of the
-- batch that the graph held (at or below length) must be the same node: a retry, not
-- other content under its id (CW400 duplicate_id).
CREATE FUNCTION cwstore._refuse_changed(p_graph_id bigint, p_len bigint, p_ids text[],
                                        p_kinds text[], p_parents text[], p_payloads text[],
                                        p_keys text[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
  v_bad bigint;
  v_bad_id text;
  v_seq bigint;
BEGIN
  -- One index lookup per id (LATERAL ... LIMIT 1): as a join, a plan kept from a small
  -- graph scanned the graph's nodes up to p_len on every append.
  SELECT u.o, u.id, n.seq INTO v_bad, v_bad_id, v_seq
    FROM unnest(p_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT n.seq, n.kind, n.parents, n.payload_text, n.resource_key
                    FROM cwstore.nodes n
                   WHERE n.graph_id = p_graph_id AND n.id = u.id
                   LIMIT 1) n ON n.seq <= p_len
   WHERE NOT cwstore._same_content(
           n.kind, n.parents, n.payload_text, n.resource_key,
           p_kinds[u.o], ARRAY(SELECT json_array_elements_text(p_parents[u.o]::json)),
           p_payloads[u.o], p_keys[u.o])
   ORDER BY u.o LIMIT 1;
  IF FOUND THEN
    PERFORM cwstore._violation('duplicate_id', p_graph_id, v_bad, v_bad_id,
      format('$[%s].id', v_bad - 1),
      format('id %s is node %s of the graph, with other content', v_bad_id, v_seq));
  END IF;
END $$;

-- _declare_after_append(graph_id, length, written, heads, ids, expected_length): the
-- declared frontier recorded after an append's new nodes. Not recorded when the fold of
-- the batch's nodes (SPEC 4) made it the frontier already, heads in the same order
-- (every node of the batch new, node o of it node length + o): a declaration there
-- changes no frontier at any sequence, and a writer that names the node it appends
-- last as the frontier (a LangGraph put) costs no more than one that leaves it to the
-- fold. When the call wrote nothing it is recorded only if it changes the frontier
-- and, with an expected_length, that is current, or, without one, no node came after
-- the batch's last: a retry after others moved on must not move their frontier back.
CREATE FUNCTION cwstore._declare_after_append(p_graph_id bigint, p_len bigint, p_new bigint,
                                              p_heads text[], p_ids text[], p_expected bigint)
RETURNS void LANGUAGE plpgsql AS $$
DECLARE
  v_last bigint;
  v_frontier bigint[];
BEGIN
  IF p_new = cardinality(p_ids) THEN
    SELECT g.frontier_seqs INTO v_frontier FROM cwstore.graphs g WHERE g.graph_id = p_graph_id;
    IF cardinality(v_frontier) = cardinality(p_heads) THEN
      FOR i IN 1 .. cardinality(p_heads) LOOP
        -- A head the batch did not write (at or below length) is not the batch's.
        IF NOT (CASE WHEN v_frontier[i] > p_len
                     THEN coalesce(p_ids[v_frontier[i] - p_len] = p_heads[i], false)
                     ELSE false END) THEN
          v_frontier := NULL;
          EXIT;
        END IF;
      END LOOP;
      IF v_frontier IS NOT NULL THEN
        RETURN;
      END IF;
    END IF;
  END IF;
  IF p_new = 0 THEN
    SELECT max(n.seq) INTO v_last
      FROM unnest(p_ids) AS u(id)
      JOIN LATERAL (SELECT n.seq FROM cwstore.nodes n
                     WHERE n.graph_id = p_graph_id AND n.id = u.id LIMIT 1) n ON true;
    IF coalesce(p_expected, v_last, p_len) <> p_len
       OR p_heads IS NOT DISTINCT FROM (
            SELECT coalesce(array_agg(n.id ORDER BY u.o), '{}')
              FROM cwstore.graphs g
             CROSS JOIN LATERAL unnest(g.frontier_seqs) WITH ORDINALITY AS u(s, o)
              JOIN LATERAL (SELECT n.id FROM cwstore.nodes n
                             WHERE n.graph_id = p_graph_id AND n.seq >= u.s AND n.seq <= u.s
                             ORDER BY n.seq LIMIT 1) n ON true
             WHERE g.graph_id = p_graph_id) THEN
      RETURN;
    END IF;
  END IF;
  INSERT INTO cwstore.frontier_declarations (graph_id, seq, heads)
  VALUES (p_graph_id, p_len + p_new, p_heads);
END $$;

-- append_v1(graph, nodes, expected_length, frontier, incarnation)
--   nodes: a JSON array of runtime nodes {id, kind, parents, payload, createdAt,
--   resourceKey?} (sequence is assigned here; one given is ignored). Each payload is
--   stored byte for byte, so it must be written as JSON.stringify writes it (compact;
--   the runtime's and cwstore's clients' own form); the same checks as cwstore import
--   apply to every node (createdAt, numbers, member names, semantic content and key
--   forms, resourceKey length), each refused with CW400, its code, index and path.
--   expected_length: NULL, or the length the writer last saw (CW409 when stale).
--   frontier: NULL (the fold applies) or a JSON array of ids, the frontier after
--   the batch.
--   incarnation: NULL, or the life of the graph the writer means (graphs.incarnation,
--   returned by every append): CW404 (erased) when the graph's life is another one, or
--   the graph does not exist (it is not created then).
--   The graph's tenant is checked on the row read first, and the row locked is that
--   same life's: a graph erased and made again meanwhile (by any tenant) is never
--   written by this call; it gets CW404 (erased) instead.
--   Nodes whose id the graph already holds, with the same content, are returned as
--   stored and not written (idempotent retries); an id given again with other content,
--   in the graph or earlier in the batch, is refused (duplicate_id). When a call writes
--   nothing, its frontier is declared only if expected_length is current, or, with no
--   expected_length, if no node was appended after the batch's own: a retry after
--   others moved on never moves their frontier back.
--   Locks: the graph row (FOR UPDATE) until commit; nothing else.
--   Returns each node's sequence, id, createdAt and recorded_at, whether this call wrote
--   it, the stored payload of a node it did not write, and the graph's life.
--   Raises: CW400 (shape, kind, parents, semantic...), CW404 (erased), CW409, CW410
--   (chain race), 42501 (another tenant's graph).
-- Its statements take arrays and ids as parameters; custom plans would be re-made on
-- every call, and the generic ones are right for every batch size that takes this path.
CREATE FUNCTION cwstore.append_v1(p_graph text, p_nodes json,
                                  p_expected_length bigint DEFAULT NULL,
                                  p_frontier json DEFAULT NULL,
                                  p_incarnation bigint DEFAULT NULL)
RETURNS TABLE (seq bigint, id text, created_at text, recorded_at timestamptz, written boolean,
               payload_text text, incarnation bigint)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
SET plan_cache_mode = force_generic_plan
SET enable_seqscan = off AS $$
DECLARE
  v_graph_id bigint;
  v_len bigint;
  v_new bigint;
  v_heads text[];
  v_life record;
  v_ids text[];
  v_kinds text[];
  v_parents text[];
  v_payloads text[];
  v_created text[];
  v_keys text[];
  v_hidden boolean;
  v_bad bigint;
  v_problem text;
  v_bad_id text;
  v_now timestamptz := now();
BEGIN
  IF p_nodes IS NULL OR json_typeof(p_nodes) <> 'array' THEN
    PERFORM cwstore._violation('shape', NULL, NULL, NULL, '$',
                               'nodes must be a JSON array of node objects');
  END IF;
  IF p_frontier IS NOT NULL THEN
    v_heads := cwstore._frontier_heads(p_frontier);
  END IF;

  -- The graph's row is read first, without a lock: the tenant check comes before
  -- anything else (a refused caller learns nothing of the graph, and must not hold
  -- another tenant's counter row while it sits in its aborted transaction). The life
  -- read here is the one locked below, or none: a graph found here but gone once locked
  -- was erased meanwhile, and the call must not write whatever holds its key by then.
  v_life := cwstore._writer_life(p_graph, false, NULL);
  IF p_incarnation IS NOT NULL AND v_life.life_incarnation IS DISTINCT FROM p_incarnation THEN
    PERFORM cwstore._erased_meanwhile(p_graph);
  END IF;
  v_graph_id := v_life.life_id;
  v_len := v_life.life_length;
  -- A stale expected length is refused before the batch is read: within a graph's life
  -- its length only grows, so a length seen here that differs from the expected one
  -- differs under the lock too (or the graph is gone by then: CW404). Unless every node
  -- of the batch is held already (a retry of a write that committed: not a conflict).
  IF p_expected_length IS NOT NULL AND p_expected_length <> coalesce(v_len, 0) THEN
    PERFORM cwstore._refuse_stale(p_graph, v_graph_id, p_nodes, p_expected_length,
                                  coalesce(v_len, 0));
  END IF;

  -- The batch's nodes, checked: a \u0000 hidden first (reversibly), as PostgreSQL's JSON
  -- functions refuse it; the first node with a problem refused (CW400, its position).
  IF cwstore._lone_surrogate(p_nodes::text) THEN
    PERFORM cwstore._violation('unrepresentable', NULL, NULL, NULL, '$',
      'a string holds a lone surrogate (half of a UTF-16 pair): no text can hold it');
  END IF;
  v_hidden := strpos(p_nodes::text, '\u0000') > 0;
  IF v_hidden THEN
    p_nodes := cwstore._nul_hide(p_nodes::text)::json;
  END IF;
  SELECT f.b_ids, f.b_kinds, f.b_parents, f.b_payloads, f.b_created, f.b_keys, f.bad, f.problem,
         f.bad_id
    INTO v_ids, v_kinds, v_parents, v_payloads, v_created, v_keys, v_bad, v_problem, v_bad_id
    FROM cwstore._batch_fields(p_nodes, v_hidden) f;
  IF v_bad IS NOT NULL THEN
    PERFORM cwstore._node_violation(v_problem, NULL, v_bad, v_bad_id, v_bad - 1);
  END IF;
  -- An id given twice is looked for by a statement only in a batch of more than three:
  -- in two or three, comparing them is cheaper than the statement's start.
  IF cardinality(v_ids) > 3 THEN
    PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
  ELSIF cardinality(v_ids) > 1 THEN
    IF v_ids[1] = v_ids[2] OR v_ids[1] = v_ids[3] OR v_ids[2] = v_ids[3] THEN
      PERFORM cwstore._refuse_repeated(v_ids, v_kinds, v_parents, v_payloads, v_keys);
    END IF;
  END IF;
  IF v_graph_id IS NULL THEN
    v_life := cwstore._writer_life(p_graph, true, NULL);
    v_graph_id := v_life.life_id;
  END IF;
  v_len := cwstore._lock_for_append(p_graph, v_graph_id, v_life.life_incarnation,
                                    p_expected_length, v_ids);

  -- New nodes only (a node the graph holds, or one given twice, is written once),
  -- numbered from the length read under the lock.
  -- xid orders the all-graphs feed; within a graph it must not go back (a transaction
  -- may hold an xid older than the one that wrote the previous node), so it is the
  -- greater of this transaction's and the graph's last node's (read as the last at or
  -- before the length, in nodes_pkey's order: only that index gives the order, so a
  -- plan made while the table was tiny cannot take another one and read the graph).
  -- The rows come joined to the graph's counter row: on Citus that makes the statement
  -- one INSERT ... SELECT on the graph's worker (not rows copied through the
  -- coordinator, which loses the SQLSTATE of the triggers' refusals).
  INSERT INTO cwstore.nodes (graph_id, seq, id, kind, parents, payload_text,
                             created_at_text, resource_key, recorded_at, xid)
  SELECT g.graph_id, v_len + row_number() OVER (ORDER BY b.o), b.id, v_kinds[b.o],
         ARRAY(SELECT json_array_elements_text(v_parents[b.o]::json)),
         v_payloads[b.o], v_created[b.o], v_keys[b.o], v_now,
         greatest(pg_current_xact_id()::text::bigint,
                  (SELECT l.xid FROM cwstore.nodes l
                    WHERE l.graph_id = v_graph_id AND l.seq <= v_len
                    ORDER BY l.seq DESC LIMIT 1))
    FROM cwstore.graphs g
   CROSS JOIN (SELECT DISTINCT ON (u.id) u.id, u.o
                 FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
                ORDER BY u.id, u.o) b
    LEFT JOIN LATERAL (SELECT true AS held FROM cwstore.nodes n
                        WHERE n.graph_id = v_graph_id AND n.id = b.id LIMIT 1) x ON true
   WHERE g.graph_id = v_graph_id AND x.held IS NULL
   ORDER BY b.o;
  GET DIAGNOSTICS v_new = ROW_COUNT;
  -- Only when the insert skipped some (raising undoes the insert).
  IF v_new < cardinality(v_ids) THEN
    PERFORM cwstore._refuse_changed(v_graph_id, v_len, v_ids, v_kinds, v_parents, v_payloads,
                                    v_keys);
  END IF;
  IF v_heads IS NOT NULL THEN
    PERFORM cwstore._declare_after_append(v_graph_id, v_len, v_new, v_heads, v_ids,
                                          p_expected_length);
  END IF;

  -- Every node new and given once: the rows are what was just written, in order.
  -- (Row by row, not RETURN QUERY: no statement to start for what is known already.)
  IF v_new = cardinality(v_ids) THEN
    written := true;
    recorded_at := v_now;
    incarnation := v_life.life_incarnation;
    FOR i IN 1 .. v_new LOOP
      seq := v_len + i;
      id := v_ids[i];
      created_at := v_created[i];
      RETURN NEXT;
    END LOOP;
    RETURN;
  END IF;
  RETURN QUERY
  SELECT n.seq, n.id, n.created_at_text, n.recorded_at, n.seq > v_len,
         CASE WHEN n.seq > v_len THEN NULL ELSE n.payload_text END, v_life.life_incarnation
    FROM unnest(v_ids) WITH ORDINALITY AS u(id, o)
    JOIN LATERAL (SELECT * FROM cwstore.nodes n
                   WHERE n.graph_id = v_graph_id AND n.id = u.id LIMIT 1) n ON true
   ORDER BY u.o;
END $$;

COMMENT ON FUNCTION cwstore.append_v1(text, json, bigint, json, bigint) IS
  'Append a batch of runtime nodes to a graph (created on first use unless a life is named), optionally declaring the frontier after it, optionally to one life of the graph only. Idempotent by id. Returns each node''s sequence, whether this call wrote it, for nodes it did not write the stored createdAt and payload, and the graph''s life (incarnation).';
