// A minimal line chart on <canvas> (no inline styles or scripts: CSP-clean). Colours come
// from the theme's CSS variables, so charts follow light/dark.

export function lineChart(canvas, series, { label = "" } = {}) {
  const css = getComputedStyle(document.documentElement);
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, hgt = canvas.clientHeight || 200;
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(hgt * dpr);
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  const pad = { l: 48, r: 8, t: 8, b: 18 };
  const all = series.flatMap((s) => s.points.map((p) => p[1]));
  const max = Math.max(1, ...all);
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const X = (x) => pad.l + (x1 === x0 ? 0 : ((x - x0) / (x1 - x0)) * (w - pad.l - pad.r));
  const Y = (y) => hgt - pad.b - (y / max) * (hgt - pad.t - pad.b);
  ctx.strokeStyle = css.getPropertyValue("--border").trim();
  ctx.fillStyle = css.getPropertyValue("--muted").trim();
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = Y(max * f);
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    ctx.fillText(fmt(max * f), 4, y + 4);
  }
  if (xs.length) ctx.fillText(`${Math.round((x1 - x0) / 1000)} s`, w - 40, hgt - 4);
  for (const s of series) {
    ctx.strokeStyle = css.getPropertyValue(s.color).trim();
    ctx.lineWidth = 2;
    ctx.beginPath();
    s.points.forEach(([x, y], i) => (i ? ctx.lineTo(X(x), Y(y)) : ctx.moveTo(X(x), Y(y))));
    ctx.stroke();
  }
  canvas.setAttribute("aria-label", label);
}

function fmt(v) {
  return v >= 1000 ? `${(v / 1000).toFixed(1)}k` : v >= 10 ? Math.round(v).toString() : v.toFixed(1);
}

// Stacked bars on <canvas>: database load in average active sessions per time bucket,
// one colour per wait type, with a dashed line at `line` (the vCPU count: load above it
// is sessions queueing for CPU or waiting). `buckets`: [{at, parts: {type: aas}}].
export const WAIT_COLOURS = ["--c2", "--c1", "--c3", "--c4", "--muted", "--accent", "--warn", "--danger", "--ok", "--fg"];

export function stackedBars(canvas, buckets, types, { line = null, label = "" } = {}) {
  const css = getComputedStyle(document.documentElement);
  const colour = (v) => css.getPropertyValue(v).trim();
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600, hgt = canvas.clientHeight || 200;
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(hgt * dpr);
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  const pad = { l: 48, r: 8, t: 8, b: 18 };
  const totals = buckets.map((b) => Object.values(b.parts).reduce((a, v) => a + v, 0));
  const max = Math.max(1, line || 0, ...totals) * 1.1;
  const Y = (y) => hgt - pad.b - (y / max) * (hgt - pad.t - pad.b);
  ctx.strokeStyle = colour("--border");
  ctx.fillStyle = colour("--muted");
  ctx.font = "11px system-ui, sans-serif";
  ctx.lineWidth = 1;
  for (const f of [0, 0.5, 1]) {
    const y = Y(max * f);
    ctx.beginPath(); ctx.moveTo(pad.l, y); ctx.lineTo(w - pad.r, y); ctx.stroke();
    ctx.fillText((max * f).toFixed(1), 4, y + 4);
  }
  const bw = (w - pad.l - pad.r) / Math.max(1, buckets.length);
  buckets.forEach((b, i) => {
    let base = 0;
    types.forEach((t, n) => {
      const v = b.parts[t] || 0;
      if (!v) return;
      ctx.fillStyle = colour(WAIT_COLOURS[n % WAIT_COLOURS.length]);
      ctx.fillRect(pad.l + i * bw + 1, Y(base + v), Math.max(1, bw - 2), Y(base) - Y(base + v));
      base += v;
    });
  });
  if (line) {
    ctx.strokeStyle = colour("--fg");
    ctx.setLineDash([6, 4]);
    ctx.lineWidth = 1.5;
    ctx.beginPath(); ctx.moveTo(pad.l, Y(line)); ctx.lineTo(w - pad.r, Y(line)); ctx.stroke();
    ctx.setLineDash([]);
    ctx.fillStyle = colour("--fg");
    ctx.fillText(`${line} vCPU`, w - pad.r - 50, Y(line) - 4);
  }
  canvas.setAttribute("aria-label", label);
}
