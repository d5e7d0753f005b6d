// Frame arithmetic of 24 fps clips (see Player.jsx).
import { FPS } from './params.js';

/** The frame index shown at media time t (a small tolerance absorbs timebase rounding). */
export const frameAt = (t) => Math.max(0, Math.floor(Number(t) * FPS + 1e-3));

/** The media time in the middle of frame n: seeking there shows exactly frame n. */
export const seekTimeForFrame = (n) => (Math.max(0, n) + 0.5) / FPS;
