import { useEffect, useId, useRef, useState } from 'react';
import { api } from '../api.js';
import {
  DEFAULT_STEPS, FPS, FRAME_STEP, FRAME_BASE, MAX_BATCH, MAX_FRAMES, MAX_LORA_STRENGTH, MIN_FRAMES, SIZE_GRID,
  SIZE_PRESETS, SPEEDS, adapterPreset, formatSeconds, freshSeed, secondsToFrames, snapFrames, snapSide,
} from '../params.js';

/** Length on the 17n+5 grid, edited as a slider, in frames or in seconds. */
function LengthField({ frames, onChange }) {
  const [framesText, setFramesText] = useState(String(frames));
  const [secondsText, setSecondsText] = useState((frames / FPS).toFixed(2));
  useEffect(() => { setFramesText(String(frames)); setSecondsText((frames / FPS).toFixed(2)); }, [frames]);
  const id = useId();
  const clamp = (f) => Math.min(MAX_FRAMES, Math.max(MIN_FRAMES, f));
  return (
    <fieldset className="field">
      <legend>Length</legend>
      <input
        id={`${id}-slider`}
        type="range"
        min={0}
        max={(MAX_FRAMES - FRAME_BASE) / FRAME_STEP}
        step={1}
        value={(frames - FRAME_BASE) / FRAME_STEP}
        onChange={(e) => onChange(Number(e.target.value) * FRAME_STEP + FRAME_BASE)}
        aria-label="Length"
        aria-valuetext={`${frames} frames, ${formatSeconds(frames / FPS)}`}
        data-testid="length-slider"
      />
      <div className="row">
        <label>
          <input type="number" inputMode="numeric" value={framesText} min={MIN_FRAMES} max={MAX_FRAMES}
            onChange={(e) => setFramesText(e.target.value)}
            onBlur={() => onChange(clamp(snapFrames(framesText)))}
            onKeyDown={(e) => { if (e.key === 'Enter') { e.preventDefault(); onChange(clamp(snapFrames(framesText))); } }}
            data-testid="frames-input" />
          <span>frames</span>
        </label>
        <label>
          <input type="number" inputMode="decimal" step="0.01" value={secondsText}
            onChange={(e) => setSecondsText(e.target.value)}
            onBlur={() => onChange(clamp(secondsToFrames(secondsText)))}
            onKeyDown={(e) => { if (e.key === 'Enter') { e.preventDefault(); onChange(clamp(secondsToFrames(secondsText))); } }}
            data-testid="seconds-input" />
          <span>seconds</span>
        </label>
      </div>
      <p className="hint">17n+5 frames at 24 fps: frames snap down, seconds snap up.</p>
    </fieldset>
  );
}

/** The adapters a worker published (GET /api/loras), read when the popover opens. */
function useAdapters() {
  const [state, setState] = useState({ loading: true, loras: [], error: '' });
  useEffect(() => {
    const ctl = new AbortController();
    api.loras({ signal: ctl.signal })
      .then((d) => setState({ loading: false, loras: (d && d.loras) || [], error: '' }))
      .catch((e) => { if (e.name !== 'AbortError') setState({ loading: false, loras: [], error: e.message }); });
    return () => ctl.abort();
  }, []);
  return state;
}

/**
 * A LoRA adapter and its strength. Picking one that was distilled for a
 * sampler (its preset) sets the sampler and with it the steps; the release
 * grid stays one click away.
 */
function AdapterField({ params, set }) {
  const { loading, loras, error } = useAdapters();
  const id = useId();
  const entry = loras.find((l) => l.name === params.lora);
  const preset = adapterPreset(entry);
  const pick = (name) => {
    const e = loras.find((l) => l.name === name);
    const p = adapterPreset(e);
    if (!name) set({ lora: '', sampler: '', steps: params.sampler ? DEFAULT_STEPS : params.steps });
    else if (p) set({ lora: name, sampler: p.sampler, steps: p.steps });
    else set({ lora: name, sampler: '' });
  };
  const known = loading || loras.some((l) => l.name === params.lora);
  return (
    <fieldset className="field" data-testid="adapter-field">
      <legend>Adapter</legend>
      <div className="row">
        <select id={`${id}-lora`} aria-label="Adapter" value={params.lora} onChange={(e) => pick(e.target.value)} data-testid="adapter-select">
          <option value="">None</option>
          {!known && params.lora && <option value={params.lora}>{params.lora} (not on the server)</option>}
          {loras.map((l) => (
            <option key={l.name} value={l.name} disabled={Boolean(l.error)} title={l.error || l.targets}>
              {l.name.replace(/\.safetensors$/, '')}{l.error ? ' (unusable)' : l.family && l.family !== 'generic' ? ` · ${l.family}` : ''}
            </option>
          ))}
        </select>
        {params.lora && (
          <label>
            <span>strength</span>
            <input type="number" step="0.05" min={-MAX_LORA_STRENGTH} max={MAX_LORA_STRENGTH} value={params.loraStrength} aria-label="Adapter strength"
              onChange={(e) => set({ loraStrength: e.target.value === '' ? '' : Number(e.target.value) })} data-testid="adapter-strength" />
          </label>
        )}
      </div>
      {params.lora && preset && (
        <div className="segmented" role="radiogroup" aria-label="Sampler">
          <button type="button" role="radio" aria-checked={params.sampler === preset.sampler} className={params.sampler === preset.sampler ? 'on' : ''}
            onClick={() => set({ sampler: preset.sampler, steps: preset.steps })} data-testid="sampler-adapter">
            {preset.sampler} <small>{preset.steps - 1} forwards</small>
          </button>
          <button type="button" role="radio" aria-checked={!params.sampler} className={!params.sampler ? 'on' : ''}
            onClick={() => set({ sampler: '', steps: DEFAULT_STEPS })} data-testid="sampler-release">Release grid</button>
        </div>
      )}
      <p className="hint" data-testid="adapter-hint">
        {error ? `The adapter list could not be read: ${error}`
          : loading ? 'Reading the adapters…'
            : !loras.length ? 'No adapters on the server ($MODELS_PATH/loras).'
              : entry && entry.error ? entry.error
                : preset ? `Distilled for ${preset.sampler}: ${preset.steps} steps.` : 'LoRA adapters from $MODELS_PATH/loras.'}
      </p>
    </fieldset>
  );
}

function SpeedField({ speed, set }) {
  const current = SPEEDS.find((s) => s.id === speed) || SPEEDS[0];
  return (
    <fieldset className="field">
      <legend>Speed</legend>
      <div className="segmented" role="radiogroup" aria-label="Speed">
        {SPEEDS.map((s) => (
          <button key={s.id} type="button" role="radio" aria-checked={speed === s.id} className={speed === s.id ? 'on' : ''}
            title={s.hint} onClick={() => set({ speed: s.id })} data-testid={`speed-${s.id}`}>{s.label}</button>
        ))}
      </div>
      <p className="hint">{current.id === 'off' ? 'Lossy shortcuts, off by default.' : `Lossy: ${current.hint}.`}</p>
    </fieldset>
  );
}

export default function ParamsPopover({ params, set, partition, onClose, estimate = '', measured = 0 }) {
  const ref = useRef(null);
  useEffect(() => {
    const onDown = (e) => { if (ref.current && !ref.current.contains(e.target) && !e.target.closest('[data-params-toggle]')) onClose(); };
    document.addEventListener('mousedown', onDown);
    const first = ref.current && ref.current.querySelector('input, button');
    if (first) first.focus();
    return () => document.removeEventListener('mousedown', onDown);
  }, [onClose]);

  return (
    <div
      ref={ref}
      className="popover params-popover"
      role="dialog"
      aria-label="Parameters"
      data-testid="params-popover"
      onKeyDown={(e) => { if (e.key === 'Escape') { e.stopPropagation(); onClose(true); } }}
    >
      <LengthField frames={params.frames} onChange={(frames) => set({ frames })} />

      <fieldset className="field">
        <legend>Size</legend>
        <div className="segmented wrap" role="radiogroup" aria-label="Size">
          {[...SIZE_PRESETS, { id: 'custom', label: 'Custom' }].map((p) => (
            <button key={p.id} type="button" role="radio" aria-checked={params.size === p.id} className={params.size === p.id ? 'on' : ''}
              title={p.width ? `${p.width}×${p.height}` : p.hint} onClick={() => set({ size: p.id })} data-testid={`size-${p.id}`}>
              {p.label}{p.width && p.id !== 'h3' ? <small> {p.width}×{p.height}</small> : null}
            </button>
          ))}
        </div>
        {params.size === 'custom' && (
          <div className="row">
            <label><input type="number" step={SIZE_GRID} min={SIZE_GRID} value={params.width} aria-label="Width"
              onChange={(e) => set({ width: e.target.value === '' ? '' : Number(e.target.value) })}
              onBlur={(e) => e.target.value !== '' && set({ width: snapSide(e.target.value) })} data-testid="width-input" /><span>×</span></label>
            <label><input type="number" step={SIZE_GRID} min={SIZE_GRID} value={params.height} aria-label="Height"
              onChange={(e) => set({ height: e.target.value === '' ? '' : Number(e.target.value) })}
              onBlur={(e) => e.target.value !== '' && set({ height: snapSide(e.target.value) })} data-testid="height-input" /><span>px</span></label>
          </div>
        )}
        <p className="hint">Sides are multiples of {SIZE_GRID} px.</p>
      </fieldset>

      <div className="field-row">
        <label className="field inline" title={params.sampler ? `set by the sampler ${params.sampler}` : undefined}>
          <span>Steps</span>
          <input type="number" min={2} max={200} value={params.steps} disabled={Boolean(params.sampler)}
            onChange={(e) => set({ steps: e.target.value === '' ? '' : Number(e.target.value) })} data-testid="steps-input" />
        </label>
        <label className="field inline switch">
          <input type="checkbox" checked={params.audio} onChange={(e) => set({ audio: e.target.checked })} data-testid="audio-toggle" />
          <span>Audio</span>
        </label>
        <label className="field inline switch" title="Opt-in fast mode">
          <input type="checkbox" checked={params.fast} onChange={(e) => set({ fast: e.target.checked })} data-testid="fast-toggle" />
          <span>Fast</span>
        </label>
      </div>

      <AdapterField params={params} set={set} />
      <SpeedField speed={params.speed} set={set} />

      <fieldset className="field">
        <legend>Seed</legend>
        <div className="row">
          <div className="segmented" role="radiogroup" aria-label="Seed mode">
            <button type="button" role="radio" aria-checked={params.seedMode === 'random'} className={params.seedMode === 'random' ? 'on' : ''} onClick={() => set({ seedMode: 'random' })} data-testid="seed-random">Random</button>
            <button type="button" role="radio" aria-checked={params.seedMode === 'locked'} className={params.seedMode === 'locked' ? 'on' : ''} onClick={() => set({ seedMode: 'locked', seed: params.seed === '' ? freshSeed() : params.seed })} data-testid="seed-locked">Locked</button>
          </div>
          {params.seedMode === 'locked' && (
            <input type="text" inputMode="numeric" value={params.seed} aria-label="Seed" onChange={(e) => set({ seed: e.target.value })} data-testid="seed-input" />
          )}
        </div>
      </fieldset>

      <fieldset className="field">
        <legend>Batch</legend>
        <div className="segmented" role="radiogroup" aria-label="Clips per request">
          {Array.from({ length: MAX_BATCH }, (_, i) => i + 1).map((n) => (
            <button key={n} type="button" role="radio" aria-checked={Number(params.batch) === n} className={Number(params.batch) === n ? 'on' : ''}
              onClick={() => set({ batch: n })} data-testid={`batch-${n}`}>×{n}<span className="visually-hidden">{n === 1 ? ' (1 clip)' : ` (${n} clips)`}</span></button>
          ))}
        </div>
        <p className="hint">Each clip of a batch gets its own seed (a locked seed counts up by one).</p>
      </fieldset>

      <fieldset className="field">
        <legend>Model</legend>
        <div className="segmented" role="radiogroup" aria-label="Model">
          {['fl2va', 'ref2va'].map((m) => (
            <button key={m} type="button" role="radio" aria-checked={partition === m} className={partition === m ? 'on' : ''}
              onClick={() => set({ partition: m, partitionChosen: true })} data-testid={`model-${m}`}>{m}</button>
          ))}
        </div>
        <p className="hint">fl2va: first/last frame. ref2va: reference images, videos and audio.</p>
      </fieldset>

      <p className="estimate" data-testid="estimate">
        {estimate ? `Estimated: ${estimate}` : measured ? '' : 'No estimate yet: no clip has finished on this server.'}
      </p>
    </div>
  );
}
