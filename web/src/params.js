// Generation parameters: the grids H3 works on and the rules the server
// enforces, checked here first so the prompt bar can explain a problem
// before anything is sent. The server stays the authority: its 400s are
// shown as they come.

export const FPS = 24;
export const FRAME_STEP = 17; // frames = 17n + 5 (the video VAE's temporal stride)
export const FRAME_BASE = 5;
export const MIN_FRAMES = FRAME_BASE;
export const MAX_FRAMES = FRAME_STEP * 21 + FRAME_BASE; // 362 frames, ~15 s (the server's limit)
export const DEFAULT_FRAMES = 124;
export const DEFAULT_STEPS = 28;
export const SIZE_GRID = 32;
export const MIN_SIDE = 64;
export const MAX_SIDE = 2048;
export const MAX_PROMPT = 8000;
export const MAX_REFS = 9;
export const MAX_REF_VIDEOS = 3;
export const MAX_REF_AUDIO = 3;
export const MAX_AUDIO_SECONDS = 15;
export const MAX_SEED = Number.MAX_SAFE_INTEGER; // 2^53 - 1, as the API accepts
export const MAX_BATCH = 4; // num_generations: rows from one request

/** A new seed, as the server would draw one. */
export const freshSeed = () => String(Math.floor(Math.random() * MAX_SEED));

export const SIZE_PRESETS = [
  { id: 'auto', label: 'Auto', hint: '1280×704, or from the first image' },
  { id: '16:9', label: '16:9', width: 1280, height: 704 },
  { id: '9:16', label: '9:16', width: 704, height: 1280 },
  { id: '1:1', label: '1:1', width: 960, height: 960 },
  { id: '4:3', label: '4:3', width: 1088, height: 832 },
  { id: 'h3', label: 'H3 1344×768', width: 1344, height: 768 },
];

/** Snaps a frame count down onto the 17n+5 grid (never below 5). */
export function snapFrames(frames) {
  const f = Math.floor(Number(frames));
  if (!Number.isFinite(f) || f < MIN_FRAMES) return MIN_FRAMES;
  return Math.floor((f - FRAME_BASE) / FRAME_STEP) * FRAME_STEP + FRAME_BASE;
}

/** Seconds at 24 fps, snapped up onto the grid, as the CLI does. */
export function secondsToFrames(seconds) {
  const s = Number(seconds);
  if (!Number.isFinite(s) || s <= 0) return MIN_FRAMES;
  const raw = Math.ceil(s * FPS - 1e-9);
  if (raw <= MIN_FRAMES) return MIN_FRAMES;
  return Math.ceil((raw - FRAME_BASE) / FRAME_STEP) * FRAME_STEP + FRAME_BASE;
}

export const framesToSeconds = (frames) => frames / FPS;
export const isOnFrameGrid = (f) => Number.isInteger(f) && f >= MIN_FRAMES && (f - FRAME_BASE) % FRAME_STEP === 0;

/** Every length the slider offers, as {n, frames, seconds}. */
export function frameChoices() {
  const out = [];
  for (let f = MIN_FRAMES; f <= MAX_FRAMES; f += FRAME_STEP) out.push({ frames: f, seconds: f / FPS });
  return out;
}

export const snapSide = (v) => Math.max(SIZE_GRID, Math.round(Number(v) / SIZE_GRID) * SIZE_GRID);

export function formatSeconds(s) {
  return `${(Math.round(s * 100) / 100).toFixed(2).replace(/\.?0+$/, '')} s`;
}

export const MAX_LORA_STRENGTH = 100; // the server's range (ComfyUI's)

/**
 * The "speed" choice: opt-in ways to compute less per clip, both lossy
 * (docs/SPARSE.md, docs/CACHING.md): sparse attention (preset sol) and the
 * step cache (fbc, its conservative preset).
 */
export const SPEEDS = [
  { id: 'off', label: 'Off', hint: 'every forward, dense attention' },
  { id: 'sparse', label: 'Sparse', hint: 'sparse attention (sol): long clips gain most', sparse: 'sol' },
  { id: 'cache', label: 'Cache', hint: 'skip forwards whose first block barely changes (fbc)', cache: 'fbc' },
  { id: 'both', label: 'Both', hint: 'sparse attention and the step cache', sparse: 'sol', cache: 'fbc' },
];

/** The speed choice a stored generation used. */
export function speedOf(g) {
  const sparse = g.sparse && g.sparse !== 'off';
  const cache = g.cache && g.cache !== 'off';
  return sparse && cache ? 'both' : sparse ? 'sparse' : cache ? 'cache' : 'off';
}

/** An adapter's entry from GET /api/loras: its sampler preset and steps, when it names one. */
export const adapterPreset = (entry) => (entry && entry.preset && entry.forwards ? { sampler: entry.preset, steps: entry.forwards + 1 } : null);

/** What a generation used beyond the basics, as [label, value] rows (empty for a plain clip). */
export function fewStepDetails(g) {
  const rows = [];
  for (const l of Array.isArray(g.loras) ? g.loras : []) rows.push(['Adapter', `${l.name} ×${l.strength ?? 1}`]);
  if (typeof g.sampler === 'string') rows.push(['Sampler', g.sampler]);
  else if (Array.isArray(g.sampler)) rows.push(['Sampler', `custom (${g.sampler.length} sigmas)`]);
  if (g.sparse && g.sparse !== 'off') rows.push(['Sparse', g.sparse]);
  if (g.cache && g.cache !== 'off') rows.push(['Cache', g.cache]);
  return rows;
}

export const defaultParams = () => ({
  frames: DEFAULT_FRAMES,
  size: 'auto',
  width: 1280,
  height: 704,
  steps: DEFAULT_STEPS,
  seedMode: 'random',
  seed: '',
  audio: true,
  fast: false,
  partition: 'fl2va',
  partitionChosen: false, // true once the user picked a model by hand
  batch: 1, // clips from one request, each with its own seed
  lora: '', // an adapter's name from GET /api/loras, '' = none
  loraStrength: 1,
  sampler: '', // a sampler preset (set from the adapter's), '' = the release grid at `steps`
  speed: 'off', // SPEEDS
});

/**
 * The partition the attachments call for: audio references only exist in
 * ref2va, so attaching audio switches to it (unless the user chose by hand,
 * in which case validate() explains the conflict instead).
 */
export function impliedPartition(params, chips) {
  if (params.partitionChosen) return params.partition;
  return chips.some((c) => c.kind === 'audio') ? 'ref2va' : params.partition;
}

/**
 * Checks a request before it is sent. Returns a list of {field, message}
 * problems, each saying what is wrong and what is accepted; empty = valid.
 */
export function validate({ prompt, params, chips, lastChipKey }) {
  const problems = [];
  const add = (field, message) => problems.push({ field, message });
  const text = (prompt || '').trim();
  if (!text) add('prompt', 'Write a prompt first.');
  if ((prompt || '').length > MAX_PROMPT) add('prompt', `The prompt is ${prompt.length} characters; at most ${MAX_PROMPT} are accepted.`);

  const pending = chips.filter((c) => c.state === 'uploading');
  if (pending.length) add('refs', `Wait for ${pending.length === 1 ? 'the upload' : `${pending.length} uploads`} to finish.`);
  const broken = chips.filter((c) => c.state === 'error');
  // The server's reason for each refused upload, in full (the chip has room for a few words only).
  for (const c of broken) add('refs', `“${c.name}” could not be attached: ${c.error || 'no reason given.'} Remove it (marked in red) to send.`);
  if (chips.length > MAX_REFS) add('refs', `${chips.length} references attached; at most ${MAX_REFS} are accepted.`);

  const partition = params.partition;
  const audio = chips.filter((c) => c.kind === 'audio');
  const videos = chips.filter((c) => c.kind === 'video');
  if (partition === 'fl2va' && audio.length) add('partition', 'Audio references need the ref2va model; switch to ref2va or remove the audio.');
  if (partition === 'ref2va') {
    if (videos.length > MAX_REF_VIDEOS) add('refs', `ref2va takes at most ${MAX_REF_VIDEOS} reference videos (${videos.length} attached).`);
    if (audio.length > MAX_REF_AUDIO) add('refs', `ref2va takes at most ${MAX_REF_AUDIO} reference audio clips (${audio.length} attached).`);
  }
  for (const a of audio) {
    if (a.duration && a.duration > MAX_AUDIO_SECONDS + 0.05)
      add('refs', `“${a.name}” is ${a.duration.toFixed(1)} s; reference audio is at most ${MAX_AUDIO_SECONDS} s.`);
  }

  if (lastChipKey) {
    const idx = chips.findIndex((c) => c.key === lastChipKey);
    const chip = chips[idx];
    if (!chip) add('last', 'The pinned last frame is no longer attached.');
    else {
      if (chip.kind !== 'image') add('last', 'Only a still image can be the last frame.');
      if (idx === 0) add('last', 'The first image is always frame 1; pin a later image as the last frame.');
      if (partition !== 'fl2va') add('last', 'A pinned last frame needs the fl2va model; switch to fl2va or unpin it.');
    }
  }

  if (!isOnFrameGrid(params.frames) || params.frames > MAX_FRAMES)
    add('frames', `Length must be 17n+5 frames between ${MIN_FRAMES} and ${MAX_FRAMES}.`);
  if (params.size === 'custom') {
    for (const [name, v] of [['width', params.width], ['height', params.height]]) {
      const n = Number(v);
      if (!Number.isInteger(n) || n % SIZE_GRID !== 0 || n < MIN_SIDE || n > MAX_SIDE)
        add('size', `${name[0].toUpperCase() + name.slice(1)} must be a multiple of ${SIZE_GRID} between ${MIN_SIDE} and ${MAX_SIDE} (got ${v === '' ? 'nothing' : v}).`);
    }
  }
  const batch = Number(params.batch ?? 1);
  if (!Number.isInteger(batch) || batch < 1 || batch > MAX_BATCH) add('batch', `A batch is 1 to ${MAX_BATCH} clips.`);
  const steps = Number(params.steps);
  if (!params.sampler && (!Number.isInteger(steps) || steps < 2 || steps > 200)) add('steps', 'Steps must be a whole number from 2 to 200.');
  if (params.lora) {
    const s = Number(params.loraStrength);
    if (params.loraStrength === '' || !Number.isFinite(s) || Math.abs(s) > MAX_LORA_STRENGTH)
      add('lora', `The adapter's strength must be a number from -${MAX_LORA_STRENGTH} to ${MAX_LORA_STRENGTH}.`);
  }
  if (params.seedMode === 'locked') {
    const s = String(params.seed).trim();
    if (!/^\d+$/.test(s) || Number(s) > MAX_SEED) add('seed', `A locked seed must be a whole number from 0 to ${MAX_SEED}.`);
  }
  return problems;
}

/** The JSON body of POST /api/ai/queue for a validated form. */
export function buildRequest({ prompt, params, chips, lastChipKey }) {
  const last = lastChipKey ? chips.find((c) => c.key === lastChipKey) : null;
  const body = {
    prompt: prompt.trim(),
    frames: params.frames,
    partition: params.partition,
    no_audio: !params.audio,
  };
  // A sampler preset fixes the steps (the server refuses both).
  if (params.sampler) body.sampler = params.sampler;
  else body.steps = Number(params.steps);
  if (params.fast) body.fast = true;
  if (params.lora) body.loras = [{ name: params.lora, strength: Number(params.loraStrength) }];
  const speed = SPEEDS.find((s) => s.id === params.speed);
  if (speed && speed.sparse) body.sparse = speed.sparse;
  if (speed && speed.cache) body.cache = speed.cache;
  const ids = chips.filter((c) => c !== last).map((c) => c.imageId);
  if (ids.length) body.image_ids = ids;
  if (last) body.last_image_id = last.imageId;
  const preset = SIZE_PRESETS.find((p) => p.id === params.size);
  if (params.size === 'custom') {
    body.width = Number(params.width);
    body.height = Number(params.height);
  } else if (preset && preset.width) {
    body.width = preset.width;
    body.height = preset.height;
  }
  if (params.seedMode === 'locked') body.seed = Number(String(params.seed).trim());
  if (Number(params.batch) > 1) body.num_generations = Number(params.batch);
  return body;
}

/**
 * Form parameters from a stored generation: edit & resubmit keeps the seed
 * (keepSeed), rerun gets a freshly drawn one, locked so it shows and can be
 * changed before running (freshSeed), otherwise the server draws one.
 */
export function paramsFromGeneration(g, { keepSeed, freshSeed: fresh = false }) {
  const p = defaultParams();
  if (g.frames) p.frames = snapFrames(g.frames);
  if (g.steps) p.steps = g.steps;
  if (g.partition) { p.partition = g.partition; p.partitionChosen = true; }
  p.audio = !g.no_audio;
  p.fast = Boolean(g.fast);
  const lora = Array.isArray(g.loras) && g.loras[0];
  if (lora) { p.lora = lora.name; p.loraStrength = lora.strength ?? 1; }
  if (typeof g.sampler === 'string' && g.sampler !== 'default') p.sampler = g.sampler;
  p.speed = speedOf(g);
  if (g.width && g.height) {
    const preset = SIZE_PRESETS.find((s) => s.width === g.width && s.height === g.height);
    if (preset) p.size = preset.id;
    else { p.size = 'custom'; p.width = g.width; p.height = g.height; }
  }
  if (keepSeed && g.seed !== undefined && g.seed !== null) { p.seedMode = 'locked'; p.seed = String(g.seed); }
  else if (fresh) {
    p.seedMode = 'locked';
    do p.seed = freshSeed(); while (String(g.seed) === p.seed);
  }
  return p;
}

/** A request that repeats a generation (rerun: new seed unless keepSeed). */
export function rerunRequest(g, { keepSeed = false } = {}) {
  const body = { prompt: g.prompt };
  for (const k of ['frames', 'steps', 'partition', 'no_audio', 'fast', 'width', 'height', 'crf', 'preset', 'last_image_id', 'sampler']) {
    if (g[k] !== undefined && g[k] !== null) body[k] = g[k];
  }
  // a sampler (other than the release grid) fixes the steps: the server takes one of the two
  if (body.sampler !== undefined && body.sampler !== 'default') delete body.steps;
  if (Array.isArray(g.loras) && g.loras.length) body.loras = g.loras;
  if (g.sparse && g.sparse !== 'off') body.sparse = g.sparse;
  if (g.cache && g.cache !== 'off') body.cache = g.cache;
  if (g.image_ids && g.image_ids.length) body.image_ids = g.image_ids;
  if (keepSeed && g.seed !== undefined && g.seed !== null) body.seed = g.seed;
  return body;
}

/** One line that tells what the parameters popover holds. */
export function clipSummary(p) {
  const preset = SIZE_PRESETS.find((s) => s.id === p.size);
  const size = p.size === 'custom' ? `${p.width}×${p.height}` : preset && preset.width ? `${preset.width}×${preset.height}` : 'auto size';
  const parts = [`${p.frames} f`, formatSeconds(p.frames / FPS), size, p.sampler ? p.sampler : `${p.steps} steps`, p.partition];
  if (p.lora) parts.push(`${p.lora.replace(/\.safetensors$/, '')} ×${p.loraStrength}`);
  if (p.speed && p.speed !== 'off') parts.push(p.speed === 'both' ? 'sparse+cache' : p.speed);
  if (!p.audio) parts.push('silent');
  if (p.fast) parts.push('fast');
  if (p.seedMode === 'locked') parts.push(`seed ${p.seed}`);
  if (Number(p.batch) > 1) parts.push(`×${p.batch}`);
  return parts.join(' · ');
}
