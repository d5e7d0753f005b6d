import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import { createRef } from 'react';
import { downloadName, mediaTime, shortLength, stepText } from '../src/format.js';
import { claimOrder, estimateSeconds, ordinal, paceSamples, queuePlan, roughDuration } from '../src/estimate.js';
import { rewriteProblem, uploadProblem } from '../src/messages.js';
import { buildRequest, clipSummary, defaultParams, paramsFromGeneration } from '../src/params.js';
import { pushHistory, readHistory } from '../src/history.js';
import { ApiError } from '../src/api.js';
import { engineState, StatusSummary } from '../src/components/Header.jsx';
import { queueText } from '../src/components/Tile.jsx';
import PromptBar from '../src/components/PromptBar.jsx';

afterEach(() => vi.unstubAllGlobals());

describe('download names', () => {
  // mmh3 generate's default_out (src/cli/cmd_generate.c): %Y%m%d_%H%M%S, then
  // the prompt's ASCII letters and digits lowercased, other runs as one dash,
  // at most 47 characters.
  const at = (y, mo, d, h, mi, s) => new Date(y, mo - 1, d, h, mi, s).getTime() / 1000;
  it('names a clip from the date it was written and the head of its prompt, as the CLI does', () => {
    expect(downloadName({ prompt: 'A red fox runs through fresh snow!', completed_at: at(2026, 12, 1, 14, 32, 7) }))
      .toBe('20261201_143207-a-red-fox-runs-through-fresh-snow.mp4');
  });
  it('cuts the slug at 47 characters and treats non-ASCII as separators', () => {
    const name = downloadName({ prompt: '  Ein Fuchs — läuft durch den frischen Schnee, langsam, im Abendlicht über die Felder', completed_at: at(2026, 1, 2, 3, 4, 5) });
    const slug = name.replace(/^20260102_030405-/, '').replace(/\.mp4$/, '');
    expect(slug).toBe('ein-fuchs-l-uft-durch-den-frischen-schnee-langs');
    expect(slug.length).toBe(47);
  });
  it('leaves the slug out when the prompt has no ASCII letter or digit', () => {
    expect(downloadName({ prompt: '狐狸在雪中奔跑', completed_at: at(2026, 5, 6, 7, 8, 9) })).toBe('20260506_070809.mp4');
  });
});

describe('progress and time in the user\'s terms', () => {
  it('counts the steps the request asked for: 28 steps read 1/28 at the start and 28/28 at the end', () => {
    expect(stepText({ steps: 28, step: 0, total_steps: 27 })).toBe('step 1/28');
    expect(stepText({ steps: 28, step: 8, total_steps: 27 })).toBe('step 9/28');
    expect(stepText({ steps: 28, step: 27, total_steps: 27 })).toBe('step 28/28');
    // A row without its request's steps says what the engine said.
    expect(stepText({ step: 8, total_steps: 27 })).toBe('step 8/27');
  });
  it('shows a sub-second clip\'s time in hundredths, longer ones as m:ss.s', () => {
    expect(mediaTime(0.54)).toBe('0.54 s');
    expect(mediaTime(0)).toBe('0.00 s');
    expect(mediaTime(75.25)).toBe('1:15.3');
    expect(shortLength(22)).toBe('0.9 s');
    expect(shortLength(124)).toBe('5.2 s');
    expect(shortLength(362)).toBe('15 s');
  });
});

describe('queue estimates', () => {
  // Two clips measured by a worker (the timings of docs/API.md's generation object).
  const done = [
    { generation_id: 'd1', status: 'succeeded', width: 1280, height: 704, frames: 124, steps: 28, total_seconds: 140, completed_at: 100, timings: { encoding_prompt: 2, denoising: 108, decoding_video: 20, decoding_audio: 4, writing: 6 } },
    { generation_id: 'd2', status: 'succeeded', width: 640, height: 352, frames: 124, steps: 28, total_seconds: 36.5, completed_at: 90, timings: { encoding_prompt: 2, denoising: 27, decoding_video: 5, decoding_audio: 1, writing: 1.5 } },
    { generation_id: 'x', status: 'failed', total_seconds: 3 },
  ];
  const samples = paceSamples(done);
  it('keeps finished clips with their breakdown', () => {
    expect(samples).toHaveLength(2);
    expect(samples[0]).toMatchObject({ forwards: 27, denoise: 108, scaled: 30, fixed: 2 });
  });
  it('scales the measured pace to a request: steps and pixels', () => {
    // The same request as d1 takes what d1 took.
    expect(estimateSeconds({ width: 1280, height: 704, frames: 124, steps: 28 }, samples)).toBeCloseTo(140, 6);
    // Twice the forwards: twice the denoising, the rest unchanged (median of both samples' scalings).
    const twice = estimateSeconds({ width: 1280, height: 704, frames: 124, steps: 55 }, samples);
    expect(twice).toBeCloseTo(2 + 30 + 216, 6);
    // A heavy request is hours, not seconds.
    const heavy = estimateSeconds({ width: 2048, height: 2048, frames: 362, steps: 200 }, samples);
    expect(heavy).toBeGreaterThan(3 * 3600);
    expect(estimateSeconds({ steps: 28 }, [])).toBeNull();
  });
  it('places queued jobs in claim order behind the running one, one worker at a time', () => {
    const now = 1000;
    const active = [
      { generation_id: 'q2', status: 'queued', enqueued_us: 3e6, width: 1280, height: 704, frames: 124, steps: 28 },
      { generation_id: 'q1', status: 'queued', enqueued_us: 2e6, width: 1280, height: 704, frames: 124, steps: 28 },
      { generation_id: 'p', status: 'processing', started_at: now - 40, enqueued_us: 1e6, width: 1280, height: 704, frames: 124, steps: 28 },
    ];
    const { plan, nextStartAt } = queuePlan({ active, workers: 1, samples, now });
    expect(plan.get('q1')).toMatchObject({ position: 1, startAt: now + 100, finishAt: now + 240 });
    expect(plan.get('q2')).toMatchObject({ position: 2, startAt: now + 240, finishAt: now + 380 });
    expect(nextStartAt).toBe(now + 380);
    // Two workers take the two queued jobs side by side.
    const two = queuePlan({ active, workers: 2, samples, now }).plan;
    expect(two.get('q1').startAt).toBe(now);
    expect(two.get('q2').startAt).toBe(now + 100);
    expect(queueText(active[1], plan.get('q1'), now)).toBe('1st in queue · starts in ≈ 2 min · done in ≈ 4 min');
    expect(queueText(active[2], plan.get('p'), now)).toBe('≈ 2 min left');
  });
  it('orders the claim like the worker: enqueue time, then id', () => {
    const rows = [{ generation_id: 'b', enqueued_us: 5 }, { generation_id: 'a', enqueued_us: 5 }, { generation_id: 'c', enqueued_us: 1 }];
    expect(rows.sort(claimOrder).map((g) => g.generation_id)).toEqual(['c', 'a', 'b']);
  });
  it('says durations roughly and positions as ordinals', () => {
    expect(roughDuration(42)).toBe('≈ 40 s');
    expect(roughDuration(190)).toBe('≈ 3 min');
    expect(roughDuration(2 * 3600 + 5 * 60)).toBe('≈ 2 h 5 min');
    expect(['1', '2', '3', '4', '11', '12', '13', '21', '22', '103'].map((n) => ordinal(Number(n)))).toEqual(['1st', '2nd', '3rd', '4th', '11th', '12th', '13th', '21st', '22nd', '103rd']);
  });
});

describe('messages in words', () => {
  it('a 409 from the rewrite says what to change in the settings', () => {
    // The bodies of fcgi/api_rewrite.c's refusals.
    const noKey = new ApiError(409, 'x', { status: 'error', error: { field: null, message: 'no Oxen API key is stored', accepted: 'PUT /api/settings {"oxen_api_key": "..."}' } });
    const off = new ApiError(409, 'x', { status: 'error', error: { field: null, message: 'rewrite is off', accepted: 'PUT /api/settings {"rewrite_enabled": true}' } });
    expect(rewriteProblem(noKey)).toEqual({ text: expect.stringMatching(/^Rewriting needs an Oxen API key.*Settings/), settings: true });
    expect(rewriteProblem(off)).toEqual({ text: expect.stringMatching(/switched off.*Settings/), settings: true });
    expect(rewriteProblem(noKey).text).not.toMatch(/PUT|\/api/);
  });
  it('upload refusals by status', () => {
    expect(uploadProblem(new ApiError(413, 'x', {}), 'a.mov')).toMatch(/larger than this server accepts/);
    expect(uploadProblem(new ApiError(429, 'x', { retry_after: 12 }), 'a.png')).toMatch(/Try again in 12 s/);
    expect(uploadProblem(new ApiError(0, 'x'), 'a.png')).toMatch(/cannot be reached/);
  });
});

describe('batches, rerun and the header', () => {
  it('a batch asks for num_generations and says so in the summary', () => {
    const params = { ...defaultParams(), batch: 4 };
    expect(buildRequest({ prompt: 'fox', params, chips: [], lastChipKey: null }).num_generations).toBe(4);
    expect(buildRequest({ prompt: 'fox', params: defaultParams(), chips: [], lastChipKey: null }).num_generations).toBeUndefined();
    expect(clipSummary(params)).toMatch(/ · ×4$/);
  });
  it('rerun draws a fresh seed and shows it; edit keeps the old one', () => {
    const g = { prompt: 'p', frames: 39, steps: 12, seed: 1234, width: 1280, height: 704 };
    const rerun = paramsFromGeneration(g, { keepSeed: false, freshSeed: true });
    expect(rerun.seedMode).toBe('locked');
    expect(rerun.seed).toMatch(/^\d+$/);
    expect(rerun.seed).not.toBe('1234');
    expect(paramsFromGeneration(g, { keepSeed: true }).seed).toBe('1234');
  });
  it('the engine pill says rendering while a job is past loading, and the mock has no weights', () => {
    expect(engineState({ kind: 'mock', state: 'loading' }, ['denoising'])).toBe('rendering');
    expect(engineState({ kind: 'h3', state: 'loading' }, ['loading'])).toBe('loading weights');
    expect(engineState({ kind: 'h3', state: 'busy' }, [])).toBe('rendering');
    render(<StatusSummary status={{ engine: { kind: 'mock', state: 'loading', resident: true }, queue: { processing: 1 } }} jobStages={['denoising']} />);
    expect(screen.getByTestId('engine-kind').textContent).toBe('mock engine · rendering');
    expect(screen.getByTestId('residency').textContent).toBe('no weights (mock engine)');
  });
});

describe('prompt history', () => {
  beforeEach(() => localStorage.clear());
  it('keeps the newest first, without repeats, at most 50', () => {
    for (let i = 0; i < 55; i++) pushHistory({ prompt: `p${i}`, params: {}, refs: [] });
    pushHistory({ prompt: 'p54', params: {}, refs: [] });
    const list = readHistory();
    expect(list).toHaveLength(50);
    expect(list[0].prompt).toBe('p54');
    expect(list.filter((e) => e.prompt === 'p54')).toHaveLength(1);
  });
  it('↑ in an empty bar walks back through sent prompts with their references and parameters; ↓ comes back', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response('{}', { status: 404 })));
    pushHistory({ prompt: 'older heron', params: { ...defaultParams(), steps: 12 }, refs: [] });
    pushHistory({ prompt: 'newer fox', params: { ...defaultParams(), frames: 39 }, refs: [{ id: 'u1', kind: 'image', name: 'first.png', thumb: '/api/files/uploads/u1.png' }] });
    const ref = createRef();
    render(<PromptBar ref={ref} settings={null} />);
    const input = screen.getByTestId('prompt-input');
    fireEvent.keyDown(input, { key: 'ArrowUp' });
    expect(input.value).toBe('newer fox');
    expect(screen.getByTestId('params-toggle').textContent).toMatch(/^39 f/);
    expect(screen.getAllByTestId('chip')).toHaveLength(1);
    expect(screen.getByTestId('chip').dataset.imageId).toBe('u1');
    fireEvent.keyDown(input, { key: 'ArrowUp' });
    expect(input.value).toBe('older heron');
    expect(screen.getByTestId('params-toggle').textContent).toMatch(/12 steps/);
    expect(screen.queryAllByTestId('chip')).toHaveLength(0);
    fireEvent.keyDown(input, { key: 'ArrowDown' });
    fireEvent.keyDown(input, { key: 'ArrowDown' });
    expect(input.value).toBe('');
    expect(screen.getByTestId('params-toggle').textContent).toBe('124 f · 5.17 s · auto size · 28 steps · fl2va');
    // Typed text is the user's: ↑ does not replace it.
    fireEvent.change(input, { target: { value: 'my own' } });
    fireEvent.keyDown(input, { key: 'ArrowUp' });
    expect(input.value).toBe('my own');
  });
  it('a sent request is remembered', async () => {
    vi.stubGlobal('fetch', vi.fn(async (url) => new Response(JSON.stringify(url === '/api/ai/queue' ? { generations: [{ generation_id: 'g1', status: 'queued' }] } : {}), { status: url === '/api/ai/queue' ? 200 : 404, headers: { 'Content-Type': 'application/json' } })));
    render(<PromptBar settings={null} />);
    const input = screen.getByTestId('prompt-input');
    fireEvent.change(input, { target: { value: 'a heron at dawn' } });
    await act(async () => { fireEvent.keyDown(input, { key: 'Enter' }); });
    await waitFor(() => expect(readHistory().map((e) => e.prompt)).toEqual(['a heron at dawn']));
  });
});
