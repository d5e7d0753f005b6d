import { describe, expect, it } from 'vitest';
import {
  adapterPreset, buildRequest, clipSummary, defaultParams, fewStepDetails, frameChoices, isOnFrameGrid, MAX_FRAMES,
  paramsFromGeneration, rerunRequest, secondsToFrames, snapFrames, speedOf, validate,
} from '../src/params.js';
import { frameAt, seekTimeForFrame } from '../src/frames.js';

const chip = (over) => ({ key: Math.random().toString(36), name: 'a.png', kind: 'image', state: 'done', imageId: 'id-' + Math.random(), ...over });
const form = (over = {}) => ({ prompt: 'a fox in the snow', params: defaultParams(), chips: [], lastChipKey: null, ...over });

describe('frame grid', () => {
  it('snaps frames down onto 17n+5', () => {
    expect(snapFrames(130)).toBe(124);
    expect(snapFrames(124)).toBe(124);
    expect(snapFrames(22)).toBe(22);
    expect(snapFrames(21)).toBe(5);
    expect(snapFrames(3)).toBe(5);
    expect(snapFrames('abc')).toBe(5);
  });
  it('converts seconds at 24 fps and snaps up, as the CLI does', () => {
    expect(secondsToFrames(5)).toBe(124); // 120 → 124
    expect(secondsToFrames(124 / 24)).toBe(124);
    expect(secondsToFrames(0.1)).toBe(5);
    expect(secondsToFrames(1)).toBe(39); // 24 → 39
  });
  it('offers only grid lengths up to the server maximum', () => {
    const c = frameChoices();
    expect(c[0].frames).toBe(5);
    expect(c.at(-1).frames).toBe(MAX_FRAMES);
    expect(c.every((x) => isOnFrameGrid(x.frames))).toBe(true);
    expect(MAX_FRAMES).toBe(362);
  });
  it('maps media time to frames and back to the middle of a frame', () => {
    for (const n of [0, 1, 23, 24, 123]) {
      expect(frameAt(n / 24)).toBe(n);
      expect(frameAt(seekTimeForFrame(n))).toBe(n);
    }
    expect(frameAt(1 / 24 - 1e-9)).toBe(1); // timebase rounding just below a boundary
  });
});

describe('validate', () => {
  it('accepts a plain prompt', () => {
    expect(validate(form())).toEqual([]);
  });
  it('requires a prompt and caps its length', () => {
    expect(validate(form({ prompt: '   ' })).map((p) => p.field)).toContain('prompt');
    expect(validate(form({ prompt: 'x'.repeat(8001) }))[0].message).toMatch(/at most 8000/);
  });
  it('explains that audio needs ref2va', () => {
    const p = validate(form({ chips: [chip({ kind: 'audio', name: 'a.wav' })] }));
    expect(p.find((x) => x.field === 'partition').message).toMatch(/ref2va/);
    const ok = validate(form({ params: { ...defaultParams(), partition: 'ref2va' }, chips: [chip({ kind: 'audio' })] }));
    expect(ok).toEqual([]);
  });
  it('only pins a later still image as the last frame, under fl2va', () => {
    const a = chip(), b = chip(), v = chip({ kind: 'video', name: 'v.mp4' });
    expect(validate(form({ chips: [a, b], lastChipKey: b.key }))).toEqual([]);
    expect(validate(form({ chips: [a, b], lastChipKey: a.key }))[0].message).toMatch(/frame 1/);
    expect(validate(form({ chips: [a, v], lastChipKey: v.key }))[0].message).toMatch(/still image/);
    const ref = validate(form({ params: { ...defaultParams(), partition: 'ref2va' }, chips: [a, b], lastChipKey: b.key }));
    expect(ref[0].message).toMatch(/needs the fl2va/);
  });
  it('enforces reference counts, upload state and audio length', () => {
    const many = Array.from({ length: 10 }, () => chip());
    expect(validate(form({ chips: many })).some((p) => /at most 9/.test(p.message))).toBe(true);
    const vids = Array.from({ length: 4 }, () => chip({ kind: 'video' }));
    expect(validate(form({ params: { ...defaultParams(), partition: 'ref2va' }, chips: vids })).some((p) => /3 reference videos/.test(p.message))).toBe(true);
    expect(validate(form({ chips: [chip({ state: 'uploading' })] }))[0].message).toMatch(/Wait for the upload/);
    const long = chip({ kind: 'audio', name: 'long.wav', duration: 20 });
    expect(validate(form({ params: { ...defaultParams(), partition: 'ref2va' }, chips: [long] }))[0].message).toMatch(/at most 15 s/);
  });
  it('checks size, steps and seed', () => {
    const custom = { ...defaultParams(), size: 'custom', width: 1000, height: 704 };
    expect(validate(form({ params: custom }))[0].message).toMatch(/multiple of 32/);
    expect(validate(form({ params: { ...defaultParams(), steps: 1 } }))[0].field).toBe('steps');
    expect(validate(form({ params: { ...defaultParams(), seedMode: 'locked', seed: '-3' } }))[0].field).toBe('seed');
    expect(validate(form({ params: { ...defaultParams(), seedMode: 'locked', seed: '42' } }))).toEqual([]);
  });
});

describe('requests', () => {
  it('builds the queue body with the pinned chip as last_image_id', () => {
    const a = chip({ imageId: 'A' }), b = chip({ imageId: 'B' }), c = chip({ imageId: 'C' });
    const body = buildRequest(form({ chips: [a, b, c], lastChipKey: c.key, params: { ...defaultParams(), size: '9:16', seedMode: 'locked', seed: '7', audio: false } }));
    expect(body).toEqual({ prompt: 'a fox in the snow', frames: 124, steps: 28, partition: 'fl2va', no_audio: true, image_ids: ['A', 'B'], last_image_id: 'C', width: 704, height: 1280, seed: 7 });
  });
  it('leaves size and seed to the server by default', () => {
    const body = buildRequest(form());
    expect(body).not.toHaveProperty('width');
    expect(body).not.toHaveProperty('seed');
  });
  it('edit keeps the seed, rerun draws a new one', () => {
    const g = { prompt: 'p', frames: 22, steps: 10, partition: 'ref2va', no_audio: false, width: 1000 - 8, height: 704, seed: 99, image_ids: ['x'] };
    const p = paramsFromGeneration(g, { keepSeed: true });
    expect(p).toMatchObject({ frames: 22, steps: 10, partition: 'ref2va', seedMode: 'locked', seed: '99', size: 'custom', width: 992 });
    const r = rerunRequest(g);
    expect(r).not.toHaveProperty('seed');
    expect(r).toMatchObject({ prompt: 'p', frames: 22, image_ids: ['x'] });
    expect(rerunRequest(g, { keepSeed: true }).seed).toBe(99);
  });
  it('summarises the parameters on one line', () => {
    expect(clipSummary(defaultParams())).toBe('124 f · 5.17 s · auto size · 28 steps · fl2va');
  });
});

describe('few-step fields', () => {
  const p = (over) => ({ ...defaultParams(), ...over });
  it('sends an adapter with its strength, and a sampler instead of steps (the server refuses both)', () => {
    const body = buildRequest(form({ params: p({ lora: 'turbo.safetensors', loraStrength: 0.8, sampler: 'turbo4', steps: 5 }) }));
    expect(body.loras).toEqual([{ name: 'turbo.safetensors', strength: 0.8 }]);
    expect(body.sampler).toBe('turbo4');
    expect(body).not.toHaveProperty('steps');
    const plain = buildRequest(form());
    expect(plain.steps).toBe(28);
    for (const k of ['loras', 'sampler', 'sparse', 'cache']) expect(plain).not.toHaveProperty(k);
  });
  it('maps the speed choice onto sparse and cache', () => {
    expect(buildRequest(form({ params: p({ speed: 'sparse' }) }))).toMatchObject({ sparse: 'sol' });
    expect(buildRequest(form({ params: p({ speed: 'cache' }) }))).toMatchObject({ cache: 'fbc' });
    const both = buildRequest(form({ params: p({ speed: 'both' }) }));
    expect([both.sparse, both.cache]).toEqual(['sol', 'fbc']);
    expect(speedOf({ sparse: 'sol', cache: 'fbc:high' })).toBe('both');
    expect(speedOf({ sparse: 'off', cache: 'off' })).toBe('off');
  });
  it('checks the strength and lets a sampler stand for the steps', () => {
    expect(validate(form({ params: p({ lora: 'x', loraStrength: 101 }) })).map((e) => e.field)).toEqual(['lora']);
    expect(validate(form({ params: p({ lora: 'x', loraStrength: '' }) })).map((e) => e.field)).toEqual(['lora']);
    expect(validate(form({ params: p({ sampler: 'turbo4', steps: '' }) }))).toEqual([]);
  });
  it('takes an adapter\'s sampler preset from the catalogue entry', () => {
    expect(adapterPreset({ name: 'a', preset: 'turbo8', forwards: 8 })).toEqual({ sampler: 'turbo8', steps: 9 });
    expect(adapterPreset({ name: 'a', preset: null })).toBeNull();
  });
  it('reuses and reruns what a clip used; a rerun with a sampler leaves the steps out', () => {
    const g = { prompt: 'x', frames: 22, steps: 5, partition: 'fl2va', loras: [{ name: 't.safetensors', strength: 0.5 }], sampler: 'turbo4', sparse: 'sol', cache: 'fbc:high' };
    const q = paramsFromGeneration(g, { keepSeed: false });
    expect([q.lora, q.loraStrength, q.sampler, q.speed]).toEqual(['t.safetensors', 0.5, 'turbo4', 'both']);
    const r = rerunRequest(g);
    expect(r).not.toHaveProperty('steps');
    expect(r).toMatchObject({ sampler: 'turbo4', loras: g.loras, sparse: 'sol', cache: 'fbc:high' });
    const d = rerunRequest({ ...g, sampler: 'default' });
    expect(d.steps).toBe(5);
    expect(fewStepDetails(g)).toEqual([['Adapter', 't.safetensors ×0.5'], ['Sampler', 'turbo4'], ['Sparse', 'sol'], ['Cache', 'fbc:high']]);
    expect(fewStepDetails({ loras: [], sampler: null, sparse: 'off', cache: 'off' })).toEqual([]);
    expect(clipSummary(q)).toContain('turbo4');
  });
});
