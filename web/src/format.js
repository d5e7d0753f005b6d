// Small display helpers.
import { FPS } from './params.js';

export function timeAgo(unixSeconds, now = Date.now() / 1000) {
  if (!unixSeconds) return '';
  const d = Math.max(0, now - unixSeconds);
  if (d < 45) return 'just now';
  if (d < 3600) return `${Math.round(d / 60)} min ago`;
  if (d < 86400) return `${Math.round(d / 3600)} h ago`;
  return new Date(unixSeconds * 1000).toLocaleDateString();
}

export function duration(seconds) {
  if (seconds === null || seconds === undefined || !Number.isFinite(Number(seconds))) return '—';
  const s = Number(seconds);
  if (s < 1) return `${Math.round(s * 1000)} ms`;
  if (s < 90) return `${s.toFixed(1)} s`;
  return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
}

export const clipLength = (frames) => (frames ? `${frames} f · ${(frames / FPS).toFixed(2).replace(/\.?0+$/, '')} s` : '');

/** A clip's length for a tile's badge: "5.2 s", "0.9 s", "1:02". */
export function shortLength(frames) {
  if (!frames) return '';
  const s = frames / FPS;
  if (s < 60) return `${s < 10 ? s.toFixed(1) : Math.round(s)} s`;
  return `${Math.floor(s / 60)}:${String(Math.round(s % 60)).padStart(2, '0')}`;
}

/**
 * A media time for the player's readout: seconds with hundredths under a
 * minute (a sub-second clip reads "0.54 s", not "0:00"), m:ss.s above.
 */
export function mediaTime(t) {
  const s = Number.isFinite(t) && t > 0 ? t : 0;
  if (s < 60) return `${s.toFixed(2)} s`;
  return `${Math.floor(s / 60)}:${(s % 60).toFixed(1).padStart(4, '0')}`;
}

/** The words for a status, the same in the filters, the tiles and the lightbox. */
export const STATUS_LABELS = { queued: 'Queued', processing: 'Running', succeeded: 'Done', failed: 'Failed', cancelled: 'Cancelled' };
export const statusLabel = (s) => STATUS_LABELS[s] || s || '';

/**
 * A download's file name the way `mmh3 generate` names its output
 * (src/cli/cmd_generate.c): the local date and time, then the prompt's ASCII
 * letters and digits, lowercased, runs of anything else as one dash, at most
 * 47 characters: 20261201_143207-a-red-fox-runs-through-fresh-snow.mp4.
 * The time is when the clip was written.
 */
export function downloadName(g, ext = 'mp4') {
  const t = new Date(((g && (g.completed_at || g.enqueued_at)) || Date.now() / 1000) * 1000);
  const p2 = (n) => String(n).padStart(2, '0');
  const stamp = `${t.getFullYear()}${p2(t.getMonth() + 1)}${p2(t.getDate())}_${p2(t.getHours())}${p2(t.getMinutes())}${p2(t.getSeconds())}`;
  let slug = '';
  let dash = false;
  for (const c of String((g && g.prompt) || '')) {
    if (slug.length >= 47) break;
    if (/[A-Za-z0-9]/.test(c)) {
      if (dash && slug.length) slug += '-';
      if (slug.length < 47) slug += c.toLowerCase();
      dash = false;
    } else dash = true;
  }
  return `${stamp}${slug ? '-' : ''}${slug}.${ext}`;
}

export const STAGE_LABELS = {
  queued: 'Queued',
  starting: 'Starting',
  encoding_prompt: 'Encoding prompt',
  encoding_references: 'Encoding references',
  decoding_video: 'Decoding video',
  decoding_audio: 'Decoding audio',
  writing: 'Writing mp4',
  loading: 'Loading weights',
  load: 'Loading weights',
  encode: 'Encoding prompt',
  encoding: 'Encoding prompt',
  text_encode: 'Encoding prompt',
  references: 'Encoding references',
  denoise: 'Denoising',
  denoising: 'Denoising',
  decode: 'Decoding video',
  decoding: 'Decoding video',
  vae_decode: 'Decoding video',
  audio_decode: 'Decoding audio',
  mux: 'Writing mp4',
  write: 'Writing mp4',
  writing: 'Writing mp4',
};

export const stageLabel = (stage) => (stage ? STAGE_LABELS[stage] || stage.replace(/_/g, ' ') : '');

/**
 * Denoising progress in the request's own terms. `steps` counts the
 * sampling grid's points and the engine reports forwards done out of
 * steps − 1 (docs/API.md); after k forwards the latent stands on point k + 1,
 * so a 28-step request reads "step 1/28" at the start and "step 28/28" at the
 * end, the number the user asked for.
 */
export function stepText(g) {
  if (!g || g.step === null || g.step === undefined || !g.total_steps) return '';
  const steps = Number(g.steps);
  if (steps && Number(g.total_steps) === steps - 1) return `step ${Math.min(steps, Number(g.step) + 1)}/${steps}`;
  return `step ${g.step}/${g.total_steps}`;
}

/** A 0..1 progress figure from stage + step (denoising dominates the time). */
export function progressFraction(g) {
  if (!g) return 0;
  if (g.status === 'succeeded') return 1;
  if (g.status === 'queued') return 0;
  if (typeof g.progress === 'number' && Number.isFinite(g.progress)) return Math.min(1, Math.max(0, g.progress));
  const total = Number(g.total_steps) || 0;
  const step = Number(g.step) || 0;
  const st = (g.stage || '').toLowerCase();
  if (st.startsWith('denois') && total) return 0.1 + 0.8 * Math.min(1, step / total);
  if (st.includes('decod') || st.includes('mux') || st.includes('writ')) return 0.92;
  if (st) return 0.05;
  return total ? Math.min(1, step / total) : 0;
}
