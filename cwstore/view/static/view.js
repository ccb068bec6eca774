/* cwstore view: the page. It draws what the server reads; every state "as of" a point
   comes from the server (the database's as-of functions), never from a fold here. */
(function () {
  "use strict";

  var COLORS = {
    system: "#6c757d", goal: "#1d3557", inference: "#457b9d", answer: "#2a9d8f",
    tool_call: "#e76f51", tool_result: "#f4a261", resource: "#8338ec",
    semantic: "#06a77d", protocol_error: "#d00000", verification: "#b5838d"
  };
  var LANES = 12, DX = 150, DY = 54;

  var $ = function (id) { return document.getElementById(id); };
  var S = {
    graph: null, length: 0, at: 0, size: 300, maxSize: 2000, firstGraph: null,
    win: null, lanes: [], es: null, stateToken: 0, stateTimer: null, node: null,
    erased: null, known: null
  };
  var cy = null;
  window.cwView = { state: S, cy: null };

  function el(tag, text, cls) {
    var e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = String(text);
    if (cls) e.className = cls;
    return e;
  }
  function kindTag(kind) {
    var s = el("span", kind, "kind");
    s.style.background = COLORS[kind] || "#999";
    return s;
  }
  function short(v, n) {
    var t = typeof v === "string" ? v : JSON.stringify(v);
    t = t.replace(/\s+/g, " ");
    return t.length > n ? t.slice(0, n - 1) + "\u2026" : t;
  }
  function showError(msg) {
    var e = $("error");
    if (!msg) { e.hidden = true; e.textContent = ""; return; }
    e.hidden = false; e.textContent = msg;
  }

  /* A graph erased while the page shows it: say so, instead of the errors its reads
     now get (the server no longer knows the name, so it answers unknown_graph). */
  function showErased(name) {
    var e = $("erased");
    if (!name) { S.erased = null; e.hidden = true; e.textContent = ""; return; }
    S.erased = name;
    e.hidden = false;
    e.textContent = "this graph was erased: " + name + " no longer exists in the store " +
      "(what the page still shows is what it had read before)";
    $("live-status").textContent = "erased";
  }
  /* An unknown graph that this page has read before (S.known) is one erased meanwhile,
     whichever read finds it gone first: a live stream that reconnects, a read in flight. */
  function isErasedAnswer(body, params) {
    if (!body.error) return false;
    return body.error.type === "graph_erased" ||
      (body.error.type === "unknown_graph" && params &&
       (params.graph === S.erased || params.graph === S.known));
  }

  function api(path, params) {
    var q = new URLSearchParams();
    Object.keys(params || {}).forEach(function (k) {
      if (params[k] !== null && params[k] !== undefined) q.set(k, params[k]);
    });
    return fetch("/api/" + path + "?" + q.toString()).then(function (r) {
      return r.json().then(function (body) {
        if (!r.ok || body.error) {
          var m = body.error ? body.error.type + ": " + body.error.message : "HTTP " + r.status;
          if (isErasedAnswer(body, params)) {
            showError(null);
            if (S.graph === params.graph) { stopLive(); showErased(params.graph); }
          } else {
            showError(m);
          }
          throw new Error(m);
        }
        showError(null);
        if (params && params.graph && params.graph === S.graph) S.known = S.graph;
        return body;
      });
    });
  }

  /* ---------------------------------------------------------------- routing */

  function route() {
    var h = location.hash || "#/";
    var m = /^#\/g\/([^?]*)(?:\?(.*))?$/.exec(h);
    if (m) {
      var name = decodeURIComponent(m[1]);
      var p = new URLSearchParams(m[2] || "");
      var at = p.get("at");
      openGraph(name, at === null ? null : parseInt(at, 10), p.get("node"));
    } else {
      showList();
    }
  }
  function setHash() {
    var h = "#/g/" + encodeURIComponent(S.graph) + "?at=" + S.at + (S.node ? "&node=" + S.node : "");
    history.replaceState(null, "", h);
  }

  /* ---------------------------------------------------------------- the list */

  var searchTimer = null;
  function showList() {
    stopLive();
    showErased(null);
    S.graph = null;
    $("graph-page").hidden = true;
    $("list-page").hidden = false;
    $("crumb").textContent = "";
    loadGraphs();
  }
  function loadGraphs() {
    api("graphs", { q: $("search").value || null }).then(function (body) {
      document.body.classList.toggle("no-roles", !body.roles);
      var tb = $("graphs").tBodies[0];
      tb.textContent = "";
      body.graphs.forEach(function (g) {
        var tr = el("tr");
        tr.dataset.graph = g.name;
        var a = el("a", g.name);
        a.href = "#/g/" + encodeURIComponent(g.name);
        var td = el("td"); td.appendChild(a); tr.appendChild(td);
        tr.appendChild(el("td", g.length));
        tr.appendChild(el("td", g.last_write ? g.last_write.replace("T", " ").slice(0, 19) : "\u2013"));
        tr.appendChild(el("td", g.tenant, "tenant-col"));
        tb.appendChild(tr);
      });
      $("graphs-note").textContent = body.graphs.length === 0 ? "no graphs" :
        body.graphs.length + " graph" + (body.graphs.length === 1 ? "" : "s") +
        (body.more ? " shown (more: narrow the search)" : "");
    }).catch(function () {});
  }
  $("search").addEventListener("input", function () {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(loadGraphs, 150);
  });

  /* ---------------------------------------------------------------- a graph */

  function openGraph(name, at, nodeId) {
    $("list-page").hidden = true;
    $("graph-page").hidden = false;
    $("crumb").textContent = name;
    if (S.graph !== name) { S.erased = null; showErased(null); }
    if (S.graph === name && S.win) {
      if (at !== null && at !== S.at) setAt(at);
      if (nodeId && nodeId !== S.node) selectNode(nodeId);
      return;
    }
    stopLive();
    S.graph = name; S.win = null; S.node = null;
    $("node").hidden = true;
    api("window", { graph: name, at: at, size: S.size }).then(function (w) {
      drawWindow(w);
      S.length = w.length;
      $("slider").max = w.length;
      $("length").textContent = w.length;
      setAt(at === null ? w.length : Math.min(at, w.length));
      centerOn(S.at, true);
      if (nodeId) selectNode(nodeId);
      startLive();
    }).catch(function () {});
  }

  function laneOf(id, parents) {
    for (var i = 0; i < parents.length; i++) {
      var idx = S.lanes.indexOf(parents[i]);
      if (idx >= 0) { S.lanes[idx] = id; return idx; }
    }
    if (S.lanes.length < LANES) { S.lanes.push(id); return S.lanes.length - 1; }
    var best = 0;
    for (var j = 1; j < S.lanes.length; j++) {
      if (S.win.bySeq[S.lanes[j]] < S.win.bySeq[S.lanes[best]]) best = j;
    }
    S.lanes[best] = id;
    return best;
  }

  function summaryLabel(part, lo, hi) {
    var kinds = Object.keys(part.kinds).sort().map(function (k) { return k + " " + part.kinds[k]; });
    return "\u2026 nodes " + lo + "\u2013" + hi + " (" + part.count + "): " + kinds.join(", ");
  }

  function nodeElement(n, parents) {
    var lane = laneOf(n.id, parents);
    return {
      group: "nodes",
      data: { id: n.id, seq: n.seq, kind: n.kind, color: COLORS[n.kind] || "#999",
              label: n.seq + " " + n.kind + (n.resourceKey ? " \u00b7 " + n.resourceKey : "") },
      position: { x: lane * DX, y: (n.seq - S.win.lo + 1) * DY }
    };
  }

  function drawWindow(w) {
    S.win = { lo: w.lo, hi: w.hi, bySeq: {}, idOf: {}, before: w.before, after: w.after };
    S.lanes = [];
    var parentsOf = {};
    w.nodes.forEach(function (n) { S.win.idOf[n.seq] = n.id; S.win.bySeq[n.id] = n.seq; });
    w.edges.forEach(function (e) { (parentsOf[e[0]] = parentsOf[e[0]] || []).push(e[1]); });
    var els = [];
    if (w.before.count > 0) {
      els.push({ group: "nodes", classes: "summary",
                 data: { id: "__before", label: summaryLabel(w.before, 1, w.lo - 1) },
                 position: { x: (LANES / 2) * DX / 2, y: 0 } });
    }
    w.nodes.forEach(function (n) {
      var ps = (parentsOf[n.seq] || []).map(function (s) { return S.win.idOf[s]; })
        .filter(function (x) { return x; });
      els.push(nodeElement(n, ps));
      var outside = false;
      (parentsOf[n.seq] || []).forEach(function (s) {
        var pid = S.win.idOf[s];
        if (pid) els.push({ group: "edges", data: { id: pid + ">" + n.id, source: pid, target: n.id } });
        else outside = true;
      });
      if (outside) els.push({ group: "edges", classes: "outside",
                              data: { id: "__before>" + n.id, source: "__before", target: n.id } });
    });
    if (w.after.count > 0) {
      els.push({ group: "nodes", classes: "summary",
                 data: { id: "__after", label: summaryLabel(w.after, w.hi + 1, w.length) },
                 position: { x: (LANES / 2) * DX / 2, y: (w.hi - w.lo + 2) * DY } });
    }
    if (cy) cy.destroy();
    cy = cytoscape({
      container: $("cy"), elements: els, layout: { name: "preset", fit: false },
      minZoom: 0.05, maxZoom: 3, wheelSensitivity: 0.3,
      style: [
        { selector: "node", style: {
          "shape": "round-rectangle", "width": 128, "height": 26, "label": "data(label)",
          "background-color": "data(color)", "color": "#fff", "font-size": 10,
          "text-valign": "center", "text-halign": "center", "text-max-width": 122,
          "text-wrap": "ellipsis", "border-width": 0 } },
        { selector: "node.summary", style: {
          "background-color": "#e9ecef", "color": "#333", "width": 420, "text-max-width": 410,
          "shape": "rectangle" } },
        { selector: "edge", style: {
          "width": 1.2, "line-color": "#adb5bd", "target-arrow-color": "#adb5bd",
          "target-arrow-shape": "triangle", "curve-style": "bezier", "arrow-scale": 0.7 } },
        { selector: "edge.outside", style: { "line-style": "dashed" } },
        { selector: "node.head", style: {
          "border-width": 4, "border-color": "#ffb703", "border-style": "double" } },
        { selector: "node.frontier", style: { "border-width": 4, "border-color": "#e63946" } },
        { selector: "node.selected", style: { "overlay-color": "#000", "overlay-opacity": 0.25 } },
        { selector: ".future", style: { "opacity": 0.15 } }
      ]
    });
    window.cwView.cy = cy;
    cy.fit(undefined, 30);
    if (cy.zoom() < 0.6) cy.zoom(0.8);
    cy.on("tap", "node", function (ev) {
      var id = ev.target.id();
      if (id === "__before") { setAt(Math.max(0, S.win.lo - 1)); return; }
      if (id === "__after") { setAt(Math.min(S.length, S.win.hi + 1)); return; }
      selectNode(id);
    });
    $("window-note").textContent = "drawn: nodes " + w.lo + "\u2013" + w.hi + " of " + w.length;
  }

  function centerOn(seq, onlyIfHidden) {
    if (!cy || !S.win) return;
    var id = S.win.idOf[Math.max(seq, S.win.lo)];
    var n = id ? cy.getElementById(id) : null;
    if (!n || !n.length) return;
    if (onlyIfHidden) {
      var p = n.position(), e = cy.extent();
      if (p.x >= e.x1 && p.x <= e.x2 && p.y >= e.y1 && p.y <= e.y2) return;
    }
    cy.center(n);
  }

  /* ---------------------------------------------------------------- the slider */

  function setAt(at, skipState) {
    at = Math.max(0, Math.min(S.length, at | 0));
    S.at = at;
    $("slider").value = at;
    $("seq").value = at;
    var w = S.win;
    var margin = Math.floor(S.size / 8);
    var outside = w && (at < w.lo - 1 + (w.lo > 1 ? margin : 0) ||
                        at > w.hi - (w.hi < S.length ? margin : 0));
    if (!w || outside) {
      api("window", { graph: S.graph, at: at, size: S.size }).then(function (nw) {
        if (nw.length > S.length) {
          S.length = nw.length;
          $("slider").max = S.length;
          $("length").textContent = S.length;
        }
        drawWindow(nw);
        markFuture();
        applyMarks();
        centerOn(at);
      }).catch(function () {});
    } else {
      markFuture();
      centerOn(at, true);
    }
    setHash();
    if (!skipState) {
      clearTimeout(S.stateTimer);
      S.stateTimer = setTimeout(function () { loadState({ at: at }); }, 60);
    }
  }

  function markFuture() {
    if (!cy) return;
    cy.batch(function () {
      cy.nodes().forEach(function (n) {
        var seq = n.data("seq");
        if (seq === undefined) return;
        n.toggleClass("future", seq > S.at);
        n.connectedEdges().forEach(function (e) { e.toggleClass("future", e.target().data("seq") > S.at); });
      });
    });
  }

  var marks = { frontier: [], heads: [] };
  function applyMarks() {
    if (!cy) return;
    cy.batch(function () {
      cy.nodes().removeClass("frontier head");
      marks.frontier.forEach(function (id) { cy.getElementById(id).addClass("frontier"); });
      marks.heads.forEach(function (id) { cy.getElementById(id).addClass("head"); });
    });
  }

  function loadState(params) {
    var token = ++S.stateToken;
    var q = { graph: S.graph };
    if (params.time) q.time = params.time; else q.at = params.at;
    return api("state", q).then(function (body) {
      if (token !== S.stateToken) return;
      if (params.time) setAt(body.at, true);
      renderState(body);
    }).catch(function () {});
  }

  function renderState(body) {
    var st = body.state;
    var fr = $("frontier"); fr.textContent = "";
    marks.frontier = []; marks.heads = [];
    st.frontier.forEach(function (f) {
      var li = el("li"); li.dataset.id = f.id; li.dataset.seq = f.sequence;
      li.appendChild(kindTag(f.kind));
      li.appendChild(el("span", " " + f.sequence + " " + short(f.payload, 60)));
      li.addEventListener("click", function () { selectNode(f.id); });
      fr.appendChild(li);
      marks.frontier.push(f.id);
    });
    var rt = $("resources").tBodies[0]; rt.textContent = "";
    Object.keys(st.resources).sort().forEach(function (k) {
      var r = st.resources[k];
      var tr = el("tr"); tr.dataset.key = k; tr.dataset.id = r.id;
      tr.appendChild(el("td", k)); tr.appendChild(el("td", "v" + r.version));
      tr.appendChild(el("td", "#" + r.sequence));
      tr.addEventListener("click", function () { selectNode(r.id); });
      rt.appendChild(tr);
      marks.heads.push(r.id);
    });
    var mt = $("memory").tBodies[0]; mt.textContent = "";
    body.memory.forEach(function (m) {
      var content = st.semantic[m.type][m.key];
      var tr = el("tr"); tr.dataset.type = m.type; tr.dataset.key = m.key; tr.dataset.id = m.id;
      tr.dataset.content = JSON.stringify(content);
      tr.appendChild(el("td", m.type)); tr.appendChild(el("td", m.key));
      tr.appendChild(el("td", "v" + m.version));
      tr.appendChild(el("td", short(content, 80)));
      tr.addEventListener("click", function () { selectNode(m.id); });
      mt.appendChild(tr);
      marks.heads.push(m.id);
    });
    $("state-sql").textContent = body.sql;
    applyMarks();
    $("state-at").textContent = body.at;
  }

  $("slider").addEventListener("input", function () { setAt(parseInt(this.value, 10)); });
  $("seq").addEventListener("change", function () { setAt(parseInt(this.value, 10) || 0); });
  function goTime() {
    var t = $("time").value.trim();
    if (t) loadState({ time: t });
  }
  $("time-go").addEventListener("click", goTime);
  $("time").addEventListener("keydown", function (e) { if (e.key === "Enter") goTime(); });

  /* ---------------------------------------------------------------- a node */

  function relList(ol, rel) {
    ol.textContent = "";
    rel.rows.forEach(function (r) {
      var li = el("li"); li.dataset.id = r.id; li.dataset.depth = r.depth; li.dataset.seq = r.seq;
      li.appendChild(kindTag(r.kind));
      li.appendChild(el("span", " " + r.seq + " \u00b7 depth " + r.depth));
      li.addEventListener("click", function () { selectNode(r.id); });
      ol.appendChild(li);
    });
    if (rel.rows.length === 0) ol.appendChild(el("li", "none", "more"));
    if (rel.more) ol.appendChild(el("li", "\u2026 more (the first " + rel.rows.length + " shown)", "more"));
  }

  function selectNode(id, depth) {
    S.node = id;
    setHash();
    return api("node", { graph: S.graph, id: id, depth: depth }).then(function (body) {
      if (S.node !== id) return;
      var n = body.node;
      $("node").hidden = false;
      $("node-seq").textContent = "#" + n.seq;
      $("node-kind").textContent = ""; $("node-kind").appendChild(kindTag(n.kind));
      $("node-id").textContent = n.id;
      $("node-created").textContent = n.createdAt;
      $("node-recorded").textContent = n.recordedAt;
      $("node-key-line").hidden = !n.resourceKey;
      $("node-key").textContent = n.resourceKey || "";
      $("payload").textContent = n.payload_text;
      var more = $("payload-all");
      more.hidden = !n.payload_truncated;
      more.textContent = "show all " + n.payload_chars + " characters";
      more.onclick = function () {
        api("payload", { graph: S.graph, id: id }).then(function (p) {
          if (S.node === id) { $("payload").textContent = p.payload_text; more.hidden = true; }
        }).catch(function () {});
      };
      $("depth-note").textContent = body.depth ? "relatives within depth " + body.depth :
        "relatives at every depth";
      $("all-depths").hidden = !body.depth;
      relList($("ancestors"), body.ancestors);
      relList($("descendants"), body.descendants);
      var hb = $("history-box");
      hb.hidden = !body.history.key;
      var ht = $("history").tBodies[0]; ht.textContent = "";
      if (body.history.key) {
        $("history-key").textContent = body.history.key;
        body.history.rows.forEach(function (v) {
          var tr = el("tr"); tr.dataset.id = v.id;
          tr.appendChild(el("td", "v" + v.version)); tr.appendChild(el("td", "#" + v.seq));
          tr.appendChild(el("td", v.createdAt)); tr.appendChild(el("td", short(v.preview, 50)));
          tr.title = v.bytes + " bytes: click to open this version";
          tr.addEventListener("click", function () { selectNode(v.id); });
          ht.appendChild(tr);
        });
      }
      $("node-sql").textContent = body.sql;
      if (cy) {
        cy.nodes().removeClass("selected");
        var c = cy.getElementById(id);
        if (c.length) c.addClass("selected");
      }
      $("side").scrollTop = $("node").offsetTop - 10;
    }).catch(function () {});
  }
  $("all-depths").addEventListener("click", function () { if (S.node) selectNode(S.node, 0); });
  $("copy-sql").addEventListener("click", function () {
    var text = $("node-sql").textContent;
    if (navigator.clipboard) navigator.clipboard.writeText(text).catch(function () {});
  });

  /* ---------------------------------------------------------------- live */

  function stopLive() {
    if (S.es) { S.es.close(); S.es = null; }
    $("live-status").textContent = "";
  }
  function startLive() {
    stopLive();
    var graph = S.graph;
    var es = new EventSource("/api/live?" + new URLSearchParams({ graph: graph, after: S.length }));
    S.es = es;
    es.onopen = function () { $("live-status").textContent = "live"; };
    es.addEventListener("node", function (ev) { onLiveNode(JSON.parse(ev.data)); });
    es.addEventListener("problem", function (ev) {
      var problem = JSON.parse(ev.data);
      if (problem.type === "unknown_graph" && graph === S.known) {
        stopLive();
        if (S.graph === graph) showErased(graph);
        return;
      }
      showError("live: " + problem.message);
    });
    es.addEventListener("erased", function () {
      // The stream's last event: stop following (no reconnect) and say so.
      stopLive();
      if (S.graph === graph) showErased(graph);
    });
    es.onerror = function () {
      if (S.es !== es) return;
      es.close();
      $("live-status").textContent = "reconnecting";
      // Before following again, one read: a graph erased while the stream was down
      // answers unknown_graph, and the page says so instead of retrying forever.
      (function retry() {
        setTimeout(function () {
          if (S.es !== es || S.graph !== graph) return;
          api("state", { graph: graph, at: 0 }).then(function () {
            if (S.es === es && S.graph === graph) startLive();
          }, retry);
        }, 2000);
      })();
    };
  }

  function onLiveNode(n) {
    if (n.seq <= S.length) return;
    var following = S.at === S.length;
    S.length = n.seq;
    $("slider").max = S.length;
    $("length").textContent = S.length;
    var w = S.win;
    if (w && cy && w.hi === n.seq - 1 && (w.hi - w.lo + 1) < S.maxSize) {
      var parents = n.parents.filter(function (p) { return w.bySeq[p] !== undefined; });
      w.hi = n.seq; w.idOf[n.seq] = n.id; w.bySeq[n.id] = n.seq;
      cy.add(nodeElement(n, parents));
      parents.forEach(function (p) {
        cy.add({ group: "edges", data: { id: p + ">" + n.id, source: p, target: n.id } });
      });
      if (parents.length < n.parents.length && cy.getElementById("__before").length) {
        cy.add({ group: "edges", classes: "outside",
                 data: { id: "__before>" + n.id, source: "__before", target: n.id } });
      }
      $("window-note").textContent = "drawn: nodes " + w.lo + "\u2013" + w.hi + " of " + S.length;
    } else if (w) {
      w.after.count = S.length - w.hi;
      w.after.kinds[n.kind] = (w.after.kinds[n.kind] || 0) + 1;
      var s = cy && cy.getElementById("__after");
      if (s && s.length) s.data("label", summaryLabel(w.after, w.hi + 1, S.length));
    }
    if (following) setAt(S.length);
    else markFuture();
  }

  /* ---------------------------------------------------------------- start */

  var legend = $("legend");
  Object.keys(COLORS).forEach(function (k) { legend.appendChild(kindTag(k)); });
  api("config", {}).then(function (c) {
    S.size = c.window; S.maxSize = c.max; S.firstGraph = c.first_graph;
    if ((!location.hash || location.hash === "#/") && c.first_graph) {
      location.hash = "#/g/" + encodeURIComponent(c.first_graph);
    }
    window.addEventListener("hashchange", route);
    route();
  }).catch(function () {});
})();
