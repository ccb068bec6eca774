-- 0015_cheaper_payload_counts: two of the payload checks read less.
--
-- Why (issue 37): in a LangGraph agent's appends the payload checks took a quarter of
-- append_v1's time, and two of their passes were regular expressions that a count
-- does without:
--
--   * _json_values (the values a payload's text holds, compared with its jsonb's to
--     find a repeated member name) counted numbers and literals with a regular
--     expression; now 1 + commas + containers - empty containers, by replace and
--     translate;
--   * the number check read every number of a payload holding true or false (their e
--     looked like an exponent); now only where a digit comes before . or e.
--
-- Nothing is accepted or refused differently (the SQL door and import compare in the
-- property tests). The definitions below are those of cwstore/sql/schema/, where they
-- are documented.
--
-- Safe with live writers: yes (functions only).

CREATE OR REPLACE FUNCTION cwstore._json_values(p_bare text) RETURNS integer
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
  SELECT 1 + (length(p_bare) - length(replace(p_bare, ',', '')))
         + (length(p_bare) - length(translate(p_bare, '{[', '')))
         - (length(p_bare) - length(replace(p_bare, '{}', ''))) / 2
         - (length(p_bare) - length(replace(p_bare, '[]', ''))) / 2
$$;

CREATE OR REPLACE FUNCTION cwstore._bare_number_problem(p_bare text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET work_mem = '1MB' AS $$
  SELECT m[1]
    FROM string_to_table(p_bare, ',') WITH ORDINALITY AS x(t, o)
   CROSS JOIN LATERAL regexp_matches(x.t, '(-?[0-9][0-9.eE+-]*)', 'g') AS m
   WHERE x.t ~ '[0-9][.eE]|[0-9]{16}|-0'
     AND m[1] !~ '^(0|-?[1-9][0-9]{0,14})$' AND cwstore.js_number(m[1]) IS DISTINCT FROM m[1]
   ORDER BY x.o
   LIMIT 1
$$;

CREATE OR REPLACE FUNCTION cwstore._payload_problem(p_text text) RETURNS text
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
  -- What is left outside strings: punctuation, literals and numbers, nothing else. Over
  -- 64 kB, each check reads the text in parts (_json_bare, _bare_number_problem,
  -- _too_deep):
  -- a regular expression over the whole text takes 4 bytes a character.
  IF octet_length(v_rest) <= 65536 THEN
    v_bare := regexp_replace(v_rest, '"[^"]*"', '""', 'g');
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
  -- Nesting depth: the deepest point of the running count of brackets outside strings.
  IF octet_length(v_bare) <= 65536 THEN
    v_deep := length(v_bare) - length(translate(v_bare, '{[', '')) > 10000
              AND (SELECT max(d) FROM (SELECT sum(CASE WHEN c IN ('{', '[') THEN 1 ELSE -1 END)
                                                OVER (ORDER BY o) AS d
                                         FROM string_to_table(regexp_replace(v_bare, '[^][{}]', '', 'g'),
                                                              NULL) WITH ORDINALITY AS t(c, o)) x) > 10000;
  ELSE
    v_deep := cwstore._too_deep(v_bare, 10000);
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
