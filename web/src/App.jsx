import { useCallback, useEffect, useRef, useState } from 'react';
import { store, useGallery } from './store.js';
import { EventHub } from './sse.js';
import { useRoute } from './router.js';
import Header from './components/Header.jsx';
import Gallery from './components/Gallery.jsx';
import Lightbox from './components/Lightbox.jsx';
import PromptBar from './components/PromptBar.jsx';
import SettingsDialog from './components/SettingsDialog.jsx';
import Toasts from './components/Toasts.jsx';
import { api } from './api.js';

export default function App({ hubFactory = () => new EventHub() }) {
  const gallery = useGallery();
  const { generationId } = useRoute();
  const [live, setLive] = useState('connecting');
  const [statuses, setStatuses] = useState([]);
  const [approvedOnly, setApprovedOnly] = useState(false);
  const [search, setSearch] = useState('');
  const [settingsOpen, setSettingsOpen] = useState(false);
  const [settings, setSettings] = useState(null);
  const [status, setStatus] = useState(null);
  const promptRef = useRef(null);

  // One event stream for the tab (shared with other tabs, see sse.js).
  useEffect(() => {
    const hub = hubFactory();
    const offEvents = hub.subscribe((msg) => {
      if (msg.event === 'status_update' && msg.data && typeof msg.data === 'object') { setStatus(msg.data); return; }
      store.onEvent(msg);
      if (msg.event !== 'resync') refreshStatusSoon();
    });
    const offState = hub.onState(setLive);
    return () => { offEvents(); offState(); hub.close(); };
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, []);

  // Query → store (search is debounced while typing).
  useEffect(() => {
    const t = setTimeout(() => store.setQuery({ statuses, search, rating: approvedOnly ? 'approved' : '' }), search ? 250 : 0);
    return () => clearTimeout(t);
  }, [statuses, search, approvedOnly]);

  // Header status: polled, and refreshed shortly after queue events.
  const statusTimer = useRef(null);
  const loadStatus = useCallback(() => {
    api.status().then(setStatus, (e) => setStatus({ error: e.message }));
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

  const editGeneration = useCallback((g) => promptRef.current && promptRef.current.load(g), []);

  return (
    <div className="app">
      <Header
        status={status}
        live={live}
        statuses={statuses}
        onStatuses={setStatuses}
        approvedOnly={approvedOnly}
        onApprovedOnly={setApprovedOnly}
        search={search}
        onSearch={setSearch}
        count={gallery.count}
        onSettings={() => setSettingsOpen(true)}
      />
      <main className="main" aria-label="Gallery">
        <Gallery gallery={gallery} onLoadMore={() => store.loadMore()}
          onClearFilters={() => { setStatuses([]); setSearch(''); setApprovedOnly(false); }} />
      </main>
      <PromptBar ref={promptRef} settings={settings} />
      {generationId && <Lightbox key={generationId} id={generationId} onEdit={editGeneration} />}
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
