import { useEffect, useState } from 'react';
import { usePreview } from '../previews.js';

const FRAME_MS = 1000 / 8; // the strip's latent frames, played at 8 per second

function reducedMotion() {
  return typeof matchMedia !== 'undefined' && matchMedia('(prefers-reduced-motion: reduce)').matches;
}

/** Steps through n frames while on; the middle one still where motion is reduced. */
function useFrame(n) {
  const still = reducedMotion();
  const [frame, setFrame] = useState(0);
  useEffect(() => {
    if (n <= 1 || still) return;
    const t = setInterval(() => setFrame((f) => (f + 1) % n), FRAME_MS);
    return () => clearInterval(t);
  }, [n, still]);
  if (still) return Math.floor(n / 2);
  return frame % Math.max(1, n);
}

/**
 * The live preview of a rendering job (docs/API.md, generation_preview): one
 * picture holding the clip's latent frames side by side, shown one frame at a
 * time as an animation. Nothing until the first preview arrives.
 */
export default function LivePreview({ id, className = '' }) {
  const p = usePreview(id);
  const n = p ? p.frames : 1;
  const frame = useFrame(n);
  if (!p) return null;
  const x = n > 1 ? (frame / (n - 1)) * 100 : 0;
  return (
    <div
      className={`live-preview ${className}`}
      role="img"
      aria-label={`Live preview, step ${p.step} of ${p.total_steps}`}
      data-testid="live-preview"
      data-seq={p.seq}
      data-step={p.step}
      data-frame={frame}
      data-frames={n}
      style={{
        backgroundImage: `url("${p.url}")`,
        backgroundSize: `${n * 100}% 100%`,
        backgroundPosition: `${x}% 0`,
        aspectRatio: `${p.frame_width} / ${p.frame_height}`,
      }}
    />
  );
}
