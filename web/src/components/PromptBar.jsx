import { forwardRef, useCallback, useEffect, useImperativeHandle, useMemo, useRef, useState } from 'react';
import { api } from '../api.js';
import { submit } from '../actions.js';
import { toast } from '../toasts.js';
import { buildRequest, clipSummary, defaultParams, paramsFromGeneration, SIZE_PRESETS, validate } from '../params.js';
import { referencesOf } from '../media.js';
import { estimateSeconds, roughDuration } from '../estimate.js';
import { useQueueInfo } from '../queue.js';
import { pushHistory, readHistory } from '../history.js';
import { ACCEPTED_MEDIA, uploadProblem } from '../messages.js';
import ParamsPopover from './ParamsPopover.jsx';
import RewriteSheet from './RewriteSheet.jsx';
import { PlayBadge, SpeakerBadge, ThumbImage } from './bits.jsx';

let chipSeq = 0;

export function kindOf(file) {
  const t = (file.type || '').split('/')[0];
  if (t === 'image' || t === 'video' || t === 'audio') return t;
  const ext = (file.name || '').toLowerCase().split('.').pop();
  if (['png', 'jpg', 'jpeg', 'webp', 'gif', 'bmp', 'avif'].includes(ext)) return 'image';
  if (['mp4', 'mov', 'webm', 'mkv', 'm4v'].includes(ext)) return 'video';
  if (['wav', 'mp3', 'flac', 'ogg', 'm4a', 'aac', 'opus'].includes(ext)) return 'audio';
  return null;
}

/** Reads a local media file's duration (for the 15 s audio limit). */
function probeDuration(url, kind) {
  return new Promise((resolve) => {
    if (kind === 'image' || typeof document === 'undefined') return resolve(null);
    const el = document.createElement(kind === 'audio' ? 'audio' : 'video');
    el.preload = 'metadata';
    el.onloadedmetadata = () => resolve(Number.isFinite(el.duration) ? el.duration : null);
    el.onerror = () => resolve(null);
    el.src = url;
  });
}

function Chip({ chip, index, pinned, partition, onPin, onRemove }) {
  // Pinning is an fl2va idea; a chip pinned before a switch to ref2va keeps
  // its button so it can be unpinned.
  const failed = chip.state === 'error';
  const canPin = !failed && chip.kind === 'image' && index > 0 && (partition === 'fl2va' || pinned);
  const frameOne = !failed && index === 0 && chip.kind === 'image' && partition === 'fl2va';
  return (
    <li className={`chip kind-${chip.kind} state-${chip.state} ${pinned ? 'pinned' : ''}`} data-testid="chip" data-kind={chip.kind} data-state={chip.state} data-image-id={chip.imageId || ''}>
      <span className="chip-thumb">
        {chip.kind === 'image' && <ThumbImage src={chip.preview} kind="image" lazy={false} />}
        {chip.kind === 'video' && chip.preview && <video src={chip.preview} muted preload="metadata" />}
        {chip.kind === 'audio' && <span className="ref-glyph" aria-hidden="true"><SpeakerBadge /></span>}
        {chip.kind === 'video' && <span className="badge"><PlayBadge /></span>}
        {chip.state === 'uploading' && <span className="chip-spinner" aria-label="uploading" />}
      </span>
      <span className="chip-label" title={failed ? `${chip.name}: ${chip.error}` : chip.name}>
        {frameOne ? 'Frame 1' : pinned ? 'Last frame' : chip.name}
        {failed && <span className="chip-error"> · not used</span>}
      </span>
      {canPin && (
        <button type="button" className={`chip-pin ${pinned ? 'on' : ''}`} aria-pressed={pinned} onClick={onPin}
          title={pinned ? 'Unpin: use as a reference again' : 'Pin as the last frame (fl2va)'} aria-label={pinned ? `Unpin ${chip.name} as last frame` : `Pin ${chip.name} as last frame`} data-testid="pin-last">
          {pinned ? '⇥ last' : '⇥'}
        </button>
      )}
      <button type="button" className="chip-remove" aria-label={`Remove ${chip.name}`} onClick={onRemove} data-testid="chip-remove">×</button>
    </li>
  );
}

/** The clip's canvas as the server will settle it, near enough for an estimate. */
function canvasOf(params) {
  if (params.size === 'custom') return { width: Number(params.width) || 1280, height: Number(params.height) || 704 };
  const preset = SIZE_PRESETS.find((p) => p.id === params.size);
  return preset && preset.width ? { width: preset.width, height: preset.height } : { width: 1280, height: 704 };
}

/** A render of ten minutes or more is worth saying before it is queued. */
const HEAVY_SECONDS = 600;

/** The estimate of a request at the measured pace: {each, total, startIn} seconds, or null. */
export function requestEstimate(params, q) {
  const each = estimateSeconds({ ...canvasOf(params), frames: params.frames, steps: Number(params.steps) || 28 }, q.samples);
  if (each === null) return null;
  const batch = Number(params.batch) > 1 ? Number(params.batch) : 1;
  const now = Date.now() / 1000 + q.clockOffset;
  const startIn = q.nextStartAt === null || q.nextStartAt === undefined ? null : Math.max(0, q.nextStartAt - now);
  return { each, total: each * batch, batch, startIn };
}

export function estimateText(est) {
  if (!est) return '';
  const what = est.batch > 1 ? `${est.batch} clips, ${roughDuration(est.each)} each: ${roughDuration(est.total)}` : roughDuration(est.total);
  const wait = est.startIn !== null && est.startIn >= 5 ? `, starting in ${roughDuration(est.startIn)} (after the jobs queued now)` : '';
  return `${what} to render at this server's measured pace${wait}.`;
}

const chipFromRef = (r) => ({ key: `c${++chipSeq}`, name: r.name || r.label, kind: r.kind, state: 'done', imageId: r.id, preview: r.thumb || (r.kind === 'image' ? r.url : null), thumb: r.thumb || null, local: false });

const PromptBar = forwardRef(function PromptBar({ settings, onOpenSettings }, ref) {
  const [prompt, setPrompt] = useState('');
  const [chips, setChips] = useState([]);
  const [lastKey, setLastKey] = useState(null);
  const [params, setParams] = useState(defaultParams);
  const [showParams, setShowParams] = useState(false);
  // Whether an empty prompt is worth saying: after a submit, or after the
  // user edited the field and left it — never while they are typing in it
  // (clearing the prompt to write another is not a mistake).
  const [promptChecked, setPromptChecked] = useState(false);
  const promptEdited = useRef(false);
  const [serverError, setServerError] = useState(null);
  const [busy, setBusy] = useState(false);
  const [dragging, setDragging] = useState(false);
  const [rewrite, setRewrite] = useState(null); // {original, body}
  // Walking the history: where (-1: not walking), and what the bar held before.
  const walk = useRef({ index: -1, before: null, shown: null });
  const textRef = useRef(null);
  const fileRef = useRef(null);
  const paramsButton = useRef(null);
  const formRef = useRef(null);
  const queue = useQueueInfo();

  // The bar's height as a CSS variable: what sits above it (toasts) and the
  // page's bottom padding follow it as chips, problems and notes come and go.
  useEffect(() => {
    const el = formRef.current;
    if (!el || typeof ResizeObserver === 'undefined') return;
    const root = document.documentElement;
    const ro = new ResizeObserver(() => root.style.setProperty('--prompt-bar-h', `${Math.ceil(el.getBoundingClientRect().height)}px`));
    ro.observe(el);
    return () => { ro.disconnect(); root.style.removeProperty('--prompt-bar-h'); };
  }, []);

  // Audio implies ref2va unless the model was picked by hand.
  const partition = params.partitionChosen ? params.partition : chips.some((c) => c.kind === 'audio') ? 'ref2va' : params.partition;
  const effective = useMemo(() => ({ ...params, partition }), [params, partition]);
  const form = { prompt, params: effective, chips, lastChipKey: lastKey };
  const problems = validate(form);
  const shown = promptChecked ? problems : problems.filter((p) => p.field !== 'prompt');
  const estimate = requestEstimate(effective, queue);

  const set = useCallback((patch) => setParams((p) => ({ ...p, ...patch })), []);

  useEffect(() => { setServerError(null); }, [prompt, chips, lastKey, params]);

  // Object URLs of chip previews are released when the chip goes.
  const chipsRef = useRef(chips);
  chipsRef.current = chips;
  useEffect(() => () => chipsRef.current.forEach((c) => c.preview && c.local && URL.revokeObjectURL(c.preview)), []);

  const addFiles = useCallback((files) => {
    for (const file of files) {
      const kind = kindOf(file);
      if (!kind) { toast(`“${file.name}” is not something this server can use: it takes ${ACCEPTED_MEDIA}.`, { kind: 'error' }); continue; }
      const key = `c${++chipSeq}`;
      const preview = typeof URL.createObjectURL === 'function' ? URL.createObjectURL(file) : null;
      setChips((cs) => [...cs, { key, name: file.name || kind, kind, state: 'uploading', preview, local: true }]);
      const update = (patch) => setChips((cs) => cs.map((c) => (c.key === key ? { ...c, ...patch } : c)));
      if (preview) probeDuration(preview, kind).then((d) => d && update({ duration: d }));
      api.upload(file).then(
        (img) => {
          const k = img.kind || img.media_type || kind;
          update({ state: 'done', imageId: img.image_id, kind: k, duration: img.duration_seconds ?? img.duration ?? undefined, thumb: img.poster_url || (k === 'image' ? img.url : null) || null });
        },
        (e) => update({ state: 'error', error: uploadProblem(e, file.name) }),
      );
    }
  }, []);

  const removeChip = (key) => {
    setChips((cs) => {
      const c = cs.find((x) => x.key === key);
      if (c && c.preview && c.local) URL.revokeObjectURL(c.preview);
      return cs.filter((x) => x.key !== key);
    });
    if (lastKey === key) setLastKey(null);
  };

  /** Fills the bar: prompt, parameters and references (uploads already on the server). */
  const fill = useCallback(({ text, nextParams, refs, lastId }) => {
    setPrompt(text);
    setParams(nextParams);
    const next = refs.map(chipFromRef);
    setChips(next);
    const last = lastId ? refs.findIndex((r) => r.id === lastId) : -1;
    setLastKey(last >= 0 ? next[last].key : null);
    setPromptChecked(false);
    promptEdited.current = false;
  }, []);

  const focusPrompt = () => setTimeout(() => textRef.current && textRef.current.focus(), 0);

  useImperativeHandle(ref, () => ({
    /**
     * A generation into the bar: edit & resubmit keeps its seed; rerun and
     * reuse take a fresh one. Nothing is queued until the user sends it.
     */
    load(g, { keepSeed = true } = {}) {
      walk.current = { index: -1, before: null, shown: null };
      fill({ text: g.prompt || '', nextParams: paramsFromGeneration(g, { keepSeed, freshSeed: !keepSeed }), refs: referencesOf(g), lastId: g.last_image_id });
      focusPrompt();
    },
    /** Files from elsewhere in the app (a clip's frame, the clip itself) become chips. */
    attach(files) { addFiles(files); focusPrompt(); },
    /** Uploads already on the server (a generation's reference) become chips as they are. */
    attachUploads(refs) { setChips((cs) => [...cs, ...refs.map((r) => chipFromRef({ ...r, name: r.name || r.label }))]); focusPrompt(); },
    focus() { textRef.current && textRef.current.focus(); },
  }), [addFiles, fill]);

  // Files dropped anywhere on the page land in the prompt bar.
  useEffect(() => {
    let depth = 0;
    const hasFiles = (e) => e.dataTransfer && Array.from(e.dataTransfer.types || []).includes('Files');
    const enter = (e) => { if (!hasFiles(e)) return; depth++; setDragging(true); };
    const leave = (e) => { if (!hasFiles(e)) return; depth = Math.max(0, depth - 1); if (!depth) setDragging(false); };
    const over = (e) => { if (hasFiles(e)) e.preventDefault(); };
    const drop = (e) => {
      if (!hasFiles(e)) return;
      e.preventDefault();
      depth = 0;
      setDragging(false);
      addFiles(Array.from(e.dataTransfer.files || []));
    };
    window.addEventListener('dragenter', enter);
    window.addEventListener('dragleave', leave);
    window.addEventListener('dragover', over);
    window.addEventListener('drop', drop);
    return () => {
      window.removeEventListener('dragenter', enter);
      window.removeEventListener('dragleave', leave);
      window.removeEventListener('dragover', over);
      window.removeEventListener('drop', drop);
    };
  }, [addFiles]);

  const reset = () => {
    setPrompt('');
    chips.forEach((c) => c.preview && c.local && URL.revokeObjectURL(c.preview));
    setChips([]);
    setLastKey(null);
    setPromptChecked(false);
    promptEdited.current = false;
    walk.current = { index: -1, before: null, shown: null };
    if (params.seedMode === 'locked') set({ seedMode: 'random', seed: '' });
  };

  const remember = (body) => {
    const last = lastKey ? chips.find((c) => c.key === lastKey) : null;
    pushHistory({
      prompt: body.prompt,
      params: { ...params, partition: effective.partition },
      refs: chips.filter((c) => c.state === 'done').map((c) => ({ id: c.imageId, kind: c.kind, name: c.name, thumb: c.thumb || null, last: c === last })),
    });
  };

  const send = async (body) => {
    setBusy(true);
    setServerError(null);
    try {
      await submit(body);
      remember(body);
      reset();
      textRef.current && textRef.current.focus();
    } catch (e) {
      setServerError(e.message);
    } finally {
      setBusy(false);
    }
  };

  const onSubmit = (e) => {
    if (e) e.preventDefault();
    setPromptChecked(true);
    promptEdited.current = false;
    if (busy || problems.length) return;
    const body = buildRequest(form);
    if (settings && settings.rewrite_enabled) setRewrite({ original: body.prompt, body });
    else send(body);
  };

  /**
   * ↑ in an empty bar (or one showing an untouched history entry) goes back
   * through the prompts this browser sent; ↓ comes forward, and past the
   * newest gives back what the bar held before.
   */
  const walkHistory = (dir) => {
    const w = walk.current;
    const browsing = w.index >= 0 && w.shown !== null && prompt === w.shown;
    if (!browsing && (prompt !== '' || chips.length)) return false;
    const list = readHistory();
    const index = (browsing ? w.index : -1) + dir;
    if (index < -1 || index >= list.length || (!browsing && dir < 0)) return browsing || list.length > 0;
    if (!browsing) w.before = { params };
    if (index === -1) {
      const before = w.before;
      walk.current = { index: -1, before: null, shown: null };
      fill({ text: '', nextParams: before ? before.params : defaultParams(), refs: [], lastId: null });
      return true;
    }
    const entry = list[index];
    const refs = (entry.refs || []).filter((r) => r && r.id).map((r) => ({ id: r.id, kind: r.kind || 'image', name: r.name, label: r.name, thumb: r.thumb || null, url: null, last: r.last }));
    const lastRef = refs.find((r) => r.last);
    walk.current = { index, before: w.before, shown: entry.prompt };
    fill({ text: entry.prompt, nextParams: { ...defaultParams(), ...entry.params }, refs, lastId: lastRef ? lastRef.id : null });
    return true;
  };

  const summary = clipSummary(effective);
  const heavy = estimate && estimate.total >= HEAVY_SECONDS;
  return (
    <form ref={formRef} className={`prompt-bar ${dragging ? 'dragging' : ''}`} onSubmit={onSubmit} aria-label="New generation" data-testid="prompt-bar">
      {chips.length > 0 && (
        <ul className="chips" aria-label="References">
          {chips.map((c, i) => (
            <Chip key={c.key} chip={c} index={i} pinned={lastKey === c.key} partition={partition}
              onPin={() => setLastKey(lastKey === c.key ? null : c.key)} onRemove={() => removeChip(c.key)} />
          ))}
        </ul>
      )}
      <div className="prompt-row">
        <button type="button" className="icon-button attach" aria-label="Attach images, videos or audio" title="Attach images, videos or audio (or drop / paste them)" onClick={() => fileRef.current && fileRef.current.click()} data-testid="attach">
          <svg viewBox="0 0 24 24" width="20" height="20" aria-hidden="true"><path fill="none" stroke="currentColor" strokeWidth="2" strokeLinecap="round" d="M12 5v14M5 12h14" /></svg>
        </button>
        <input ref={fileRef} type="file" multiple accept="image/*,video/*,audio/*" hidden data-testid="file-input"
          onChange={(e) => { addFiles(Array.from(e.target.files || [])); e.target.value = ''; }} />
        <textarea
          ref={textRef}
          className="prompt-input"
          rows={1}
          placeholder="Describe a clip… (Enter to generate, Shift+Enter for a new line, ↑ for earlier prompts)"
          aria-label="Prompt"
          aria-keyshortcuts="/"
          value={prompt}
          onChange={(e) => { setPrompt(e.target.value); setPromptChecked(false); promptEdited.current = true; }}
          onBlur={() => { if (promptEdited.current) { promptEdited.current = false; setPromptChecked(true); } }}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) onSubmit(e);
            else if ((e.key === 'ArrowUp' || e.key === 'ArrowDown') && !e.shiftKey && !e.altKey && !e.metaKey && !e.ctrlKey && !e.isComposing) {
              if (walkHistory(e.key === 'ArrowUp' ? 1 : -1)) e.preventDefault();
            }
          }}
          onPaste={(e) => {
            const files = Array.from(e.clipboardData?.files || []);
            if (files.length) { e.preventDefault(); addFiles(files); }
          }}
          data-testid="prompt-input"
        />
        <div className="prompt-actions">
          <button ref={paramsButton} type="button" className="ghost params-toggle" data-params-toggle aria-expanded={showParams} aria-haspopup="dialog"
            onClick={() => setShowParams((s) => !s)} data-testid="params-toggle" title={`Parameters: ${summary}`}>
            <span className="params-summary">{summary}</span>
          </button>
          <button type="submit" className="primary" disabled={busy} aria-disabled={problems.length > 0} data-testid="submit">
            {busy ? 'Queuing…' : Number(effective.batch) > 1 ? `Generate ×${effective.batch}` : 'Generate'}
          </button>
        </div>
      </div>
      {showParams && (
        <ParamsPopover params={params} partition={partition} set={set} estimate={estimateText(estimate)} measured={queue.samples.length}
          onClose={(viaKey) => { setShowParams(false); if (viaKey && paramsButton.current) paramsButton.current.focus(); }} />
      )}
      {heavy && !showParams && <p className="note" role="status" data-testid="heavy-estimate">A long render: {estimateText(estimate)}</p>}
      {(shown.length > 0 || serverError) && (
        <ul className="problems" role="alert" data-testid="problems">
          {shown.map((p, i) => <li key={i} data-field={p.field}>{p.message}</li>)}
          {serverError && <li className="server-error" data-testid="server-error">The server refused it: {serverError}</li>}
        </ul>
      )}
      {dragging && <div className="drop-hint" aria-hidden="true">Drop images, videos or audio to attach</div>}
      {rewrite && (
        <RewriteSheet
          original={rewrite.original}
          settings={settings}
          onCancel={() => { setRewrite(null); textRef.current && textRef.current.focus(); }}
          onOpenSettings={onOpenSettings ? () => { setRewrite(null); onOpenSettings(); } : null}
          onPick={(text) => { const body = { ...rewrite.body, prompt: text }; setRewrite(null); send(body); }}
        />
      )}
    </form>
  );
});

export default PromptBar;
