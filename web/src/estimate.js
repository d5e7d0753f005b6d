// Queue awareness: a queued job's place in the order the workers claim jobs
// (oldest first, src/queue/jobs.c) and a rough start and finish from the pace
// the workers measured on clips that finished on this server, all from what
// GET /api/ai/queue and /api/status return.
//
// The model: denoising costs in proportion to the forwards (steps − 1) and
// the pixels of the clip (width × height × frames); decoding and writing in
// proportion to the pixels; encoding the prompt and the references is a
// constant; loading the weights happens once per worker and is left out. A
// request is estimated from the few finished clips nearest to it in size,
// each scaled to it, and the median taken. Attention grows faster than the
// pixels, so a request far larger than anything measured may take longer
// than shown (the estimate says "≈").

const NEAREST = 5;

const normKey = (k) => k.replace(/_(s|ms|seconds)$/, '');
const keySeconds = (k, v) => (/_ms$/.test(k) ? v / 1000 : v);

/** The work of a request or a row: forwards and pixels. */
export function workOf(g) {
  const steps = Number(g.steps) || 28;
  const frames = Number(g.frames) || 124;
  const w = Number(g.width) || 1280;
  const h = Number(g.height) || 704;
  return { forwards: Math.max(1, steps - 1), pixels: w * h * frames };
}

/** Pace samples from finished rows: the seconds each part of a render took, with the work it did. */
export function paceSamples(rows) {
  const out = [];
  for (const g of rows || []) {
    if (!g || g.status !== 'succeeded' || typeof g.total_seconds !== 'number' || !(g.total_seconds > 0)) continue;
    const t = g.timings && typeof g.timings === 'object' ? g.timings : {};
    let denoise = 0, scaled = 0, fixed = 0, load = 0;
    for (const [k, v] of Object.entries(t)) {
      if (typeof v !== 'number' || !(v >= 0)) continue;
      const key = normKey(k), s = keySeconds(k, v);
      if (key.startsWith('denois')) denoise += s;
      else if (key.startsWith('load')) load += s;
      else if (key.startsWith('encod') || key === 'starting' || key === 'queued') fixed += s;
      else scaled += s; // decoding_video, decoding_audio, writing
    }
    if (!(denoise > 0)) {
      // No breakdown: the whole render, less the load, counts as denoising.
      denoise = Math.max(0, g.total_seconds - load);
      scaled = fixed = 0;
    }
    out.push({ ...workOf(g), denoise, scaled, fixed, completed_at: g.completed_at || 0 });
  }
  return out;
}

function median(xs) {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
}

/** Seconds to render a request (or a row) at the measured pace; null with nothing measured. */
export function estimateSeconds(req, samples) {
  if (!samples || !samples.length) return null;
  const q = workOf(req);
  const near = [...samples]
    .sort((a, b) => Math.abs(Math.log(q.pixels / a.pixels)) - Math.abs(Math.log(q.pixels / b.pixels)) || b.completed_at - a.completed_at)
    .slice(0, NEAREST);
  return median(near.map((s) => s.denoise * (q.forwards / s.forwards) * (q.pixels / s.pixels) + s.scaled * (q.pixels / s.pixels) + s.fixed));
}

/** The server's claim order: enqueue time, then id, oldest first (the list shows the reverse). */
const enqueuedUs = (g) => g.enqueued_us ?? (g.enqueued_at ?? 0) * 1e6;
export function claimOrder(a, b) {
  const d = enqueuedUs(a) - enqueuedUs(b);
  if (d !== 0) return d;
  const x = String(a.generation_id), y = String(b.generation_id);
  return x === y ? 0 : x < y ? -1 : 1;
}

/** Workers that take jobs now: online and not failed (at least one while any job runs). */
export function activeWorkers(status, processing = 0) {
  const ws = (status && Array.isArray(status.workers) ? status.workers : []).filter((w) => w.online !== false && !['failed', 'stopped'].includes(w.state));
  return Math.max(ws.length, processing);
}

/**
 * Each active job's place and times: {position (queued only, 1-based),
 * ahead (jobs before it), startAt, finishAt, seconds} in Unix seconds of the
 * server's clock; times are null while nothing has been measured. Workers
 * take the queue in claim order, each the next job as it frees up.
 */
export function queuePlan({ active, workers, samples, now }) {
  const plan = new Map();
  const running = active.filter((g) => g.status === 'processing');
  const queued = active.filter((g) => g.status === 'queued').sort(claimOrder);
  const free = [];
  for (const g of running) {
    const est = estimateSeconds(g, samples);
    const started = g.started_at || now;
    const finishAt = est === null ? null : Math.max(now, started + est);
    plan.set(g.generation_id, { position: 0, ahead: 0, startAt: started, finishAt, seconds: est });
    free.push(finishAt);
  }
  for (let i = running.length; i < Math.max(1, workers); i++) free.push(now);
  queued.forEach((g, i) => {
    const est = estimateSeconds(g, samples);
    let startAt = null, finishAt = null;
    if (est !== null && free.every((t) => t !== null)) {
      const k = free.indexOf(Math.min(...free));
      startAt = free[k];
      finishAt = startAt + est;
      free[k] = finishAt;
    }
    plan.set(g.generation_id, { position: i + 1, ahead: i + running.length, startAt, finishAt, seconds: est });
  });
  // When a new request would start: the earliest a worker frees after the queue.
  const known = free.every((t) => t !== null);
  return { plan, nextStartAt: known ? Math.min(...free) : null, queued: queued.length, running: running.length };
}

/** "≈ 40 s", "≈ 3 min", "≈ 2 h 5 min" */
export function roughDuration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(seconds)) return '';
  const s = Math.max(0, seconds);
  if (s < 55) return `≈ ${Math.max(1, Math.round(s / 5) * 5)} s`;
  if (s < 3570) return `≈ ${Math.max(1, Math.round(s / 60))} min`;
  const h = Math.floor((s + 30) / 3600), m = Math.round((s - h * 3600) / 60);
  return `≈ ${h} h${m > 0 ? ` ${m} min` : ''}`;
}

/** "1st", "2nd", "3rd", "11th" */
export function ordinal(n) {
  const t = n % 100;
  if (t >= 11 && t <= 13) return `${n}th`;
  return `${n}${['th', 'st', 'nd', 'rd'][n % 10] || 'th'}`;
}
