import { forwardRef, useCallback, useEffect, useImperativeHandle, useRef, useState } from 'react';
import {
  MediaController, MediaControlBar, MediaPlayButton, MediaTimeRange, MediaMuteButton,
  MediaVolumeRange, MediaFullscreenButton, MediaTimeDisplay,
} from 'media-chrome/react';
import { FPS } from '../params.js';
import { frameAt, seekTimeForFrame } from '../frames.js';

/**
 * The lightbox player: media-chrome's controls around a <video>, plus frame
 * stepping. Clips are exactly 24 fps, so frame n is shown for media times
 * [n/24, (n+1)/24); the readout follows the frame actually presented
 * (requestVideoFrameCallback's mediaTime), and stepping seeks to the middle
 * of the target frame so rounding can never land on its neighbour.
 */
const Player = forwardRef(function Player({ src, poster, frames, label, kind = 'video' }, ref) {
  const video = useRef(null);
  const [frame, setFrame] = useState(0);
  const [total, setTotal] = useState(frames || 0);
  const [loop, setLoop] = useState(true);
  const frameRef = useRef(0);
  // The frame a step asked for while its seek is in flight, so quick key
  // repeats add up instead of all starting from the frame still on screen.
  const pending = useRef(null);

  const show = useCallback((n) => { frameRef.current = n; setFrame(n); }, []);

  useEffect(() => {
    const v = video.current;
    if (!v) return;
    let handle = 0;
    let stopped = false;
    const hasRVFC = typeof v.requestVideoFrameCallback === 'function';
    const onFrame = (_now, meta) => {
      if (stopped) return;
      show(frameAt(meta.mediaTime));
      handle = v.requestVideoFrameCallback(onFrame);
    };
    if (hasRVFC) handle = v.requestVideoFrameCallback(onFrame);
    // Without rVFC (or before the first frame) fall back to currentTime.
    const fromTime = (e) => {
      if (e && e.type === 'seeked' && !v.seeking) pending.current = null;
      if (!hasRVFC || v.paused) show(frameAt(v.currentTime));
    };
    // floor, not round: an audio tail may outlast the last frame.
    const onMeta = () => { if (!frames && Number.isFinite(v.duration)) setTotal(Math.floor(v.duration * FPS + 1e-3)); };
    v.addEventListener('seeked', fromTime);
    v.addEventListener('timeupdate', fromTime);
    v.addEventListener('loadedmetadata', onMeta);
    return () => {
      stopped = true;
      if (hasRVFC && handle) v.cancelVideoFrameCallback(handle);
      v.removeEventListener('seeked', fromTime);
      v.removeEventListener('timeupdate', fromTime);
      v.removeEventListener('loadedmetadata', onMeta);
    };
  }, [src, frames, show]);

  useEffect(() => { if (frames) setTotal(frames); }, [frames]);
  useEffect(() => { if (video.current) video.current.loop = loop; }, [loop]);

  useImperativeHandle(ref, () => ({
    step(delta) {
      const v = video.current;
      if (!v) return;
      v.pause();
      const last = Math.max(0, (total || Math.round((v.duration || 0) * FPS)) - 1);
      const from = pending.current ?? frameRef.current;
      const target = Math.min(last, Math.max(0, from + delta));
      pending.current = target;
      v.currentTime = seekTimeForFrame(target);
    },
    togglePlay() {
      const v = video.current;
      if (!v) return;
      pending.current = null;
      if (v.paused) v.play().catch(() => {}); else v.pause();
    },
    /** Moves by whole seconds (audio has no frames to step). */
    seek(seconds) {
      const v = video.current;
      if (!v) return;
      const end = Number.isFinite(v.duration) ? v.duration : Infinity;
      v.currentTime = Math.min(end, Math.max(0, (v.currentTime || 0) + seconds));
    },
    toggleLoop() { setLoop((l) => !l); },
    toggleMute() { const v = video.current; if (v) v.muted = !v.muted; },
    get element() { return video.current; },
  }), [total]);

  if (kind === 'image') {
    return <div className="viewer-still"><img src={src} alt={label || ''} /></div>;
  }
  const controller = (
    <MediaController className={`player ${kind === 'audio' ? 'audio' : ''}`} nohotkeys="" audio={kind === 'audio' ? true : undefined} data-testid="player">
      {kind === 'audio' ? (
        <audio slot="media" src={src} ref={video} preload="auto" />
      ) : (
        <video slot="media" src={src} poster={poster || undefined} ref={video} preload="auto" playsInline loop={loop} data-testid="player-video" />
      )}
      <MediaControlBar className="player-bar">
        <MediaPlayButton />
        {kind !== 'audio' && (
          <span className="frame-readout" data-testid="frame-readout" aria-live="off" title="frame / total (←/→ one frame, shift for one second)">
            {total ? `${Math.min(frame + 1, total)} / ${total}` : `${frame + 1}`}
          </span>
        )}
        <MediaTimeRange />
        <MediaTimeDisplay showduration="" />
        <button type="button" className={`loop-button ${loop ? 'on' : ''}`} aria-pressed={loop} aria-label="Loop (l)" title="Loop (l)" onClick={() => setLoop((l) => !l)} data-testid="loop">
          <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true"><path fill="none" stroke="currentColor" strokeWidth="2" strokeLinecap="round" strokeLinejoin="round" d="M17 2l3 3-3 3M4 11V9a4 4 0 0 1 4-4h12M7 22l-3-3 3-3M20 13v2a4 4 0 0 1-4 4H4" /></svg>
        </button>
        <MediaMuteButton />
        <MediaVolumeRange />
        {kind !== 'audio' && <MediaFullscreenButton />}
      </MediaControlBar>
    </MediaController>
  );
  if (kind !== 'audio') return controller;
  // Audio has no picture: say what is playing instead of a black box.
  return (
    <div className="audio-view" data-testid="audio-view">
      <div className="audio-face" aria-hidden="true"><span className="audio-glyph">♪</span></div>
      <p className="audio-label">{label || 'Audio'}</p>
      {controller}
    </div>
  );
});

export default Player;
