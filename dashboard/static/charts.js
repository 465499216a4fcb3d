// Small line charts on <canvas>, drawn by hand (no library, nothing fetched): the balance
// over the last hour. drawChart(canvas, points, key, opts) draws one series of
// {at_ms, [key]: number} points against the dashboard's clock.
"use strict";

const Charts = (() => {
  const WINDOW_MS = 3600 * 1000, MIN_WINDOW_MS = 600 * 1000;

  function niceMax(v, floor) {
    const m = Math.max(v, floor);
    const p = Math.pow(10, Math.floor(Math.log10(m)));
    for (const s of [1, 2, 2.5, 5, 10]) if (s * p >= m) return s * p;
    return 10 * p;
  }

  function drawChart(canvas, points, key, opts) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
      canvas.width = Math.round(w * dpr);
      canvas.height = Math.round(h * dpr);
    }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    // the last hour; a younger history is spread over at least 10 minutes, not squeezed
    const now = opts.now;
    const first = points.length ? points[0].at_ms : now;
    const span = Math.max(MIN_WINDOW_MS, Math.min(WINDOW_MS, now - first));
    const t0 = now - span;
    const pts = points.filter(p => p.at_ms >= t0 && typeof p[key] === "number");
    const lo = opts.min !== undefined ? opts.min : 0;
    // a cap keeps one wild moment (a fleet starting: mean near 0) from flattening the hour
    const top_ = Math.min(Math.max(lo, ...pts.map(p => p[key])), opts.cap || Infinity);
    const hi = niceMax(top_ - lo, opts.floor || 1) + lo;
    g.font = "10px system-ui, sans-serif";
    const ticks = [lo, (lo + hi) / 2, hi];
    const left = 6 + Math.max(...ticks.map(v => g.measureText(opts.fmt(v)).width));
    const right = 4, top = 6, bottom = 14;
    const x = t => left + (w - left - right) * (t - t0) / span;
    const y = v => top + (h - top - bottom) * (1 - (v - lo) / (hi - lo));
    g.fillStyle = "#6b7480";
    g.strokeStyle = "#eceef1";
    g.lineWidth = 1;
    for (const v of ticks) {
      const yy = Math.round(y(v)) + 0.5;
      g.beginPath(); g.moveTo(left, yy); g.lineTo(w - right, yy); g.stroke();
      g.textAlign = "right"; g.textBaseline = "middle";
      g.fillText(opts.fmt(v), left - 4, yy);
    }
    g.textBaseline = "alphabetic";
    const mins = Math.round(span / 60000);
    for (const [t, label, align] of [[t0, `−${mins} min`, "left"],
                                     [t0 + span / 2, `−${Math.round(mins / 2)}`, "center"],
                                     [now, "now", "right"]]) {
      g.textAlign = align;
      g.fillText(label, Math.min(Math.max(x(t), left), w - right), h - 2);
    }
    if (!pts.length) return;
    g.save();
    g.beginPath(); g.rect(left, 0, w - left - right, h - bottom); g.clip();
    g.strokeStyle = opts.color;
    g.lineWidth = 1.6;
    g.beginPath();
    pts.forEach((p, i) => {
      const px = x(p.at_ms), py = y(p[key]);
      if (i === 0) g.moveTo(px, py); else g.lineTo(px, py);
    });
    g.stroke();
    const last = pts[pts.length - 1];
    g.fillStyle = opts.color;
    g.beginPath(); g.arc(x(last.at_ms), y(last[key]), 2.5, 0, 2 * Math.PI); g.fill();
    g.restore();
  }

  function drawHistogram(canvas, bins, color) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth, h = canvas.clientHeight;
    if (!w || !h) return;
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    const max = Math.max(1, ...bins);
    g.font = "10px system-ui, sans-serif";
    const left = 6 + g.measureText(max.toLocaleString("en")).width, bottom = 14, top = 6;
    const bw = (w - left - 4) / bins.length;
    g.font = "10px system-ui, sans-serif";
    g.fillStyle = "#6b7480";
    g.textAlign = "right"; g.textBaseline = "middle";
    g.fillText(max.toLocaleString("en"), left - 4, top + 4);
    g.fillText("0", left - 4, h - bottom);
    g.textBaseline = "alphabetic";
    for (const [i, label] of [[0, "0%"], [bins.length / 2, "50%"], [bins.length, "100%"]]) {
      g.textAlign = i === 0 ? "left" : i === bins.length ? "right" : "center";
      g.fillText(label, left + i * bw, h - 2);
    }
    g.fillStyle = color;
    bins.forEach((n, i) => {
      if (!n) return;
      const bh = Math.max(1, (h - top - bottom) * n / max);
      g.fillRect(left + i * bw + 1, h - bottom - bh, Math.max(1, bw - 2), bh);
    });
  }

  return { drawChart, drawHistogram, WINDOW_MS };
})();
