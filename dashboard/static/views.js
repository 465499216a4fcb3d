// How things look: DOM building (text only: ids come from workers and are never HTML),
// event sentences, worker rows, task rows. No state and no requests here (app.js has those).
"use strict";

const Views = (() => {
  function h(tag, attrs, ...kids) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") el.className = v;
      else if (k === "style") Object.assign(el.style, v);  // CSSOM: allowed by the CSP
      else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
      else if (k.startsWith("data-") || k === "title" || k === "type" || k === "id") el.setAttribute(k, v);
      else el[k] = v;
    }
    for (const kid of kids.flat()) {
      if (kid === null || kid === undefined || kid === false) continue;
      el.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
    }
    return el;
  }

  // Whole percents, halves rounded up: corralctl rounds the same way (1/40 is 3 % on both).
  const pct = u => `${Math.floor(100 * (u || 0) + 0.5)}%`;
  const num = v => (Math.round((v || 0) * 100) / 100).toLocaleString("en");
  const tokenText = t => (t === undefined || t === null) ? "-"
    : `${Math.floor(t / 4194304)} / ${t % 4194304}`;  // epoch << 22 | grant

  function age(ms) {
    if (ms < 0) ms = 0;
    const s = ms / 1000;
    if (s < 60) return `${s.toFixed(1)} s`;
    if (s < 3600) return `${Math.floor(s / 60)} min ${Math.floor(s % 60)} s`;
    return `${(s / 3600).toFixed(1)} h`;
  }

  function clock(ms) {
    const d = new Date(ms);
    return d.toTimeString().slice(0, 8);
  }

  // Utilization colour: how far from the fleet mean (the balance is what corral is about),
  // in the worker's own steps: one task moves it by 1 / max_load, so a worker within one task
  // of the mean is as balanced as it can be, at any load (1 of 20 against a mean of 3 %).
  function distanceClass(row, mean) {
    if (!row.active || row.state === "inactive") return "off";
    const d = (row.utilization || 0) - (mean || 0);
    const step = Math.max(0.05, row.max_load ? 1 / row.max_load : 0);
    if (Math.abs(d) <= step + 1e-9) return "near";
    if (d > Math.max(0.2, 2 * step)) return "far";
    return d > 0 ? "above" : "below";
  }

  // A zone whole: each level may wrap after its "/", none is cut off.
  function zoneCell(zone) {
    if (!zone) return h("td", { class: "zone" }, "–");
    const parts = zone.split("/");
    return h("td", { class: "zone", title: zone },
      parts.flatMap((p, i) => i < parts.length - 1 ? [p + "/", h("wbr", {})] : [p]));
  }

  function stateText(row) {
    if (row.drained && row.state !== "inactive") return "drained";
    return row.state.replace("_", " ");  // lame duck, handing over
  }

  function workerRow(row, ctx) {
    const st = stateText(row);
    const cls = distanceClass(row, ctx.mean);
    const width = Math.min(100, 100 * (row.max_load ? row.running / row.max_load : 0));
    const serving = row.serving && row.serving.qps ? `${num(row.serving.qps)} qps` :
      (row.serving && row.serving.utilization ? pct(row.serving.utilization) : "–");
    const acts = [];
    if (ctx.unlocked && row.state !== "inactive") {
      const verb = row.drained ? "undrain" : "drain";
      acts.push(h("button", {
        class: verb === "drain" ? "danger" : "", "data-action": verb, "data-worker": row.id,
        onclick: e => { e.stopPropagation(); ctx.act(verb, row.id); },
      }, verb === "drain" ? "Drain" : "Undrain"));
    }
    const note = row.conflict ? ` ⚠ ${row.conflict}` : "";
    return h("tr", { "data-worker": row.id, "data-state": st, onclick: () => ctx.open(row.id) },
      h("td", { title: row.id + note }, row.id, note),
      h("td", {}, h("span", { class: `state ${st.replace(" ", "_")}` }, st)),
      zoneCell(row.zone),
      h("td", { class: "util", title: `utilization ${pct(row.utilization)}; fleet mean ${pct(ctx.mean)}` },
        h("div", { class: "bar" }, h("span", { class: cls, style: { width: `${width}%` } }),
          h("em", {}, pct(row.max_load ? row.running / row.max_load : 0)))),
      h("td", { class: "num" }, `${num(row.running)}/${num(row.max_load)}`),
      h("td", { class: "num age", title: "as of the dashboard's latest listing" },
        age(1000 * (row.last_report_age_s || 0))),
      h("td", { class: "num" }, serving),
      h("td", { class: "act" }, acts));
  }

  const EVENT_TONE = {
    timeout: "bad", refused: "bad", contested: "bad", unreachable: "bad", missed: "bad",
    move: "move", rebalance: "move", drain: "move", handoff: "good", join: "good",
    revive: "good", connected: "good", undrain: "good", running: "good",
  };

  function eventText(e) {
    const w = e.worker;
    switch (e.kind) {
      case "join": return `${w} joined (max load ${num(e.max_load)}${e.zone ? ", zone " + e.zone : ""})`;
      case "restart": return `${w} restarted (incarnation ${e.incarnation})`;
      case "revive": return `${w} reported again`;
      case "timeout": return `${w} inactive (silent ${num(e.silent_s)} s): ${e.tasks} task(s) move`;
      case "move": return `${e.task}: ${e.source || "–"} → ${e.to} · ${e.reason}`;
      case "placed": return `${e.replicas} new replica(s) placed`;
      case "handoff": return `${e.task}: ${e.source} → ${e.to} done`;
      case "rebalance": return `rebalance pass: ${e.moves} move(s)`;
      case "tasks": return `task list: +${e.added} −${e.removed} ~${e.respecified} (${e.total} tasks)`;
      case "respec": return `${e.task} restarted with a new spec`;
      case "state": return `${w} is ${e.state}`;
      case "drain": return `${w} drained: its tasks move`;
      case "undrain": return `${w} takes tasks again`;
      case "role": return e.role === "leader" ? `became the leader (epoch ${e.epoch})`
        : `stood by${e.reason ? ": " + e.reason : ""}`;
      case "contested": return `another process reports as ${w}`;
      case "refused": return `${w} refused: ${e.reason}`;
      case "running": return `running: ${e.tasks} tasks on ${e.workers} workers`;
      case "connected": return `dashboard following ${e.endpoint}`;
      case "unreachable": return `supervisor unreachable: ${e.reason}`;
      case "resync": return `dashboard resynchronised: ${e.reason}`;
      case "missed": return `dashboard missed ${e.missed} events (the feed moved on)`;
      default: {
        const rest = Object.entries(e).filter(([k]) => !["n", "seq", "t", "at_ms", "kind"].includes(k));
        return rest.map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(" ");
      }
    }
  }

  function eventItem(e) {
    return h("li", { class: EVENT_TONE[e.kind] || "info", "data-kind": e.kind, "data-n": e.n },
      h("span", { class: "when", title: new Date(e.at_ms).toISOString() }, clock(e.at_ms)),
      h("span", { class: "kind" }, e.kind),
      h("span", { class: "what", title: eventText(e) }, eventText(e)));
  }

  // Each owner with its token, and what it does with the task when that is not running yet
  // (assigned is not running: starting, or failing in restart backoff).
  function owners(t) {
    if (!t.owners.length) return "–";
    const states = t.states || {};
    return t.owners.map(o => {
      const s = states[o];
      return `${o} · ${tokenText(t.tokens[o])}` + (s && s !== "running" ? ` (${s})` : "");
    }).join(",  ");
  }

  // Where a task fails, and the workers it is kept off with why (failing, not started).
  function keptOff(t) {
    const off = Object.entries(t.excluded || {}).map(([w, why]) => `${w}: ${why}`);
    const failing = (t.failing_on || []).filter(w => !(w in (t.excluded || {})));
    return [...failing, ...off].join(", ");
  }

  // A task's last failure: on which worker, how long ago, and why (what its log said).
  function lastError(e, now) {
    if (!e) return "";
    const when = e.at_ms !== undefined ? ` · ${age(now - e.at_ms)} ago` : "";
    return `${e.worker}${when}: ${e.error}`;
  }

  function taskRow(t, now) {
    const err = lastError(t.last_error, now);
    return h("tr", { "data-task": t.task },
      h("td", { title: t.task }, t.task), h("td", { class: "num" }, num(t.cost)),
      h("td", { title: owners(t) }, owners(t)), h("td", {}, t.missing || ""),
      h("td", { class: "wrap", title: t.pending_reason || "" }, t.pending_reason || ""),
      h("td", {}, t.handoff_from || ""), h("td", { class: "wrap", title: keptOff(t) }, keptOff(t)),
      h("td", { class: err ? "error" : "", title: err }, err));
  }

  function facts(dl, pairs) {
    dl.replaceChildren(...pairs.flatMap(([k, v, id]) => [h("dt", {}, k), h("dd", { id }, v)]));
  }

  return { h, pct, num, age, clock, tokenText, workerRow, eventItem, eventText, taskRow,
           owners, facts, stateText, lastError };
})();
