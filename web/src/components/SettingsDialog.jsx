import { useEffect, useState } from 'react';
import { api } from '../api.js';
import { toast } from '../toasts.js';
import Modal from './Modal.jsx';

export const DEFAULT_REWRITE_MODEL = 'claude-sonnet-4-6';

/**
 * Settings (GET/PUT /api/settings). The Oxen API key is write-only: the
 * server only says whether one is set, and the field is sent only when the
 * user typed a new key (or asked to clear it).
 */
export default function SettingsDialog({ settings, onClose, onSaved, reload }) {
  const [key, setKey] = useState('');
  const [clearKey, setClearKey] = useState(false);
  const [enabled, setEnabled] = useState(Boolean(settings?.rewrite_enabled));
  const [model, setModel] = useState(settings?.rewrite_model || DEFAULT_REWRITE_MODEL);
  const [system, setSystem] = useState(settings?.rewrite_system_prompt || '');
  const [error, setError] = useState(settings ? null : 'Settings could not be read from the server.');
  const [saving, setSaving] = useState(false);

  useEffect(() => { reload && reload(); }, [reload]);
  useEffect(() => {
    if (!settings) return;
    setEnabled(Boolean(settings.rewrite_enabled));
    setModel(settings.rewrite_model || DEFAULT_REWRITE_MODEL);
    setSystem(settings.rewrite_system_prompt || '');
    setError(null);
  }, [settings]);

  const save = async (e) => {
    e.preventDefault();
    setSaving(true);
    setError(null);
    const body = { rewrite_enabled: enabled, rewrite_model: model.trim() || DEFAULT_REWRITE_MODEL, rewrite_system_prompt: system };
    if (key.trim()) body.oxen_api_key = key.trim();
    else if (clearKey) body.oxen_api_key = null;
    try {
      const answer = await api.saveSettings(body);
      const next = answer && typeof answer === 'object' && 'rewrite_enabled' in answer ? answer : { ...settings, ...body, oxen_api_key: undefined, has_oxen_api_key: body.oxen_api_key === undefined ? settings?.has_oxen_api_key : Boolean(body.oxen_api_key) };
      delete next.oxen_api_key;
      onSaved(next);
      setKey('');
      toast('Settings saved.');
      onClose();
    } catch (err) {
      setError(err.message);
    } finally {
      setSaving(false);
    }
  };

  const keySet = settings?.has_oxen_api_key;
  return (
    <Modal className="settings" label="Settings" onClose={onClose} testId="settings">
      <form onSubmit={save} className="settings-form">
        <h2>Settings</h2>
        <label className="field">
          <span>Oxen API key <small className="muted" data-testid="key-state">{keySet ? '(set — type to replace)' : '(not set)'}</small></span>
          <input type="password" autoComplete="off" value={key} placeholder={keySet ? '••••••••••••' : 'paste a key'} onChange={(e) => { setKey(e.target.value); setClearKey(false); }} data-testid="api-key" />
          {keySet && (
            <label className="inline small"><input type="checkbox" checked={clearKey} onChange={(e) => setClearKey(e.target.checked)} /> remove the stored key</label>
          )}
        </label>
        <label className="field inline switch">
          <input type="checkbox" checked={enabled} onChange={(e) => setEnabled(e.target.checked)} data-testid="rewrite-toggle" />
          <span>Rewrite prompts before generating (asks for approval each time)</span>
        </label>
        <label className="field">
          <span>Rewrite model</span>
          <input type="text" value={model} onChange={(e) => setModel(e.target.value)} data-testid="rewrite-model" />
        </label>
        <label className="field">
          <span>Rewriter system prompt</span>
          <textarea rows={8} value={system} onChange={(e) => setSystem(e.target.value)} placeholder="(the server's default)" data-testid="rewrite-system" />
        </label>
        {error && <p className="error-text" role="alert" data-testid="settings-error">{error}</p>}
        <div className="sheet-actions">
          <button type="button" className="ghost" onClick={onClose}>Cancel</button>
          <button type="submit" className="primary" disabled={saving} data-testid="settings-save">{saving ? 'Saving…' : 'Save'}</button>
        </div>
      </form>
    </Modal>
  );
}
