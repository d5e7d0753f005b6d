import { useEffect, useState } from 'react';
import { cancelOrDelete, downloadClips, setRating } from '../actions.js';
import { toast } from '../toasts.js';

/** Actions on the clips selected in the grid: approve, reject, download as one zip, delete. */
export default function SelectionBar({ items, onClear }) {
  const [armed, setArmed] = useState(false);
  const [busy, setBusy] = useState(null);
  useEffect(() => {
    if (!armed) return;
    const t = setTimeout(() => setArmed(false), 4000);
    return () => clearTimeout(t);
  }, [armed]);
  const done = items.filter((g) => g.status === 'succeeded');
  const n = items.length;
  const clips = (k) => `${k} ${k === 1 ? 'clip' : 'clips'}`;

  const rate = async (rating) => {
    setBusy(rating);
    await Promise.all(done.map((g) => setRating(g, rating)));
    setBusy(null);
    const skipped = n - done.length;
    toast(`${clips(done.length)} ${rating === 'approved' ? 'approved' : 'rejected'}${skipped ? ` (${skipped} not finished, left as they are)` : ''}.`);
  };
  const remove = async () => {
    setBusy('delete');
    const results = await Promise.all(items.map((g) => cancelOrDelete(g)));
    setBusy(null);
    const failed = results.filter((ok) => !ok).length;
    toast(failed ? `${n - failed} of ${n} removed; ${failed} could not be (see the messages).` : `${clips(n)} removed.`, { kind: failed ? 'error' : 'info' });
    onClear();
  };
  const download = async () => {
    setBusy('zip');
    try {
      await downloadClips(done);
    } catch (e) {
      toast(`The download failed: ${e.message}`, { kind: 'error' });
    } finally {
      setBusy(null);
    }
  };

  return (
    <div className="selection-bar" role="region" aria-label="Selected clips" data-testid="selection-bar">
      <span className="selection-count" data-testid="selection-count">{n} selected</span>
      <button type="button" onClick={() => rate('approved')} disabled={!done.length || busy !== null} data-testid="bulk-approve">Approve</button>
      <button type="button" onClick={() => rate('rejected')} disabled={!done.length || busy !== null} data-testid="bulk-reject">Reject</button>
      <button type="button" onClick={download} disabled={!done.length || busy !== null} data-testid="bulk-download"
        title={done.length < n ? 'Only finished clips are downloaded' : undefined}>
        {busy === 'zip' ? 'Zipping…' : `Download ${done.length > 1 ? `${done.length} as zip` : ''}`.trim()}
      </button>
      <button type="button" className={`danger ${armed ? 'armed' : ''}`} disabled={busy !== null} data-testid="bulk-delete"
        onClick={() => { if (armed) { setArmed(false); remove(); } else setArmed(true); }}>
        {armed ? `Delete ${clips(n)} for good?` : 'Delete'}
      </button>
      <button type="button" className="ghost" onClick={onClear} data-testid="bulk-clear">Clear <kbd>Esc</kbd></button>
    </div>
  );
}
