import { describe, expect, it, vi } from 'vitest';
import { act, render, screen } from '@testing-library/react';
import { PreviewStore, previews } from '../src/previews.js';
import LivePreview from '../src/components/LivePreview.jsx';

const ev = (seq, id = 'g1', extra = {}) => ({
  event: 'generation_preview',
  data: { generation_id: id, seq, url: `/api/files/previews/${id}.jpg?seq=${seq}`, step: seq * 2, total_steps: 27, frames: 4, frame_width: 342, frame_height: 256, ...extra },
});

describe('PreviewStore', () => {
  it('keeps the newest preview per job, ignores late older ones and drops it when the job ends', () => {
    const s = new PreviewStore();
    const seen = vi.fn();
    s.subscribe('g1', seen);
    s.onEvent(ev(2));
    s.onEvent(ev(1)); // relayed late
    expect(s.get('g1').seq).toBe(2);
    s.onEvent(ev(3, 'g2'));
    expect(seen).toHaveBeenCalledTimes(1);
    s.onEvent({ event: 'generation_update', data: { generation_id: 'g1', status: 'processing' } });
    expect(s.get('g1').seq).toBe(2);
    s.onEvent({ event: 'generation_update', data: { generation_id: 'g1', status: 'succeeded' } });
    expect(s.get('g1')).toBeNull();
    s.onEvent({ event: 'generation_deleted', data: { generation_id: 'g2', seq: 9 } });
    expect(s.get('g2')).toBeNull();
    s.onEvent(ev(1, 'g3', { frames: 0 }));
    expect(s.get('g3')).toBeNull(); // not a strip
  });
});

describe('LivePreview', () => {
  it('shows nothing before the first preview, then steps through the strip frame by frame', () => {
    vi.useFakeTimers();
    try {
      render(<LivePreview id="lp1" />);
      expect(screen.queryByTestId('live-preview')).toBeNull();
      act(() => previews.onEvent(ev(1, 'lp1')));
      const el = screen.getByTestId('live-preview');
      expect(el.style.backgroundImage).toContain('/api/files/previews/lp1.jpg?seq=1');
      expect(el.style.backgroundSize).toBe('400% 100%');
      expect(el.getAttribute('aria-label')).toBe('Live preview, step 2 of 27');
      const frames = [el.dataset.frame];
      for (let i = 0; i < 4; i++) { act(() => vi.advanceTimersByTime(125)); frames.push(el.dataset.frame); }
      expect(frames).toEqual(['0', '1', '2', '3', '0']);
      expect(screen.getByTestId('live-preview').style.backgroundPosition).toBe('0% 0px');
      act(() => previews.onEvent(ev(2, 'lp1')));
      expect(screen.getByTestId('live-preview').dataset.seq).toBe('2');
      act(() => previews.onEvent({ event: 'generation_update', data: { generation_id: 'lp1', status: 'succeeded' } }));
      expect(screen.queryByTestId('live-preview')).toBeNull();
    } finally {
      vi.useRealTimers();
    }
  });
});
