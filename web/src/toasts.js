// Transient notices (copied, queued, errors). Errors stay until dismissed.
import { useSyncExternalStore } from 'react';

let items = [];
let nextId = 1;
const listeners = new Set();
const emit = () => { for (const fn of listeners) fn(); };

export function toast(message, { kind = 'info', timeout } = {}) {
  const id = nextId++;
  items = [...items, { id, message, kind }];
  emit();
  const ms = timeout ?? (kind === 'error' ? 0 : 3500);
  if (ms) setTimeout(() => dismiss(id), ms);
  return id;
}
export function dismiss(id) { items = items.filter((t) => t.id !== id); emit(); }
export function useToasts() {
  return useSyncExternalStore((fn) => { listeners.add(fn); return () => listeners.delete(fn); }, () => items);
}
