// Small SVG charts for the lwl job page: lines, scatter with ellipses, heatmaps, bars.
// Each function returns an SVG string built from numbers and escaped labels only.
"use strict";

const Plots = (() => {
  const W = 360, H = 220, PAD = { l: 52, r: 12, t: 22, b: 34 };
  const LEGEND_W = 100;  // the scatter's legend margin
  const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
                  "#7f7f7f", "#bcbd22", "#17becf"];

  function esc(s) {
    return String(s).replace(/[&<>"']/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
  }

  function fmt(v) {
    // a missing number (null, undefined) shows as nothing: isFinite(null) is true
    if (typeof v !== "number" || !isFinite(v)) return "";
    const a = Math.abs(v);
    return a !== 0 && (a < 1e-3 || a >= 1e4) ? v.toExponential(1) : String(+v.toPrecision(3));
  }

  function extent(values, log) {
    let lo = Infinity, hi = -Infinity;
    for (const v of values) {
      if (!isFinite(v) || (log && v <= 0)) continue;
      lo = Math.min(lo, v); hi = Math.max(hi, v);
    }
    if (lo === Infinity) return [0, 1];
    if (lo === hi) { if (log) return [lo / 1.5, hi * 1.5]; const d = Math.abs(lo) * 0.1 || 1; return [lo - d, hi + d]; }
    return [lo, hi];
  }

  function scale(lo, hi, a, b, log) {
    if (log) { lo = Math.log10(lo); hi = Math.log10(hi); }
    return (v) => a + ((log ? Math.log10(v) : v) - lo) / (hi - lo) * (b - a);
  }

  function ticks(lo, hi, log) {
    if (log) {
      const out = [];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        const v = Math.pow(10, e);
        if (v >= lo * 0.999 && v <= hi * 1.001) out.push(v);
      }
      if (out.length >= 2) return out;
      // under a decade: 1-2-3-5 steps, so that a narrow log axis still reads (0.3, 0.5 ...)
      const more = [];
      for (let e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
        for (const m of [1, 2, 3, 5]) {
          const v = m * Math.pow(10, e);
          if (v >= lo * 0.999 && v <= hi * 1.001) more.push(+v.toPrecision(12));
        }
      }
      if (more.length >= 3) return more;
      // a narrow log axis (a race between close Errs): evenly spaced round numbers, as on a linear axis
      const even = ticks(lo, hi, false).filter((v) => v > 0);
      return even.length >= 2 ? even : [lo, hi];
    }
    const step = Math.pow(10, Math.floor(Math.log10((hi - lo) / 4 || 1)));
    const mult = [1, 2, 5, 10].find((m) => (hi - lo) / (m * step) <= 5) || 10;
    const out = [];
    for (let v = Math.ceil(lo / (mult * step)) * mult * step; v <= hi + 1e-12; v += mult * step) out.push(+v.toPrecision(12));
    return out;
  }

  function frame(title, xs, ys, logx, logy, xlabel, ylabel) {
    const [x0, x1] = xs, [y0, y1] = ys;
    const sx = scale(x0, x1, PAD.l, W - PAD.r, logx), sy = scale(y0, y1, H - PAD.b, PAD.t, logy);
    let s = `<text x="${W / 2}" y="14" text-anchor="middle" class="title">${esc(title)}</text>`;
    s += `<rect x="${PAD.l}" y="${PAD.t}" width="${W - PAD.l - PAD.r}" height="${H - PAD.t - PAD.b}" class="frame"/>`;
    for (const t of ticks(x0, x1, logx)) {
      s += `<text x="${sx(t)}" y="${H - PAD.b + 13}" text-anchor="middle" class="tick">${fmt(t)}</text>`;
    }
    for (const t of ticks(y0, y1, logy)) {
      s += `<line x1="${PAD.l}" x2="${W - PAD.r}" y1="${sy(t)}" y2="${sy(t)}" class="grid"/>`;
      s += `<text x="${PAD.l - 4}" y="${sy(t) + 3}" text-anchor="end" class="tick">${fmt(t)}</text>`;
    }
    if (xlabel) s += `<text x="${(PAD.l + W - PAD.r) / 2}" y="${H - 4}" text-anchor="middle" class="label">${esc(xlabel)}</text>`;
    if (ylabel) s += `<text x="12" y="${(PAD.t + H - PAD.b) / 2}" transform="rotate(-90 12 ${(PAD.t + H - PAD.b) / 2})" text-anchor="middle" class="label">${esc(ylabel)}</text>`;
    return { s, sx, sy };
  }

  function svg(body, cls, w = W, h = H) {
    return `<svg class="chart ${cls || ""}" viewBox="0 0 ${w} ${h}" width="${w}" height="${h}" xmlns="http://www.w3.org/2000/svg">${body}</svg>`;
  }

  function data(attrs) {  // data-* attributes the page's tests read (which check is the kept one)
    return Object.entries(attrs || {}).map(([k, v]) => ` data-${esc(k)}="${esc(v)}"`).join("");
  }

  // A legend laid out in rows below the x axis, outside the plotting frame, so that it never
  // covers a point; returns the SVG and the height it adds.
  function legendBelow(items, top) {
    let x = PAD.l, y = top, s = "";
    for (const it of items) {
      const w = 22 + 5.2 * String(it.name).length;
      if (x + w > W - PAD.r && x > PAD.l) { x = PAD.l; y += 12; }
      const key = it.kind === "ring" ? `<circle cx="${x + 4}" cy="${y - 3}" r="3.5" fill="none" stroke="${it.color}" stroke-width="1.8"/>`
        : it.kind === "dash" ? `<line x1="${x}" x2="${x + 9}" y1="${y - 3}" y2="${y - 3}" stroke="${it.color}" stroke-width="1.5" stroke-dasharray="3 2"/>`
          : it.kind === "dot" ? `<circle cx="${x + 4}" cy="${y - 3}" r="2.5" fill="${it.color}"/>`
            : `<rect x="${x}" y="${y - 7}" width="8" height="8" fill="${it.color}"/>`;
      s += `<g class="legend-item">${key}<text x="${x + 12}" y="${y}" class="legend">${esc(it.name)}</text></g>`;
      x += w;
    }
    return { s: `<g class="legend-box">${s}</g>`, height: items.length ? y - top + 10 : 0 };
  }

  // series: [{name, x: [], y: [], color, step (a staircase: best so far), dots (points only),
  // plain (a line without dots however few its points), dash}]; refs: horizontal reference lines [{y, name, color, data}]; rings: points drawn
  // circled [{x, y, name, data}] (the kept iterate); vmarks: vertical lines [{x, name, data}];
  // marks: x positions drawn as red ticks (rejected steps). Refs and rings count in the y range.
  // The y range padded on both sides, so that no point sits on the frame's top or bottom edge.
  function padded([lo, hi], log) {
    if (log) { const f = Math.pow(hi / lo, 0.06); return [lo / f, hi * f]; }
    const pad = (hi - lo) * 0.06;
    return [lo - pad, hi + pad];
  }

  // legend: true draws the legend even for a single series (a chart that must say what it plots)
  function lines({ title, series, logx = false, logy = false, xlabel = "", ylabel = "", marks = [], refs = [], rings = [],
    vmarks = [], legend = false }) {
    const allx = series.flatMap((s) => s.x).concat(rings.map((r) => r.x));
    const ally = series.flatMap((s) => s.y).concat(refs.map((r) => r.y), rings.map((r) => r.y));
    if (!allx.length) return svg(`<text x="${W / 2}" y="${H / 2}" text-anchor="middle" class="label">${esc(title)}: no data yet</text>`);
    const ys = padded(extent(ally, logy), logy);  // no point, ring or ref line on the frame's edge
    const xs = extent(allx, logx);
    // dots and rings clear of the frame's sides too (a line may end on them)
    if (!logx && (rings.length || series.some((ser) => ser.dots))) { const pad = (xs[1] - xs[0]) * 0.03; xs[0] -= pad; xs[1] += pad; }
    const f = frame(title, xs, ys, logx, logy, xlabel, ylabel);
    let s = f.s;
    const x0 = PAD.l, x1 = W - PAD.r;
    for (const r of refs) {
      if (!isFinite(r.y) || (logy && r.y <= 0)) continue;
      s += `<line class="ref" x1="${x0}" x2="${x1}" y1="${f.sy(r.y).toFixed(1)}" y2="${f.sy(r.y).toFixed(1)}" stroke="${r.color || "#888"}" stroke-width="1.2" stroke-dasharray="4 3"${data(r.data)}/>`;
    }
    for (const v of vmarks) {
      if (!isFinite(v.x)) continue;
      s += `<line class="vmark" x1="${f.sx(v.x).toFixed(1)}" x2="${f.sx(v.x).toFixed(1)}" y1="${PAD.t}" y2="${H - PAD.b}" stroke="${v.color || "#2ca02c"}" stroke-width="1.2" stroke-dasharray="2 2"${data(v.data)}/>`;
    }
    series.forEach((ser, i) => {
      const pts = ser.x.map((x, j) => [x, ser.y[j]]).filter(([x, y]) => isFinite(x) && isFinite(y) && (!logy || y > 0) && (!logx || x > 0));
      const color = ser.color || COLORS[i % COLORS.length];
      if (!pts.length) return;
      const xy = ([x, y]) => `${f.sx(x).toFixed(1)},${f.sy(y).toFixed(1)}`;
      if (!ser.dots) {
        const path = ser.step ? pts.flatMap((p, j) => (j ? [[p[0], pts[j - 1][1]], p] : [p])) : pts;
        s += `<polyline fill="none" stroke="${color}" stroke-width="${ser.width || 1.5}"${ser.dash ? ` stroke-dasharray="${ser.dash}"` : ""} points="${path.map(xy).join(" ")}"${data(ser.data)}/>`;
      }
      if (ser.dots || (pts.length < 30 && !ser.step && !ser.plain)) s += pts.map(([x, y]) => `<circle cx="${f.sx(x).toFixed(1)}" cy="${f.sy(y).toFixed(1)}" r="2.5" fill="${color}"/>`).join("");
    });
    for (const r of rings) {
      if (!isFinite(r.x) || !isFinite(r.y)) continue;
      s += `<circle class="ring" cx="${f.sx(r.x).toFixed(1)}" cy="${f.sy(r.y).toFixed(1)}" r="6" fill="none" stroke="${r.color || "#2ca02c"}" stroke-width="2"${data(r.data)}/>`;
    }
    for (const m of marks) s += `<line x1="${f.sx(m)}" x2="${f.sx(m)}" y1="${H - PAD.b}" y2="${H - PAD.b - 8}" class="mark"/>`;
    const items = [];
    if (legend || series.length > 1 || marks.length || refs.length || rings.length || vmarks.length) {
      // a series without a name (a band's second edge) is drawn but not named twice
      series.forEach((ser, i) => { if (ser.name) items.push({ name: ser.name, color: ser.color || COLORS[i % COLORS.length], kind: ser.dots ? "dot" : "box" }); });
      refs.forEach((r) => items.push({ name: r.name, color: r.color || "#888", kind: "dash" }));
      rings.forEach((r) => items.push({ name: r.name, color: r.color || "#2ca02c", kind: "ring" }));
      vmarks.filter((v) => v.name).forEach((v) => items.push({ name: v.name, color: v.color || "#2ca02c", kind: "dash" }));
      if (marks.length) items.push({ name: "rejected step", color: "#d62728", kind: "box" });
    }
    const leg = legendBelow(items, H + 6);
    return svg(s + leg.s, "", W, H + leg.height);
  }

  // points: [{name, pts: [[x, y]], mean, cov, color}] in one plane; ellipses at 2 sd
  function scatter({ title, groups, xlabel = "PC 1", ylabel = "PC 2" }) {
    const xs = groups.flatMap((g) => g.pts.map((p) => p[0])), ys = groups.flatMap((g) => g.pts.map((p) => p[1]));
    const f = frame(title, extent(xs), extent(ys), false, false, xlabel, ylabel);
    let s = f.s;
    groups.forEach((g, i) => {
      const color = g.color || COLORS[i % COLORS.length];
      s += g.pts.map((p) => `<circle cx="${f.sx(p[0]).toFixed(1)}" cy="${f.sy(p[1]).toFixed(1)}" r="${g.r || 1.6}" fill="${color}" fill-opacity="${g.opacity || 0.45}"/>`).join("");
      if (g.mean && g.cov) {
        const [a, b, c] = [g.cov[0][0], g.cov[0][1], g.cov[1][1]];
        const l11 = Math.sqrt(Math.max(a, 0)), l21 = l11 > 0 ? b / l11 : 0, l22 = Math.sqrt(Math.max(c - l21 * l21, 0));
        const path = [];
        for (let k = 0; k <= 48; k++) {
          const t = (2 * Math.PI * k) / 48, u = Math.cos(t), v = Math.sin(t);
          path.push(`${f.sx(g.mean[0] + 2 * l11 * u).toFixed(1)},${f.sy(g.mean[1] + 2 * (l21 * u + l22 * v)).toFixed(1)}`);
        }
        s += `<polyline fill="none" stroke="${color}" stroke-width="${g.bold ? 2.5 : 1.2}" points="${path.join(" ")}"/>`;
      }
    });
    // the legend sits in a margin right of the frame: inside it, it hid the points it named
    const legend = groups.filter((g) => g.legend !== false);
    s += `<g class="legend-box">${legend.map((g, i) => `<rect x="${W + 2}" y="${PAD.t + 4 + 11 * i}" width="8" height="8" fill="${g.color || COLORS[groups.indexOf(g) % COLORS.length]}"/><text x="${W + 14}" y="${PAD.t + 11 + 11 * i}" class="legend">${esc(g.name)}</text>`).join("")}</g>`;
    return svg(s, "", W + LEGEND_W, H);
  }

  function colour(t) {  // viridis-like ramp, t in [0, 1]
    const stops = [[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]];
    const u = Math.min(Math.max(t, 0), 1) * (stops.length - 1), i = Math.min(Math.floor(u), stops.length - 2), f = u - i;
    return `rgb(${stops[i].map((c, k) => Math.round(c + f * (stops[i + 1][k] - c))).join(",")})`;
  }

  // matrix: rows of numbers (a covariance, or a 2-D field). range: [lo, hi] of the colour
  // scale, shared by heatmaps that are to be compared (else the matrix's own); xlabel/ylabel
  // name the column and row index.
  function heatmap({ title, matrix, range = null, xlabel = "", ylabel = "" }) {
    const n = matrix.length, m = n ? matrix[0].length : 0;
    const [lo, hi] = range || extent(matrix.flat().filter(isFinite));
    const size = Math.min(W - 130, H - 62), cw = size / Math.max(m, 1), ch = size / Math.max(n, 1);
    let s = `<text x="${W / 2}" y="14" text-anchor="middle" class="title">${esc(title)}</text>`;
    const x0 = 50, y0 = 24;
    matrix.forEach((row, i) => row.forEach((v, j) => {
      s += `<rect x="${(x0 + j * cw).toFixed(2)}" y="${(y0 + i * ch).toFixed(2)}" width="${(cw + 0.3).toFixed(2)}" height="${(ch + 0.3).toFixed(2)}" fill="${colour((v - lo) / (hi - lo || 1))}"/>`;
    }));
    // index ticks: every index of a small matrix, else the first, middle and last
    const idx = (k) => (k <= 12 ? [...Array(k).keys()] : [0, Math.floor((k - 1) / 2), k - 1]);
    for (const j of idx(m)) s += `<text x="${(x0 + (j + 0.5) * cw).toFixed(1)}" y="${y0 + size + 11}" text-anchor="middle" class="tick">${j + 1}</text>`;
    for (const i of idx(n)) s += `<text x="${x0 - 4}" y="${(y0 + (i + 0.5) * ch + 3).toFixed(1)}" text-anchor="end" class="tick">${i + 1}</text>`;
    if (xlabel) s += `<text x="${x0 + size / 2}" y="${y0 + size + 24}" text-anchor="middle" class="label">${esc(xlabel)}</text>`;
    if (ylabel) s += `<text x="14" y="${y0 + size / 2}" transform="rotate(-90 14 ${y0 + size / 2})" text-anchor="middle" class="label">${esc(ylabel)}</text>`;
    let bar = "";
    for (let k = 0; k <= 4; k++) {
      bar += `<rect x="${x0 + size + 14}" y="${y0 + size - (k + 1) * size / 5}" width="12" height="${size / 5}" fill="${colour(k / 4)}"/>`;
    }
    bar += `<text x="${x0 + size + 30}" y="${y0 + 8}" class="tick">${fmt(hi)}</text>`
      + `<text x="${x0 + size + 30}" y="${y0 + size / 2 + 3}" class="tick">${fmt((lo + hi) / 2)}</text>`
      + `<text x="${x0 + size + 30}" y="${y0 + size}" class="tick">${fmt(lo)}</text>`;
    s += `<g class="colorbar" data-lo="${esc(fmt(lo))}" data-hi="${esc(fmt(hi))}">${bar}</g>`;
    return svg(s, "heat");
  }

  // One bar per label; the chart grows taller with the number of bars (at least 10 px each), so
  // that no bar is cut off however many there are. xlabel names what the bars measure.
  function bars({ title, labels, values, highlight, xlabel = "" }) {
    const hi = Math.max(...values.filter(isFinite), 1e-300);
    const bh = Math.max(10, Math.min(18, (H - 40) / Math.max(labels.length, 1)));
    const h = Math.max(H, 26 + labels.length * (bh + 3) + (xlabel ? 22 : 8));
    // the labels' column as wide as the longest label (names in words are long), the chart wider with it
    const lw = Math.max(92, Math.min(220, 10 + 5 * Math.max(0, ...labels.map((l) => String(l).length))));
    const w0 = W - 92 + lw;
    let s = `<text x="${w0 / 2}" y="14" text-anchor="middle" class="title">${esc(title)}</text>`;
    labels.forEach((l, i) => {
      const w = (values[i] / hi) * (W - 170), y = 26 + i * (bh + 3);
      s += `<text x="${lw}" y="${y + bh * 0.75}" text-anchor="end" class="tick">${esc(l)}</text>`;
      s += `<rect x="${lw + 4}" y="${y}" width="${Math.max(w, 0.5)}" height="${bh}" fill="${l === highlight ? "#1f77b4" : "#9ab"}"/>`;
      s += `<text x="${lw + 8 + w}" y="${y + bh * 0.75}" class="tick">${fmt(values[i])}</text>`;
    });
    if (xlabel) s += `<text x="${lw + 4 + (W - 170) / 2}" y="${h - 6}" text-anchor="middle" class="label">${esc(xlabel)}</text>`;
    return svg(s, "", w0, h);
  }

  // a field on a 1-D grid (a line) or a 2-D grid (a heatmap)
  function field({ title, values, shape }) {
    if (shape.length === 2) {
      const rows = [];
      for (let i = 0; i < shape[0]; i++) rows.push(values.slice(i * shape[1], (i + 1) * shape[1]));
      return heatmap({ title, matrix: rows, xlabel: "grid column", ylabel: "grid row" });
    }
    return lines({ title, series: [{ name: title, x: values.map((_, i) => i / Math.max(values.length - 1, 1)), y: values }], xlabel: "x" });
  }

  return { lines, scatter, heatmap, bars, field, esc, fmt, extent, COLORS };
})();
