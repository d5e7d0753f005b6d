import { useEffect, useRef } from 'react';
import { STATUSES } from '../api.js';
import { STATUS_LABELS } from '../format.js';

/** The search shortcut as this keyboard writes it (⌘K on Apple, Ctrl K elsewhere). */
export function searchShortcut(nav = typeof navigator !== 'undefined' ? navigator : null) {
  const platform = (nav && (nav.userAgentData?.platform || nav.platform || nav.userAgent)) || '';
  return /mac|iphone|ipad|ipod/i.test(platform) ? '⌘K' : 'Ctrl K';
}

/**
 * The engine's state in words. A worker reports "loading" from the moment it
 * starts loading the weights for a job until that job ends, so while its job
 * is past loading (denoising, decoding…) the engine is rendering.
 */
export function engineState(engine, jobStages = []) {
  const state = engine.state || (engine.kind ? '' : 'offline');
  if (state === 'busy') return 'rendering';
  if (state === 'loading' && jobStages.length && jobStages.every((s) => s && s !== 'loading' && s !== 'queued')) return 'rendering';
  if (state === 'loading') return 'loading weights';
  return state;
}

/**
 * Engine kind/state, weights residency and queue counts from /api/status;
 * jobStages: the stage of each job a worker holds now (from the rows).
 */
export function StatusSummary({ status, jobStages = [] }) {
  if (!status) return <span className="status-pill muted">…</span>;
  if (status.error) return <span className="status-pill bad" title={status.error}>server unreachable</span>;
  const engine = status.engine && typeof status.engine === 'object' ? status.engine : {};
  const kind = engine.kind || null; // "mock", "h3", or null when no worker is online
  const state = engineState(engine, jobStages);
  const message = [engine.message, engine.placement && `placement: ${engine.placement}`].filter(Boolean).join(' — ');
  // The mock engine has no weights, whatever it reports.
  const residency = kind === 'mock' ? 'no weights (mock engine)' : engine.resident === true ? 'weights resident' : engine.resident === false ? 'weights not loaded' : null;
  const q = status.queue || {};
  const bad = !kind || /failed|offline/.test(state);
  // " engine" is dropped on phones (CSS) to leave room for the queue counts.
  const short = kind === 'mock' ? 'mock' : kind === 'h3' ? 'H3' : kind || null;
  const name = short ? <>{short}<span className="engine-word"> engine</span></> : 'no worker';
  return (
    <span className="status-summary" data-testid="engine-status" title={message}>
      <span className={`status-pill ${bad ? 'bad' : kind === 'mock' ? 'warn' : 'ok'}`} data-testid="engine-kind" data-kind={kind || ''} title={residency || undefined}>
        {name}{state ? ` · ${state}` : ''}
      </span>
      {residency && <span className="status-pill muted residency" data-testid="residency">{residency}</span>}
      {bad && engine.message && <span className="status-pill bad engine-message">{engine.message}</span>}
      <span className="status-pill muted" data-testid="queue-counts">
        {q.processing ?? 0} running · {q.queued ?? 0} queued
      </span>
    </span>
  );
}

export default function Header({ status, jobStages, live, statuses, onStatuses, approvedOnly, onApprovedOnly, hideCancelled, onHideCancelled, search, onSearch, count, onSettings }) {
  const searchRef = useRef(null);

  // ⌘K / Ctrl-K focuses the prompt search from anywhere.
  useEffect(() => {
    const onKey = (e) => {
      if ((e.metaKey || e.ctrlKey) && !e.altKey && (e.key === 'k' || e.key === 'K')) {
        e.preventDefault();
        searchRef.current?.focus();
        searchRef.current?.select();
      }
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);

  const toggle = (s) => onStatuses(statuses.includes(s) ? statuses.filter((x) => x !== s) : [...statuses, s]);

  return (
    <header className="header">
      <div className="header-row">
        <h1 className="brand"><a href="/">mmh3<span className="visually-hidden"> gallery</span></a></h1>
        <StatusSummary status={status} jobStages={jobStages} />
        <span className={`live ${live}`} title={live === 'open' ? 'live updates on' : 'reconnecting to live updates…'} data-testid="live-state" data-state={live} role="status">
          <span className="live-dot" aria-hidden="true" />
          {live === 'reconnecting'
            ? <span className="live-label" data-testid="live-label">Reconnecting…</span>
            : <span className="visually-hidden">{live === 'open' ? 'live' : 'connecting'}</span>}
        </span>
        <div className="search">
          <input
            ref={searchRef}
            type="search"
            placeholder="Search prompts"
            aria-label="Search prompts"
            value={search}
            onChange={(e) => onSearch(e.target.value)}
            onKeyDown={(e) => { if (e.key === 'Escape') { onSearch(''); e.currentTarget.blur(); } }}
            data-testid="search"
          />
          {!search && <kbd className="kbd-hint" aria-hidden="true" data-testid="search-hint">{searchShortcut()}</kbd>}
        </div>
        <button type="button" className="icon-button" aria-label="Settings" onClick={onSettings} data-testid="settings-button">
          <svg viewBox="0 0 24 24" width="20" height="20" aria-hidden="true"><path fill="currentColor" d="M19.4 13a7.7 7.7 0 0 0 0-2l2-1.6-2-3.4-2.4 1a7.3 7.3 0 0 0-1.7-1L15 3.5h-4l-.4 2.5a7.3 7.3 0 0 0-1.7 1l-2.4-1-2 3.4 2 1.6a7.7 7.7 0 0 0 0 2l-2 1.6 2 3.4 2.4-1a7.3 7.3 0 0 0 1.7 1l.4 2.5h4l.4-2.5a7.3 7.3 0 0 0 1.7-1l2.4 1 2-3.4-2-1.6ZM13 15.5a3.5 3.5 0 1 1 0-7 3.5 3.5 0 0 1 0 7Z" transform="translate(-1 0)"/></svg>
        </button>
      </div>
      <div className="filters" role="group" aria-label="Filter by status">
        <button type="button" className={`filter ${statuses.length === 0 ? 'on' : ''}`} aria-pressed={statuses.length === 0} onClick={() => onStatuses([])}>All</button>
        {STATUSES.map((s) => (
          <button key={s} type="button" className={`filter ${statuses.includes(s) ? 'on' : ''}`} aria-pressed={statuses.includes(s)} onClick={() => toggle(s)} data-testid={`filter-${s}`}>
            {STATUS_LABELS[s]}
          </button>
        ))}
        {statuses.length === 0 && (
          <button type="button" className={`filter hide-cancelled ${hideCancelled ? 'on' : ''}`} aria-pressed={hideCancelled} onClick={() => onHideCancelled(!hideCancelled)} data-testid="hide-cancelled"
            title={hideCancelled ? 'Cancelled jobs are hidden: click to show them' : 'Hide cancelled jobs'}>
            {hideCancelled ? 'Cancelled hidden' : 'Hide cancelled'}
          </button>
        )}
        <button type="button" className={`filter approved-filter ${approvedOnly ? 'on' : ''}`} aria-pressed={approvedOnly} onClick={() => onApprovedOnly(!approvedOnly)} data-testid="filter-approved">✓ Approved</button>
        <span className="count" aria-live="polite" data-testid="result-count">{count} {count === 1 ? 'clip' : 'clips'}</span>
      </div>
    </header>
  );
}
