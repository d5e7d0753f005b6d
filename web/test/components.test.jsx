import { afterEach, describe, expect, it, vi } from 'vitest';
import { act, fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import { createRef } from 'react';
import PromptBar from '../src/components/PromptBar.jsx';
import { StatusSummary } from '../src/components/Header.jsx';
import Tile from '../src/components/Tile.jsx';
import { referencesOf } from '../src/media.js';

// Component tests run in jsdom: the network is a recorded exchange in the
// shapes of docs/API.md. The same flows run against the real stack in
// tests/e2e.
function fakeFetch(handler) {
  const calls = [];
  const f = vi.fn(async (url, init = {}) => {
    calls.push({ url, init });
    const { status = 200, body } = await handler(url, init, calls.length);
    return new Response(JSON.stringify(body), { status, headers: { 'Content-Type': 'application/json' } });
  });
  vi.stubGlobal('fetch', f);
  return calls;
}
afterEach(() => vi.unstubAllGlobals());

let n = 0;
const uploadAnswer = (kind) => ({ body: { image_ids: [`u${++n}`], images: [{ image_id: `u${n}`, kind, url: `/api/files/uploads/u${n}.x`, poster_url: null }] } });

describe('PromptBar', () => {
  it('uploads dropped files as chips and switches to ref2va for audio', async () => {
    const calls = fakeFetch((url, init) => {
      if (url === '/api/images') return uploadAnswer(init.body.get('files').type.split('/')[0]);
      return { status: 404, body: {} };
    });
    render(<PromptBar settings={null} />);
    const input = screen.getByTestId('file-input');
    const png = new File(['x'], 'first.png', { type: 'image/png' });
    const wav = new File(['y'], 'voice.wav', { type: 'audio/wav' });
    await act(async () => { fireEvent.change(input, { target: { files: [png, wav] } }); });
    await waitFor(() => expect(screen.getAllByTestId('chip').every((c) => c.dataset.state === 'done')).toBe(true));
    expect(calls.filter((c) => c.url === '/api/images')).toHaveLength(2);
    expect(calls[0].init.body.get('files').name).toBe('first.png');
    expect(screen.getByTestId('params-toggle').textContent).toMatch(/ref2va/);
    // Under ref2va the first image is a reference like the others, not frame 1,
    // and no chip offers to be pinned as a last frame.
    expect(screen.getAllByTestId('chip')[0].textContent).toMatch(/first\.png/);
    expect(screen.getAllByTestId('chip')[0].textContent).not.toMatch(/Frame 1/);
    expect(screen.queryAllByTestId('pin-last')).toHaveLength(0);
  });

  it('labels the first image frame 1 only under fl2va', async () => {
    fakeFetch((url, init) => (url === '/api/images' ? uploadAnswer(init.body.get('files').type.split('/')[0]) : { status: 404, body: {} }));
    render(<PromptBar settings={null} />);
    const files = ['a.png', 'b.png'].map((name) => new File(['x'], name, { type: 'image/png' }));
    await act(async () => { fireEvent.change(screen.getByTestId('file-input'), { target: { files } }); });
    await waitFor(() => expect(screen.getAllByTestId('chip').every((c) => c.dataset.state === 'done')).toBe(true));
    expect(screen.getAllByTestId('chip')[0].textContent).toMatch(/Frame 1/);
    fireEvent.click(screen.getByTestId('params-toggle'));
    fireEvent.click(screen.getByTestId('model-ref2va'));
    expect(screen.getAllByTestId('chip')[0].textContent).toMatch(/a\.png/);
    expect(screen.queryAllByTestId('pin-last')).toHaveLength(0);
  });

  it('says in words why an upload was refused, once, and names the chip by its file', async () => {
    // The body mmh3-fcgi sends for a file FFmpeg cannot read (docs/API.md's error shape).
    const message = "'broken.png': not a media file we can read (the data matches no known image, video or audio format); accepted: PNG, JPEG, WebP, BMP, GIF, TIFF images; MP4/MOV, WebM/MKV videos; WAV, MP3, FLAC, Ogg, AAC/M4A audio";
    const accepted = "multipart/form-data with 1..15 file parts (field name 'files'): images (PNG, JPEG, WebP, BMP, TIFF, GIF), videos (mp4, mov, webm, mkv) or audio (wav, mp3, flac, ogg, m4a)";
    fakeFetch((url) => (url === '/api/images' ? { status: 400, body: { status: 'error', status_message: `files[0]: ${message}; accepted: ${accepted}`, error: { field: 'files[0]', message, accepted } } } : { status: 404, body: {} }));
    render(<PromptBar settings={null} />);
    await act(async () => { fireEvent.change(screen.getByTestId('file-input'), { target: { files: [new File(['x'], 'broken.png', { type: 'image/png' })] } }); });
    await waitFor(() => expect(screen.getByTestId('chip').dataset.state).toBe('error'));
    const said = screen.getByTestId('problems').textContent;
    expect(said).toContain('“broken.png” could not be attached: not a media file we can read (the data matches no known image, video or audio format). This server takes a picture (PNG, JPEG');
    expect(said).not.toMatch(/files\[0\]|multipart|accepted:/);
    expect(said.match(/PNG/g)).toHaveLength(1);
    // The first image's chip is "Frame 1" only when it is attached.
    expect(screen.getByTestId('chip').textContent).toMatch(/^broken\.png · not used/);
    expect(screen.getByTestId('chip').textContent).not.toMatch(/Frame 1/);
  });

  it('shows a glyph, not a broken image, for a chip the browser cannot decode', async () => {
    fakeFetch((url, init) => (url === '/api/images' ? uploadAnswer('image') : { status: 404, body: {} }));
    render(<PromptBar settings={null} />);
    await act(async () => { fireEvent.change(screen.getByTestId('file-input'), { target: { files: [new File(['x'], 'odd.png', { type: 'image/png' })] } }); });
    const chip = screen.getByTestId('chip');
    fireEvent.error(chip.querySelector('img'));
    expect(chip.querySelector('img')).toBeNull();
    expect(within(chip).getByTestId('thumb-glyph')).toBeTruthy();
  });

  it('explains a pinned last frame under ref2va before anything is sent', async () => {
    const calls = fakeFetch((url, init) => (url === '/api/images' ? uploadAnswer(init.body.get('files').type.split('/')[0]) : { status: 500, body: {} }));
    render(<PromptBar settings={null} />);
    const files = ['a.png', 'b.png'].map((name) => new File(['x'], name, { type: 'image/png' }));
    await act(async () => { fireEvent.change(screen.getByTestId('file-input'), { target: { files } }); });
    await waitFor(() => expect(screen.getAllByTestId('chip').every((c) => c.dataset.state === 'done')).toBe(true));
    // Only the second chip can be pinned (the first is frame 1).
    const pins = screen.getAllByTestId('pin-last');
    expect(pins).toHaveLength(1);
    fireEvent.click(pins[0]);
    expect(screen.getAllByTestId('chip')[1].textContent).toMatch(/Last frame/);
    fireEvent.click(screen.getByTestId('params-toggle'));
    fireEvent.click(screen.getByTestId('model-ref2va'));
    expect(screen.getByTestId('problems').textContent).toMatch(/last frame needs the fl2va/);
    fireEvent.change(screen.getByTestId('prompt-input'), { target: { value: 'two frames' } });
    fireEvent.submit(screen.getByTestId('prompt-bar'));
    expect(calls.filter((c) => c.url === '/api/ai/queue')).toHaveLength(0);
  });

  it('sends the request and shows the server error when it is refused', async () => {
    const calls = fakeFetch((url) => {
      if (url === '/api/ai/queue') return { status: 400, body: { status: 'error', status_message: 'prompt: contains only whitespace; accepted: 1..8000 characters', error: { field: 'prompt', message: 'x' } } };
      return { status: 404, body: {} };
    });
    render(<PromptBar settings={null} />);
    fireEvent.change(screen.getByTestId('prompt-input'), { target: { value: 'a heron takes off' } });
    await act(async () => { fireEvent.keyDown(screen.getByTestId('prompt-input'), { key: 'Enter' }); });
    await waitFor(() => expect(screen.getByTestId('server-error').textContent).toMatch(/only whitespace/));
    const sent = JSON.parse(calls.find((c) => c.url === '/api/ai/queue').init.body);
    expect(sent).toMatchObject({ prompt: 'a heron takes off', frames: 124, steps: 28, partition: 'fl2va', no_audio: false });
    // The prompt is kept so it can be fixed.
    expect(screen.getByTestId('prompt-input').value).toBe('a heron takes off');
  });

  it('says an empty prompt is missing on submit or on leaving the field, not while it is being rewritten', async () => {
    const calls = fakeFetch((url) => (url === '/api/ai/queue' ? { status: 400, body: { status: 'error', status_message: 'steps: 99 is out of range; accepted: 1..60' } } : { status: 404, body: {} }));
    render(<PromptBar settings={null} />);
    const input = screen.getByTestId('prompt-input');
    const promptProblem = () => screen.queryByTestId('problems')?.querySelector('[data-field=prompt]') || null;
    fireEvent.change(input, { target: { value: 'a heron takes off' } });
    await act(async () => { fireEvent.keyDown(input, { key: 'Enter' }); });
    await waitFor(() => expect(screen.getByTestId('server-error')).toBeTruthy());
    // Clearing the refused prompt to write another is not a mistake yet.
    fireEvent.change(input, { target: { value: '' } });
    expect(promptProblem()).toBeNull();
    // Submitting it empty is: say so, send nothing.
    await act(async () => { fireEvent.keyDown(input, { key: 'Enter' }); });
    expect(promptProblem().textContent).toBe('Write a prompt first.');
    expect(calls.filter((c) => c.url === '/api/ai/queue')).toHaveLength(1);
    // Typing again takes it away; emptying the field and leaving it brings it back.
    fireEvent.change(input, { target: { value: 'a' } });
    expect(promptProblem()).toBeNull();
    fireEvent.change(input, { target: { value: '' } });
    expect(promptProblem()).toBeNull();
    fireEvent.blur(input);
    expect(promptProblem().textContent).toBe('Write a prompt first.');
  });

  it('does not complain about an empty prompt that was only visited', () => {
    fakeFetch(() => ({ status: 404, body: {} }));
    render(<PromptBar settings={null} />);
    const input = screen.getByTestId('prompt-input');
    fireEvent.focus(input);
    fireEvent.blur(input);
    expect(screen.queryByTestId('problems')).toBeNull();
  });

  it('loads a generation for edit & resubmit with its seed locked', () => {
    fakeFetch(() => ({ status: 404, body: {} }));
    const ref = createRef();
    render(<PromptBar ref={ref} settings={null} />);
    act(() => ref.current.load({ prompt: 'again', frames: 39, steps: 12, seed: 1234, partition: 'fl2va', width: 1280, height: 704, image_ids: ['i1'], references: [{ image_id: 'i1', kind: 'image', url: '/u/i1.png', poster_url: '/u/i1.png' }] }));
    expect(screen.getByTestId('prompt-input').value).toBe('again');
    expect(screen.getByTestId('params-toggle').textContent).toBe('39 f · 1.63 s · 1280×704 · 12 steps · fl2va · seed 1234');
    expect(screen.getAllByTestId('chip')).toHaveLength(1);
  });

  it('length popover snaps typed frames down and seconds up', () => {
    fakeFetch(() => ({ status: 404, body: {} }));
    render(<PromptBar settings={null} />);
    fireEvent.click(screen.getByTestId('params-toggle'));
    const frames = screen.getByTestId('frames-input');
    fireEvent.change(frames, { target: { value: '130' } });
    fireEvent.blur(frames);
    expect(screen.getByTestId('params-toggle').textContent).toMatch(/^124 f/);
    const secs = screen.getByTestId('seconds-input');
    fireEvent.change(secs, { target: { value: '1' } });
    fireEvent.blur(secs);
    expect(screen.getByTestId('params-toggle').textContent).toMatch(/^39 f · 1.63 s/);
  });
});

describe('header status', () => {
  it('names the engine kind, state and queue counts', () => {
    render(<StatusSummary status={{ engine: { kind: 'mock', state: 'ready', resident: true }, queue: { queued: 2, processing: 1 } }} />);
    expect(screen.getByTestId('engine-kind').textContent).toBe('mock engine · ready');
    expect(screen.getByTestId('queue-counts').textContent).toBe('1 running · 2 queued');
  });
  it('says when no worker is online or the engine failed', () => {
    const { rerender } = render(<StatusSummary status={{ engine: { kind: null, state: 'offline' }, queue: {} }} />);
    expect(screen.getByTestId('engine-kind').textContent).toMatch(/no worker · offline/);
    rerender(<StatusSummary status={{ engine: { kind: 'h3', state: 'failed', message: 'no weights found', resident: false }, queue: {} }} />);
    expect(screen.getByTestId('engine-status').textContent).toMatch(/no weights found/);
  });
});

describe('tiles', () => {
  it('shows live progress for a running job', () => {
    render(<Tile g={{ generation_id: 'a', status: 'processing', prompt: 'waves', stage: 'denoising', step: 7, total_steps: 27, progress: 0.3 }} />);
    expect(screen.getByTestId('progress-text').textContent).toBe('Denoising · step 7/27');
    expect(within(screen.getByTestId('tile')).getByRole('progressbar').getAttribute('aria-valuenow')).toBe('30');
  });
  it('shows a playable clip with a one-click approve', () => {
    fakeFetch(() => ({ body: { generation_id: 'b', status: 'succeeded', rating: 'approved', prompt: 'x' } }));
    render(<Tile g={{ generation_id: 'b', status: 'succeeded', prompt: 'x', result_url: '/api/files/generations/b.mp4', poster_url: '/api/files/generations/b.jpg', rating: null }} />);
    expect(screen.getByTestId('tile-video').getAttribute('src')).toBe('/api/files/generations/b.mp4');
    expect(screen.getByTestId('approve').getAttribute('aria-pressed')).toBe('false');
    expect(screen.getByTestId('tile').querySelector('a').getAttribute('href')).toBe('/g/b');
  });
  it('labels references: first frame, numbered refs, last frame', () => {
    const refs = referencesOf({ partition: 'fl2va', image_ids: ['a', 'b'], last_image_id: 'c', references: [{ image_id: 'a', kind: 'image' }, { image_id: 'b', kind: 'video' }], last_image: { image_id: 'c', kind: 'image' } });
    expect(refs.map((r) => r.label)).toEqual(['First frame', 'Video 1', 'Last frame']);
  });
});
