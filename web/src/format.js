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
