import { useCallback, useEffect, useRef, useState } from 'react';
import { store, useGallery } from './store.js';
import { EventHub } from './sse.js';
import { previews } from './previews.js';
import { useRoute } from './router.js';
import Header from './components/Header.jsx';
import Gallery from './components/Gallery.jsx';
import Lightbox from './components/Lightbox.jsx';
import PromptBar from './components/PromptBar.jsx';
import SettingsDialog from './components/SettingsDialog.jsx';
import Toasts from './components/Toasts.jsx';
import { api, STATUSES } from './api.js';
import { queueInfo, useQueueInfo } from './queue.js';

const HIDE_CANCELLED = 'mmh3-hide-cancelled';
const readFlag = (k) => { try { return localStorage.getItem(k) === '1'; } catch { return false; } };
const writeFlag = (k, on) => { try { localStorage.setItem(k, on ? '1' : '0'); } catch { /* private mode */ } };
const isTyping = (el) => el && (el.tagName === 'INPUT' || el.tagName === 'TEXTAREA' || el.tagName === 'SELECT' || el.isContentEditable);

export default function App({ hubFactory = () => new EventHub() }) {
  const gallery = useGallery();
  const { generationId } = useRoute();
  const [live, setLive] = useState('connecting');
  const [statuses, setStatuses] = useState([]);
  const [approvedOnly, setApprovedOnly] = useState(false);
  const [hideCancelled, setHideCancelledState] = useState(() => readFlag(HIDE_CANCELLED));
  const setHideCancelled = useCallback((on) => { setHideCancelledState(on); writeFlag(HIDE_CANCELLED, on); }, []);
  const queue = useQueueInfo();
  const [search, setSearch] = useState('');
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [settings, setSettings] = useState(null);
  const [status, setStatus] = useState(null);
  const promptRef = useRef(null);

  // One event stream for the tab (shared with other tabs, see sse.js).
  useEffect(() => {
    const hub = hubFactory();
    const offEvents = hub.subscribe((msg) => {
      previews.onEvent(msg);
      if (msg.event === 'generation_preview') return;
      if (msg.event === 'status_update' && msg.data && typeof msg.data === 'object') { setStatus(msg.data); queueInfo.setStatus(msg.data); return; }
      const id = msg.data && typeof msg.data === 'object' ? msg.data.generation_id : null;
      queueInfo.onEvent(msg, id ? store.byId.get(id) : null);
      store.onEvent(msg);
      if (msg.event !== 'resync') refreshStatusSoon();
    });
    const offState = hub.onState(setLive);
    return () => { offEvents(); offState(); hub.close(); };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  // Query → store (search is debounced while typing).
  // "Hide cancelled" applies to the unfiltered view; a status filter says what it shows.
  useEffect(() => {
    const shown = statuses.length === 0 && hideCancelled ? STATUSES.filter((s) => s !== 'cancelled') : statuses;
    const t = setTimeout(() => store.setQuery({ statuses: shown, search, rating: approvedOnly ? 'approved' : '' }), search ? 250 : 0);
    return () => clearTimeout(t);
  }, [statuses, search, approvedOnly, hideCancelled]);

  useEffect(() => { queueInfo.refresh(); }, []);

  // "/" puts the cursor in the prompt bar from anywhere but a field or a dialog.
  useEffect(() => {
    const onKey = (e) => {
      if (e.key !== '/' || e.metaKey || e.ctrlKey || e.altKey || isTyping(e.target) || document.querySelector('dialog[open]')) return;
      e.preventDefault();
      promptRef.current && promptRef.current.focus();
    };
    window.addEventListener('keydown', onKey);
    return () => window.removeEventListener('keydown', onKey);
  }, []);

  // Header status: polled, and refreshed shortly after queue events.
  const statusTimer = useRef(null);
  const loadStatus = useCallback(() => {
    api.status().then((st) => { setStatus(st); queueInfo.setStatus(st); }, (e) => setStatus({ error: e.message }));
  }, []);
  const refreshStatusSoon = useCallback(() => {
    if (statusTimer.current) return;
    statusTimer.current = setTimeout(() => { statusTimer.current = null; loadStatus(); }, 400);
  }, [loadStatus]);
  useEffect(() => {
    loadStatus();
    const t = setInterval(loadStatus, 15000);
    return () => clearInterval(t);
  }, [loadStatus]);

  const loadSettings = useCallback(() => api.settings().then(setSettings, () => setSettings(null)), []);
  useEffect(() => { loadSettings(); }, [loadSettings]);
  // Settings have no event: a tab coming back to the front re-reads them (and
  // the status), so a rewrite switched on in another tab applies here too.
  useEffect(() => {
    const back = () => { if (document.visibilityState !== 'hidden') { loadSettings(); loadStatus(); } };
    window.addEventListener('focus', back);
    document.addEventListener('visibilitychange', back);
    return () => { window.removeEventListener('focus', back); document.removeEventListener('visibilitychange', back); };
  }, [loadSettings, loadStatus]);

  const editGeneration = useCallback((g) => promptRef.current && promptRef.current.load(g, { keepSeed: true }), []);
  const rerunGeneration = useCallback((g) => promptRef.current && promptRef.current.load(g, { keepSeed: false }), []);
  const attachFiles = useCallback((files) => promptRef.current && promptRef.current.attach(files), []);
  const attachUploads = useCallback((refs) => promptRef.current && promptRef.current.attachUploads(refs), []);
  const openSettings = useCallback(() => setSettingsOpen(true), []);

  // The stage of each job a worker holds now, for the engine pill.
  const jobStages = (status && Array.isArray(status.workers) ? status.workers : [])
    .map((w) => w.current_generation_id)
    .filter(Boolean)
    .map((id) => (gallery.byId.get(id) || queue.rows.get(id) || {}).stage || null);

  return (
    <div className="app">
      <Header
        status={status}
        jobStages={jobStages}
        live={live}
        statuses={statuses}
        onStatuses={setStatuses}
        approvedOnly={approvedOnly}
        onApprovedOnly={setApprovedOnly}
        hideCancelled={hideCancelled}
        onHideCancelled={setHideCancelled}
        search={search}
        onSearch={setSearch}
        count={gallery.count}
        onSettings={openSettings}
      />
      {/* The prompt bar (fixed at the bottom) comes before the tiles in the Tab order. */}
      <PromptBar ref={promptRef} settings={settings} onOpenSettings={openSettings} />
      <main className="main" aria-label="Gallery">
        <Gallery gallery={gallery} onLoadMore={() => store.loadMore()} onReuse={rerunGeneration}
          onClearFilters={() => { setStatuses([]); setSearch(''); setApprovedOnly(false); setHideCancelled(false); }} />
      </main>
      {generationId && <Lightbox key={generationId} id={generationId} onEdit={editGeneration} onRerun={rerunGeneration} onAttach={attachFiles} onAttachUploads={attachUploads} />}
      {settingsOpen && (
        <SettingsDialog
          settings={settings}
          onClose={() => setSettingsOpen(false)}
          onSaved={(s) => { setSettings(s); }}
          reload={loadSettings}
        />
      )}
      <Toasts />
    </div>
  );
}
