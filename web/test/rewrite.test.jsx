import { afterEach, describe, expect, it, vi } from 'vitest';
import { act, fireEvent, render, screen, waitFor } from '@testing-library/react';
import RewriteSheet from '../src/components/RewriteSheet.jsx';
import SettingsDialog from '../src/components/SettingsDialog.jsx';

afterEach(() => vi.unstubAllGlobals());

// A streamed answer whose SSE frames are cut at awkward places, released one
// chunk at a time so the test can watch the text grow.
function streamedFetch(chunks) {
  const gates = [];
  const calls = [];
  vi.stubGlobal('fetch', vi.fn(async (url, init) => {
    calls.push({ url, init });
    const enc = new TextEncoder();
    let i = 0;
    const body = new ReadableStream({
      async pull(ctl) {
        if (i >= chunks.length) { ctl.close(); return; }
        await new Promise((r) => gates.push(r));
        ctl.enqueue(enc.encode(chunks[i++]));
      },
    });
    return new Response(body, { status: 200, headers: { 'Content-Type': 'text/event-stream' } });
  }));
  const release = async () => { await waitFor(() => expect(gates.length).toBeGreaterThan(0)); gates.shift()(); };
  return { calls, release };
}

describe('RewriteSheet', () => {
  it('streams the rewrite token by token and Enter accepts it', async () => {
    const { calls, release } = streamedFetch([
      'event: token\ndata: {"token":"A grey"}\n\nevent: to',
      'ken\ndata: {"token":" heron"}\n',
      '\nevent: done\ndata: {}\n\n',
    ]);
    const onPick = vi.fn();
    render(<RewriteSheet original="heron" settings={{ rewrite_model: 'claude-sonnet-4-6' }} onPick={onPick} onCancel={() => {}} />);
    expect(JSON.parse(calls[0].init.body)).toEqual({ prompt: 'heron', model: 'claude-sonnet-4-6' });
    await act(release);
    await waitFor(() => expect(screen.getByTestId('rewrite-text').textContent).toBe('A grey'));
    expect(screen.getByTestId('use-rewrite').disabled).toBe(true); // not done yet
    fireEvent.keyDown(screen.getByTestId('rewrite-sheet'), { key: 'Enter' });
    expect(onPick).not.toHaveBeenCalled();
    await act(release); // the " heron" frame is not complete until its blank line arrives
    expect(screen.getByTestId('rewrite-text').textContent).toBe('A grey');
    await act(release);
    await waitFor(() => expect(screen.getByTestId('rewrite-text').textContent).toBe('A grey heron'));
    await waitFor(() => expect(screen.getByTestId('use-rewrite').disabled).toBe(false));
    fireEvent.keyDown(screen.getByTestId('rewrite-sheet'), { key: 'Enter' });
    expect(onPick).toHaveBeenCalledWith('A grey heron');
  });

  it('shows the server error and still offers the original', async () => {
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ status: 'error', status_message: 'no Oxen API key is set' }), { status: 400, headers: { 'Content-Type': 'application/json' } })));
    const onPick = vi.fn();
    render(<RewriteSheet original="heron" settings={null} onPick={onPick} onCancel={() => {}} />);
    await waitFor(() => expect(screen.getByTestId('rewrite-error').textContent).toMatch(/no Oxen API key is set/));
    fireEvent.click(screen.getByTestId('use-original'));
    expect(onPick).toHaveBeenCalledWith('heron');
  });

  it('relays an error event from the stream', async () => {
    const { release } = streamedFetch(['event: token\ndata: {"token":"x"}\n\n', 'event: error\ndata: {"message":"upstream 500"}\n\n']);
    render(<RewriteSheet original="p" settings={null} onPick={() => {}} onCancel={() => {}} />);
    await act(release);
    await act(release);
    await waitFor(() => expect(screen.getByTestId('rewrite-error').textContent).toMatch(/upstream 500/));
  });
});

describe('SettingsDialog', () => {
  it('never shows the key and sends it only when typed', async () => {
    const sent = [];
    vi.stubGlobal('fetch', vi.fn(async (url, init = {}) => {
      if (init.method === 'PUT') sent.push(JSON.parse(init.body));
      const body = { has_oxen_api_key: true, rewrite_enabled: true, rewrite_model: 'claude-sonnet-4-6', rewrite_system_prompt: 'be brief' };
      return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
    }));
    const settings = { has_oxen_api_key: true, rewrite_enabled: false, rewrite_model: 'claude-sonnet-4-6', rewrite_system_prompt: '' };
    const onSaved = vi.fn();
    render(<SettingsDialog settings={settings} onClose={() => {}} onSaved={onSaved} reload={null} />);
    expect(screen.getByTestId('api-key').value).toBe('');
    expect(screen.getByTestId('key-state').textContent).toMatch(/set/);
    fireEvent.click(screen.getByTestId('rewrite-toggle'));
    await act(async () => { fireEvent.click(screen.getByTestId('settings-save')); });
    await waitFor(() => expect(sent).toHaveLength(1));
    expect(sent[0]).toEqual({ rewrite_enabled: true, rewrite_model: 'claude-sonnet-4-6', rewrite_system_prompt: '' });
    expect(onSaved.mock.calls[0][0]).not.toHaveProperty('oxen_api_key');
  });
});
