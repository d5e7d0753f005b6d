import { useEffect, useRef, useState } from 'react';
import { ACTIVE } from '../api.js';
import { store, useGallery } from '../store.js';
import { closeLightbox, openGeneration } from '../router.js';
import { cancelOrDelete, copyText, setRating, vary } from '../actions.js';
import { clipLength, downloadName, duration, statusLabel, timeAgo } from '../format.js';
import { toast } from '../toasts.js';
import { posterUrl, referencesOf, resultUrl } from '../media.js';
import { FPS, fewStepDetails } from '../params.js';
import Player from './Player.jsx';
import { ProgressLine } from './Tile.jsx';
import LivePreview from './LivePreview.jsx';
import { CheckIcon, RefThumb, XIcon } from './bits.jsx';
import Modal from './Modal.jsx';

// Pipeline order of the stages (docs/API.md), for the timings table.
const STAGE_ORDER = ['queued', 'starting', 'loading', 'encoding_prompt', 'encoding_references', 'denoising', 'decoding_video', 'decoding_audio', 'writing'];

const isTyping = (el) => el && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' || el.isContentEditable);

function Params({ g }) {
  const rows = [
    ['Model', g.partition || 'fl2va'],
    ['Size', g.width && g.height ? `${g.width}×${g.height}` : '—'],
    ['Length', g.frames ? clipLength(g.frames) : '—'],
    ['Steps', g.steps ?? '—'],
    ['Seed', g.seed === undefined || g.seed === null ? '—' : `${g.seed}${g.seed_drawn ? ' (drawn)' : ''}`],
    ['Audio', g.no_audio ? 'off' : 'on'],
  ];
  rows.push(...fewStepDetails(g));
  if (g.fast) rows.push(['Fast', 'on']);
  if (g.placement) rows.push(['Placement', g.placement]);
  if (g.crf !== undefined && g.crf !== null) rows.push(['CRF', g.crf]);
  if (g.attempts > 1) rows.push(['Attempts', g.attempts]);
  return (
    <dl className="params" data-testid="params">
      {rows.map(([k, v]) => (<div key={k}><dt>{k}</dt><dd data-testid={`param-${k.toLowerCase()}`}>{String(v)}</dd></div>))}
    </dl>
  );
}

/** What the engine reported beside the stage times: forwards run, step-cache skips, sparse density. */
function timingExtras(t) {
  if (!t) return [];
  const rows = [];
  if (typeof t.forwards === 'number') rows.push(['forwards', String(t.forwards)]);
  const sc = t.step_cache;
  if (sc && typeof sc === 'object') {
    const list = Array.isArray(sc.skipped_forwards) && sc.skipped_forwards.length ? ` (${sc.skipped_forwards.join(', ')})` : '';
    rows.push(['skipped', `${sc.skipped} of ${sc.forwards} forwards by ${sc.policy}${list}`]);
  }
  const d = Array.isArray(t.sparse_density) ? t.sparse_density.filter((x) => typeof x === 'number') : [];
  if (d.length) {
    const mean = d.reduce((a, b) => a + b, 0) / d.length;
    rows.push(['density', `${Math.round(mean * 100)} % mean (${d.map((x) => x.toFixed(2)).join(' ')})`]);
  }
  return rows;
}

function Timings({ g }) {
  const t = g.timings && typeof g.timings === 'object' ? g.timings : null;
  const rank = (k) => { const i = STAGE_ORDER.indexOf(k.replace(/_(s|ms|seconds)$/, '')); return i < 0 ? STAGE_ORDER.length : i; };
  const entries = t ? Object.entries(t).filter(([k, v]) => typeof v === 'number' && k !== 'forwards').sort((a, b) => rank(a[0]) - rank(b[0])) : [];
  const extras = timingExtras(t);
  const total = typeof g.total_seconds === 'number' ? g.total_seconds : g.started_at && g.completed_at ? g.completed_at - g.started_at : null;
  const wait = g.started_at && g.enqueued_at ? g.started_at - g.enqueued_at : null;
  if (!entries.length && !extras.length && total === null) return null;
  return (
    <dl className="params timings" data-testid="timings">
      {entries.map(([k, v]) => (<div key={k}><dt>{k.replace(/_(s|ms|seconds)$/, '').replace(/_/g, ' ')}</dt><dd>{duration(/_ms$/.test(k) ? v / 1000 : v)}</dd></div>))}
      {extras.map(([k, v]) => (<div key={k} data-testid={`timing-${k}`}><dt>{k.replace(/_/g, ' ')}</dt><dd>{v}</dd></div>))}
      {wait !== null && <div><dt>waited</dt><dd>{duration(wait)}</dd></div>}
      {total !== null && <div><dt>total</dt><dd>{duration(total)}</dd></div>}
    </dl>
  );
}

// Audio has no frames: the arrows seek by seconds instead.
const AUDIO_SEEK_S = 1;
const AUDIO_SEEK_LONG_S = 5;

/**
 * The keys that do something for what the viewer shows: a video (the result
 * or a video reference) steps frames; audio seeks by seconds; a still, a live
 * job or an ended one has no player keys. Moving through the list and closing
 * always work.
 */
export function keyHints(media, rating = false) {
  const player = media === 'video'
    ? ['←/→ frame', 'shift ±1 s', 'home/end first/last', 'space play', 'l loop', 'm mute']
    : media === 'audio'
      ? [`←/→ ±${AUDIO_SEEK_S} s`, `shift ±${AUDIO_SEEK_LONG_S} s`, 'home/end start/end', 'space play', 'l loop', 'm mute']
      : [];
  return [...player, ...(rating ? ['a approve', 'r reject'] : []), '↑/↓ previous/next clip', 'esc close'];
}

/** The frame on screen as a PNG file (the clip is same-origin, so the canvas is readable). */
async function frameFile(v, name) {
  if (!v || !v.videoWidth) throw new Error('the clip has not loaded a frame yet');
  const c = document.createElement('canvas');
  c.width = v.videoWidth;
  c.height = v.videoHeight;
  c.getContext('2d').drawImage(v, 0, 0);
  const blob = await new Promise((resolve, reject) => c.toBlob((b) => (b ? resolve(b) : reject(new Error('the frame could not be encoded'))), 'image/png'));
  return new File([blob], name, { type: 'image/png' });
}

async function clipFile(url, name) {
  const res = await fetch(url);
  if (!res.ok) throw new Error(`the clip could not be read (HTTP ${res.status})`);
  return new File([await res.blob()], name, { type: 'video/mp4' });
}

function ConfirmButton({ label, confirmLabel, onConfirm, className = '', testId }) {
  const [armed, setArmed] = useState(false);
  useEffect(() => {
    if (!armed) return;
    const t = setTimeout(() => setArmed(false), 4000);
    return () => clearTimeout(t);
  }, [armed]);
  return (
    <button type="button" className={`${className} ${armed ? 'armed' : ''}`} data-testid={testId}
      onClick={() => { if (armed) { setArmed(false); onConfirm(); } else setArmed(true); }}>
      {armed ? confirmLabel : label}
    </button>
  );
}

export default function Lightbox({ id, onEdit, onRerun, onAttach, onAttachUploads }) {
  const { byId, items } = useGallery();
  const g = byId.get(id);
  const [missing, setMissing] = useState(null);
  const [view, setView] = useState('result');
  const player = useRef(null);
  const seen = useRef(false);
  if (g) seen.current = true;
  const gone = !g && seen.current; // deleted while open (here or in another tab)

  useEffect(() => {
    // Always read the full row once (a deep link or a tile from a partial event).
    store.fetchOne(id).catch((e) => setMissing(e.status === 404 ? 'This generation does not exist (it may have been deleted).' : e.message));
  }, [id]);

  const refs = referencesOf(g);
  const active = g && ACTIVE.has(g.status);
  const current = view === 'result' ? null : refs[view] || null;
  // What plays in the viewer: 'video', 'audio', 'image' or null (no player).
  const media = !g ? null
    : current ? (current.url ? current.kind : null)
      : g.status === 'succeeded' && resultUrl(g) ? 'video' : null;
  const playable = media === 'video' || media === 'audio';
  const rateable = Boolean(g && g.status === 'succeeded');
  const [varying, setVarying] = useState(null);

  /** The frame on screen, or the clip itself, into the prompt bar as a reference. */
  const referenceFrom = async (what) => {
    const p = player.current;
    const base = downloadName(g).replace(/\.mp4$/, '');
    try {
      if (what === 'frame') {
        p && p.element && p.element.pause();
        const n = p && p.element ? Math.floor(p.element.currentTime * FPS + 1e-3) + 1 : 1;
        const file = await frameFile(p && p.element, `${base}-frame-${n}.png`);
        onAttach && onAttach([file]);
      } else if (what === 'clip') {
        onAttach && onAttach([await clipFile(resultUrl(g), `${base}.mp4`)]);
      } else if (current) {
        onAttachUploads && onAttachUploads([current]);
      }
      closeLightbox();
    } catch (e) {
      toast(`Could not use it as a reference: ${e.message}.`, { kind: 'error' });
    }
  };

  const onKeyDown = (e) => {
    if (isTyping(e.target) || e.metaKey || e.ctrlKey || e.altKey) return;
    const p = playable ? player.current : null;
    const key = e.key;
    let handled = true;
    const arrow = key === 'ArrowRight' ? 1 : key === 'ArrowLeft' ? -1 : 0;
    if (arrow && p && media === 'audio') p.seek(arrow * (e.shiftKey ? AUDIO_SEEK_LONG_S : AUDIO_SEEK_S));
    else if (arrow && p) p.step(arrow * (e.shiftKey ? FPS : 1));
    else if ((key === ' ' || key === 'Spacebar') && p) p.togglePlay();
    else if ((key === 'l' || key === 'L') && p) p.toggleLoop();
    else if ((key === 'm' || key === 'M') && p) p.toggleMute();
    else if ((key === 'Home' || key === 'End') && p && media === 'audio') p.seekTo(key === 'Home' ? 0 : Infinity);
    else if ((key === 'Home' || key === 'End') && p) p.goto(key === 'Home' ? 0 : Infinity);
    else if ((key === 'a' || key === 'A') && rateable) setRating(g, g.rating === 'approved' ? null : 'approved');
    else if ((key === 'r' || key === 'R') && rateable) setRating(g, g.rating === 'rejected' ? null : 'rejected');
    else if (key === 'ArrowUp' || key === 'ArrowDown' || key === 'k' || key === 'j') {
      // Previous / next clip of the gallery's current list, in place.
      const i = items.findIndex((x) => x.generation_id === id);
      const next = items[i + (key === 'ArrowUp' || key === 'k' ? -1 : 1)];
      if (i >= 0 && next) openGeneration(next.generation_id, { replace: true });
    }
    else handled = false;
    if (handled) { e.preventDefault(); e.stopPropagation(); }
  };

  const title = g ? g.prompt : 'Generation';
  // The viewer takes the shape of what it shows (a portrait clip is tall on a
  // phone, not a strip in a 16:9 box); the desktop layout fills the space.
  const shape = current ? (current.kind === 'audio' ? null : current) : g;
  const aspect = shape && shape.width > 0 && shape.height > 0 ? `${shape.width} / ${shape.height}` : null;
  return (
    <Modal className="lightbox" label={title ? `Generation: ${title.slice(0, 80)}` : 'Generation'} onClose={closeLightbox} onKeyDownCapture={onKeyDown} testId="lightbox">
      <div className={`lb-viewer ${current && current.kind === 'audio' ? 'audio' : ''}`} style={aspect ? { '--viewer-aspect': aspect } : undefined} data-testid="lb-viewer">
        {!g && gone && <div className="lb-placeholder" role="alert" data-testid="lb-gone">This generation was deleted.</div>}
        {!g && !gone && !missing && <div className="lb-placeholder">Loading…</div>}
        {!g && missing && <div className="lb-placeholder" role="alert">{missing}</div>}
        {g && view === 'result' && g.status === 'succeeded' && resultUrl(g) && (
          <Player ref={player} key="result" src={resultUrl(g)} poster={posterUrl(g)} frames={g.frames} label="Result" />
        )}
        {g && view === 'result' && active && (
          <div className="lb-live" data-testid="live-progress">
            {g.status === 'processing' && <LivePreview id={g.generation_id} className="lb-preview" />}
            <p className="lb-live-status">{g.status === 'queued' ? 'Waiting in the queue' : 'Generating'}</p>
            <ProgressLine g={g} />
            <ConfirmButton className="danger" label="Cancel" confirmLabel="Cancel this job?" testId="cancel" onConfirm={() => cancelOrDelete(g)} />
          </div>
        )}
        {g && view === 'result' && (g.status === 'failed' || g.status === 'cancelled') && (
          <div className="lb-placeholder" data-testid="lb-ended">
            <p>{g.status === 'failed' ? 'This generation failed.' : 'This generation was cancelled.'}</p>
            {g.error_message && <p className="error-text">{g.error_message}</p>}
          </div>
        )}
        {g && current && (
          current.url
            ? <Player ref={player} key={`ref-${view}`} src={current.url} poster={current.thumb} kind={current.kind} label={current.name ? `${current.label} · ${current.name}` : current.label} />
            : <div className="lb-placeholder">{current.label}: no preview</div>
        )}
      </div>
      {g && (
        <nav className="lb-rail" aria-label="Result and references">
          <button type="button" className={`rail-item ${view === 'result' ? 'on' : ''}`} aria-pressed={view === 'result'} onClick={() => setView('result')} data-testid="rail-result">
            <span className="ref-thumb">{posterUrl(g) ? <img src={posterUrl(g)} alt="" /> : <span className="ref-glyph">★</span>}</span>
            <span className="rail-label">Result</span>
          </button>
          {refs.map((r, i) => (
            <button key={`${i}-${r.id}`} type="button" className={`rail-item ${view === i ? 'on' : ''}`} aria-pressed={view === i} onClick={() => setView(i)} data-testid="rail-ref" data-kind={r.kind}>
              <RefThumb r={r} />
              <span className="rail-label">{r.label}</span>
            </button>
          ))}
        </nav>
      )}
      {g && (
        <aside className="lb-side">
          <div className="lb-head">
            <span className={`status-tag ${g.status}`} data-testid="lb-status" data-status={g.status}>{statusLabel(g.status)}</span>
            {g.rating === 'approved' && <span className="approved-tag" data-testid="lb-approved"><CheckIcon /> approved</span>}
            {g.rating === 'rejected' && <span className="rejected-tag">rejected</span>}
            <span className="muted small">{timeAgo(g.enqueued_at)}</span>
          </div>
          <p className="lb-prompt" data-testid="lb-prompt">{g.prompt}</p>
          <Params g={g} />
          {Array.isArray(g.warnings) && g.warnings.length > 0 && (
            <ul className="warnings" data-testid="lb-warnings">{g.warnings.map((w, i) => <li key={i}>{w}</li>)}</ul>
          )}
          {g.status !== 'failed' && g.error_message && <p className="muted small">Previous attempt: {g.error_message}</p>}
          <Timings g={g} />
          <div className="lb-actions">
            {g.status === 'succeeded' && (
              <>
                <button type="button" className={`approve-btn ${g.rating === 'approved' ? 'on' : ''}`} aria-pressed={g.rating === 'approved'} onClick={() => setRating(g, g.rating === 'approved' ? null : 'approved')} data-testid="lb-approve">
                  <CheckIcon /> {g.rating === 'approved' ? 'Approved' : 'Approve'}
                </button>
                <button type="button" className={`reject-btn ${g.rating === 'rejected' ? 'on' : ''}`} aria-pressed={g.rating === 'rejected'} onClick={() => setRating(g, g.rating === 'rejected' ? null : 'rejected')} data-testid="lb-reject">
                  <XIcon /> {g.rating === 'rejected' ? 'Rejected' : 'Reject'}
                </button>
              </>
            )}
            <button type="button" onClick={() => { onRerun(g); closeLightbox(); }} data-testid="rerun"
              title="The prompt, references and settings in the prompt bar with a new seed, to change before running">Rerun…</button>
            <button type="button" onClick={() => { onEdit(g); closeLightbox(); }} data-testid="edit"
              title="The prompt, references and settings in the prompt bar, the seed kept">Edit &amp; resubmit</button>
            <span className="vary" role="group" aria-label="Vary: the same request with new seeds, queued at once">
              <span className="vary-label" aria-hidden="true">Vary</span>
              {[1, 2, 4].map((n) => (
                <button key={n} type="button" disabled={varying !== null} onClick={async () => { setVarying(n); await vary(g, n); setVarying(null); }}
                  title={n === 1 ? 'One new seed, queued now' : `${n} new seeds, queued now`} data-testid={`vary-${n}`}>
                  <span className="visually-hidden">Vary </span>×{n}<span className="visually-hidden">{n === 1 ? ' (one new seed)' : ` (${n} new seeds)`}</span>
                </button>
              ))}
            </span>
            {g.status === 'succeeded' && resultUrl(g) && (
              <a className="button" href={resultUrl(g)} download={downloadName(g)} data-testid="download">Download</a>
            )}
            {view === 'result' && media === 'video' && (
              <>
                <button type="button" onClick={() => referenceFrom('frame')} data-testid="use-frame" title="This frame as a still in the prompt bar (frame 1 under fl2va)">Use frame as reference</button>
                <button type="button" onClick={() => referenceFrom('clip')} data-testid="use-clip" title="This clip as a video reference in the prompt bar">Use clip as reference</button>
              </>
            )}
            {current && (
              <button type="button" onClick={() => referenceFrom('upload')} data-testid="use-reference">Use this reference</button>
            )}
            <button type="button" onClick={() => copyText(g.prompt || '')} data-testid="copy-prompt">Copy prompt</button>
            {!active && (
              <ConfirmButton className="danger" label="Delete" confirmLabel="Delete for good?" testId="delete"
                onConfirm={async () => { if (await cancelOrDelete(g)) closeLightbox(); }} />
            )}
          </div>
          <p className="muted small keys-hint" data-testid="keys-hint" data-media={media || 'none'}>{keyHints(media, rateable).join(' · ')}</p>
        </aside>
      )}
    </Modal>
  );
}
