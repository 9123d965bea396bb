// events.js is the one place that knows the shape of a run's event stream
// (GET /v1/runs/{id}/events, Server-Sent Events of RunEvent JSON). It
// reads the stream and turns each event into an update the run page
// applies; when the event vocabulary changes, only this file changes.

import {authHeaders} from './api.js';

// Update kinds.
export const PHASE = 'phase', STEP_STARTED = 'step-started', TARGET = 'target', STEP_FINISHED = 'step-finished',
  LOG = 'log', FINISHED = 'finished', END = 'end', DENIED = 'denied', OTHER = 'other';

// The event kinds, statuses and data fields are the run vocabulary of
// client/events.go (docs/run-events.md); this module reads exactly those
// shapes and guesses nothing: a kind it does not know is OTHER.

// runError reads a {code, message} error, or null when there is none.
function runError(e) {
  if (!e || typeof e !== 'object') return null;
  return {code: e.code || '', message: e.message || ''};
}

// decode turns one RunEvent into an update: {type, seq, at, step, sid, …}.
export function decode(ev) {
  const d = (ev && typeof ev.data === 'object' && ev.data) || {};
  const base = {seq: ev.seq || 0, at: ev.at ? new Date(ev.at) : null, step: ev.step || '', sid: ev.sid || '', kind: ev.kind};
  switch (ev.kind) {
    case 'run.phase':
      return {...base, type: PHASE, phase: d.phase || '', resumed: !!d.resumed};
    case 'step.started':
      return {...base, type: STEP_STARTED, index: d.index, module: d.module || '', targets: Array.isArray(d.targets) ? d.targets.map(String) : []};
    case 'target.result':
      return {...base, type: TARGET, status: d.status || '', changed: !!d.changed, attempts: d.attempts || 0,
        durationMs: d.duration_ms, error: runError(d.error)};
    case 'step.finished':
      return {...base, type: STEP_FINISHED, index: d.index, status: d.status || '', changed: !!d.changed, counts: d.counts || {}};
    case 'step.interrupted':
      return {...base, type: LOG, text: (d.module ? d.module + ' ' : '') + 'was running when the keeper stopped'};
    case 'command.reattached':
      return {...base, type: LOG, text: d.why === 'redialled'
        ? `connection cut mid-command: reconnected and reattached to ${d.command || ''} (not started again)`
        : `resumed (execution ${d.epoch || ''}): reattached to ${d.command || ''} over ${d.transport || ''} (not started again)`};
    case 'log':
      return {...base, type: LOG, text: d.message || ''};
    case 'run.finished':
      return {...base, type: FINISHED, phase: d.phase || '', error: runError(d.error)};
    case 'stream.end':
      return {...base, type: END};
    case 'stream.denied':
      return {...base, type: DENIED, problem: d};
    default:
      return {...base, type: OTHER, data: d};
  }
}

// parse splits SSE text into events; it returns the events and the text
// left over (an incomplete last event).
export function parse(text) {
  const out = [];
  const blocks = text.replace(/\r\n/g, '\n').split('\n\n');
  const rest = blocks.pop();
  for (const block of blocks) {
    let id = '', kind = '', data = [];
    for (const line of block.split('\n')) {
      if (line === '' || line.startsWith(':')) continue;
      const i = line.indexOf(':');
      const field = i < 0 ? line : line.slice(0, i);
      const value = i < 0 ? '' : line.slice(i + 1).replace(/^ /, '');
      if (field === 'id') id = value;
      else if (field === 'event') kind = value;
      else if (field === 'data') data.push(value);
    }
    if (data.length === 0) continue;
    let ev;
    try { ev = JSON.parse(data.join('\n')); } catch { continue; }
    if (!ev.kind) ev.kind = kind;
    if (!ev.seq && id) ev.seq = Number(id);
    out.push(ev);
  }
  return {events: out, rest};
}

// follow streams run id's events after seq `after`, calling onUpdate with
// each decoded update, until the stream ends (END or DENIED), the signal
// aborts, or the keeper refuses it. A broken connection is resumed where
// it stopped (Last-Event-ID). onError is told about each break.
export async function follow(id, {after = 0, signal, onUpdate, onError = () => {}}) {
  let last = after;
  for (let attempt = 0; !signal.aborted; attempt++) {
    try {
      const res = await fetch('/v1/runs/' + encodeURIComponent(id) + '/events', {
        headers: {Accept: 'text/event-stream', 'Last-Event-ID': String(last), ...authHeaders()},
        credentials: 'same-origin', cache: 'no-store', signal,
      });
      if (!res.ok) {
        let problem = null;
        try { problem = await res.json(); } catch { /* not a problem document */ }
        onUpdate({type: DENIED, problem: problem || {status: res.status, title: res.statusText}});
        return;
      }
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const {value, done} = await reader.read();
        if (done) break;
        const {events, rest} = parse(buf + value);
        buf = rest;
        for (const ev of events) {
          const u = decode(ev);
          if (u.seq > last && u.type !== END && u.type !== DENIED) last = u.seq;
          onUpdate(u);
          if (u.type === END || u.type === DENIED) return;
        }
        attempt = 0;
      }
    } catch (e) {
      if (signal.aborted) return;
      onError(e);
    }
    await new Promise(r => setTimeout(r, Math.min(5000, 250 * 2 ** attempt)));
  }
}
