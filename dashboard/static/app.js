// The page's state and wiring: one EventSource (a snapshot, then deltas), the fleet page
// fetched from the server (sorted, filtered and paged there), the tabs and the actions.
"use strict";

(() => {
  const { h } = Views;
  const $ = sel => document.querySelector(sel);
  const S = {
    offset: 0,           // server clock − browser clock (ms)
    status: null, conn: null, summary: null, history: [], events: [], handoffs: [],
    actions: false, token: sessionStorage.getItem("corral-token") || "",
    page: { sort: "id", desc: false, state: "", zone: "", q: "", offset: 0, limit: 100 },
    rows: [], total: 0, streamOk: false,
    evFilter: { kind: "", q: "" }, evList: [], drill: null,
  };
  const now = () => Date.now() + S.offset;
  const CHARTS = [
    ["spread_ratio", "Spread max ÷ mean", "#d0453a", v => v.toFixed(2) + "×", { min: 1, floor: 0.1, cap: 3 }],
    ["spread_diff", "Spread max − min", "#e0a030", v => Math.round(v * 100) + " pt", { floor: 0.1 }],
    ["pending", "Pending tasks", "#3b7dd8", v => Math.round(v).toLocaleString("en"), { floor: 4 }],
    ["moves_per_min", "Moves per minute", "#8a5a00", v => Math.round(v).toLocaleString("en"), { floor: 4 }],
    ["alive", "Workers alive", "#2e9b5b", v => Math.round(v).toLocaleString("en"), { floor: 4 }],
  ];

  // -- the stream ----------------------------------------------------------------------------
  function connect() {
    const es = new EventSource("/api/stream");
    es.addEventListener("open", () => { S.streamOk = true; renderConn(); });
    es.addEventListener("error", () => { S.streamOk = false; renderConn(); });
    es.addEventListener("snapshot", m => {
      const d = JSON.parse(m.data);
      S.offset = d.now_ms - Date.now();
      Object.assign(S, { status: d.status, conn: d.conn, summary: d.summary, history: d.history,
                         events: d.events, handoffs: d.handoffs, actions: d.actions });
      renderAll();
      fetchPage();
      fetchEvents();
    });
    es.addEventListener("events", m => {
      const evs = JSON.parse(m.data);
      S.events.push(...evs);
      if (S.events.length > 500) S.events.splice(0, S.events.length - 500);
      renderLatest();
      renderCards();  // moves in the last minute
      const shown = evs.filter(e => matches(e, S.evFilter));
      if (shown.length) { S.evList.unshift(...shown.reverse()); renderEventList(); }
      if (S.drill && evs.some(e => [e.worker, e.to, e.source].includes(S.drill))) openDrill(S.drill);
    });
    es.addEventListener("fleet", m => {
      const d = JSON.parse(m.data);
      S.offset = d.now_ms - Date.now();
      S.summary = d.summary;
      const byId = new Map(d.changed.map(r => [r.id, r]));
      let touched = false;
      S.rows = S.rows.map(r => { const c = byId.get(r.id); if (c) touched = true; return c || r; });
      if (touched) renderFleet();
      renderCards();
      renderCharts();
      schedulePage();
    });
    es.addEventListener("status", m => {
      const d = JSON.parse(m.data);
      Object.assign(S, { status: d.status, conn: d.conn, handoffs: d.handoffs });
      renderConn(); renderCards(); renderHA(); renderHandoffs();
    });
    es.addEventListener("sample", m => {
      S.history.push(JSON.parse(m.data));
      if (S.history.length > 1000) S.history.shift();
      renderCharts();
    });
  }

  // -- requests ------------------------------------------------------------------------------
  async function getJSON(url) {
    const r = await fetch(url, { headers: { Accept: "application/json" } });
    const body = await r.json().catch(() => ({}));
    if (!r.ok) throw new Error(body.error || `${r.status} ${r.statusText}`);
    return body;
  }

  let pageTimer = null, pageBusy = false;
  function schedulePage() {  // after fleet deltas: refetch the visible page, at most every 2 s
    if (pageTimer) return;
    pageTimer = setTimeout(() => { pageTimer = null; fetchPage(); }, 1000);
  }
  async function fetchPage() {
    if (pageBusy) { schedulePage(); return; }
    pageBusy = true;
    try {
      const p = S.page;
      const q = new URLSearchParams({ sort: p.sort, desc: p.desc ? "1" : "", state: p.state,
                                      zone: p.zone, q: p.q, offset: p.offset, limit: p.limit });
      const d = await getJSON(`/api/workers?${q}`);
      S.offset = d.now_ms - Date.now();
      Object.assign(S, { rows: d.rows, total: d.total, summary: d.summary });
      renderFleet(); renderCards();
    } catch (e) { /* the connection indicator tells */ }
    finally { pageBusy = false; }
  }

  function matches(e, f) {
    if (f.kind && e.kind !== f.kind) return false;
    if (!f.q) return true;
    const q = f.q.toLowerCase();
    return ["worker", "task", "to", "source", "reason", "role"]
      .some(k => e[k] && String(e[k]).toLowerCase().includes(q));
  }
  async function fetchEvents(older) {
    const q = new URLSearchParams({ kind: S.evFilter.kind, q: S.evFilter.q, limit: 200 });
    if (older && S.evList.length) q.set("before", S.evList[S.evList.length - 1].n);
    try {
      const d = await getJSON(`/api/events?${q}`);
      S.evList = older ? S.evList.concat(d.events) : d.events;
      renderEventList();
    } catch (e) { /* shown by the connection indicator */ }
  }

  async function act(verb, worker) {
    const r = await fetch(`/api/actions/${verb}`, {
      method: "POST", headers: { "Content-Type": "application/json", "X-Corral-Token": S.token },
      body: JSON.stringify(worker ? { worker } : {}),
    });
    const body = await r.json().catch(() => ({}));
    if (r.status === 403) { lock(); alert(`Refused: ${body.error}`); return; }
    if (!r.ok) { alert(`${verb} failed: ${body.error}`); return; }
    schedulePage();
  }

  async function unlock(token) {
    const r = await fetch("/api/auth", { method: "POST", headers: { "X-Corral-Token": token } });
    if (r.status !== 204) { alert("That token is not this dashboard's."); return; }
    S.token = token;
    sessionStorage.setItem("corral-token", token);
    renderActions(); renderFleet();
  }
  function lock() {
    S.token = "";
    sessionStorage.removeItem("corral-token");
    renderActions(); renderFleet();
  }

  // -- rendering -----------------------------------------------------------------------------
  const unlocked = () => S.actions && !!S.token;

  function renderAll() {
    renderConn(); renderCards(); renderCharts(); renderLatest(); renderHA(); renderHandoffs();
    renderActions(); renderFleet();
  }

  function renderConn() {
    const el = $("#conn"), c = S.conn;
    const ok = S.streamOk && c && c.ok;
    el.dataset.ok = ok ? "true" : "false";
    let text = "dashboard unreachable: reconnecting…";
    if (S.streamOk && c) {
      text = c.ok ? `live · ${c.endpoint}`
        : `supervisor unreachable for ${Views.age(now() - c.since_ms)}: ${c.error || ""}`;
    }
    $("#conn-text").textContent = text;
    el.title = text;
    const st = S.status;
    $("#headline").textContent = st ? `${st.phase} · epoch ${st.epoch} · ${st.role === "single" ?
      "single supervisor" : st.role === "leader" ? `leader ${st.leader}`
      : `answered by a standby; leader ${st.leader || "unknown"}`}` : "no status yet";
  }

  function card(k, v, s, cls) {
    return h("div", { class: `card ${cls || ""}`, "data-card": k },
      h("div", { class: "k" }, k), h("div", { class: "v" }, v), h("div", { class: "s" }, s));
  }
  function renderCards() {
    const st = S.status || {}, sm = S.summary || {};
    const by = sm.by_state || {};
    const since = now() - 60000;
    const moves = S.events.filter(e => e.kind === "move" && e.at_ms >= since).length;
    $("#cards").replaceChildren(
      card("Workers alive", `${(st.workers_active ?? sm.alive ?? 0).toLocaleString("en")} / ${(st.workers_total ?? sm.total ?? 0).toLocaleString("en")}`,
        `${by.inactive || 0} inactive · ${by.drained || 0} drained`,
        by.inactive ? "warn" : "ok"),
      // Assigned is not running: the value is what runs, the total beside it.
      card("Tasks running", `${(st.tasks_running ?? 0).toLocaleString("en")} / ` +
        (st.tasks_total ?? 0).toLocaleString("en"),
        `${(st.tasks_assigned ?? 0).toLocaleString("en")} assigned · ${st.tasks_failing || 0} failing` +
        (st.source_error ? ` · task list refused ${Views.age(1000 * st.source_error.since_s)}` : ""),
        st.tasks_failing || st.source_error || st.tasks_running < st.tasks_assigned ? "warn" : ""),
      card("Pending", (st.tasks_pending ?? 0).toLocaleString("en"), "tasks short of replicas",
        st.tasks_pending ? "warn" : "ok"),
      card("Utilization", Views.pct(sm.mean), `mean · range ${Views.pct(sm.min)}–${Views.pct(sm.max)}`),
      // Its colour is the supervisor's balance criterion, not the ratio: at a low load one
      // task more is a big ratio (1 of 20 against a mean of 3 %: 1.7×) and the best there is.
      card("Spread max÷mean", `${(sm.spread_ratio || 1).toFixed(2)}×`,
        `max − min ${Math.floor(100 * (sm.spread_diff || 0) + 0.5)} pt · ${balanceText(st)}`,
        st.balanced === false ? "warn" : st.balanced ? "ok" : ""),
      card("Movement", `${moves} /min`, `${st.handoffs || 0} hand-offs · ${st.rebalancing ? "rebalancing" : "settled"}`));
  }
  function balanceText(st) {
    if (st.warmup) return "warming up";
    if (st.balanced === true) return "balanced";
    return st.balanced === false ? `not balanced: ${st.moves_planned} move(s) planned` : "–";
  }

  function renderCharts() {
    const box = $("#charts");
    if (!box.children.length) {
      for (const [key, title] of CHARTS) {
        box.append(h("div", { class: "chart" }, h("h4", {}, title, h("b", { id: `cur-${key}` })),
          h("canvas", { id: `chart-${key}` })));
      }
      box.append(h("div", { class: "chart" }, h("h4", {}, "Utilization now (workers per 5 %)"),
        h("canvas", { id: "chart-hist" })));
    }
    const t = now();
    for (const [key, , color, fmt, opts] of CHARTS) {
      Charts.drawChart($(`#chart-${key}`), S.history, key, { ...opts, color, fmt, now: t });
      const last = S.history[S.history.length - 1];
      $(`#cur-${key}`).textContent = last && typeof last[key] === "number" ? fmt(last[key]) : "";
    }
    if (S.summary) Charts.drawHistogram($("#chart-hist"), S.summary.histogram || [], "#3b7dd8");
    const first = S.history[0];
    $("#hist-span").textContent = first ? `since ${Views.clock(first.at_ms)} · one point per 5 s` : "collecting…";
  }

  function renderFleet() {
    const ctx = { mean: S.summary ? S.summary.mean : 0, now: now(), unlocked: unlocked(), act,
                  open: openDrill };
    $("#fleet tbody").replaceChildren(...S.rows.map(r => Views.workerRow(r, ctx)));
    const p = S.page, last = Math.min(p.offset + p.limit, S.total);
    const pager = $("#pager");
    pager.replaceChildren(
      `${S.total ? p.offset + 1 : 0}–${last} of ${S.total.toLocaleString("en")} `,
      h("button", { class: "link", disabled: p.offset === 0, "data-page": "prev",
                    onclick: () => { p.offset = Math.max(0, p.offset - p.limit); fetchPage(); } }, "‹ prev"),
      h("button", { class: "link", disabled: last >= S.total, "data-page": "next",
                    onclick: () => { p.offset += p.limit; fetchPage(); } }, "next ›"));
    document.querySelectorAll("#fleet th[data-sort]").forEach(th => {
      th.classList.toggle("sorted", th.dataset.sort === p.sort);
      th.classList.toggle("desc", th.dataset.sort === p.sort && p.desc);
    });
  }

  function tick() {  // the unreachable-for counter moves on
    if (S.conn && !S.conn.ok) renderConn();
  }

  function renderLatest() {
    const latest = S.events.slice(-30).reverse();
    $("#latest").replaceChildren(...latest.map(Views.eventItem));
  }
  function renderEventList() {
    $("#events").replaceChildren(...S.evList.slice(0, 2000).map(Views.eventItem));
    const kinds = new Set([...S.events, ...S.evList].map(e => e.kind));
    const sel = $("#e-kind"), have = new Set([...sel.options].map(o => o.value));
    for (const k of [...kinds].sort()) if (!have.has(k)) sel.append(h("option", { value: k }, k));
  }

  function renderHA() {
    const st = S.status || {}, c = S.conn || {};
    Views.facts($("#ha"), [
      ["role of the one answering", st.role || "–", "ha-role"],
      ["leader", st.role === "single" ? "(no HA: a single supervisor)" : (st.leader || "none known"), "ha-leader"],
      ["leader's control endpoint", st.leader_control || c.endpoint || "–"],
      ["standbys", (st.standbys || []).join(", ") || "none", "ha-standbys"],
      ["epoch", String(st.epoch ?? "–"), "ha-epoch"],
      ["HA error", st.ha_error || "none"],
      ["phase", st.phase || "–"],
      ["uptime", st.uptime_s !== undefined ? Views.age(st.uptime_s * 1000) : "–"],
      ["dashboard follows", (c.endpoints || []).join(", ")],
      ["answering now", c.ok ? c.endpoint : `nobody (${c.error || "not yet"})`, "ha-answering"],
    ]);
  }

  function renderHandoffs() {
    const t = now(), list = S.handoffs || [];
    $("#handoffs tbody").replaceChildren(...list.map(e => h("tr", {},
      h("td", {}, e.task), h("td", {}, e.source || "–"), h("td", {}, e.to), h("td", {}, e.reason),
      h("td", {}, Views.age(t - e.at_ms)))));
    if (!list.length) $("#handoffs tbody").append(h("tr", {}, h("td", { class: "none", colSpan: 5 }, "none in flight")));
  }

  function renderActions() {
    const bar = $("#actions-bar");
    if (!S.actions) { bar.replaceChildren(h("span", { class: "muted", id: "read-only" }, "read-only")); return; }
    if (!unlocked()) {
      const input = h("input", { type: "password", id: "token", placeholder: "operator token",
                                 "aria-label": "operator token" });
      bar.replaceChildren(input, h("button", { id: "unlock", onclick: () => unlock(input.value) }, "Unlock actions"));
      input.addEventListener("keydown", e => { if (e.key === "Enter") unlock(input.value); });
      return;
    }
    bar.replaceChildren(
      h("button", { "data-action": "query", onclick: () => act("query") }, "Query tasks now"),
      h("button", { id: "lock", onclick: lock }, "Lock"));
  }

  // -- drill-down ----------------------------------------------------------------------------
  async function openDrill(id) {
    S.drill = id;
    let d;
    try { d = await getJSON(`/api/workers/${encodeURIComponent(id)}`); }
    catch (e) { alert(`${id}: ${e.message}`); return; }
    if (S.drill !== id) return;
    const w = d.worker;
    $("#drill-title").textContent = id;
    const acts = [];
    if (unlocked() && w.state !== "inactive") {
      const verb = w.drained ? "undrain" : "drain";
      acts.push(h("button", { class: verb === "drain" ? "danger" : "", "data-action": verb,
                              "data-worker": id, onclick: () => act(verb, id) },
                  verb === "drain" ? "Drain" : "Undrain"));
    }
    $("#drill-actions").replaceChildren(...acts);
    Views.facts($("#drill-facts"), [
      ["state", Views.stateText(w)], ["zone", w.zone || "–"],
      ["load", `${Views.num(w.running)} of ${Views.num(w.max_load)} (${Views.pct(w.utilization)}), ${w.assigned} replicas assigned`],
      ["last report", `${Views.age(d.now_ms - w.report_ms)} ago`],
      ["labels", Object.entries(w.labels || {}).map(([k, v]) => `${k}=${v}`).join(", ") || "–"],
      ["serving", w.serving ? `${Views.pct(w.serving.utilization)} busy, ${Views.num(w.serving.qps)} qps, ${Views.num(w.serving.errors)} errors/s` : "–"],
      ["address", w.address || "–"], ["incarnation", w.incarnation || "–"],
      ["failing tasks", (w.failing || []).join(", ") || "none"], ["conflict", w.conflict || "none"],
    ]);
    $("#drill-tasks tbody").replaceChildren(...d.tasks.map(t => h("tr", {},
      h("td", {}, t.task), h("td", { class: "num" }, Views.num(t.cost)),
      h("td", { title: Views.owners(t) }, Views.owners(t)), h("td", {}, t.handoff_from || ""))));
    if (d.more) $("#drill-tasks tbody").append(h("tr", {}, h("td", { class: "none", colSpan: 4 }, "… more (see the Tasks tab)")));
    $("#drill-events").replaceChildren(...d.events.map(Views.eventItem));
    $("#drill").hidden = false;
  }
  function closeDrill() { S.drill = null; $("#drill").hidden = true; }

  // -- tasks ---------------------------------------------------------------------------------
  let taskAfter = null;
  async function searchTasks(more) {
    const q = new URLSearchParams({ task: $("#t-task").value.trim(), worker: $("#t-worker").value.trim(),
                                    pending: $("#t-pending").checked ? "1" : "", limit: 100 });
    if (more && taskAfter) q.set("after", taskAfter);
    let d;
    try { d = await getJSON(`/api/tasks?${q}`); }
    catch (e) { $("#task-more").textContent = e.message; return; }
    const rows = d.tasks.map(t => Views.taskRow(t, now()));
    if (more) $("#tasks tbody").append(...rows); else $("#tasks tbody").replaceChildren(...rows);
    taskAfter = d.next;
    $("#task-more").replaceChildren(d.next ? h("button", { class: "link", onclick: () => searchTasks(true) }, "more ›") : "");
  }

  // -- wiring --------------------------------------------------------------------------------
  function debounce(fn, ms) { let t; return (...a) => { clearTimeout(t); t = setTimeout(() => fn(...a), ms); }; }
  function wire() {
    document.querySelectorAll("#tabs button").forEach(b => b.addEventListener("click", () => {
      document.querySelectorAll("#tabs button").forEach(x => x.classList.toggle("active", x === b));
      document.querySelectorAll(".tab").forEach(t => t.classList.toggle("active", t.id === `tab-${b.dataset.tab}`));
      if (b.dataset.tab === "tasks" && !$("#tasks tbody").children.length) searchTasks(false);
      if (b.dataset.tab === "overview") renderCharts();
    }));
    document.querySelectorAll("#fleet th[data-sort]").forEach(th => th.addEventListener("click", () => {
      const p = S.page;
      if (p.sort === th.dataset.sort) p.desc = !p.desc; else { p.sort = th.dataset.sort; p.desc = th.dataset.sort === "utilization"; }
      p.offset = 0; fetchPage();
    }));
    const refilter = debounce(() => {
      Object.assign(S.page, { q: $("#f-q").value.trim(), state: $("#f-state").value,
                              zone: $("#f-zone").value.trim(), offset: 0 });
      fetchPage();
    }, 250);
    ["#f-q", "#f-zone"].forEach(s => $(s).addEventListener("input", refilter));
    $("#f-state").addEventListener("change", refilter);
    const evRefilter = debounce(() => { S.evFilter = { kind: $("#e-kind").value, q: $("#e-q").value.trim() }; fetchEvents(false); }, 250);
    $("#e-kind").addEventListener("change", evRefilter);
    $("#e-q").addEventListener("input", evRefilter);
    $("#e-older").addEventListener("click", () => fetchEvents(true));
    $("#task-form").addEventListener("submit", e => { e.preventDefault(); searchTasks(false); });
    $("#drill-close").addEventListener("click", closeDrill);
    $("#drill").addEventListener("click", e => { if (e.target.id === "drill") closeDrill(); });
    document.addEventListener("keydown", e => { if (e.key === "Escape") closeDrill(); });
    window.addEventListener("resize", debounce(renderCharts, 200));
    setInterval(tick, 1000);
    setInterval(renderCharts, 15000);  // the time axis moves on
  }

  wire();
  renderActions();
  connect();
})();
