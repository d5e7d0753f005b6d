import { describe, expect, it, vi } from 'vitest';
import { fireEvent, render, screen, waitFor, within } from '@testing-library/react';
import Header, { searchShortcut } from '../src/components/Header.jsx';
import Gallery from '../src/components/Gallery.jsx';
import Player from '../src/components/Player.jsx';
import { RefThumb } from '../src/components/bits.jsx';

// What the gallery tells its user: connection state, the search shortcut,
// why a list is empty, what an audio reference is, a reference that is gone.
const headerProps = { status: null, statuses: [], onStatuses: () => {}, approvedOnly: false, onApprovedOnly: () => {}, search: '', onSearch: () => {}, count: 0, onSettings: () => {} };

describe('header feedback', () => {
  it('says in words that live updates are reconnecting, not only with a dot', () => {
    const { rerender } = render(<Header {...headerProps} live="open" />);
    expect(screen.queryByTestId('live-label')).toBeNull();
    rerender(<Header {...headerProps} live="reconnecting" />);
    const label = screen.getByTestId('live-label');
    expect(label.textContent).toMatch(/Reconnecting/);
    expect(label.closest('.visually-hidden')).toBeNull();
  });
  it('writes the search shortcut for the keyboard at hand and hides it over typed text', () => {
    expect(searchShortcut({ platform: 'MacIntel' })).toBe('⌘K');
    expect(searchShortcut({ platform: 'Linux x86_64' })).toBe('Ctrl K');
    expect(searchShortcut({ userAgentData: { platform: 'Windows' } })).toBe('Ctrl K');
    const { rerender } = render(<Header {...headerProps} live="open" />);
    expect(screen.getByTestId('search-hint').textContent).toBe(searchShortcut());
    rerender(<Header {...headerProps} live="open" search="fox" />);
    expect(screen.queryByTestId('search-hint')).toBeNull();
  });
});

const gallery = (query) => ({ items: [], loading: false, exhausted: true, error: null, count: 0, query: { statuses: [], search: '', rating: '', ...query } });

describe('empty gallery', () => {
  it('under the approved filter says nothing matches and offers to show all', () => {
    const clear = vi.fn();
    render(<Gallery gallery={gallery({ rating: 'approved' })} onLoadMore={() => {}} onClearFilters={clear} />);
    expect(screen.getByTestId('empty').textContent).toMatch(/Nothing matches this filter/);
    expect(screen.getByTestId('empty').textContent).not.toMatch(/No clips yet/);
    fireEvent.click(screen.getByTestId('clear-filters'));
    expect(clear).toHaveBeenCalledTimes(1);
  });
  it('names the search that found nothing', () => {
    render(<Gallery gallery={gallery({ search: 'zebra', statuses: ['failed'] })} onLoadMore={() => {}} onClearFilters={() => {}} />);
    expect(screen.getByTestId('empty').textContent).toMatch(/Nothing matches “zebra” with these filters/);
  });
  it('without filters invites the first prompt, with no clear button', () => {
    render(<Gallery gallery={gallery({})} onLoadMore={() => {}} onClearFilters={() => {}} />);
    expect(screen.getByTestId('empty').textContent).toMatch(/No clips yet/);
    expect(screen.queryByTestId('clear-filters')).toBeNull();
  });
});

describe('references', () => {
  it('an audio reference in the viewer shows what plays, not a black box', () => {
    render(<Player src="/api/files/uploads/a.wav" kind="audio" label="Audio 3 · voice.wav" />);
    const view = screen.getByTestId('audio-view');
    expect(view.textContent).toMatch(/Audio 3 · voice\.wav/);
    expect(view.querySelector('audio')).toBeTruthy();
  });
  it('a thumbnail whose file is gone falls back to the kind glyph', () => {
    render(<RefThumb r={{ id: 'x', kind: 'image', thumb: '/api/files/uploads/x.png', label: 'First frame' }} />);
    fireEvent.error(document.querySelector('.ref-thumb img'));
    expect(document.querySelector('.ref-thumb img')).toBeNull();
    expect(within(document.querySelector('.ref-thumb')).getByTestId('thumb-glyph').textContent).toBe('▦');
  });
});

describe('tiles and tabs', () => {
  it('a rejected clip says so on its tile, not only by fading', async () => {
    const { default: Tile } = await import('../src/components/Tile.jsx');
    render(<Tile g={{ generation_id: 'r', status: 'succeeded', prompt: 'dull', result_url: '/api/files/generations/r.mp4', rating: 'rejected' }} />);
    expect(screen.getByTestId('rejected-badge').textContent).toBe('rejected');
    // The link's name is its own text (no aria-label that differs from what shows): prompt and badge.
    const link = screen.getByTestId('tile').querySelector('a');
    expect(link.getAttribute('aria-label')).toBeNull();
    expect(link.textContent).toMatch(/^dull.*rejected/);
  });
  it('a tab coming back to the front re-reads the settings changed in another tab', async () => {
    const { default: App } = await import('../src/App.jsx');
    let rewrite = false;
    const seen = [];
    vi.stubGlobal('fetch', vi.fn(async (url) => {
      seen.push(String(url));
      const body = String(url).startsWith('/api/settings') ? { rewrite_enabled: rewrite, has_oxen_api_key: false }
        : String(url).startsWith('/api/status') ? { engine: { kind: 'mock', state: 'ready' }, queue: {} }
          : { count: 0, generations: [] };
      return new Response(JSON.stringify(body), { status: 200, headers: { 'Content-Type': 'application/json' } });
    }));
    const hub = { subscribe: () => () => {}, onState: (fn) => { fn('open'); return () => {}; }, close: () => {} };
    render(<App hubFactory={() => hub} />);
    await waitFor(() => expect(seen.filter((u) => u === '/api/settings')).toHaveLength(1));
    rewrite = true;
    fireEvent(window, new Event('focus'));
    await waitFor(() => expect(seen.filter((u) => u === '/api/settings')).toHaveLength(2));
    vi.unstubAllGlobals();
  });
});

describe('lightbox key hints', () => {
  it('lists the keys of what the viewer shows: frames for video, seconds for audio, none for a still', async () => {
    const { default: Lightbox, keyHints } = await import('../src/components/Lightbox.jsx');
    expect(keyHints('video').join(' ')).toMatch(/←\/→ frame.*shift ±1 s.*space.*l loop.*m mute/);
    for (const media of ['audio', 'image', null]) expect(keyHints(media).join(' ')).not.toMatch(/frame/);
    expect(keyHints('audio').join(' ')).toMatch(/←\/→ ±1 s.*space play.*m mute/);
    for (const media of ['image', null]) expect(keyHints(media).join(' ')).not.toMatch(/space|mute|loop|←/);
    const g = {
      generation_id: 'lbkeys', status: 'succeeded', prompt: 'a choir', partition: 'ref2va', frames: 39,
      result_url: '/api/files/generations/lbkeys.mp4',
      references: [
        { image_id: 'a1', kind: 'audio', url: '/api/files/uploads/a1.wav' },
        { image_id: 'i1', kind: 'image', url: '/api/files/uploads/i1.png' },
        { image_id: 'v1', kind: 'video', url: '/api/files/uploads/v1.mp4', poster_url: '/api/files/uploads/v1.jpg' },
      ],
    };
    vi.stubGlobal('fetch', vi.fn(async () => new Response(JSON.stringify({ generation: g }), { status: 200, headers: { 'Content-Type': 'application/json' } })));
    render(<Lightbox id="lbkeys" onEdit={() => {}} />);
    const hint = await screen.findByTestId('keys-hint');
    expect(hint.dataset.media).toBe('video');
    expect(hint.textContent).toMatch(/←\/→ frame/);
    const [audio, still, video] = screen.getAllByTestId('rail-ref');
    fireEvent.click(audio);
    expect(screen.getByTestId('keys-hint').dataset.media).toBe('audio');
    expect(screen.getByTestId('keys-hint').textContent).not.toMatch(/frame/);
    expect(screen.getByTestId('keys-hint').textContent).toMatch(/space play/);
    fireEvent.click(still);
    expect(screen.getByTestId('keys-hint').textContent).not.toMatch(/frame|space|mute/);
    fireEvent.click(video);
    expect(screen.getByTestId('keys-hint').textContent).toMatch(/←\/→ frame/);
    vi.unstubAllGlobals();
  });
});
