// drift.js: the fleet's drift — how many souls carry their seeds, which
// do not and why, each with the check run that has the diffs.
import {h, replace, table, badge, time, errorBox} from './dom.js';
import * as api from './api.js';

const STATES = ['drifted', 'unreachable', 'unknown', 'checking', 'in_sync'];

export async function driftPage(main, {params, signal, navigate}) {
  const state = params.get('state') || '';
  const summary = h('div', {id: 'drift-summary', class: 'summary'});
  const list = h('div', {id: 'drift'});
  const msg = h('div', {});
  const sel = h('select', {id: 'filter-state', name: 'state', onchange: () => navigate('#/drift' + api.query({state: sel.value}))},
    h('option', {value: ''}, 'any state'), STATES.map(s => h('option', {value: s, selected: s === state}, s.replace('_', ' '))));
  const check = api.can('drift.check') ? h('button', {type: 'button', id: 'drift-check-all', onclick: async (e) => {
    e.target.disabled = true;
    try {
      const started = await api.call('POST', '/v1/drift/checks', {all: true});
      replace(msg, h('p', {class: 'notice', role: 'status'}, started.checks.length + ' check run(s) started; the page follows them.'));
    } catch (err) {
      replace(msg, errorBox(err));
    } finally {
      e.target.disabled = false;
    }
  }}, 'Check all souls') : null;
  replace(main, h('h1', {}, 'Drift'),
    h('p', {class: 'muted'}, 'Whether each soul still carries its seeds, from the last check run of each seed (nothing is changed by a check). ' +
      'Corrective: the seed was applied and the soul changed since; pending: the seed was never applied.'),
    summary, h('form', {class: 'filters', onsubmit: e => e.preventDefault()}, h('label', {for: 'filter-state'}, 'State'), sel, check), msg, list);

  const load = async () => {
    const rep = await api.call('GET', '/v1/drift' + api.query({state, limit: 500}));
    if (signal.aborted) return;
    replace(summary, STATES.map(s => h('span', {class: 'count-card', dataset: {state: s}}, badge(s), ' ', h('strong', {}, String(rep.counts[s] || 0)))));
    const rows = [];
    for (const so of rep.items) for (const sd of so.seeds) rows.push({so, sd});
    replace(list, table([
      {label: 'Soul', cell: r => h('span', {class: 'mono'}, r.so.sid)},
      {label: 'Seed', cell: r => String(r.sd.seed_id)},
      {label: 'State', cell: r => [badge(r.sd.state), r.sd.kind ? h('span', {class: 'muted'}, ' ' + r.sd.kind) : null,
        r.sd.acknowledged ? h('div', {class: 'muted'}, 'acknowledged until ', time(r.sd.ack_until), ' by ', h('span', {class: 'mono'}, r.sd.ack_by), ': ', r.sd.ack_reason) : null]},
      {label: 'Why', cell: r => r.sd.reason || '—'},
      {label: 'Checked', cell: r => time(r.sd.checked_at)},
      {label: 'Check run', cell: r => r.sd.run_id ? h('a', {href: '#/runs/' + encodeURIComponent(r.sd.run_id), class: 'mono'}, r.sd.run_id) : '—'},
      {label: 'Remediation', cell: r => r.sd.remediation_run_id ? h('a', {href: '#/runs/' + encodeURIComponent(r.sd.remediation_run_id), class: 'mono'}, r.sd.remediation_run_id) : '—'},
    ], rows, {empty: state ? 'No soul in this state.' : 'No soul checked yet: soulctl drift check --all, or keeper.yml drift.every.',
      row: r => ({dataset: {sid: r.so.sid, seed: String(r.sd.seed_id), state: r.sd.state}})}));
  };
  await load();
  const poll = setInterval(() => { if (!document.hidden) load().catch(() => {}); }, 4000);
  signal.addEventListener('abort', () => clearInterval(poll));
}
