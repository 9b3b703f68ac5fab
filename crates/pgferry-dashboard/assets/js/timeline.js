// A step history drawn as a timeline on <canvas> (CSP-clean, colours from the theme): one
// row per history entry, a bar from when the step was claimed to its outcome, on a shared
// time axis. Outcomes fail / retry / cancelled are drawn in the failure colour.

export function timeline(canvas, history) {
  if (!canvas) return;
  const css = getComputedStyle(document.documentElement);
  const color = (v) => css.getPropertyValue(v).trim();
  const rows = history.map((s) => {
    const end = Date.parse(s.finished_at);
    const start = s.started_at ? Date.parse(s.started_at) : end;
    return { label: `${s.step_seq}. ${s.step} → ${s.outcome}`, start, end, bad: ["fail", "retry", "cancelled"].includes(s.outcome) };
  });
  const rowH = 22, pad = { l: 210, r: 12, t: 6, b: 18 };
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 600;
  const hgt = pad.t + pad.b + Math.max(1, rows.length) * rowH;
  canvas.style.height = `${hgt}px`; // CSSOM, not an inline style attribute: allowed by the CSP
  canvas.width = Math.round(w * dpr); canvas.height = Math.round(hgt * dpr);
  const ctx = canvas.getContext("2d");
  ctx.scale(dpr, dpr);
  ctx.clearRect(0, 0, w, hgt);
  ctx.font = "12px system-ui, sans-serif";
  const t0 = Math.min(...rows.map((r) => r.start)), t1 = Math.max(...rows.map((r) => r.end));
  const span = Math.max(1, t1 - t0);
  const X = (t) => pad.l + ((t - t0) / span) * (w - pad.l - pad.r);
  rows.forEach((r, n) => {
    const y = pad.t + n * rowH;
    ctx.fillStyle = color("--fg");
    ctx.fillText(r.label.length > 30 ? `${r.label.slice(0, 29)}…` : r.label, 4, y + 15);
    ctx.fillStyle = color(r.bad ? "--c3" : "--c1");
    ctx.fillRect(X(r.start), y + 4, Math.max(3, X(r.end) - X(r.start)), rowH - 8);
  });
  ctx.fillStyle = color("--muted");
  if (rows.length) ctx.fillText(`${span < 2000 ? `${span} ms` : `${(span / 1000).toFixed(1)} s`} from first claim to last outcome`, pad.l, hgt - 4);
  canvas.setAttribute("aria-label", rows.length
    ? `Step timeline: ${rows.map((r) => `${r.label} (${r.end - r.start} ms)`).join("; ")}`
    : "No steps have ended yet");
}
