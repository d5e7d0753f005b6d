import { useEffect, useRef, useState } from 'react';
import { postSSE } from '../sse.js';
import Modal from './Modal.jsx';
import { rewriteProblem } from '../messages.js';

/**
 * Prompt rewrite approval: POST /api/rewrite streams the rewrite token by
 * token (SSE events token / done / error) next to the original. Enter takes
 * the rewrite once it is complete, Esc cancels; nothing is queued until one
 * of the two prompts is picked.
 */
export default function RewriteSheet({ original, settings, onPick, onCancel, onOpenSettings }) {
  const [text, setText] = useState('');
  const [state, setState] = useState('streaming'); // streaming | done | error
  const [error, setError] = useState(null); // {text, settings}
  const acceptRef = useRef(null);

  useEffect(() => {
    const ctl = new AbortController();
    let acc = '';
    postSSE('/api/rewrite', { prompt: original, model: settings?.rewrite_model }, (ev) => {
      let data = ev.data;
      try { data = JSON.parse(ev.data); } catch { /* plain text token */ }
      if (ev.event === 'token') {
        const t = typeof data === 'string' ? data : data?.token ?? data?.text ?? data?.content ?? '';
        acc += t;
        setText(acc);
      } else if (ev.event === 'done') {
        const full = data && typeof data === 'object' && typeof (data.prompt ?? data.text) === 'string' ? data.prompt ?? data.text : acc;
        acc = full;
        setText(full);
        setState('done');
      } else if (ev.event === 'error') {
        const why = typeof data === 'string' ? data : data?.message || data?.error || 'no reason given';
        setError({ text: `The rewrite service failed: ${String(why).replace(/\.$/, '')}. Try again, or send the prompt as you wrote it.`, settings: false });
        setState('error');
      }
    }, { signal: ctl.signal }).then(
      () => setState((s) => {
        if (s !== 'streaming') return s;
        if (!acc) setError({ text: 'The rewrite came back empty. Try again, or send the prompt as you wrote it.', settings: false });
        return acc ? 'done' : 'error';
      }),
      (e) => { if (e.name !== 'AbortError') { setError(rewriteProblem(e)); setState('error'); } },
    );
    return () => ctl.abort();
  }, [original, settings?.rewrite_model]);

  useEffect(() => { if (state === 'done' && acceptRef.current) acceptRef.current.focus(); }, [state]);

  const onKeyDown = (e) => {
    if (e.key === 'Enter' && !e.shiftKey && e.target.tagName !== 'BUTTON') {
      e.preventDefault();
      if (state === 'done' && text.trim()) onPick(text.trim());
    }
  };

  return (
    <Modal className="rewrite-sheet" label="Approve the rewritten prompt" onClose={onCancel} onKeyDownCapture={onKeyDown} testId="rewrite-sheet" closeLabel="Cancel">
      <h2>Rewrite the prompt?</h2>
      <div className="rewrite-cols">
        <section>
          <h3>Original</h3>
          <p className="rewrite-text" data-testid="rewrite-original">{original}</p>
        </section>
        <section>
          <h3>Rewrite {settings?.rewrite_model ? <small className="muted">({settings.rewrite_model})</small> : null}</h3>
          <p className={`rewrite-text ${state === 'streaming' ? 'streaming' : ''}`} aria-live="polite" aria-busy={state === 'streaming'} data-testid="rewrite-text">
            {text}{state === 'streaming' && <span className="caret" aria-hidden="true" />}
          </p>
          {state === 'error' && error && (
            <div className="error-text" role="alert" data-testid="rewrite-error">
              <p>{error.text}</p>
              {error.settings && onOpenSettings && (
                <button type="button" onClick={onOpenSettings} data-testid="rewrite-open-settings">Open Settings</button>
              )}
            </div>
          )}
        </section>
      </div>
      <div className="sheet-actions">
        <button type="button" className="ghost" onClick={onCancel}>Cancel <kbd>Esc</kbd></button>
        <button type="button" onClick={() => onPick(original)} data-testid="use-original">Use original</button>
        <button ref={acceptRef} type="button" className="primary" disabled={state !== 'done' || !text.trim()} onClick={() => onPick(text.trim())} data-testid="use-rewrite">
          Use rewrite <kbd>Enter</kbd>
        </button>
      </div>
    </Modal>
  );
}
