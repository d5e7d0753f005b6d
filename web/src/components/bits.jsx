// Small shared pieces: icons and reference thumbnails.
import { useState } from 'react';

export const CheckIcon = () => (
  <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true"><path fill="none" stroke="currentColor" strokeWidth="3" strokeLinecap="round" strokeLinejoin="round" d="m5 12.5 4.5 4.5L19 7.5" /></svg>
);
export const XIcon = () => (
  <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true"><path fill="none" stroke="currentColor" strokeWidth="2.5" strokeLinecap="round" d="M6 6l12 12M18 6 6 18" /></svg>
);
export const ReuseIcon = () => (
  <svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true"><path fill="none" stroke="currentColor" strokeWidth="2.2" strokeLinecap="round" strokeLinejoin="round" d="M4 12a8 8 0 1 0 2.4-5.7M4 4v4.5h4.5" /></svg>
);
export const PlayBadge = () => (
  <svg viewBox="0 0 16 16" width="12" height="12" aria-hidden="true"><path fill="currentColor" d="M4 2.5v11l9-5.5z" /></svg>
);
export const SpeakerBadge = () => (
  <svg viewBox="0 0 16 16" width="12" height="12" aria-hidden="true"><path fill="currentColor" d="M2 6h3l4-3v10L5 10H2z" /><path fill="none" stroke="currentColor" strokeWidth="1.5" d="M11 5.5a3.5 3.5 0 0 1 0 5M12.5 3.5a6 6 0 0 1 0 9" /></svg>
);

export const kindGlyph = (kind) => (kind === 'audio' ? '♪' : kind === 'video' ? '▶' : '▦');

/**
 * A thumbnail image that turns into the kind's glyph when it cannot be shown
 * (an upload purged from disk, a file the browser cannot decode) instead of
 * the browser's broken-image icon.
 */
export function ThumbImage({ src, kind, lazy = true }) {
  const [failed, setFailed] = useState(null);
  if (!src || failed === src) return <span className="ref-glyph" data-testid="thumb-glyph" aria-hidden="true">{kindGlyph(kind)}</span>;
  return <img src={src} alt="" loading={lazy ? 'lazy' : undefined} onError={() => setFailed(src)} />;
}

/**
 * A reference's thumbnail: the picture with a small kind badge (a video's
 * play mark), or, with no picture (audio, a file that is gone), the kind's
 * glyph alone; a badge over a glyph would hide it.
 */
export function RefThumb({ r, small }) {
  const [failed, setFailed] = useState(null);
  const picture = Boolean(r.thumb) && failed !== r.thumb;
  return (
    <span className={`ref-thumb kind-${r.kind} ${small ? 'small' : ''}`} title={r.label}>
      {picture
        ? <img src={r.thumb} alt="" loading="lazy" onError={() => setFailed(r.thumb)} />
        : <span className="ref-glyph" data-testid="thumb-glyph" aria-hidden="true">{kindGlyph(r.kind)}</span>}
      {picture && r.kind === 'video' && <span className="badge" data-testid="kind-badge"><PlayBadge /></span>}
      {picture && r.kind === 'audio' && <span className="badge" data-testid="kind-badge"><SpeakerBadge /></span>}
    </span>
  );
}
