import { memo, useEffect, useRef, useState } from 'react';
import { ACTIVE } from '../api.js';
import { openGeneration } from '../router.js';
import { clipLength, progressFraction, stageLabel, timeAgo } from '../format.js';
import { posterUrl, referencesOf, resultUrl } from '../media.js';
import { setRating } from '../actions.js';
import { CheckIcon, RefThumb } from './bits.jsx';

export function ProgressLine({ g }) {
  const frac = progressFraction(g);
  const denoising = g.step !== null && g.step !== undefined && g.total_steps;
  let text = g.status === 'queued' ? 'Queued' : stageLabel(g.stage) || 'Starting';
  if (g.status === 'processing' && denoising && /denois/i.test(g.stage || 'denoise')) text += ` · step ${g.step}/${g.total_steps}`;
  if (g.cancel_requested) text += ' · cancelling';
  return (
    <div className="progress" data-testid="progress">
      <div className="progress-bar" role="progressbar" aria-valuemin={0} aria-valuemax={100} aria-valuenow={Math.round(frac * 100)} aria-label="progress">
        <span style={{ transform: `scaleX(${frac})` }} className={g.status === 'queued' ? 'idle' : ''} />
      </div>
      <span className="progress-text" data-testid="progress-text">{text}</span>
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

function TileMedia({ g }) {
  const [hover, setHover] = useState(false);
  const video = useRef(null);
  const box = useRef(null);
  const near = useNear(box);
  const src = resultUrl(g);
  const poster = posterUrl(g);
  const start = () => { setHover(true); const v = video.current; if (v) { v.currentTime = 0; v.play().catch(() => {}); } };
  const stop = () => { setHover(false); const v = video.current; if (v) v.pause(); };
  return (
    <div ref={box} className="tile-media" onMouseEnter={start} onMouseLeave={stop} onFocus={start} onBlur={stop}>
      {poster && <img src={poster} alt="" loading="lazy" decoding="async" className={hover ? 'fade' : ''} />}
      <video
        ref={video}
        src={src && (near || hover) ? (poster ? src : `${src}#t=0.05`) : undefined}
        muted
        loop
        playsInline
        preload={poster ? 'none' : 'metadata'}
        className={poster && !hover ? 'under' : ''}
        data-testid="tile-video"
      />
    </div>
  );
}

function Tile({ g }) {
  const active = ACTIVE.has(g.status);
  const refs = referencesOf(g);
  const approved = g.rating === 'approved';
  const open = (e) => {
    if (e.metaKey || e.ctrlKey || e.shiftKey || e.button === 1) return; // let the browser open a tab
    e.preventDefault();
    openGeneration(g.generation_id);
  };
  return (
    <article
      className={`tile status-${g.status} ${g.rating === 'rejected' ? 'rejected' : ''}`}
      data-testid="tile"
      data-id={g.generation_id}
      data-status={g.status}
      data-rating={g.rating || ''}
    >
      <a className="tile-link" href={`/g/${g.generation_id}`} onClick={open} aria-label={`Open: ${g.prompt || 'generation'}${g.rating === 'rejected' ? ' (rejected)' : ''}`}>
        {g.status === 'succeeded' && resultUrl(g) ? (
          <TileMedia g={g} />
        ) : (
          <div className="tile-card">
            <p className="tile-prompt">{g.prompt}</p>
            {refs.length > 0 && (
              <div className="tile-refs">{refs.slice(0, 5).map((r) => <RefThumb key={r.id} r={r} small />)}</div>
            )}
            {active && <ProgressLine g={g} />}
            {g.status === 'failed' && <p className="tile-error" data-testid="tile-error">{g.error_message || 'Failed'}</p>}
            {g.status === 'cancelled' && <p className="tile-note">Cancelled</p>}
          </div>
        )}
      </a>
      {g.rating === 'rejected' && <span className="rejected-badge" data-testid="rejected-badge" title="Rejected">rejected</span>}
      {g.status === 'succeeded' && (
        <>
          <div className="tile-caption" aria-hidden="true">
            <span className="tile-caption-prompt">{g.prompt}</span>
            <span className="tile-caption-meta">{clipLength(g.frames)} · {timeAgo(g.completed_at || g.enqueued_at)}</span>
          </div>
          <button
            type="button"
            className={`approve ${approved ? 'on' : ''}`}
            aria-pressed={approved}
            aria-label={approved ? 'Approved (click to clear)' : 'Approve'}
            title={approved ? 'Approved — click to clear' : 'Approve'}
            onClick={() => setRating(g, approved ? null : 'approved')}
            data-testid="approve"
          >
            <CheckIcon />
          </button>
        </>
      )}
    </article>
  );
}

export default memo(Tile);
