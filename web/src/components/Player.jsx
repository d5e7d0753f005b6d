import { forwardRef, useCallback, useEffect, useId, useImperativeHandle, useRef, useState } from 'react';
import {
  MediaController, MediaControlBar, MediaPlayButton, MediaTimeRange, MediaMuteButton,
  MediaVolumeRange, MediaFullscreenButton,
} from 'media-chrome/react';
import { FPS } from '../params.js';
import { frameAt, seekTimeForFrame } from '../frames.js';
import { mediaTime } from '../format.js';

const StepIcon = ({ back }) => (
  <svg viewBox="0 0 24 24" width="16" height="16" aria-hidden="true">
    {back
      ? <path fill="currentColor" d="M6 5h2.5v14H6zM19 5v14L9.5 12z" />
      : <path fill="currentColor" d="M15.5 5H18v14h-2.5zM5 5v14l9.5-7z" />}
  </svg>
);

/**
 * The lightbox player: media-chrome's controls under a <video> (a bar
 * outside the picture, so it never covers the bottom of a portrait clip),
 * plus frame stepping. Clips are exactly 24 fps, so frame n is shown for
 * media times [n/24, (n+1)/24); the readout follows the frame actually
 * presented (requestVideoFrameCallback's mediaTime), and stepping seeks to
 * the middle of the target frame so rounding can never land on its neighbour.
 */
const Player = forwardRef(function Player({ src, poster, frames, label, kind = 'video' }, ref) {
  const controllerId = `player-${useId().replace(/[^\w-]/g, '')}`;
  const video = useRef(null);
  const [frame, setFrame] = useState(0);
  const [total, setTotal] = useState(frames || 0);
  const [time, setTime] = useState(0);
  const [length, setLength] = useState(frames ? frames / FPS : 0);
  const [loop, setLoop] = useState(true);
  const frameRef = useRef(0);
  // The frame a step asked for while its seek is in flight, so quick key
  // repeats add up instead of all starting from the frame still on screen.
  const pending = useRef(null);

  const show = useCallback((n, t) => { frameRef.current = n; setFrame(n); setTime(t); }, []);

  useEffect(() => {
    const v = video.current;
    if (!v) return;
    let handle = 0;
    let stopped = false;
    const hasRVFC = typeof v.requestVideoFrameCallback === 'function';
    const onFrame = (_now, meta) => {
      if (stopped) return;
      show(frameAt(meta.mediaTime), meta.mediaTime);
      handle = v.requestVideoFrameCallback(onFrame);
    };
    if (hasRVFC) handle = v.requestVideoFrameCallback(onFrame);
    // Without rVFC (or before the first frame, or for audio) fall back to currentTime.
    const fromTime = (e) => {
      if (e && e.type === 'seeked' && !v.seeking) pending.current = null;
      if (!hasRVFC || v.paused) show(frameAt(v.currentTime), v.currentTime);
    };
    // floor, not round: an audio tail may outlast the last frame.
    const onMeta = () => {
      if (!Number.isFinite(v.duration)) return;
      setLength(v.duration);
      if (!frames) setTotal(Math.floor(v.duration * FPS + 1e-3));
    };
    v.addEventListener('seeked', fromTime);
    v.addEventListener('timeupdate', fromTime);
    v.addEventListener('loadedmetadata', onMeta);
    v.addEventListener('durationchange', onMeta);
    return () => {
      stopped = true;
      if (hasRVFC && handle) v.cancelVideoFrameCallback(handle);
      v.removeEventListener('seeked', fromTime);
      v.removeEventListener('timeupdate', fromTime);
      v.removeEventListener('loadedmetadata', onMeta);
      v.removeEventListener('durationchange', onMeta);
    };
  }, [src, frames, show]);

  useEffect(() => { if (frames) setTotal(frames); }, [frames]);
  useEffect(() => { if (video.current) video.current.loop = loop; }, [loop]);

  const lastFrame = () => Math.max(0, (total || Math.round(((video.current && video.current.duration) || 0) * FPS)) - 1);
  const goto = (target) => {
    const v = video.current;
    if (!v) return;
    v.pause();
    const n = Math.min(lastFrame(), Math.max(0, target));
    pending.current = n;
    v.currentTime = seekTimeForFrame(n);
  };
  const step = (delta) => goto((pending.current ?? frameRef.current) + delta);

  useImperativeHandle(ref, () => ({
    step,
    /** Frame n (0-based), clamped to the clip; Infinity is the last one. */
    goto(n) { goto(n === Infinity ? lastFrame() : n); },
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
    /** Seconds from the start, or the end (Infinity). */
    seekTo(seconds) {
      const v = video.current;
      if (!v) return;
      const end = Number.isFinite(v.duration) ? v.duration : 0;
      v.currentTime = Math.min(end, Math.max(0, seconds));
    },
    toggleLoop() { setLoop((l) => !l); },
    toggleMute() { const v = video.current; if (v) v.muted = !v.muted; },
    get element() { return video.current; },
  }));

  if (kind === 'image') {
    return <div className="viewer-still"><img src={src} alt={label || ''} /></div>;
  }
  const audio = kind === 'audio';
  const controller = (
    <MediaController id={controllerId} className={`player ${audio ? 'audio' : ''}`} nohotkeys="" audio={audio ? true : undefined} data-testid="player">
      {audio ? (
        <audio slot="media" src={src} ref={video} preload="auto" />
      ) : (
        <video slot="media" src={src} poster={poster || undefined} ref={video} preload="auto" playsInline loop={loop} data-testid="player-video" />
      )}
    </MediaController>
  );
  const bar = (
    <MediaControlBar className="player-bar" mediacontroller={controllerId} data-testid="player-bar">
      <MediaPlayButton />
      {!audio && (
        <span className="frame-step" role="group" aria-label="Frame">
          <button type="button" className="bar-button" aria-label="Previous frame (←)" title="Previous frame (←; shift: one second)" onClick={() => step(-1)} data-testid="frame-prev"><StepIcon back /></button>
          <span className="frame-readout" data-testid="frame-readout" aria-live="off" title="frame / total (←/→ one frame, shift for one second, Home/End first/last)">
            {total ? `${Math.min(frame + 1, total)} / ${total}` : `${frame + 1}`}
          </span>
          <button type="button" className="bar-button" aria-label="Next frame (→)" title="Next frame (→; shift: one second)" onClick={() => step(1)} data-testid="frame-next"><StepIcon /></button>
        </span>
      )}
      <MediaTimeRange />
      <span className="time-readout" data-testid="time-readout">{mediaTime(time)} / {mediaTime(length)}</span>
      <button type="button" className={`bar-button loop-button ${loop ? 'on' : ''}`} aria-pressed={loop} aria-label="Loop (l)" title="Loop (l)" onClick={() => setLoop((l) => !l)} data-testid="loop">
        <svg viewBox="0 0 24 24" width="18" height="18" aria-hidden="true"><path fill="none" stroke="currentColor" strokeWidth="2" strokeLinecap="round" strokeLinejoin="round" d="M17 2l3 3-3 3M4 11V9a4 4 0 0 1 4-4h12M7 22l-3-3 3-3M20 13v2a4 4 0 0 1-4 4H4" /></svg>
      </button>
      <MediaMuteButton />
      <MediaVolumeRange />
      {!audio && <MediaFullscreenButton />}
    </MediaControlBar>
  );
  if (!audio) return <div className="player-wrap">{controller}{bar}</div>;
  // Audio has no picture: say what is playing instead of a black box.
  return (
    <div className="audio-view" data-testid="audio-view">
      <div className="audio-face" aria-hidden="true"><span className="audio-glyph">♪</span></div>
      <p className="audio-label">{label || 'Audio'}</p>
      <div className="player-wrap audio">{controller}{bar}</div>
    </div>
  );
});

export default Player;
