import { memo, useEffect, useRef, useState } from 'react';
import { ACTIVE } from '../api.js';
import { openGeneration } from '../router.js';
import { progressFraction, shortLength, stageLabel, statusLabel, stepText, timeAgo } from '../format.js';
import { ordinal, roughDuration } from '../estimate.js';
import { posterUrl, referencesOf, resultUrl } from '../media.js';
import { setRating } from '../actions.js';
import { useQueueInfo } from '../queue.js';
import { CheckIcon, RefThumb, ReuseIcon } from './bits.jsx';
import LivePreview from './LivePreview.jsx';
import { fewStepDetails } from '../params.js';

/** The badge of a clip made with an adapter, a sampler preset or a speed choice: the first that applies. */
function fewStepBadge(g) {
  const lora = Array.isArray(g.loras) && g.loras[0];
  if (lora) return lora.name.replace(/\.safetensors$/, '');
  if (typeof g.sampler === 'string') return g.sampler;
  return g.sparse && g.sparse !== 'off' ? 'sparse' : 'cache';
}

/** Re-renders every `ms` while `on` (relative times: "starts in ≈ 2 min"). */
function useTick(on, ms = 5000) {
  const [, set] = useState(0);
  useEffect(() => {
    if (!on) return;
    const t = setInterval(() => set((n) => n + 1), ms);
    return () => clearInterval(t);
  }, [on, ms]);
}

/** "2nd in queue · starts in ≈ 1 min · done in ≈ 2 min", "≈ 40 s left": from the queue plan. */
export function queueText(g, entry, now) {
  if (!entry) return '';
  const parts = [];
  if (g.status === 'queued' && entry.position) parts.push(`${ordinal(entry.position)} in queue`);
  if (g.status === 'queued' && entry.startAt !== null) parts.push(entry.startAt - now < 5 ? 'starts soon' : `starts in ${roughDuration(entry.startAt - now)}`);
  if (entry.finishAt !== null && entry.finishAt !== undefined) {
    const left = entry.finishAt - now;
    if (g.status === 'queued') parts.push(`done in ${roughDuration(left)}`);
    else parts.push(left < 5 ? 'finishing' : `${roughDuration(left)} left`);
  }
  return parts.join(' · ');
}

export function ProgressLine({ g, queue = true }) {
  const q = useQueueInfo();
  const entry = queue ? q.plan.get(g.generation_id) : null;
  useTick(Boolean(entry));
  const frac = progressFraction(g);
  let text = g.status === 'queued' ? 'Queued' : stageLabel(g.stage) || 'Starting';
  const steps = stepText(g);
  if (g.status === 'processing' && steps && /denois/i.test(g.stage || 'denoise')) text += ` · ${steps}`;
  if (g.cancel_requested) text += ' · cancelling';
  const eta = queueText(g, entry, Date.now() / 1000 + q.clockOffset);
  return (
    <div className="progress" data-testid="progress">
      <div className="progress-bar" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(frac * 100)} aria-label="progress">
        <span style={{ transform: `scaleX(${frac})` }} className={g.status === 'queued' ? 'idle' : ''} />
      </div>
      <span className="progress-text" data-testid="progress-text">{text}</span>
      {eta && <span className="progress-eta" data-testid="queue-eta" data-position={entry.position || ''}>{eta}</span>}
    </div>
  );
}

/** True once the element comes near the viewport (media is fetched only then). */
function useNear(ref) {
  const [near, setNear] = useState(typeof IntersectionObserver === 'undefined');
  useEffect(() => {
    if (near || !ref.current) return;
    const io = new IntersectionObserver((es) => { if (es.some((e) => e.isIntersecting)) setNear(true); }, { rootMargin: '600px 0px' });
    io.observe(ref.current);
    return () => io.disconnect();
  }, [near, ref]);
  return near;
}

/**
 * The clip of a finished tile: its poster until the clip actually plays
 * (hover or focus), so a tile that appears under a resting pointer, or whose
 * clip is still loading, never shows a black box.
 */
function TileMedia({ g, active }) {
  const video = useRef(null);
  const box = useRef(null);
  const near = useNear(box);
  const [playing, setPlaying] = useState(false);
  const src = resultUrl(g);
  const poster = posterUrl(g);
  const loaded = Boolean(src && (near || active));
  useEffect(() => {
    const v = video.current;
    if (!v || !loaded) return;
    if (active) {
      v.currentTime = 0;
      v.play().catch(() => {});
    } else {
      v.pause();
    }
  }, [active, loaded]);
  const shown = active && playing;
  return (
    <div ref={box} className="tile-media">
      {poster && <img src={poster} alt="" loading="lazy" decoding="async" className={shown ? 'fade' : ''} data-testid="tile-poster" />}
      <video
        ref={video}
        src={loaded ? (poster ? src : `${src}#t=0.05`) : undefined}
        muted
        loop
        playsInline
        preload={poster ? 'none' : 'metadata'}
        onPlaying={() => setPlaying(true)}
        onPause={() => setPlaying(false)}
        onEmptied={() => setPlaying(false)}
        data-testid="tile-video"
      />
    </div>
  );
}

/** The aspect of a generation's canvas (its tile keeps it from queued to done). */
export const aspectOf = (g) => (g && g.width > 0 && g.height > 0 ? g.width / g.height : 16 / 9);

/**
 * One tile. The link is its only Tab stop (the grid moves focus with the
 * arrow keys, see Gallery.jsx); approve, reuse and select are buttons for
 * the pointer, and keys on the focused tile (a, r, u, x).
 */
function Tile({ g, selected = false, selecting = false, tabIndex, onSelect, onFocusTile, onReuse }) {
  const [hot, setHot] = useState(false);
  const active = ACTIVE.has(g.status);
  const refs = referencesOf(g);
  const approved = g.rating === 'approved';
  const rejected = g.rating === 'rejected';
  const media = g.status === 'succeeded' && resultUrl(g);
  const open = (e) => {
    if (e.metaKey || e.ctrlKey || e.button === 1) return; // let the browser open a tab
    e.preventDefault();
    if (e.shiftKey || selecting) { onSelect && onSelect(g.generation_id, { range: e.shiftKey }); return; }
    openGeneration(g.generation_id);
  };
  // On a touch screen a long press (the browser's context menu) selects.
  const longPress = (e) => {
    if (!onSelect || typeof matchMedia === 'undefined' || !matchMedia('(pointer: coarse)').matches) return;
    e.preventDefault();
    onSelect(g.generation_id, { range: false });
  };
  const length = shortLength(g.frames);
  const fewStep = fewStepDetails(g);
  return (
    <article
      className={`tile status-${g.status} ${rejected ? 'rejected' : ''} ${selected ? 'selected' : ''} ${selecting ? 'selecting' : ''}`}
      data-testid="tile"
      data-id={g.generation_id}
      data-status={g.status}
      data-rating={g.rating || ''}
      data-selected={selected ? 'true' : 'false'}
      style={{ '--ar': aspectOf(g) }}
      onMouseEnter={() => setHot(true)}
      onMouseLeave={() => setHot(false)}
      onFocus={() => { setHot(true); onFocusTile && onFocusTile(g.generation_id); }}
      onBlur={(e) => { if (!e.currentTarget.contains(e.relatedTarget)) setHot(false); }}
    >
      <a className="tile-link" href={`/g/${g.generation_id}`} onClick={open} onContextMenu={longPress} tabIndex={tabIndex} data-testid="tile-link">
        {media ? (
          <TileMedia g={g} active={hot} />
        ) : (
          <div className={`tile-card ${g.status === 'processing' ? 'has-preview' : ''}`}>
            {g.status === 'processing' && <LivePreview id={g.generation_id} className="tile-preview" />}
            <p className="tile-prompt">{g.prompt}</p>
            {refs.length > 0 && (
              <div className="tile-refs">{refs.slice(0, 5).map((r) => <RefThumb key={r.id} r={r} small />)}</div>
            )}
            {active && <ProgressLine g={g} />}
            {g.status === 'failed' && <p className="tile-error" data-testid="tile-error">{g.error_message || 'Failed'}</p>}
            {g.status === 'cancelled' && <p className="tile-note">{statusLabel('cancelled')}</p>}
          </div>
        )}
        {media && (
          <span className="tile-caption" data-testid="tile-caption">
            <span className="tile-caption-prompt">{g.prompt}</span>
            <span className="tile-caption-meta">{timeAgo(g.completed_at || g.enqueued_at)}</span>
          </span>
        )}
        <span className="tile-badges">
          {rejected && <span className="badge-pill rejected-badge" data-testid="rejected-badge">rejected</span>}
          {length && <span className="badge-pill length-badge" data-testid="tile-length" title={`${g.frames} frames`}>{length}</span>}
          {fewStep.length > 0 && (
            <span className="badge-pill fewstep-badge" data-testid="tile-fewstep" title={fewStep.map(([k, v]) => `${k}: ${v}`).join('\n')}>
              {fewStepBadge(g)}
            </span>
          )}
        </span>
      </a>
      <button
        type="button"
        className={`select-box ${selected ? 'on' : ''}`}
        tabIndex={-1}
        aria-pressed={selected}
        aria-label={selected ? 'Selected' : 'Select'}
        title={selected ? 'Selected (x)' : 'Select (x; shift-click selects a range)'}
        onClick={(e) => onSelect && onSelect(g.generation_id, { range: e.shiftKey })}
        data-testid="select"
      >
        {selected && <CheckIcon />}
      </button>
      <button
        type="button"
        className="reuse"
        tabIndex={-1}
        aria-label="Reuse: this prompt, its references and settings in the prompt bar"
        title="Reuse: prompt, references and settings in the prompt bar (u)"
        onClick={() => onReuse && onReuse(g)}
        data-testid="reuse"
      >
        <ReuseIcon />
      </button>
      {g.status === 'succeeded' && (
        <button
          type="button"
          className={`approve ${approved ? 'on' : ''}`}
          tabIndex={-1}
          aria-pressed={approved}
          aria-label={approved ? 'Approved (click to clear)' : 'Approve'}
          title={approved ? 'Approved — click to clear (a)' : 'Approve (a)'}
          onClick={() => setRating(g, approved ? null : 'approved')}
          data-testid="approve"
        >
          <CheckIcon />
        </button>
      )}
    </article>
  );
}

export default memo(Tile);
